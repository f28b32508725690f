"""Ray Serve deployment of a program: replicas that load it through toolchain.runtime (never torch) and
serve the v2 protocol (toolchain.serve.protocol) as their ASGI ingress, with Ray Serve's batcher in front
of batchable models."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from ray import serve

from toolchain.errors import InputError, LoadError
from toolchain.serve.backend import ProgramBackend, Result
from toolchain.serve.protocol import DEFAULT_MAX_BODY_BYTES, V2App

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the `toolchain` package


def rss_bytes() -> int:
    """This process's resident set size (Linux /proc)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def process_age_s() -> float:
    """Seconds since this process started (/proc/self/stat's start time against the boot clock)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime", encoding="ascii") as f:
            return float(f.read().split()[0]) - start
    except (OSError, ValueError, IndexError):
        return -1.0


@serve.ingress()
class ProgramReplica:
    """One replica: loads the program in its constructor, then serves it (see `__serve_build_asgi_app__`)."""

    def __init__(self, path: str, options: dict[str, Any]) -> None:
        t0 = time.monotonic()
        self.rss_at_init = rss_bytes()  # the Ray worker and Serve alone, before the program's engine
        factory = options.get("runner_factory")
        if factory is not None:  # another engine behind the same protocol (bench/bench_serve.py: torch's)
            program = factory(path, options)
        else:
            from toolchain import runtime

            program = runtime.load(path, device=options.get("device", "cpu"),
                                   cuda_graphs=bool(options.get("cuda_graphs", False)),
                                   library_path=options.get("library_path"))
        self.backend = ProgramBackend(program, Path(path), name=options.get("name"),
                                      max_batch=int(options.get("max_batch", 0)))
        self.max_body_bytes = int(options.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES))
        if self.backend.batchable():
            batched: Any = self._batched  # serve.batch's wrapper, tunable per replica
            batched.set_max_batch_size(self.backend.max_batch)
            batched.set_batch_wait_timeout_s(float(options.get("batch_wait_ms", 5.0)) / 1000.0)
            self.backend.submit = self._batched
        self.init_seconds = time.monotonic() - t0
        self.start_to_ready_s = process_age_s()

    def __serve_build_asgi_app__(self) -> V2App:
        return V2App(self.backend, self.max_body_bytes)

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
    async def _batched(self, items: list[Any]) -> list[Result]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.backend.executor, self.backend.run_many, items)

    def replica_info(self) -> dict[str, Any]:
        """What tests and benchmarks read: pid, resident memory, whether torch is in this process, load time."""
        import ray

        ctx = ray.get_runtime_context()
        return {"pid": os.getpid(), "rss_bytes": rss_bytes(), "rss_at_init_bytes": self.rss_at_init, "torch_imported": "torch" in sys.modules,
                "actor_name": ctx.get_actor_name(), "init_seconds": self.init_seconds,
                "device": getattr(self.backend.runner, "device", None),
                "gpu_ids": [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "process_start_to_ready_s": self.start_to_ready_s, "models": sorted(self.backend.models),
                **self.backend.counts}


def replica_device(device: str) -> str:
    """What a replica loads the program on: "cpu", or "cuda:0" for "cuda"/"cuda:0". Ray gives each CUDA replica
    one GPU of its own (num_gpus=1) and makes it the replica's only visible device (CUDA_VISIBLE_DEVICES), so
    its GPU is always its cuda:0; another index names nothing in the replica and is refused here."""
    from toolchain.runtime.device import parse_device

    parsed = parse_device(device)
    if parsed.index is not None and parsed.index != 0:
        msg = (f"device={device!r}: Ray gives each replica one GPU of its own and makes it the replica's only "
               "visible device (CUDA_VISIBLE_DEVICES), so every replica runs on its cuda:0 and Ray picks the GPU")
        raise InputError(msg, fix=f"pass device 'cuda' (replicas spread over the GPUs, one each); to serve from GPU "
                                  f"{parsed.index} alone, start with CUDA_VISIBLE_DEVICES={parsed.index}")
    return parsed.name


def require_gpus(replicas: int) -> None:
    """Refuses, naming the count and the fix, when the connected Ray cluster has fewer GPUs than `replicas` CUDA
    replicas need (one each): Ray would otherwise leave the replicas pending forever."""
    import ray

    gpus = float(ray.cluster_resources().get("GPU", 0.0))
    if gpus >= replicas:
        return
    if gpus < 1:
        msg = "device cuda: the Ray cluster has no GPU (CUDA replicas need one each)"
        raise LoadError(msg, fix="run on a host with a GPU (nvidia-smi lists them), join a cluster that has GPUs "
                                 "(--address), or serve on the cpu (--device cpu)")
    have = int(gpus)
    msg = (f"device cuda with {replicas} replicas: each replica needs a GPU of its own and the Ray cluster has "
           f"{gpus:g} GPU{'s' if gpus != 1 else ''}")
    raise InputError(msg, fix=f"use --replicas {have} (or an --autoscale minimum of at most {have}), or add GPUs "
                              "(a host with more, or a cluster with --address)")


def parse_autoscale(text: str) -> tuple[int, int]:
    """'MIN..MAX' -> (MIN, MAX)."""
    lo, sep, hi = text.partition("..")
    try:
        pair = (int(lo), int(hi)) if sep else None
    except ValueError:
        pair = None
    if pair is None or pair[0] < 0 or pair[1] < max(1, pair[0]):
        msg = f"--autoscale {text!r}: expected MIN..MAX with 0 <= MIN <= MAX and MAX >= 1"
        raise InputError(msg, fix="e.g. --autoscale 1..4")
    return pair


def application(model: str | os.PathLike[str], *, replicas: int = 1, autoscale: tuple[int, int] | None = None,
                max_batch: int = 0, batch_wait_ms: float = 5.0, device: str = "cpu", cuda_graphs: bool = False,
                name: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, num_cpus: float = 1.0,
                library_path: str | os.PathLike[str] | None = None,
                max_ongoing_requests: int = 32, runner_factory: Any = None) -> serve.Application:
    """A Ray Serve application serving `model` (.pt2, plugin .so, or a directory / methods.json of several
    methods) over the v2 protocol; run it with `ray.serve.run(app, route_prefix="/")`.

    replicas / autoscale=(MIN, MAX): fixed replicas or Ray Serve autoscaling. max_batch > 1 batches
    requests of a model whose contract has a dynamic dimension 0 (rows per run <= max_batch and the
    contract's maximum), waiting up to batch_wait_ms. device "cuda" gives each replica a GPU of its own
    (num_gpus=1: Ray spreads replicas over the GPUs, one each, and the replica sees its GPU as cuda:0; another
    index is refused, see replica_device) and cuda_graphs=True captures its runs into CUDA graphs. runner_factory(path, options),
    a picklable function, replaces toolchain.runtime.load as the replicas' engine (for comparisons)."""
    path = Path(model).resolve()
    if not path.exists():
        msg = f"{model}: no such file or directory"
        raise InputError(msg, fix="pass a .pt2 package, a plugin .so, or a directory of method packages")
    device = replica_device(device)
    if cuda_graphs and device == "cpu":
        msg = "cuda_graphs needs device cuda"
        raise InputError(msg, fix="add --device cuda")
    if replicas < 1:
        msg = f"replicas={replicas}: need at least 1"
        raise InputError(msg)
    options = {"device": device, "cuda_graphs": cuda_graphs, "name": name, "max_batch": max_batch,
               "batch_wait_ms": batch_wait_ms, "max_body_bytes": max_body_bytes,
               "library_path": str(library_path) if library_path is not None else None,
               "runner_factory": runner_factory}
    # replicas import the same toolchain (and so the same built runtime library) as this process
    pythonpath = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    actor: dict[str, Any] = {"num_cpus": num_cpus, "runtime_env": {"env_vars": {"PYTHONPATH": pythonpath}}}
    if device.startswith("cuda"):
        actor["num_gpus"] = 1
    deployment_options: dict[str, Any] = {"name": "aoti", "ray_actor_options": actor,
                                          "max_ongoing_requests": max_ongoing_requests}
    if autoscale is not None:
        deployment_options["autoscaling_config"] = {"min_replicas": autoscale[0], "max_replicas": autoscale[1],
                                                    "initial_replicas": max(1, autoscale[0])}
    else:
        deployment_options["num_replicas"] = replicas
    deployment: Any = serve.deployment(ProgramReplica)
    deployment = deployment.options(**deployment_options)
    return deployment.bind(str(path), options)
