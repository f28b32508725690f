"""aoti-toolchain serve: serve a program over the KServe/Triton v2 protocol on Ray Serve (local Ray)."""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from toolchain.errors import LoadError, UsageError, exit_code


def main(args: argparse.Namespace) -> int:
    model = Path(args.model)
    if not model.exists():
        msg = f"{model}: no such file or directory"
        raise UsageError(msg, fix="pass a .pt2 package, a plugin .so, or a directory of method packages")
    if args.replicas is not None and args.autoscale is not None:
        msg = "--replicas and --autoscale exclude each other"
        raise UsageError(msg, fix="give one of them")
    if args.batch_wait_ms < 0 or args.max_batch < 0:
        msg = "--max-batch and --batch-wait-ms must not be negative"
        raise UsageError(msg)
    if not 0 < args.port < 65536:
        msg = f"--port {args.port}: not a TCP port"
        raise UsageError(msg)
    try:
        import ray
        from ray import serve

        from toolchain.serve import deploy, private_ray_temp_dir
    except ImportError as exc:
        msg = f"serving needs Ray Serve, which is not importable here: {exc}"
        from toolchain.hostlib import pip_install

        raise LoadError(msg, fix=f"{pip_install('serve')} (Ray Serve)") from None
    autoscale = deploy.parse_autoscale(args.autoscale) if args.autoscale is not None else None
    app_device = deploy.replica_device(args.device)
    app = deploy.application(model, replicas=args.replicas or 1, autoscale=autoscale, max_batch=args.max_batch,
                             batch_wait_ms=args.batch_wait_ms, device=args.device, cuda_graphs=args.cuda_graphs,
                             name=args.name, max_body_bytes=int(args.max_body_mb * (1 << 20)),
                             num_cpus=args.cpus_per_replica)
    # A local Ray instance gets a private temp dir (not the shared /tmp/ray), removed at exit. RAY_TMPDIR or a
    # cluster (--address) overrides it.
    temp_dir = None
    if args.address is None and not os.environ.get("RAY_TMPDIR"):
        temp_dir = private_ray_temp_dir()
    ray.init(address=args.address, num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=args.verbose,
             _temp_dir=temp_dir)
    try:
        if args.address is None and app_device != "cpu":  # a cluster may add GPU nodes on demand: not checked
            deploy.require_gpus(autoscale[0] if autoscale is not None else args.replicas or 1)
        serve.start(http_options={"host": args.host, "port": args.port})
        serve.run(app, name="aoti", route_prefix="/")
        handle = serve.get_deployment_handle("aoti", app_name="aoti")
        info = handle.replica_info.remote().result()
        print(f"serving {model} at http://{args.host}:{args.port}/v2 (models: {', '.join(info['models'])})",
              flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
        ray.shutdown()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
    return exit_code("ok")


def register(sub) -> None:
    r = sub.add_parser("serve", help="serve a program over the v2 inference protocol on Ray Serve (extra: serve)")
    r.add_argument("model", help="a .pt2, a plugin .so, or a program of several methods (a directory or methods.json)")
    r.add_argument("--replicas", type=int, default=None, help="fixed number of replicas (default 1)")
    r.add_argument("--autoscale", metavar="MIN..MAX", default=None, help="Ray Serve autoscaling between MIN and MAX")
    r.add_argument("--max-batch", type=int, default=0,
                   help="batch up to B rows per run along the contract's dynamic dimension 0 (0: no batching)")
    r.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a batch waits to fill (default 5)")
    r.add_argument("--device", default="cpu",
                   help="cpu or cuda (each replica asks Ray for a GPU of its own and sees it as cuda:0)")
    r.add_argument("--cuda-graphs", action="store_true", help="capture each replica's runs into CUDA graphs")
    r.add_argument("--name", default=None, help="model name (default: the file's stem)")
    r.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    r.add_argument("--port", type=int, default=8000, help="HTTP port of the v2 endpoint (default 8000)")
    r.add_argument("--max-body-mb", type=float, default=64.0, help="largest request body (default 64 MiB)")
    r.add_argument("--cpus-per-replica", type=float, default=1.0, help="CPUs Ray reserves for each replica (default 1.0)")
    r.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray instance (default: all)")
    r.add_argument("--address", default=None, help="an existing Ray cluster (default: start a local one)")
    r.add_argument("--verbose", action="store_true", help="show the replicas' logs")
    r.set_defaults(func=main)
