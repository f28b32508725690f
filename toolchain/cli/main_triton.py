"""aoti-toolchain triton-repo / triton-backend-dir: NVIDIA Triton Inference Server with the aoti_toolchain
backend (toolchain.serve.triton; docs/serving.md)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from toolchain.errors import UsageError, exit_code


def _gpus(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        ids = ()
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"{text!r}: give GPU ids separated by commas (0,1)")
    return ids


def repo_main(args: argparse.Namespace) -> int:
    from toolchain.serve import triton

    if args.instances < 1:
        raise UsageError(f"--instances {args.instances}: at least 1")
    if args.max_batch is not None and args.max_batch < 0:
        raise UsageError(f"--max-batch {args.max_batch}: 0 (never batch) or more")
    if args.gpus and args.kind != "gpu":
        raise UsageError("--gpus needs --kind gpu")
    options = triton.Options(instances=args.instances, kind=args.kind, gpus=args.gpus or (),
                             cuda_graphs=args.cuda_graphs, max_batch=args.max_batch,
                             batch_delay_us=args.batch_delay_us)
    models = triton.repository([Path(s) for s in args.sources], Path(args.repo), name=args.name, options=options)
    for m in models:
        cfg = m.config
        batching = (f"max_batch_size {cfg['max_batch_size']}, dynamic batching" if cfg["max_batch_size"]
                    else "not batched (max_batch_size 0)")
        group = cfg["instance_group"][0]
        print(f"{Path(args.repo) / m.name}: method {m.method}, {batching}, {group['count']} x {group['kind']}")
    print(f"serve it: tritonserver --model-repository={shlex.quote(str(Path(args.repo).resolve()))} "
          "--backend-directory=\"$(aoti-toolchain triton-backend-dir)\"")
    return exit_code("ok")


def backend_dir_main(args: argparse.Namespace) -> int:
    from toolchain.serve import triton

    print(triton.backend_dir(args.device))
    return exit_code("ok")


def register(sub) -> None:
    r = sub.add_parser("triton-repo", help="write a Triton Inference Server model repository for the aoti_toolchain "
                       "backend")
    r.add_argument("sources", nargs="+", metavar="PKG.pt2|METHODS_DIR",
                   help="packages and programs of several methods (a directory with methods.json); a package is "
                   "the model <stem>, a program <name>.<method> for each method")
    r.add_argument("--repo", required=True, metavar="DIR", help="the model repository (created or updated)")
    r.add_argument("--name", default=None, help="the model name of the one source (default: its file stem)")
    r.add_argument("--instances", type=int, default=1, metavar="N", help="instances per model (per GPU with --kind gpu; default 1)")
    r.add_argument("--kind", choices=("cpu", "gpu"), default="cpu",
                   help="instance kind: cpu (KIND_CPU) or gpu (KIND_GPU: each instance loads on its GPU)")
    r.add_argument("--gpus", type=_gpus, default=None, metavar="0,1", help="with --kind gpu: which GPUs (default all)")
    r.add_argument("--cuda-graphs", action="store_true", help="GPU instances capture and replay CUDA graphs")
    r.add_argument("--max-batch", type=int, default=None, metavar="N",
                   help="max_batch_size at most N (0: never batch; default: the contract's maximum of dimension 0, "
                   "16 when it has none); batching needs dimension 0 to be one size symbol in every input and output")
    r.add_argument("--batch-delay-us", type=int, default=0, metavar="US",
                   help="dynamic batching: how long a request may wait for others (max_queue_delay_microseconds)")
    r.set_defaults(func=repo_main)
    b = sub.add_parser("triton-backend-dir", help="print the directory to pass as tritonserver's --backend-directory")
    b.add_argument("--device", default="cpu", help="cpu, or cuda to prefer the CUDA runtime's backend")
    b.set_defaults(func=backend_dir_main)
