"""Benchmark: one Triton Inference Server 2.51 serving the same package through our backend (aoti_toolchain)
and through Triton's python backend running torch's AOTI runner (`torch._inductor.aoti_load_package` in
model.py), the way AOTInductor models are served in Triton without a C++ backend.

    .venv/bin/python bench/bench_triton.py [--requests 400] [--concurrency 8] [--rows 4] [--instances 1]
                                           [--max-batch 0] [--device cpu|cuda] [--json OUT.json]

The server is the one .ci/setup unpacks into build/tritonserver/ (nvidia-pytriton 0.7.0). The model is a
256-wide 3-layer MLP with a dynamic batch 1..64 (exported once into build/bench-triton/, reused while it
exists). One server on 127.0.0.1 (free ports, --model-control-mode=explicit, OMP_NUM_THREADS=1 for both
engines) loads `ours` (config.pbtxt by toolchain.serve.triton) and `torch` (the same configuration with
backend "python"; model.py imports torch from this venv, loads the same .pt2 and returns outputs through
DLPack: the wheel's python backend stub was built against numpy 1, and its numpy path sends empty outputs
with numpy 2). --instances instances each. Unbatched (max_batch_size 0) by default; --max-batch N gives both
max_batch_size N and Triton's dynamic batcher, and both engines then stack the requests of an execution along
dimension 0 into one run (ours in the backend; model.py with torch.cat, the runner, and a split per request).

Measured, per engine: model load time (the repository API's load call, which returns when the model is
ready; for the python backend it includes the stub process and the torch import); memory per instance
(proportional set size, PSS, of the server and its child processes after the load and a warm-up, above
the server before the load; RSS too); p50/p99 latency of --requests sequential requests (concurrency 1)
and throughput at --concurrency (tritonclient.http, one client per thread, after a warm-up). Outputs of
the two engines are compared. The latency and throughput measurements run in --rounds rounds that
alternate the engines (medians reported). Prints a table and the ratios ours / torch against the issue's
targets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
from _common import REPO, export_mlp

from tests.helpers import free_ports

OUT = REPO / "build" / "bench-triton"
TRITON = REPO / "build" / "tritonserver" / "pytriton" / "tritonserver"
WIDTH = 256
MAX_ROWS = 64
TARGETS = {"throughput": (">=", 1.5), "p50": ("<=", 0.5), "memory": ("<=", 0.25), "load": ("<=", 0.05)}

MODEL_PY = '''import os
import sys

sys.path.insert(0, {site!r})  # this venv's torch (the stub's interpreter has no site-packages of its own)
import ctypes

import torch

# a link_libtorch=False plugin binds its aoti_torch_* shims from the global scope (FACTS.md)
for lib in ("libtorch_cpu.so", "libtorch_cuda.so") if {device!r} == "cuda" else ("libtorch_cpu.so",):
    ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", lib), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
import torch._inductor
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = {device!r}
        path = os.path.join(args["model_repository"], args["model_version"], "model.pt2")
        self.runner = torch._inductor.aoti_load_package(path)

    def execute(self, requests):
        # the requests of a dynamic batch stacked along dimension 0 into one run, split back per request
        with torch.inference_mode():
            xs = [torch.utils.dlpack.from_dlpack(pb_utils.get_input_tensor_by_name(r, "input").to_dlpack())
                  for r in requests]
            x = xs[0] if len(xs) == 1 else torch.cat(xs)
            y = self.runner(x.to(self.device))
            y = (y[0] if isinstance(y, (list, tuple)) else y).cpu().contiguous()
            parts = [y] if len(xs) == 1 else torch.split(y, [len(t) for t in xs])
            return [pb_utils.InferenceResponse([pb_utils.Tensor.from_dlpack(
                "output_0", torch.utils.dlpack.to_dlpack(part.contiguous()))]) for part in parts]
'''


def export_model(device: str) -> Path:
    return export_mlp(OUT / f"mlp-{device}.pt2", WIDTH, MAX_ROWS, device)


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def backend_directory(device: str) -> Path:
    """build/bench-triton/backends: python/ (the wheel's python backend and the stub for this Python, linked,
    so that the stub's $ORIGIN RPATH still finds the wheel's libraries) and aoti_toolchain/ (ours)."""
    from toolchain.serve.triton import BACKEND, backend_dir

    root = OUT / "backends"
    py = root / "python"
    py.mkdir(parents=True, exist_ok=True)
    for f in (TRITON / "backends" / "python").iterdir():
        _link(f, py / f.name)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = TRITON / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise SystemExit(f"the wheel has no python backend stub for Python {version}")
    _link(stub, py / stub.name)
    _link(backend_dir(device) / BACKEND, root / BACKEND)
    return root


def write_repository(pt2: Path, device: str, instances: int, max_batch: int = 0) -> Path:
    from toolchain.serve import triton

    repo = OUT / f"repo-{device}"
    options = triton.Options(instances=instances, kind="gpu" if device == "cuda" else "cpu", max_batch=max_batch)
    (ours,) = triton.models_of(pt2, name="ours", options=options)
    cfg = dict(ours.config, name="torch", backend="python")
    cfg.pop("parameters")
    cfg["parameters"] = {}
    triton.write_models([ours, triton.RepoModel("torch", "forward", cfg, pt2, {"model.pt2": pt2})], repo)
    site = sysconfig.get_paths()["purelib"]
    (repo / "torch" / "1" / "model.py").write_text(MODEL_PY.format(site=site, device=device))
    return repo


def _tree(pid: int) -> list[int]:
    """pid and its descendants (the python backend's stub processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def memory_kib(pid: int) -> dict[str, int]:
    """PSS and RSS (KiB) summed over the server and its child processes."""
    pss = rss = 0
    for p in _tree(pid):
        with contextlib.suppress(OSError):
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1])
    return {"pss": pss, "rss": rss}


class Server:
    def __init__(self, repo: Path, backends: Path, log: Path) -> None:
        self.http_port, grpc = free_ports(2)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHOME": sys.base_prefix,
               "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [sysconfig.get_config_var("LIBDIR"),
                                                                 os.environ.get("LD_LIBRARY_PATH")]))}
        cmd = [str(TRITON / "bin" / "tritonserver"), f"--model-repository={repo}", f"--backend-directory={backends}",
               "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", f"--http-port={self.http_port}",
               f"--grpc-port={grpc}", "--allow-metrics=false", "--allow-gpu-metrics=false",
               "--pinned-memory-pool-byte-size=0", "--model-control-mode=explicit", "--exit-timeout-secs=5"]
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env=env)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"tritonserver exited ({self.proc.returncode}); see {log}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://{self.url}/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"tritonserver did not become ready in 120 s; see {log}")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def load(self, model: str) -> float:
        t0 = time.perf_counter()
        req = urllib.request.Request(f"http://{self.url}/v2/repository/models/{model}/load", data=b"{}",
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                assert r.status == 200
        except urllib.error.HTTPError as exc:
            raise SystemExit(f"loading {model} failed: {exc.code} {exc.read()[:2000]!r}; see {self.log.name}") from None
        return time.perf_counter() - t0

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()


class RawClient:
    """A v2 client over http.client (one kept-alive connection, the binary tensor data extension) for a machine
    without tritonclient (the GPU machine): the same requests tritonclient.http sends."""

    def __init__(self, url: str) -> None:
        import http.client

        host, port = url.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=300)

    def infer(self, model: str, x: np.ndarray) -> np.ndarray:
        header = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                         "parameters": {"binary_data_size": x.nbytes}}],
                             "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}]}).encode()
        self.conn.request("POST", f"/v2/models/{model}/infer", body=header + x.tobytes(),
                          headers={"Inference-Header-Content-Length": str(len(header)),
                                   "Content-Type": "application/octet-stream"})
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"{r.status}: {body[:500]!r}")
        n = int(r.getheader("Inference-Header-Content-Length"))
        (out,) = json.loads(body[:n])["outputs"]
        return np.frombuffer(body[n:], dtype=np.float32).reshape(out["shape"])


RAW_CLIENT = False  # --client raw: RawClient even where tritonclient is installed


def client_for(url: str):
    """(client, module): tritonclient.http where it is installed (and --client raw was not asked), else
    RawClient."""
    if RAW_CLIENT:
        return RawClient(url), None
    try:
        import tritonclient.http as th
    except ImportError:
        return RawClient(url), None
    return th.InferenceServerClient(url), th


def infer(client, th, model: str, x: np.ndarray) -> np.ndarray:
    if th is None:
        return client.infer(model, x)
    inp = th.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp]).as_numpy("output_0")


def latency(url: str, model: str, x: np.ndarray, n: int) -> dict[str, float]:
    client, th = client_for(url)
    for _ in range(20):
        infer(client, th, model, x)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        infer(client, th, model, x)
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"p50_ms": statistics.median(times) * 1e3, "p99_ms": times[min(n - 1, int(n * 0.99))] * 1e3}


def throughput(url: str, model: str, x: np.ndarray, n: int, concurrency: int) -> float:
    per = max(1, n // concurrency)
    barrier = threading.Barrier(concurrency + 1)
    errors: list[BaseException] = []

    def worker() -> None:
        client, th = client_for(url)
        try:
            for _ in range(5):
                infer(client, th, model, x)
            barrier.wait(timeout=300)
            for _ in range(per):
                infer(client, th, model, x)
        except BaseException as exc:  # reported below
            errors.append(exc)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.abort()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait(timeout=300)
    t0 = time.perf_counter()
    for t in threads:
        t.join(timeout=600)
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return per * concurrency / wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--max-batch", type=int, default=0,
                    help="max_batch_size and dynamic batching for both engines (0: unbatched)")
    ap.add_argument("--rounds", type=int, default=3, help="measurement rounds, alternating the engines (medians)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--client", choices=("auto", "raw"), default="auto",
                    help="raw: the bench's http.client client (lighter than tritonclient.http, which is the default "
                         "where installed)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)
    global RAW_CLIENT
    RAW_CLIENT = args.client == "raw"
    if not (TRITON / "bin" / "tritonserver").is_file():
        raise SystemExit(f"no Triton server in {TRITON}: run .ci/setup")
    OUT.mkdir(parents=True, exist_ok=True)
    pt2 = export_model(args.device)
    if args.max_batch and args.rows > args.max_batch:
        raise SystemExit(f"--rows {args.rows} is over --max-batch {args.max_batch}")
    repo = write_repository(pt2, args.device, args.instances, args.max_batch)
    server = Server(repo, backend_directory(args.device), OUT / f"server-{args.device}.log")
    x = np.random.default_rng(0).standard_normal((args.rows, WIDTH)).astype(np.float32)
    results: dict[str, dict[str, float]] = {}
    try:
        client, th = client_for(server.url)
        outputs = {}
        for model in ("ours", "torch"):
            before = memory_kib(server.proc.pid)
            load_s = server.load(model)
            outputs[model] = infer(client, th, model, x)
            for _ in range(50):
                infer(client, th, model, x)
            after = memory_kib(server.proc.pid)
            results[model] = {"load_s": load_s,
                              "pss_mib_per_instance": (after["pss"] - before["pss"]) / 1024 / args.instances,
                              "rss_mib_per_instance": (after["rss"] - before["rss"]) / 1024 / args.instances}
        np.testing.assert_allclose(outputs["ours"], outputs["torch"], rtol=1e-4, atol=1e-5)
        # rounds alternate the engines, so that a load elsewhere on the machine falls on both; medians
        rounds: dict[str, list[dict[str, float]]] = {"ours": [], "torch": []}
        for _ in range(args.rounds):
            for model in ("ours", "torch"):
                r = latency(server.url, model, x, args.requests)
                r["throughput_rps"] = throughput(server.url, model, x, args.requests, args.concurrency)
                rounds[model].append(r)
        for model, rs in rounds.items():
            for key in rs[0]:
                results[model][key] = statistics.median(r[key] for r in rs)
            results[model]["rounds"] = rs  # type: ignore[assignment]
    finally:
        server.stop()
    ours, torch_ = results["ours"], results["torch"]
    ratios = {"throughput": ours["throughput_rps"] / torch_["throughput_rps"],
              "p50": ours["p50_ms"] / torch_["p50_ms"],
              "memory": ours["pss_mib_per_instance"] / torch_["pss_mib_per_instance"],
              "load": ours["load_s"] / torch_["load_s"]}
    print(f"client: {'tritonclient.http' if client_for('127.0.0.1:1')[1] else 'http.client (binary tensor data)'}")
    batching = f"dynamic batching up to {args.max_batch} rows" if args.max_batch else "unbatched"
    print(f"Triton 2.51, {args.device}, MLP {WIDTH}x{WIDTH}x16, {args.rows} rows per request, {batching}, "
          f"{args.instances} instance(s) per model, OMP_NUM_THREADS=1, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}, medians of {args.rounds} rounds of {args.requests} requests")
    print(f"{'':8} {'load s':>8} {'PSS MiB/inst':>13} {'RSS MiB/inst':>13} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'req/s @' + str(args.concurrency):>10}")
    for name, r in results.items():
        print(f"{name:8} {r['load_s']:8.3f} {r['pss_mib_per_instance']:13.1f} {r['rss_mib_per_instance']:13.1f} "
              f"{r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['throughput_rps']:10.1f}")
    for key, value in ratios.items():
        op, target = TARGETS[key]
        ok = value >= target if op == ">=" else value <= target
        print(f"ours / torch {key:10}: {value:7.3f}  (target {op} {target}: {'met' if ok else 'NOT met'})")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results,
                                         "ratios": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
