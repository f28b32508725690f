"""Benchmark: Ray Serve replicas on our runtime vs replicas serving the same package with torch's runner.

    .venv/bin/python bench/bench_serve.py [--requests 400] [--concurrency 8] [--rows 4]

Exports (once; reused while build/bench-serve/mlp.pt2 exists) a 256-wide 3-layer MLP with a dynamic batch
dimension 1..64. One local Ray instance (2 CPUs, small object store, OMP_NUM_THREADS=1) serves it on
127.0.0.1 through the same replica class, the same v2 protocol layer and no batching, with two engines:

- ours: toolchain.runtime.load (the replica never imports torch; checked);
- torch: `torch._inductor.aoti_load_package` on the very same .pt2 (libtorch_cpu.so re-opened RTLD_GLOBAL
  first, as a link_libtorch=False plugin needs, FACTS.md), inputs and outputs through torch.from_numpy.

For each engine and 1 and 2 replicas: replica start (the replica's constructor, import of the engine
to ready; and the replica process's age when ready, /proc), resident memory per replica after the load and
the warm-up (and above the bare Serve replica measured at the constructor's start), then a bounded loop of
--requests requests at --concurrency concurrent requests (tritonclient.http.aio) after a warm-up: p50/p99
latency and throughput. Prints a table and the ratios ours / torch.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from _common import REPO, export_mlp

OUT = REPO / "build" / "bench-serve"
WIDTH = 256


def export_model() -> Path:
    return export_mlp(OUT / "mlp.pt2", WIDTH, 64)


class TorchRunner:
    """torch's AOTI runner with the Runner shape toolchain.serve.backend serves (numpy in and out)."""

    def __init__(self, path: str) -> None:
        import ctypes

        import torch

        ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"),
                    mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        self.torch = torch
        self.model = torch._inductor.aoti_load_package(path)
        self.methods = ("forward",)
        self.inputs: tuple[Any, ...] = ()
        self.outputs: tuple[Any, ...] = ()

    def run(self, inputs: Any, *, method: str | None = None) -> list[Any]:
        with self.torch.inference_mode():
            out = self.model(*[self.torch.from_numpy(a) for a in inputs])
        outs = out if isinstance(out, (list, tuple)) else [out]
        return [o.numpy() for o in outs]


def torch_runner(path: str, options: dict[str, Any]) -> TorchRunner:
    tmp = Path(path).parent / "tmp"  # aoti_load_package leaves an aotinductor_* folder per load
    tmp.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(tmp)
    return TorchRunner(path)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


async def load_loop(url: str, requests: int, concurrency: int, rows: int, warmup: int) -> tuple[list[float], float]:
    import numpy as np
    import tritonclient.http.aio as tha

    x = np.random.default_rng(0).standard_normal((rows, WIDTH)).astype(np.float32)
    client = tha.InferenceServerClient(url, conn_limit=concurrency)
    inp = tha.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    latencies: list[float] = []
    try:
        for _ in range(warmup):
            await client.infer("mlp", [inp])
        left = requests

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                t0 = time.perf_counter()
                await client.infer("mlp", [inp])
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), timeout=600)
        wall = time.perf_counter() - t0
    finally:
        await client.close()
    return latencies, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--port", type=int, default=18321)
    args = ap.parse_args()

    pt2 = export_model()
    os.environ["OMP_NUM_THREADS"] = "1"  # every replica process, both engines
    import ray
    from ray import serve

    from toolchain.serve import application, private_ray_temp_dir

    url = f"127.0.0.1:{args.port}"
    temp_dir = private_ray_temp_dir()
    ray.init(num_cpus=2, object_store_memory=80 << 20, include_dashboard=False, log_to_driver=False,
             configure_logging=False, _temp_dir=temp_dir)
    rows: list[dict[str, Any]] = []
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        for replicas in (1, 2):
            for engine in ("ours", "torch"):  # interleaved, so a change in the machine's load hits both
                factory = torch_runner if engine == "torch" else None
                app = application(pt2, name="mlp", replicas=replicas, num_cpus=0.5, runner_factory=factory)
                t0 = time.perf_counter()
                serve.run(app, name="bench", route_prefix="/")
                deploy_s = time.perf_counter() - t0
                handle = serve.get_deployment_handle("aoti", app_name="bench")
                lat, wall = asyncio.run(load_loop(url, args.requests, args.concurrency, args.rows, args.warmup))
                infos: dict[int, dict[str, Any]] = {}
                deadline = time.monotonic() + 60
                while len(infos) < replicas and time.monotonic() < deadline:
                    info = handle.replica_info.remote().result(timeout_s=30)
                    infos[info["pid"]] = info
                row = {
                    "engine": engine, "replicas": replicas, "deploy_s": deploy_s,
                    "init_s": statistics.mean(i["init_seconds"] for i in infos.values()),
                    "age_s": statistics.mean(i["process_start_to_ready_s"] for i in infos.values()),
                    "rss_mb": statistics.mean(i["rss_bytes"] for i in infos.values()) / 2**20,
                    "rss_engine_mb": statistics.mean(i["rss_bytes"] - i["rss_at_init_bytes"]
                                                     for i in infos.values()) / 2**20,
                    "torch_imported": any(i["torch_imported"] for i in infos.values()),
                    "run_us": 1e6 * sum(i["run_seconds"] for i in infos.values())
                    / max(1, sum(i["runs"] for i in infos.values())),
                    "p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3, "rps": len(lat) / wall,
                }
                rows.append(row)
                print(f"{engine:5s} x{replicas}: deploy {deploy_s:6.2f} s, replica init {row['init_s']:.3f} s, "
                      f"process age at ready {row['age_s']:.2f} s, RSS {row['rss_mb']:.0f} MB "
                      f"(+{row['rss_engine_mb']:.0f} MB over the bare replica), torch imported: "
                      f"{row['torch_imported']}, engine {row['run_us']:.0f} us per run, p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms, "
                      f"{row['rps']:.0f} req/s", flush=True)
                serve.delete("bench")
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    print(f"\n{args.requests} requests of {args.rows}x{WIDTH} FP32, concurrency {args.concurrency}, no batching; "
          "ratios ours / torch:")
    by = {(r["engine"], r["replicas"]): r for r in rows}
    for replicas in (1, 2):
        a, b = by[("ours", replicas)], by[("torch", replicas)]
        print(f"  x{replicas}: replica init {a['init_s'] / b['init_s']:.4f}, process age at ready "
              f"{a['age_s'] / b['age_s']:.2f}, RSS {a['rss_mb'] / b['rss_mb']:.2f} "
              f"(engine part {a['rss_engine_mb'] / max(b['rss_engine_mb'], 1e-9):.3f}), "
              f"engine time per run {a['run_us'] / b['run_us']:.2f}, "
              f"p50 {a['p50_ms'] / b['p50_ms']:.2f}, p99 {a['p99_ms'] / b['p99_ms']:.2f}, "
              f"throughput {a['rps'] / b['rps']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
