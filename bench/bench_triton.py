"""Benchmark: one Triton Inference Server 2.51 serving the same package through our backend (aoti_toolchain)
and through Triton's python backend running torch's AOTI runner (`torch._inductor.aoti_load_package` in
model.py), the way AOTInductor models are served in Triton without a C++ backend.

    .venv/bin/python bench/bench_triton.py [--requests 400] [--concurrency 8] [--rows 4] [--instances 1]
                                           [--memory-instances 4] [--max-batch 0] [--device cpu|cuda]
                                           [--json OUT.json]

The server is the one .ci/setup unpacks into build/tritonserver/ (nvidia-pytriton 0.7.0). The model is a
256-wide 3-layer MLP with a dynamic batch 1..64 (exported once into build/bench-triton/, reused while it
exists). One server on 127.0.0.1 (free ports, --model-control-mode=explicit, OMP_NUM_THREADS=1 for both
engines) loads `ours` (config.pbtxt by toolchain.serve.triton) and `torch` (the same configuration with
backend "python"; model.py imports torch from this venv, loads the same .pt2 and returns outputs through
DLPack: the wheel's python backend stub was built against numpy 1, and its numpy path sends empty outputs
with numpy 2), each through the load call's configuration override, which sets the instance count:
--instances for latency and throughput. Unbatched (max_batch_size 0) by default; --max-batch N gives both
max_batch_size N and Triton's dynamic batcher, and both engines then stack the requests of an execution along
dimension 0 into one run (ours in the backend; model.py with torch.cat, the runner, and a split per request).

Measured, per engine:
- model load time: the repository API's load call of 1 instance, which returns when the model is ready (for
  the python backend it includes the stub process and the torch import);
- memory, from the server's process tree (host PSS and RSS; on a GPU host also the device memory nvidia-smi
  lists for those processes), in two numbers: the FIRST instance's cost (the model loaded with 1 instance,
  minus the server before it: for ours the engine, its libraries and on a GPU the process's CUDA context, paid
  once per server; for the python backend a stub process with torch and, on a GPU, its own CUDA context) and
  the cost PER FURTHER INSTANCE, the slope (mem(k) - mem(1)) / (k - 1) between the model reloaded with k
  (--memory-instances) instances and with 1, each after requests that ran every instance. The target
  (memory per instance <= 0.25x) is compared on the slope of host PSS + GPU memory: what each instance_group
  count adds to a server, which is what "memory per instance" scales; the first-instance ratio is printed
  beside it, not hidden;
- p50/p99 latency of --requests sequential requests (concurrency 1, one client);
- throughput at --concurrency from that many client PROCESSES (each its own connection, so that the load
  generator is not one interpreter's lock: one process of threads topped out near 3.3k req/s for both engines
  on the H200), after a warm-up; with it, over the same window, Triton's own statistics of the model (time in
  the server per request and of it queued, requests per execution, execution time, and the instances' busy
  fraction: execution time / (wall x instances)) and the CPU cores the server process tree and the clients
  used, which show whether the server or the clients limit the number.
Outputs of the two engines are compared. The latency and throughput measurements run in --rounds rounds that
alternate the engines (medians reported). Prints tables and the ratios ours / torch against the issue's
targets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import queue
import shutil
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


def write_repository(pt2: Path, device: str, instances: int, max_batch: int = 0) -> tuple[Path, dict[str, dict]]:
    """The repository of both models, and their configurations (JSON form, for load overrides)."""
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
    return repo, {"ours": dict(ours.config), "torch": cfg}


def with_instances(config: dict, n: int) -> dict:
    """`config` with each instance group's count set to n (KIND_GPU: n per GPU it lists)."""
    return dict(config, instance_group=[dict(g, count=n) for g in config["instance_group"]])


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


def gpu_mib(pid: int) -> dict[str, float]:
    """Device memory (MiB): "gpu", what nvidia-smi lists as used by the server and its child processes (each
    process's CUDA context, its allocations and its kernels' modules; 0 where it lists none of them, e.g. from
    a PID namespace it cannot see into), and "gpu_device", the memory used on all GPUs (a whole-device number:
    only its differences mean anything, on a machine nothing else uses). Empty without nvidia-smi or a GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}

    def query(what: str) -> list[list[str]]:
        out = subprocess.run([smi, f"--query-{what}", "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=30)
        return [[f.strip() for f in line.split(",")] for line in out.stdout.splitlines()] if out.returncode == 0 else []

    def number(text: str) -> float | None:
        try:
            return float(text)
        except ValueError:
            return None

    used = [number(f[0]) for f in query("gpu=memory.used") if f]
    if not used or None in used:
        return {}
    pids = set(_tree(pid))
    mine = [number(f[1]) for f in query("compute-apps=pid,used_memory")
            if len(f) == 2 and f[0].isdigit() and int(f[0]) in pids]
    return {"gpu": sum(m for m in mine if m is not None), "gpu_device": sum(used)}


def memory(pid: int) -> dict[str, float]:
    """Host PSS and RSS (MiB) of the server's process tree, and its GPU memory (MiB; absent without
    nvidia-smi)."""
    m = memory_kib(pid)
    out = {"pss": m["pss"] / 1024, "rss": m["rss"] / 1024}
    out.update(gpu_mib(pid))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the server's process tree (the python backend's stubs included)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in _tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


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

    def load(self, model: str, config: dict | None = None) -> float:
        """Loads `model` (with `config` instead of its config.pbtxt, Triton's load override: a loaded model is
        replaced); the seconds until it is ready."""
        body = json.dumps({"parameters": {"config": json.dumps(config)}} if config else {}).encode()
        t0 = time.perf_counter()
        req = urllib.request.Request(f"http://{self.url}/v2/repository/models/{model}/load", data=body,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                assert r.status == 200
        except urllib.error.HTTPError as exc:
            raise SystemExit(f"loading {model} failed: {exc.code} {exc.read()[:2000]!r}; see {self.log.name}") from None
        return time.perf_counter() - t0

    def stats(self, model: str) -> dict:
        with urllib.request.urlopen(f"http://{self.url}/v2/models/{model}/stats", timeout=30) as r:
            return json.loads(r.read())["model_stats"][0]

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


def _client_process(url: str, model: str, x: np.ndarray, n: int, raw: bool, barrier, results) -> None:
    """One load-generating process: its own client (one kept-alive connection), a warm-up, then `n` requests
    back to back from the barrier on; puts (start, end, its CPU seconds over the requests, error or None)."""
    global RAW_CLIENT
    RAW_CLIENT = raw
    try:
        client, th = client_for(url)
        for _ in range(5):
            infer(client, th, model, x)
    except BaseException as exc:  # reported by the parent
        barrier.abort()
        results.put((0.0, 0.0, 0.0, repr(exc)))
        return
    barrier.wait(timeout=300)
    cpu0, t0 = time.process_time(), time.monotonic()
    err = None
    try:
        for _ in range(n):
            infer(client, th, model, x)
    except BaseException as exc:
        err = repr(exc)
    results.put((t0, time.monotonic(), time.process_time() - cpu0, err))


def _execution_ns(stats: dict) -> tuple[int, int]:
    """(executions, nanoseconds the model's instances spent in them: compute input + infer + output) from
    Triton's batch statistics (one entry per execution, whatever number of requests it ran)."""
    count = ns = 0
    for b in stats.get("batch_stats", []):
        count += int(b["compute_infer"]["count"])
        ns += sum(int(b[k]["ns"]) for k in ("compute_input", "compute_infer", "compute_output"))
    return count, ns


def throughput(server: Server, model: str, x: np.ndarray, n: int, concurrency: int,
               instances: int) -> dict[str, float]:
    """Requests per second of `concurrency` client processes (one connection each, so that no client shares an
    interpreter lock) sending n requests in all, and what shows where the time went: the server's own
    statistics over the window (time in the server per request, of it queued; executions, requests per
    execution, and the instances' busy fraction: execution time / (wall x instances)) and the CPU the clients and
    the server process tree used (as cores: CPU seconds / wall). A server-bound run has busy near 1 or server
    CPU near the cores it may use; a client-bound one has each client near 1 core and the server idle."""
    per = max(1, n // concurrency)
    ctx = multiprocessing.get_context("spawn")  # tritonclient's gevent does not survive a fork
    barrier = ctx.Barrier(concurrency + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=_client_process, args=(server.url, model, x, per, RAW_CLIENT, barrier, results),
                         daemon=True) for _ in range(concurrency)]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=120)
    except threading.BrokenBarrierError:
        pass  # a client failed its warm-up: its result says why
    before, server_cpu0, t0 = server.stats(model), cpu_seconds(server.proc.pid), time.monotonic()
    got: list = []
    while len(got) < len(procs):
        try:
            got.append(results.get(timeout=2))
        except queue.Empty:
            if not any(p.is_alive() for p in procs) and results.empty():
                raise RuntimeError(f"client processes ended without a result (exit codes "
                                   f"{[p.exitcode for p in procs]})") from None
            if time.monotonic() - t0 > 600:
                raise RuntimeError("client processes still running after 600 s") from None
    wall_end = time.monotonic()
    after, server_cpu = server.stats(model), cpu_seconds(server.proc.pid) - server_cpu0
    for p in procs:
        p.join(timeout=60)
    errors = [e for *_, e in got if e]
    if errors:
        raise RuntimeError(f"a client process failed: {errors[0]}")
    start, end = min(g[0] for g in got), max(g[1] for g in got)
    wall = end - start
    done = per * concurrency
    inf = {k: int(after["inference_stats"][k]["count"]) - int(before["inference_stats"][k]["count"])
           for k in ("success", "queue")}
    ns = {k: int(after["inference_stats"][k]["ns"]) - int(before["inference_stats"][k]["ns"])
          for k in ("success", "queue")}
    ex0, ns0 = _execution_ns(before)
    ex1, ns1 = _execution_ns(after)
    requests = max(inf["success"], 1)
    # the stats window (t0 .. wall_end) holds the measured window plus the stats calls themselves
    window = max(wall_end - t0, wall)
    return {"throughput_rps": done / wall,
            "server_us_per_request": ns["success"] / requests / 1e3,
            "queue_us_per_request": ns["queue"] / requests / 1e3,
            "executions": ex1 - ex0,
            "requests_per_execution": requests / max(ex1 - ex0, 1),
            "execution_us": (ns1 - ns0) / max(ex1 - ex0, 1) / 1e3,
            "instances_busy": (ns1 - ns0) / 1e9 / (window * instances),
            "client_cores": sum(g[2] for g in got) / wall,
            "server_cores": server_cpu / window}


def warm(url: str, model: str, x: np.ndarray, instances: int) -> np.ndarray:
    """Requests enough, concurrently, that each of the model's instances has run (and allocated what it
    keeps); returns an output."""
    from concurrent.futures import ThreadPoolExecutor

    def loop(_: int) -> np.ndarray:
        client, th = client_for(url)  # tritonclient.http's client serves the thread that made it
        for _ in range(25):
            out = infer(client, th, model, x)
        return out

    with ThreadPoolExecutor(max_workers=2 * instances) as pool:
        return list(pool.map(loop, range(2 * instances)))[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=8, help="client processes of the throughput measurement")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--instances", type=int, default=1, help="instances per model for latency and throughput")
    ap.add_argument("--memory-instances", type=int, default=4,
                    help="memory per instance is the slope between 1 and this many instances per model")
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
    if args.memory_instances < 2:
        raise SystemExit("--memory-instances must be at least 2 (the slope from 1 instance)")
    OUT.mkdir(parents=True, exist_ok=True)
    pt2 = export_model(args.device)
    if args.max_batch and args.rows > args.max_batch:
        raise SystemExit(f"--rows {args.rows} is over --max-batch {args.max_batch}")
    repo, configs = write_repository(pt2, args.device, args.instances, args.max_batch)
    server = Server(repo, backend_directory(args.device), OUT / f"server-{args.device}.log")
    x = np.random.default_rng(0).standard_normal((args.rows, WIDTH)).astype(np.float32)
    results: dict[str, dict[str, float]] = {}
    k = args.memory_instances
    t_start = time.monotonic()
    try:
        outputs = {}
        for model in ("ours", "torch"):
            # memory: the server before the model, with 1 instance, with k instances (a reload replaces the
            # 1-instance model); load time: the first, 1-instance load
            m0 = memory(server.proc.pid)
            load_s = server.load(model, with_instances(configs[model], 1))
            outputs[model] = warm(server.url, model, x, 1)
            m1 = memory(server.proc.pid)
            server.load(model, with_instances(configs[model], k))
            warm(server.url, model, x, k)
            mk = memory(server.proc.pid)
            r: dict = {"load_s": load_s}
            for key in m1:
                r[f"{key}_mib_first"] = m1[key] - m0[key]
                r[f"{key}_mib_per_instance"] = (mk[key] - m1[key]) / (k - 1)
            results[model] = r
            if args.instances != k:
                server.load(model, with_instances(configs[model], args.instances))
                warm(server.url, model, x, args.instances)
        np.testing.assert_allclose(outputs["ours"], outputs["torch"], rtol=1e-4, atol=1e-5)
        # rounds alternate the engines, so that a load elsewhere on the machine falls on both; medians
        rounds: dict[str, list[dict[str, float]]] = {"ours": [], "torch": []}
        for _ in range(args.rounds):
            for model in ("ours", "torch"):
                r = latency(server.url, model, x, args.requests)
                r.update(throughput(server, model, x, args.requests, args.concurrency, args.instances))
                rounds[model].append(r)
        for model, rs in rounds.items():
            for key in rs[0]:
                results[model][key] = statistics.median(r[key] for r in rs)
            results[model]["rounds"] = rs  # type: ignore[assignment]
    finally:
        server.stop()
    elapsed = time.monotonic() - t_start
    ours, torch_ = results["ours"], results["torch"]

    # GPU memory per process where nvidia-smi attributes any to the server's processes, else the whole device's
    gpu_key = "gpu" if any(r.get("gpu_mib_first", 0.0) > 0 for r in results.values()) else "gpu_device"
    gpu = f"{gpu_key}_mib_first" in ours
    gpu_source = ("nvidia-smi, the server's processes" if gpu_key == "gpu" else
                  "nvidia-smi, memory used on the whole device (it attributes none to the server's processes)")
    for r in results.values():
        r["gpu_source"] = gpu_source if gpu else ""  # type: ignore[assignment]

    def per_instance(r: dict) -> float:
        return r["pss_mib_per_instance"] + r.get(f"{gpu_key}_mib_per_instance", 0.0)

    def first_instance(r: dict) -> float:
        return r["pss_mib_first"] + r.get(f"{gpu_key}_mib_first", 0.0)

    ratios = {"throughput": ours["throughput_rps"] / torch_["throughput_rps"],
              "p50": ours["p50_ms"] / torch_["p50_ms"],
              "memory": per_instance(ours) / per_instance(torch_),
              "load": ours["load_s"] / torch_["load_s"]}
    print(f"client: {args.concurrency} processes, "
          f"{'tritonclient.http' if client_for('127.0.0.1:1')[1] else 'http.client (binary tensor data)'}")
    batching = f"dynamic batching up to {args.max_batch} rows" if args.max_batch else "unbatched"
    print(f"Triton 2.51, {args.device}, MLP {WIDTH}x{WIDTH}x16, {args.rows} rows per request, {batching}, "
          f"{args.instances} instance(s) per model, OMP_NUM_THREADS=1, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}, medians of {args.rounds} rounds of {args.requests} requests, {elapsed:.0f} s")
    print(f"{'':8} {'load s':>8} {'p50 ms':>8} {'p99 ms':>8} {'req/s @' + str(args.concurrency):>10} "
          f"{'srv us/req':>10} {'queue us':>9} {'req/exec':>8} {'exec us':>8} {'busy':>5} {'srv cores':>9} "
          f"{'cli cores':>9}")
    for name, r in results.items():
        print(f"{name:8} {r['load_s']:8.3f} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['throughput_rps']:10.1f} "
              f"{r['server_us_per_request']:10.1f} {r['queue_us_per_request']:9.1f} {r['requests_per_execution']:8.2f} "
              f"{r['execution_us']:8.1f} {r['instances_busy']:5.2f} {r['server_cores']:9.2f} {r['client_cores']:9.2f}")
    print(f"memory (MiB): first instance (engine, libraries{', CUDA context' if args.device == 'cuda' else ''}) and per further "
          f"instance (slope from 1 to {k} instances)")
    print(f"{'':8} {'PSS first':>10} {'PSS /inst':>10} {'RSS first':>10} {'RSS /inst':>10}"
          + (f" {'GPU first':>10} {'GPU /inst':>10}" if gpu else ""))
    for name, r in results.items():
        print(f"{name:8} {r['pss_mib_first']:10.1f} {r['pss_mib_per_instance']:10.1f} {r['rss_mib_first']:10.1f} "
              f"{r['rss_mib_per_instance']:10.1f}"
              + (f" {r[gpu_key + '_mib_first']:10.1f} {r[gpu_key + '_mib_per_instance']:10.1f}" if gpu else ""))
    if gpu:
        print(f"GPU memory: {gpu_source}")
    for key, value in ratios.items():
        op, target = TARGETS[key]
        ok = value >= target if op == ">=" else value <= target
        print(f"ours / torch {key:10}: {value:7.3f}  (target {op} {target}: {'met' if ok else 'NOT met'})")
    first = first_instance(ours) / first_instance(torch_)
    print(f"ours / torch first-instance memory (not the target's measure): {first:7.3f}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results,
                                         "ratios": ratios, "first_instance_memory_ratio": first,
                                         "seconds": elapsed}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
