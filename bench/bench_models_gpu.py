"""Benchmark: real architectures on the GPU (or the CPU), ours against torch's eager, CUDA-graph replay and AOTI
runner, float32 and bfloat16, several batch sizes, every output checked against eager.

    python bench/bench_models_gpu.py [--device cuda|cpu] [--models resnet18,...] [--dtypes fp32,bf16]
        [--batches 8,1] [--budget-s 420] [--jobs 8] [--pipelines 8] [--seconds 0.3] [--json OUT.json]
        [--markdown OUT.md] [--aoti-run PATH] [--no-torch-runner] [--export-only] [--reexport]

Rows: (model, dtype, batch), in the order batch (as given) > model > dtype, so that a run stopped by --budget-s
has every dtype of the first models. The models are bench/real_models.py's builders (random init, seed 0;
nothing downloaded); batch B > 1 feeds B samples (new normal inputs for float inputs, token ids rolled along
the sequence for integer ones); bf16 is the module cast with module.to(torch.bfloat16) and its float inputs
cast, eager in the same dtype. Each row's package is exported once (toolchain.export, the device's plugin,
cached under build/bench-models-gpu/<device>/<row>/ by a content hash of real_models.py, the export settings
and torch's version) together with its inputs and eager outputs on the device (TF32 off for matmuls and cuDNN,
as everywhere below). --jobs export processes run at once (each exports row after row, in row order), and
--pipelines rows are being measured at once while the exports go on: each measurement process loads what it
needs first (torch's runner can take tens of seconds to load a package on the H200 machine) and times only
while it holds a lock file, so no two timings ever share the GPU.

Per row (per call = median over N calls, each followed by a device synchronisation, inputs already on the
device; N chosen so that one measurement lasts about --seconds):
- torch (one process): eager; a CUDA graph of the eager module captured over static inputs (torch.cuda.graph)
  and replayed; torch's AOTI runner (torch._inductor.aoti_load_package) on the very same .pt2, libtorch's
  shims made global first (FACTS.md);
- ours, Python (one process, no torch in it): toolchain.runtime.load, device inputs (cuda.DeviceArray),
  device outputs, graphs off, then graphs on with borrowed outputs;
- ours, C++: `aoti-run --device cuda --device-inputs --repeat N --warmup W`, graphs off, then --cuda-graphs.
Every side's outputs are checked against the exported eager outputs: |x - eager| <= rtol * (|eager| +
max|eager|) elementwise, rtol 1e-4 (fp32) / 2e-2 (bf16), computed in float64 (bench/bench_models.py's rule);
a failed check is recorded with its error and the row's timings are kept. aoti-run's outputs are also
compared, by the same rule, with torch's runner's on the same package (JSON `vs_torch_runner`; the table says
it where a side missed eager): in bfloat16 the compiled package can differ from eager by more than rtol
whoever runs it (torch's runner too), and this column tells that apart from a runtime bug. Ratios: ours / torch's runner and
ours / torch's graph replay (targets <= 1.0), ours being aoti-run with graphs (the C++ floor a server gets).
--device cpu runs the same rows on the CPU: eager, torch's runner and ours (aoti-run, Python), no graphs.

On the GPU machine it runs inside tests/gpu/run.sh (GPU_MODELS=1: the exports start beside the CUDA build, the
timing runs last, in what is left of GPU_RUN_BUDGET_S; GPU_MODELS_ARGS passes options). This benchmark alone,
in one device call (carry .whl .deps; about 40 s of build and setup, then the rows until the budget):
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH && GPU_MODELS=1 GPU_TESTS=0 GPU_BENCH=0
    TORCH_RUNNER_TRACE=0 PREPARE_ONLY="--only mlp" GPU_RUN_BUDGET_S=540 timeout 590 bash tests/gpu/run.sh

Output: a table on stdout as rows finish, the JSON (--json, rewritten after every row) and a markdown table
(--markdown, and printed at the end) for bench/RESULTS.md. Exit status 0 when every measured row's outputs
passed their checks, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.atomic import locked

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

DEFAULT_MODELS = "resnet18,resnet50,vit_b16,bert_base,gpt2_small,llama_blocks,convnext_tiny,mobilenet_v3_small"
RTOL = {"fp32": 1e-4, "bf16": 2e-2}
TORCH_DTYPE = {"fp32": "float32", "bf16": "bfloat16"}
EXPORT_FORMAT = "1"  # bumped when what an export writes changes (the stamp then differs: re-exported)
MAX_CALLS = 2000
MIN_CALLS = 5


# ---------- shared by the children ----------

def tiny_convnet() -> tuple[Any, tuple[Any, ...]]:
    """Not a real architecture: a small CNN (convolutions, BatchNorm, ReLU, pooling, Linear; two outputs) whose
    export takes seconds, for the test of this benchmark on the CPU (tests/integration/test_bench_models_gpu.py)."""
    import torch

    nn = torch.nn

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
                                          nn.Conv2d(16, 32, 3, 2, 1, groups=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                          nn.Flatten())
            self.head = nn.Linear(32, 10)

        def forward(self, x):
            f = self.features(x)
            return self.head(f), f

    return Tiny().eval(), (torch.randn(1, 3, 32, 32),)


def all_models() -> dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]]:
    import real_models

    return {**real_models.MODELS, "tiny_convnet": tiny_convnet}


def build_row(name: str, dtype: str, batch: int) -> tuple[Any, list[Any]]:
    """The module (eval, on the CPU, in `dtype`) and its `batch`-sample inputs; the same values every time."""
    import torch

    torch.manual_seed(0)
    module, inputs = all_models()[name]()
    gen = torch.Generator().manual_seed(1)
    xs = []
    for x in inputs:
        if batch != x.shape[0]:
            if x.is_floating_point():
                x = torch.randn((batch, *x.shape[1:]), generator=gen, dtype=x.dtype)
            else:  # token ids: the sample rolled along the sequence, valid ids whatever the vocabulary
                x = torch.cat([x[:1].roll(7 * i, dims=-1) for i in range(batch)])
        xs.append(x)
    if dtype == "bf16":
        module = module.to(torch.bfloat16)
        xs = [x.to(torch.bfloat16) if x.is_floating_point() else x for x in xs]
    return module.eval(), xs


def to_numpy(t: Any) -> np.ndarray:
    """A host numpy copy of a torch tensor; bfloat16 as ml_dtypes.bfloat16 (what aoti-run and our Python take)."""
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def load_npy(path: Path) -> np.ndarray:
    """np.load, with bfloat16 files (descr '<V2') viewed as ml_dtypes.bfloat16 again (docs/dtypes.md)."""
    a = np.load(path)
    if a.dtype.kind == "V" and a.dtype.itemsize == 2:
        import ml_dtypes

        a = a.view(ml_dtypes.bfloat16)
    return a


def inputs_of(d: Path) -> list[Path]:
    return sorted(d.glob("x*.npy"), key=lambda p: int(p.stem[1:]))


def refs_of(d: Path) -> list[np.ndarray]:
    return [np.load(p) for p in sorted(d.glob("ref_*.npy"), key=lambda p: int(p.stem.split("_")[1]))]


def check(outs: list[Any], refs: list[np.ndarray], rtol: float) -> dict:
    """{"err": the largest |x - eager| / max|eager| over the outputs, "ok": every element within
    rtol * (|eager| + max|eager|)}, plus "error" naming the first output that fails."""
    if len(outs) != len(refs):
        return {"ok": False, "err": None, "error": f"{len(outs)} outputs, eager has {len(refs)}"}
    worst, res = 0.0, {"ok": True}
    for i, (got, ref) in enumerate(zip(outs, refs, strict=True)):
        got = np.asarray(got).astype(np.float64)
        ref64 = ref.astype(np.float64)
        if got.shape != ref.shape:
            return {"ok": False, "err": None, "error": f"output {i}: shape {got.shape}, eager {ref.shape}"}
        scale = float(np.max(np.abs(ref64))) if ref.size else 0.0
        scale = scale or 1.0
        err = np.abs(got - ref64)
        err[np.isnan(err)] = np.inf
        bad = err > rtol * (np.abs(ref64) + scale)
        worst = max(worst, float(err.max()) / scale if err.size else 0.0)
        if bad.any() and res["ok"]:
            res = {"ok": False, "error": f"output {i}: {int(bad.sum())} of {bad.size} elements beyond rtol {rtol} "
                                         f"(max error {float(err.max()):.3g}, max |eager| {scale:.3g})"}
    res["err"] = worst
    return res


def measure(fn: Callable[[], Any], sync: Callable[[], Any], seconds: float) -> tuple[float, int]:
    """(median microseconds per call, calls): warm-up (at least 5 calls, a tenth of the time), then N calls,
    each followed by sync, N sized so that they last about `seconds`."""
    warm, t_end = 0, time.perf_counter() + seconds / 10
    t0 = time.perf_counter()
    while warm < 5 or time.perf_counter() < t_end:
        fn()
        sync()
        warm += 1
    per_call = (time.perf_counter() - t0) / warm
    n = int(min(MAX_CALLS, max(MIN_CALLS, seconds / max(per_call, 1e-7))))
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - t) * 1e6)
    return statistics.median(samples), n


def _flat(ys: Any) -> list[Any]:
    return list(ys) if isinstance(ys, (list, tuple)) else [ys]


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[-800:]}"


def _proto_stdout() -> Any:
    """The child's protocol channel: the original stdout; fd 1 goes to stderr from here on (torch and inductor
    print on stdout)."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return proto


# ---------- children ----------

def child_export_worker(device: str, work: Path) -> int:
    """Exports the rows named on stdin (one "model dtype batch" a line), in this one process; a JSON line each
    on the protocol channel."""
    proto = _proto_stdout()
    from toolchain import export

    export.prepare_build_dirs(work / "build")
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for line in sys.stdin:
        name, dtype, batch_s = line.split()
        d = work / row_key(name, dtype, int(batch_s))
        t0 = time.perf_counter()
        try:
            module, xs = build_row(name, dtype, int(batch_s))
            for old in [*d.glob("*.npy"), d / "stamp"]:
                old.unlink(missing_ok=True)
            for i, x in enumerate(xs):
                np.save(d / f"x{i}.npy", to_numpy(x))
            dev = module.to(device)
            dxs = [x.to(device) for x in xs]
            with torch.no_grad():
                for i, y in enumerate(_flat(dev(*dxs))):
                    np.save(d / f"ref_{i}.npy", y.detach().float().cpu().numpy())
            export.export(dev, dxs, d / "model.pt2", build_dir=work / "build", device=device)
            (d / "stamp").write_text(export_stamp(name, dtype, int(batch_s), device))
            proto.write(json.dumps({"ok": True, "export_s": round(time.perf_counter() - t0, 1)}) + "\n")
        except Exception as exc:  # noqa: BLE001 - reported in the row; the next rows still export
            proto.write(json.dumps({"ok": False, "error": _error(exc)}) + "\n")
    return 0


def _reopen_libtorch_global(device: str) -> None:
    """FACTS.md: torch's runner loads a link_libtorch=False plugin only once libtorch's shims are global."""
    import ctypes

    import torch

    lib = Path(torch.__file__).parent / "lib"
    for so in ("libtorch_cpu.so", *(("libtorch_cuda.so",) if device == "cuda" else ())):
        ctypes.CDLL(str(lib / so), mode=os.RTLD_NOW | os.RTLD_GLOBAL)


def child_torch(device: str, d: Path, name: str, dtype: str, batch: int, seconds: float, runner: bool,
                lock: Path) -> dict:
    """torch's sides of one row: eager, CUDA-graph replay (cuda), the AOTI runner on the row's package."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    _reopen_libtorch_global(device)
    rtol, refs = RTOL[dtype], refs_of(d)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    res: dict[str, Any] = {"us": {}, "calls": {}, "check": {}}
    module, _ = build_row(name, dtype, batch)
    xs = []
    for p in inputs_of(d):
        x = load_npy(p)
        bf16 = x.dtype.name == "bfloat16"
        t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if bf16 else torch.from_numpy(x)
        xs.append(t.to(device))
    timed: list[tuple[str, Callable[[], Any]]] = []
    with torch.no_grad():
        module = module.to(device)
        try:
            res["check"]["eager"] = check([to_float(y) for y in _flat(module(*xs))], refs, rtol)
            timed.append(("eager", lambda: module(*xs)))
        except Exception as exc:  # noqa: BLE001
            res["check"]["eager"] = {"ok": False, "err": None, "error": _error(exc)}
        if cuda and "eager" in dict(timed):
            try:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        module(*xs)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    static_out = _flat(module(*xs))
                g.replay()
                sync()
                res["check"]["torch_graph"] = check([to_float(y) for y in static_out], refs, rtol)
                timed.append(("torch_graph", g.replay))
            except Exception as exc:  # noqa: BLE001
                res["check"]["torch_graph"] = {"ok": False, "err": None, "error": _error(exc)}
        if runner:
            try:
                t0 = time.perf_counter()
                r = torch._inductor.aoti_load_package(str(d / "model.pt2"))
                res["runner_load_s"] = round(time.perf_counter() - t0, 2)
                runner_outs = [to_float(y) for y in _flat(r(*xs))]
                res["check"]["torch_runner"] = check(runner_outs, refs, rtol)
                # The same package's outputs under torch's runner: ours are also compared with these (in bfloat16
                # the compiled package itself can differ from eager by more than rtol, torch's runner included).
                for i, y in enumerate(runner_outs):
                    np.save(d / f"runner_out_{i}.npy", y)
                timed.append(("torch_runner", lambda: r(*xs)))
            except Exception as exc:  # noqa: BLE001
                res["check"]["torch_runner"] = {"ok": False, "err": None, "error": _error(exc)}
        for side, fn in timed:
            with locked(lock):
                res["us"][side], res["calls"][side] = measure(fn, sync, seconds)
    return res


def to_float(t: Any) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def child_ours_python(device: str, d: Path, dtype: str, seconds: float, lock: Path) -> dict:
    """Our Python module on one row: graphs off, then (cuda) graphs on with borrowed outputs."""
    from toolchain import runtime

    rtol, refs = RTOL[dtype], refs_of(d)
    xs = [load_npy(p) for p in inputs_of(d)]
    res: dict[str, Any] = {"us": {}, "calls": {}, "check": {}, "stats": {}}
    cuda = device == "cuda"
    if cuda:
        from toolchain.runtime import cuda as rt_cuda

        xs = [rt_cuda.DeviceArray.from_numpy(x) for x in xs]
    for graphs in (False, True) if cuda else (False,):
        side = "python_graphs" if graphs else "python"
        try:
            prog = runtime.load(d / "model.pt2", device=device, cuda_graphs=graphs, borrow_graph_outputs=graphs)
            if cuda:
                def run(prog: Any = prog) -> Any:
                    return prog.run(xs, device_outputs=True)

                def host(ys: list[Any]) -> list[np.ndarray]:
                    return [np.asarray(y.numpy()).astype(np.float32) for y in ys]
            else:
                def run(prog: Any = prog) -> Any:
                    return prog.run(xs)

                def host(ys: list[Any]) -> list[np.ndarray]:
                    return [np.asarray(y).astype(np.float32) for y in ys]
            for _ in range(4):  # graphs: two eager runs, the capture, then the replay checked below
                run()
            res["check"][side] = check(host(run()), refs, rtol)
            with locked(lock):
                res["us"][side], res["calls"][side] = measure(run, prog.synchronize, seconds)
            if cuda:
                st = prog.cuda_stats()
                res["stats"][side] = {"captures": st.graph_captures, "replays": st.graph_replays,
                                      "off": st.graphs_disabled_reason, "input_copies": st.graph_input_copies}
            prog.close()
        except Exception as exc:  # noqa: BLE001
            res["check"].setdefault(side, {"ok": False, "err": None, "error": _error(exc)})
            res.setdefault("errors", {})[side] = _error(exc)
    return res


# ---------- the orchestrator ----------

def row_key(name: str, dtype: str, batch: int) -> str:
    return f"{name}-{dtype}-b{batch}"


def export_stamp(name: str, dtype: str, batch: int, device: str) -> str:
    from importlib.metadata import version

    h = hashlib.sha256((BENCH / "real_models.py").read_bytes())
    h.update(f"{EXPORT_FORMAT} {version('torch')} {name} {dtype} {batch} {device}".encode())
    return h.hexdigest()


class Runner:
    """The children of this run: started in their own process groups, stopped together at the budget."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.procs: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def popen(self, cmd: list[str], **kw: Any) -> subprocess.Popen:
        if self.stopped.is_set():
            raise TimeoutError("stopped at the budget")
        p = subprocess.Popen(cmd, start_new_session=True, **kw)
        with self.lock:
            self.procs.add(p)
        return p

    def run(self, cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of cmd, stopped at the budget (TimeoutError)."""
        p = self.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            out, err = p.communicate(timeout=max(1.0, self.left()) if self.deadline != float("inf") else None)
        except subprocess.TimeoutExpired:
            self.kill(p)
            p.communicate()
            raise TimeoutError("stopped at the budget") from None
        finally:
            with self.lock:
                self.procs.discard(p)
        if self.stopped.is_set():
            raise TimeoutError("stopped at the budget")
        return p.returncode, out, err

    def kill(self, p: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)

    def stop(self) -> None:
        self.stopped.set()
        with self.lock:
            procs = list(self.procs)
        for p in procs:
            self.kill(p)


def child_json(runner: Runner, args: list[str], env: dict[str, str]) -> dict:
    rc, out, err = runner.run([sys.executable, __file__, "--child", *args], env=env)
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": f"exit {rc}: {(err or out)[-1500:]}"}


def parse_aoti_run(text: str) -> tuple[float | None, str]:
    med, graphs = None, ""
    for line in text.splitlines():
        if line.startswith("latency_us:"):
            med = float(line.split("median=")[1].split()[0])
        elif line.startswith("cuda_graphs:"):
            graphs = line.strip()
    return med, graphs


def default_aoti_run(device: str) -> Path | None:
    if os.environ.get("AOTI_RUN"):
        return Path(os.environ["AOTI_RUN"])
    pattern = "cpu-*-release" if device == "cpu" else "cuda-*-release"
    found = sorted((REPO / "build").glob(f"{pattern}/dist/bin/aoti-run"))
    return found[0] if found else None


def measure_row(runner: Runner, a: argparse.Namespace, row: dict, work: Path, env: dict[str, str]) -> None:
    """Every side of one exported row, into `row`."""
    d = work / row["key"]
    cuda = a.device == "cuda"
    lock = work / "timing.lock"
    common = [a.device, str(d)]
    t = child_json(runner, ["torch", *common, row["model"], row["dtype"], str(row["batch"]), str(a.seconds),
                            "0" if a.no_torch_runner else "1", str(lock)], env)
    py = child_json(runner, ["python", *common, row["dtype"], str(a.seconds), str(lock)], env)
    for part in (t, py):
        row["us"].update(part.get("us", {}))
        row["calls"].update(part.get("calls", {}))
        row["check"].update(part.get("check", {}))
        if "error" in part:
            row["errors"].append(part["error"])
        row["errors"] += [f"{k}: {v}" for k, v in part.get("errors", {}).items()]
    if "runner_load_s" in t:
        row["torch_runner_load_s"] = t["runner_load_s"]
    row["graph_stats"] = py.get("stats", {})
    row["errors"] += [f"{side}: graphs off: {st['off']}" for side, st in row["graph_stats"].items() if st.get("off")]
    xs = [str(p) for p in inputs_of(d)]
    for graphs in (False, True) if cuda else (False,):
        side = "aoti_run_graphs" if graphs else "aoti_run"
        per_call = row["us"].get("python_graphs" if graphs else "python") or row["us"].get("eager")
        n = int(min(MAX_CALLS, max(MIN_CALLS, a.seconds / (per_call * 1e-6)))) if per_call else 20
        out = d / f"out_{side}"
        out.mkdir(exist_ok=True)
        for old in out.glob("*.npy"):
            old.unlink()
        cmd = [str(a.aoti_run), str(d / "model.pt2"), *sum((["-i", x] for x in xs), []), "-o", str(out), "--quiet",
               "--repeat", str(n), "--warmup", str(max(5, n // 10))]
        if cuda:
            cmd += ["--device", "cuda", "--device-inputs", *(["--cuda-graphs"] if graphs else [])]
        with locked(lock):
            rc, so, se = runner.run(cmd, env=env)
        med, counters = parse_aoti_run(so + se)
        if rc != 0 or med is None:
            row["check"][side] = {"ok": False, "err": None, "error": f"aoti-run exit {rc}: {(se or so)[-800:]}"}
            continue
        row["us"][side], row["calls"][side] = med, n
        if counters:
            row["graph_stats"][side] = counters
        outs = [load_npy(p).astype(np.float32) for p in sorted(out.glob("output_*.npy"),
                                                                key=lambda p: int(p.stem.split("_")[1]))]
        row["check"][side] = check(outs, refs_of(d), RTOL[row["dtype"]])
        runner_outs = sorted(d.glob("runner_out_*.npy"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
        if runner_outs and "torch_runner" in row["us"]:
            row.setdefault("vs_torch_runner", {})[side] = check(outs, [load_npy(p) for p in runner_outs],
                                                                RTOL[row["dtype"]])
    ours = "aoti_run_graphs" if cuda else "aoti_run"
    for ref in ("torch_runner", "torch_graph"):
        if row["us"].get(ours) and row["us"].get(ref):
            row["ratios"][f"ours_vs_{ref}"] = row["us"][ours] / row["us"][ref]
    for side in ("aoti_run", "python", "python_graphs"):
        if side != ours and row["us"].get(side) and row["us"].get("torch_runner"):
            row["ratios"][f"{side}_vs_torch_runner"] = row["us"][side] / row["us"]["torch_runner"]
    row["loadavg"] = round(os.getloadavg()[0], 1)  # the exports and loads that ran beside the timings
    row["ok"] = bool(row["check"]) and all(c.get("ok") for c in row["check"].values())
    row["status"] = "measured"


SIDES = [("eager", "eager"), ("torch_graph", "torch graph"), ("torch_runner", "torch runner"),
         ("aoti_run", "aoti-run"), ("aoti_run_graphs", "aoti-run graphs"), ("python", "Python"),
         ("python_graphs", "Python graphs")]


def _ms(row: dict, side: str) -> str:
    us = row["us"].get(side)
    if us is None:
        c = row["check"].get(side)
        return "error" if c and not c.get("ok") and c.get("err") is None else "-"
    mark = "" if row["check"].get(side, {}).get("ok", True) else "!"
    return f"{us / 1000:.3f}{mark}"


def _check_cell(row: dict) -> str:
    if row["status"] != "measured":
        return row["status"]
    bad = [s for s, c in row["check"].items() if not c.get("ok")]
    errs = [c["err"] for c in row["check"].values() if c.get("err") is not None]
    worst = f"max err {max(errs):.1e}" if errs else "no output"
    cell = f"ok ({worst})" if not bad else f"FAILED {', '.join(bad)} ({worst})"
    vs = row.get("vs_torch_runner", {})
    if bad and vs:  # say whether ours still equals the same package under torch's runner
        vs_bad = [s for s, c in vs.items() if not c.get("ok")]
        vs_err = max((c["err"] for c in vs.values() if c.get("err") is not None), default=None)
        vs_worst = f"max err {vs_err:.1e}" if vs_err is not None else "no output"
        cell += f"; aoti-run vs torch runner: {'ok' if not vs_bad else 'FAILED ' + ', '.join(vs_bad)} ({vs_worst})"
    return cell


def markdown(rows: list[dict], device: str) -> str:
    sides = [s for s in SIDES if device == "cuda" or "graph" not in s[0]]
    ours = "aoti-run graphs" if device == "cuda" else "aoti-run"
    head = ["model", "dtype", "batch", *(f"{label} ms" for _, label in sides), f"{ours} / torch runner"]
    if device == "cuda":
        head.append(f"{ours} / torch graph")
    head.append("outputs vs eager")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], r["dtype"], str(r["batch"]), *(_ms(r, s) for s, _ in sides)]
        for ref in ("torch_runner", "torch_graph") if device == "cuda" else ("torch_runner",):
            v = r["ratios"].get(f"ours_vs_{ref}")
            cells.append("-" if v is None else (f"**{v:.2f}**" if v > 1.0 else f"{v:.2f}"))
        cells.append(_check_cell(r))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--batches", default="8,1")
    ap.add_argument("--budget-s", type=float, default=0.0, help="stop cleanly after this many seconds (0: none)")
    ap.add_argument("--jobs", type=int, default=0, help="export processes at once (default: cores / 2, at most 8)")
    ap.add_argument("--pipelines", type=int, default=8, help="rows being measured at once (timings never overlap)")
    ap.add_argument("--threads", type=int, help="OMP_NUM_THREADS of every measurement (default: 1 on the CPU)")
    ap.add_argument("--seconds", type=float, default=0.3, help="about how long one side's timed calls last")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--aoti-run", type=Path, help="default: $AOTI_RUN, else the built variant's")
    ap.add_argument("--work", type=Path, help="default: build/bench-models-gpu/<device>")
    ap.add_argument("--no-torch-runner", action="store_true", help="leave out torch's AOTI runner")
    ap.add_argument("--export-only", action="store_true")
    ap.add_argument("--reexport", action="store_true")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, *r = a.child
        if kind == "export":
            return child_export_worker(r[0], Path(r[1]))
        proto = _proto_stdout()
        try:
            if kind == "torch":
                out = child_torch(r[0], Path(r[1]), r[2], r[3], int(r[4]), float(r[5]), r[6] == "1", Path(r[7]))
            else:
                out = child_ours_python(r[0], Path(r[1]), r[2], float(r[3]), Path(r[4]))
        except Exception as exc:  # noqa: BLE001 - the row records it
            out = {"error": _error(exc)}
        proto.write(json.dumps(out) + "\n")
        return 0

    models = a.models.split(",")
    dtypes = a.dtypes.split(",")
    unknown = [m for m in models if m not in all_models()] + [t for t in dtypes if t not in RTOL]
    if unknown:
        print(f"unknown: {', '.join(unknown)}; models: {', '.join(all_models())}; dtypes: fp32, bf16",
              file=sys.stderr)
        return 2
    batches = [int(b) for b in a.batches.split(",")]
    a.aoti_run = a.aoti_run or default_aoti_run(a.device)
    if not a.export_only and (a.aoti_run is None or not a.aoti_run.is_file()):
        print(f"aoti-run not found ({a.aoti_run}): build the runtime (scons; cuda=on for --device cuda), "
              "set AOTI_RUN or pass --aoti-run", file=sys.stderr)
        return 2
    work = (a.work or REPO / "build" / "bench-models-gpu" / a.device).resolve()
    work.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    runner = Runner(start + a.budget_s - min(3.0, a.budget_s / 10) if a.budget_s else float("inf"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1", "AOTI_HOST_CUDNN_ALLOW_TF32": "0"}
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(work / "build" / "torch" / "inductor-cache"))
    threads = a.threads or (1 if a.device == "cpu" else None)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)

    def stop_on_signal(_signum: int, _frame: Any) -> None:  # an outer timeout: stop the children, keep the table
        runner.stop()

    signal.signal(signal.SIGTERM, stop_on_signal)

    rows = [{"model": m, "dtype": t, "batch": b, "key": row_key(m, t, b), "status": "not measured (budget)",
             "us": {}, "calls": {}, "check": {}, "ratios": {}, "errors": [], "ok": None}
            for b in batches for m in models for t in dtypes]
    exported = {r["key"]: threading.Event() for r in rows}
    stamps = {r["key"]: export_stamp(r["model"], r["dtype"], r["batch"], a.device) for r in rows}

    def is_current(r: dict) -> bool:
        stamp = work / r["key"] / "stamp"
        return stamp.is_file() and stamp.read_text() == stamps[r["key"]]

    to_export = []
    for r in rows:
        (work / r["key"]).mkdir(exist_ok=True)
        if not a.reexport and is_current(r):
            r["export"] = "cached"
            exported[r["key"]].set()
        else:
            to_export.append(r)
    jobs = a.jobs or max(1, min(8, (os.cpu_count() or 2) // 2))
    print(f"bench_models_gpu: {len(rows)} rows on {a.device} ({len(to_export)} to export in "
          f"{min(jobs, len(to_export))} processes), budget {a.budget_s or 'none'} s, ~{a.seconds} s a side; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)

    pending: queue.Queue = queue.Queue()
    for r in to_export:
        pending.put(r)
    export_env = {k: v for k, v in env.items() if k != "OMP_NUM_THREADS"}
    export_env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(2, (os.cpu_count() or 2) // max(1, jobs))))

    deferred: queue.Queue = queue.Queue()

    def next_row() -> tuple[dict, Any] | None:
        """The next row to export, its export lock held (another run of this benchmark, e.g. run.sh's exports
        in the background, may be exporting into the same directory): a row locked elsewhere is deferred and
        waited for last; one found exported once its lock is held is taken as it is."""
        while not runner.stopped.is_set():
            try:
                r, wait = pending.get_nowait(), False
            except queue.Empty:
                try:
                    r, wait = deferred.get_nowait(), True
                except queue.Empty:
                    return None
            f = open(work / r["key"] / "export.lock", "a")  # noqa: SIM115 - held until the export is done
            try:
                fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                f.close()
                deferred.put(r)
                continue
            if is_current(r) and (wait or not a.reexport):
                f.close()
                r["export"] = "cached"
                exported[r["key"]].set()
                continue
            return r, f
        return None

    def export_worker() -> None:
        try:
            p = runner.popen([sys.executable, __file__, "--child", "export", a.device, str(work)], env=export_env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        except TimeoutError:
            return
        lock_file = None
        try:
            while not runner.stopped.is_set():
                got = next_row()
                if got is None:
                    break
                r, lock_file = got
                p.stdin.write(f"{r['model']} {r['dtype']} {r['batch']}\n")
                p.stdin.flush()
                line = p.stdout.readline()
                lock_file.close()
                res = json.loads(line) if line.startswith("{") else {"ok": False, "error": "export process died"}
                if res["ok"]:
                    r["export"] = f"{res['export_s']} s"
                    print(f"  [{time.monotonic() - start:6.1f} s] exported {r['key']} in {res['export_s']} s",
                          flush=True)
                elif runner.stopped.is_set():
                    r["export"] = "stopped at the budget"
                else:
                    r["export"] = "failed"
                    r["status"] = "export failed"
                    r["errors"].append(res["error"])
                    print(f"  [{time.monotonic() - start:6.1f} s] export of {r['key']} FAILED: {res['error'][-300:]}",
                          flush=True)
                exported[r["key"]].set()
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError, ValueError):
                p.stdin.close()
                if lock_file is not None:
                    lock_file.close()
            p.wait()
            with runner.lock:
                runner.procs.discard(p)

    threads = [threading.Thread(target=export_worker, daemon=True) for _ in range(min(jobs, len(to_export)))]

    def save() -> None:
        meta = {"device": a.device, "models": models, "dtypes": dtypes, "batches": batches,
                "seconds": a.seconds, "budget_s": a.budget_s, "elapsed_s": round(time.monotonic() - start, 1),
                "rtol": RTOL, "torch_runner": not a.no_torch_runner, "aoti_run": str(a.aoti_run),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        if a.json:
            a.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        if a.markdown:
            a.markdown.write_text(markdown(rows, a.device) + "\n")

    save_lock = threading.Lock()
    todo: queue.Queue = queue.Queue()
    for r in rows:
        todo.put(r)

    def measure_worker() -> None:
        while not runner.stopped.is_set():
            try:
                r = todo.get_nowait()
            except queue.Empty:
                return
            while not exported[r["key"]].wait(1.0) or runner.stopped.is_set():
                if runner.stopped.is_set():
                    return
            if r["status"] == "export failed":
                continue
            try:
                measure_row(runner, a, r, work, env)
            except TimeoutError:
                r["status"] = "stopped at the budget"
                return
            except Exception as exc:  # noqa: BLE001 - one row's failure is the row's
                r["status"] = "error"
                r["errors"].append(_error(exc))
            with save_lock:
                us = " ".join(f"{k} {v / 1000:.3f}" for k, v in r["us"].items())
                ratios = " ".join(f"{k} {v:.2f}" for k, v in r["ratios"].items())
                print(f"  [{time.monotonic() - start:6.1f} s] {r['key']}: ms: {us}; {ratios}; {_check_cell(r)}",
                      flush=True)
                for e in r["errors"]:
                    print(f"    error: {e[-600:]}", flush=True)
                for side, c in r["check"].items():
                    if not c.get("ok"):
                        print(f"    {side}: {c.get('error')}", flush=True)
                save()

    for t in threads:
        t.start()
    if a.export_only:
        while any(t.is_alive() for t in threads):
            threads[0].join(1.0)
            if runner.left() <= 0:
                runner.stop()
            threads = [t for t in threads if t.is_alive()] or threads
        done = sum(exported[r["key"]].is_set() and r.get("export") not in (None, "failed", "stopped at the budget")
                   for r in rows)
        print(f"bench_models_gpu: {done} of {len(rows)} rows exported ({time.monotonic() - start:.0f} s)")
        return 0 if done == len(rows) else 1
    measurers = [threading.Thread(target=measure_worker, daemon=True) for _ in range(max(1, a.pipelines))]
    for t in measurers:
        t.start()
    for t in measurers:
        while t.is_alive():
            t.join(1.0)
            if runner.left() <= 0:
                runner.stop()
    runner.stop()  # the exports nothing waits for any more
    for t in threads:
        t.join(5)
    save()
    md = markdown(rows, a.device)
    measured = [r for r in rows if r["status"] == "measured"]
    print(f"\nbench_models_gpu: {len(measured)} of {len(rows)} rows measured in {time.monotonic() - start:.0f} s "
          f"(per call in ms; '!' = outputs beyond rtol; ratios: ours = aoti-run"
          f"{' with graphs' if a.device == 'cuda' else ''}, bold > 1.0)\n{md}", flush=True)
    return 0 if all(r["ok"] for r in measured) else 1


if __name__ == "__main__":
    raise SystemExit(main())
