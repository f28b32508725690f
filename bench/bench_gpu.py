"""GPU benchmark: our CUDA runtime against eager torch and torch's own AOTI runner, in one run.

    python bench/bench_gpu.py --artifacts DIR --aoti-run PATH [--json OUT.json]
(tests/gpu/run.sh runs it after tests/gpu/prepare.py has exported the plugins into DIR; the JSON is rewritten
after each part, so a run stopped early keeps what it measured.) BENCH_PART=resnet: the real architecture alone,
e.g. `python tests/gpu/prepare.py DIR --only resnet18 && BENCH_PART=resnet python bench/bench_gpu.py ...`.

Real architecture (tests/gpu/models.BENCH_MODELS, when DIR holds its export: ResNet-18, batch 8, 224x224,
float32): torch eager and torch's CUDA-graph replay, against `aoti-run --cuda-graphs --device-inputs` on the
same package with the runtime's convolutions on cuDNN (and, but for BENCH_QUICK, cuDNN with
AOTI_HOST_CUDNN_BENCHMARK=1, the direct kernel with AOTI_HOST_CUDNN=off, and torch's AOTI runner), each of our
outputs against eager's (prepare.py's reference, TF32 off; both sides here run torch's defaults, where cuDNN
float32 convolutions may use TF32).

Every measurement runs in its own process, so torch and our runtime never share one (both define the
aoti_torch_* shims). Per-call latency includes a device synchronisation (median of N calls, device
inputs), beside the floor: the same plugin's captured graph replayed bare (tests/tools/graph_floor). Cold
start: exec to the first result, new process each time. Weight load: the wall time of runtime.load for
blob-mode weights, against the limit measured in the same run (the larger of bytes / host read bandwidth of
the package's pages and bytes / pinned host-to-device bandwidth). Ratios are ours / reference, measured now;
nothing is compared with remembered numbers.

The graph sides of the small model sit within a microsecond of each other, where one process differs from the
next by about as much (where the CUDA runtime's threads and the timing thread land): torch's replay, aoti-run
--cuda-graphs, the floor program and the Python module with borrowed outputs each run in PROCESS_ROUNDS
processes, alternating, and each figure is the median of those processes' medians (every process's median is
kept beside it, `*_runs`).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
N_CALLS = 1000
PROCESS_ROUNDS = 3
# BENCH_QUICK=1: leave out torch's AOTI runner (about a minute per process to load a package on the
# H200 machine), torch's cold start and the real architecture's slow rows (the direct kernel, cudnnFind).
QUICK = os.environ.get("BENCH_QUICK") == "1"
DIRECT_CALLS = 5  # the direct convolution kernel takes tens of milliseconds per ResNet-18 call
T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"  [{time.perf_counter() - T0:6.1f} s] {msg}", flush=True)


def _child(*args: str, timeout: int = 120) -> dict:
    try:
        proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s", "rc": None}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            out = json.loads(line)
            timings = [ln.split(": ", 1)[-1] for ln in proc.stderr.splitlines() if "loaded in" in ln]
            if timings:  # the runtime's per-phase load times (AOTI_HOST_LOG=info)
                out["load_phases"] = timings
            return out
    return {"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-600:]}", "rc": proc.returncode}


WARMUP = 2000  # untimed calls before every timed loop, on every side: the GPU at its steady clocks


def _median_us(fn, sync, n: int = N_CALLS) -> float:
    for _ in range(WARMUP):
        fn()
        sync()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


# ---------- children ----------

def child_torch_eager(art: Path, name: str) -> dict:
    import numpy as np
    import torch

    sys.path.insert(0, str(REPO))
    from tests.gpu.models import BENCH_MODELS, MODELS

    torch.backends.cuda.matmul.allow_tf32 = False
    model, _ = {**MODELS, **BENCH_MODELS}[name][0]()
    model = model.cuda()
    x = torch.from_numpy(np.load(art / f"{name}.in0.npy")).cuda()
    res = {}
    with torch.no_grad():
        res["eager_us"] = _median_us(lambda: model(x), torch.cuda.synchronize)
        static_x = x.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(static_x)
        res["torch_graph_replay_us"] = _median_us(g.replay, torch.cuda.synchronize)
    return res


def _reopen_libtorch_global() -> None:
    """FACTS.md: torch's runner can only load a link_libtorch=False plugin once libtorch's shims are global."""
    import torch

    lib = Path(torch.__file__).parent / "lib"
    for name in ("libtorch_cpu.so", "libtorch_cuda.so"):
        ctypes.CDLL(str(lib / name), mode=os.RTLD_NOW | os.RTLD_GLOBAL)


def child_torch_aoti(art: Path, name: str) -> dict:
    import numpy as np
    import torch

    _reopen_libtorch_global()
    runner = torch._inductor.aoti_load_package(str(art / f"{name}.pt2"))
    x = torch.from_numpy(np.load(art / f"{name}.in0.npy")).cuda()
    return {"torch_aoti_us": _median_us(lambda: runner(x), torch.cuda.synchronize)}


def child_ours_python(art: Path, name: str, graphs: str) -> dict:
    """graphs: "0" eager, "1" graphs with outputs the caller owns (copies), "borrow" graphs with borrowed
    outputs (views of graph memory, valid until the next run)."""
    import numpy as np

    from toolchain import runtime
    from toolchain.runtime import cuda

    prog = runtime.load(art / f"{name}.pt2", device="cuda", cuda_graphs=graphs != "0",
                        borrow_graph_outputs=graphs == "borrow")
    x = cuda.DeviceArray.from_numpy(np.load(art / f"{name}.in0.npy"))
    us = _median_us(lambda: prog.run([x], device_outputs=True), prog.synchronize)
    st = prog.cuda_stats()
    return {"python_us": us, "replays": st.graph_replays, "off": st.graphs_disabled_reason,
            "input_copies": st.graph_input_copies, "output_copies": st.graph_output_copies,
            "compiled_path": prog._fast is not None}


def child_upload(art: Path) -> dict:
    """runtime.load of the blob-weights model, timed from call to return, in a process whose CUDA context
    already exists and whose runtime library is open (a serving process has both; creating them is not the
    load's), then a second load."""
    from toolchain import runtime
    from toolchain.runtime import cuda

    cuda._check(cuda._cudart().cudaFree(0), "cudaFree(0)")  # the context
    runtime.library(device="cuda")  # the runtime library (and cuBLAS) opened: what a server has before a load
    out: dict = {}
    for label in ("", "second_"):
        t0 = time.perf_counter()
        prog = runtime.load(art / "wide_mlp_blob.pt2", device="cuda")
        out[label + "load_s"] = time.perf_counter() - t0
        st = prog.cuda_stats()
        out.update({label + "bytes": st.weight_upload_bytes, label + "stage_s": st.weight_stage_seconds,
                    label + "upload_s": st.weight_upload_seconds, label + "weight_load_s": st.weight_load_seconds,
                    label + "mode": st.weight_upload_mode})
        prog.close()
    return out


def child_read_bandwidth(art: Path) -> dict:
    """Host read bandwidth of the package's weight pages (page cache, as a load finds them): the blob member's
    bytes read with pread(2) into a buffer, and copied out of a fresh read-only mapping (page faults included).
    Median of 5 each."""
    import mmap
    import zipfile

    import numpy as np

    pkg = art / "wide_mlp_blob.pt2"
    with zipfile.ZipFile(pkg) as zf:
        (info,) = [i for i in zf.infolist() if i.filename.endswith("_weights.blob")]
    raw = pkg.read_bytes()[info.header_offset:info.header_offset + 30]
    start = info.header_offset + 30 + int.from_bytes(raw[26:28], "little") + int.from_bytes(raw[28:30], "little")
    n = info.file_size
    buf = np.empty(n, np.uint8)
    buf.fill(1)  # resident before timing
    res: dict = {"bytes": n}
    fd = os.open(pkg, os.O_RDONLY)
    try:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            view, off = memoryview(buf), 0
            while off < n:
                got = os.preadv(fd, [view[off:off + (8 << 20)]], start + off)
                if got <= 0:
                    break
                off += got
            times.append(time.perf_counter() - t0)
        res["pread_GBps"] = n / statistics.median(times) / 1e9
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)  # a fresh mapping: its pages fault in as they are read
            buf[:] = np.frombuffer(m, np.uint8, n, start)
            times.append(time.perf_counter() - t0)
            del m
        res["mmap_copy_GBps"] = n / statistics.median(times) / 1e9
    finally:
        os.close(fd)
    res["read_GBps"] = max(res["pread_GBps"], res["mmap_copy_GBps"])
    return res


def child_pinned_bandwidth() -> dict:
    import torch

    n = 256 << 20
    host = torch.empty(n, dtype=torch.uint8).pin_memory()
    pageable = torch.empty(n, dtype=torch.uint8)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = {}
    for label, src in (("pinned", host), ("pageable", pageable)):
        for _ in range(3):
            dev.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dev.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        out[f"{label}_GBps"] = n / statistics.median(times) / 1e9
    return out


def child_torch_cold(art: Path, name: str) -> dict:
    t0 = time.perf_counter()
    import numpy as np
    import torch
    import torch._inductor  # noqa: F401

    t_import = time.perf_counter() - t0
    _reopen_libtorch_global()
    runner = torch._inductor.aoti_load_package(str(art / f"{name}.pt2"))
    y = runner(torch.from_numpy(np.load(art / f"{name}.in0.npy")).cuda())
    torch.cuda.synchronize()
    _ = y[0].cpu() if isinstance(y, list | tuple) else y.cpu()
    return {"import_s": t_import, "total_s": time.perf_counter() - t0}


def child_torch_default(art: Path, promote: str = "0") -> dict:
    """torch's runner on its own default (libtorch-linked) plugin. promote=1 first makes the shared
    libstdc++.so.6 global (what our host does for plugins carrying an exported C++ runtime)."""
    if promote == "1":
        ctypes.CDLL("libstdc++.so.6", mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    import numpy as np
    import torch

    runner = torch._inductor.aoti_load_package(str(art / "small_mlp_default.pt2"))
    x = torch.from_numpy(np.load(art / "small_mlp.in0.npy")).cuda()
    runner(x)
    torch.cuda.synchronize()
    return {"ok": True, "torch_default_plugin_us": _median_us(lambda: runner(x), torch.cuda.synchronize)}


# ---------- orchestration ----------

def aoti_run(exe: str, art: Path, name: str, extra: list[str], inputs: str | None = None,
             env: dict[str, str] | None = None, outputs: list | None = None) -> tuple[int, str]:
    """aoti-run on DIR/<name>.pt2 with its example input; `outputs`, when given, receives the outputs."""
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        try:
            proc = subprocess.run([exe, str(art / f"{name}.pt2"), "--device", "cuda", "-i",
                                   str(art / f"{inputs or name}.in0.npy"), "-o", tmp, "--quiet", *extra],
                                  capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired:
            return -1, "timed out after 120 s"
        if outputs is not None and proc.returncode == 0:
            outputs += [np.load(p) for p in sorted(Path(tmp).glob("output_*.npy"))]
    return proc.returncode, proc.stdout + proc.stderr


def parse_median(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("latency_us:"):
            return float(line.split("median=")[1].split()[0])
    return None


def _median_of(values: list):
    """The median of the numbers among `values` (a failed side's entry is its error text), else the first."""
    nums = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(nums) if nums else (values[0] if values else None)


def graph_floor(exe: Path, art: Path, name: str) -> dict:
    """One graph_floor process (runtime/tests/tools/graph_floor.cpp): the same plugin's captured graph replayed
    bare (launch + sync) beside our per-call path, interleaved in one process."""
    try:
        proc = subprocess.run([str(exe), str(art / f"{name}.pt2"), str(N_CALLS // 2), "4",
                               str(art / f"{name}.in0.npy")], capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("{")), None)
    return json.loads(line) if line else {"error": (proc.stderr or proc.stdout)[-400:]}


def wall(cmd: list[str], n: int, timeout: int = 120) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            subprocess.run(cmd, capture_output=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})
        except subprocess.TimeoutExpired:
            return float("nan")
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def real_model(exe: str, art: Path, name: str) -> dict:
    """A real architecture end to end (see the module's doc): per call in milliseconds, ratios to torch's
    CUDA-graph replay and to eager, and the max relative error of each of our rows against eager."""
    import numpy as np

    ref = np.load(art / f"{name}.ref0.npy").astype(np.float32)
    r: dict = {}
    progress(f"{name}: torch eager and CUDA-graph replay")
    eager = _child("--child", "eager", str(art), name, timeout=300)
    r.update({k: v / 1000 if isinstance(v, float) else v for k, v in eager.items()})  # us -> ms
    r = {k.replace("_us", "_ms"): v for k, v in r.items()}
    if not QUICK:
        progress(f"{name}: torch's AOTI runner")
        aoti = _child("--child", "aoti", str(art), name, timeout=300)
        r["torch_aoti_ms"] = aoti["torch_aoti_us"] / 1000 if "torch_aoti_us" in aoti else aoti
    print(f"  {name} torch: {json.dumps(r)}", flush=True)
    timed = ["--device-inputs", "--cuda-graphs", "--repeat", str(N_CALLS), "--warmup", str(WARMUP)]
    rows: list[tuple[str, dict[str, str], list[str]]] = [("cudnn", {}, timed)]
    if not QUICK:
        rows += [("cudnn_benchmark", {"AOTI_HOST_CUDNN_BENCHMARK": "1"}, timed),
                 ("direct", {"AOTI_HOST_CUDNN": "off"},
                  ["--device-inputs", "--cuda-graphs", "--repeat", str(DIRECT_CALLS), "--warmup", "1"])]
    for label, env, args in rows:
        progress(f"{name}: ours, aoti-run --cuda-graphs, {label}")
        outs: list = []
        rc, text = aoti_run(exe, art, name, args, env={"AOTI_HOST_LOG": "info", **env}, outputs=outs)
        med = parse_median(text) if rc == 0 else None
        row: dict = {"ms": med / 1000 if med is not None else None}
        if rc != 0 or not outs:
            row["error"] = text[-600:]
        else:
            got = outs[0].astype(np.float32)
            row["max_rel_err_vs_eager"] = float(np.abs(got - ref).max() / np.abs(ref).max())
        row["cudnn_log"] = [ln for ln in text.splitlines() if "cudnn" in ln.lower()][:6]
        for ref_key in ("torch_graph_replay_ms", "eager_ms", "torch_aoti_ms"):
            if isinstance(row["ms"], float) and isinstance(r.get(ref_key), float):
                row[f"ratio_vs_{ref_key[:-3]}"] = row["ms"] / r[ref_key]
        r[f"ours_graphs_{label}"] = row
        print(f"  {name} ours ({label}): {json.dumps(row)}", flush=True)
    return r


def weight_load(art: Path, results: dict, sweep: bool = False) -> None:
    """The wall time of runtime.load for 134 MB of blob weights (CUDA context already up), per upload mode,
    against the limit measured in the same run: the larger of bytes / host read bandwidth of the package's
    pages and bytes / pinned host-to-device bandwidth. sweep: also the host ring's chunk sizes and threads."""
    progress("weight load: pinned bandwidth, host read bandwidth, then each mode (new process each, 3 each)")
    bw = _child("--child", "pinned")
    rd = _child("--child", "readbw", str(art))
    wl: dict = {"bandwidth": bw, "read": rd}
    results["weight_load"] = wl
    limit = None
    if "pinned_GBps" in bw and "read_GBps" in rd:
        limit = max(rd["bytes"] / (rd["read_GBps"] * 1e9), rd["bytes"] / (bw["pinned_GBps"] * 1e9))
        wl["limit_s"] = limit
    configs: list[tuple[str, dict]] = [("host", {}), ("stage", {}), ("pageable", {})]
    if sweep:
        configs += [(f"host_t{t}_c{c}", {"AOTI_HOST_UPLOAD_THREADS": str(t), "AOTI_HOST_UPLOAD_CHUNK_MB": str(c)})
                    for c in (1, 2, 4, 8) for t in (1, 2, 4)]
    for label, extra in configs:
        mode = label.split("_")[0]
        env_keys = {"AOTI_HOST_WEIGHT_UPLOAD": mode, "AOTI_HOST_LOG": "info", **extra}
        os.environ.update(env_keys)
        runs = [_child("--child", "upload", str(art)) for _ in range(3)]
        for k in env_keys:
            os.environ.pop(k, None)
        ok = [r for r in runs if r.get("load_s")]
        row: dict = {"runs": len(ok)}
        if ok:
            row["load_phases"] = ok[0].get("load_phases")
            row["load_s"] = statistics.median(r["load_s"] for r in ok)
            row["second_load_s"] = statistics.median(r["second_load_s"] for r in ok)
            row["weight_load_s"] = statistics.median(r["weight_load_s"] for r in ok)
            row["upload_s"] = statistics.median(r["upload_s"] for r in ok)
            if limit:
                row["ratio_load_vs_limit"] = row["load_s"] / limit
        else:
            row["error"] = str(runs[0])[-300:]
        wl[label] = row
        print(f"  weight load {label}: {json.dumps(row)}", flush=True)
    if "load_s" in wl.get("host", {}) and "load_s" in wl.get("pageable", {}):
        wl["ratio_host_vs_plugin_loader"] = wl["host"]["load_s"] / wl["pageable"]["load_s"]
    print(f"  weight load: limit {limit} s; pinned {bw.get('pinned_GBps')} GB/s; read {json.dumps(rd)}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--artifacts", type=Path)
    ap.add_argument("--aoti-run")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", nargs="+")
    a = ap.parse_args()
    if a.child:
        kind, *rest = a.child
        art = Path(rest[0]) if rest else Path()
        fn = {"eager": lambda: child_torch_eager(art, rest[1]), "aoti": lambda: child_torch_aoti(art, rest[1]),
              "python": lambda: child_ours_python(art, rest[1], rest[2]), "upload": lambda: child_upload(art),
              "readbw": lambda: child_read_bandwidth(art),
              "pinned": child_pinned_bandwidth, "cold": lambda: child_torch_cold(art, rest[1]),
              "default": lambda: child_torch_default(art, *rest[1:])}[kind]
        print(json.dumps(fn()))
        return 0
    art, exe = a.artifacts.resolve(), a.aoti_run
    results: dict = {"n_calls": N_CALLS, "quick": QUICK}

    def save() -> None:
        if a.json:
            a.json.write_text(json.dumps(results, indent=1))

    if os.environ.get("BENCH_PART") == "upload":  # the weight load alone, with the host ring's sweep
        weight_load(art, results, sweep=True)
        save()
        return 0
    if os.environ.get("BENCH_PART") == "torch":  # only what BENCH_QUICK leaves out (a second, warm call)
        for name in ("small_mlp", "wide_mlp_blob"):
            progress(f"{name}: torch's AOTI runner")
            results[name] = _child("--child", "aoti", str(art), name, timeout=240)
            print(f"  {name}: {json.dumps(results[name])}")
        progress("cold start: torch import + aoti_load_package + first result (2 processes)")
        cold = wall([sys.executable, __file__, "--child", "cold", str(art), "small_mlp"], 2, timeout=240)
        results["cold_start"] = {"torch_exec_to_result_s": cold}
        print(f"  cold start: {json.dumps(results['cold_start'])}")
        for promote in ("0", "1"):
            progress(f"torch's runner on its default plugin, libstdc++ made global first: {promote == '1'}")
            results[f"torch_default_plugin_promote{promote}"] = d = _child("--child", "default", str(art), promote,
                                                                           timeout=240)
            print(f"  torch runner on its default plugin (promote={promote}): {json.dumps(d)}")
        save()
        return 0
    print(f"bench_gpu: per call = median of {N_CALLS} calls, each followed by a device sync; device inputs")
    sys.path.insert(0, str(REPO))
    from tests.gpu.models import BENCH_MODELS  # (imports no torch)

    real = [n for n in BENCH_MODELS if (art / f"{n}.pt2").is_file()]
    for name in real:
        results[name] = real_model(exe, art, name)
        save()
    if os.environ.get("BENCH_PART") == "resnet":
        if not real:
            print(f"bench_gpu: no {', '.join(BENCH_MODELS)} package in {art}: export it first "
                  f"(python tests/gpu/prepare.py {art} --only {' '.join(BENCH_MODELS)})")
            return 2
        return 0
    for name in ("small_mlp", "wide_mlp_blob"):
        r: dict = {}
        if not QUICK:
            progress(f"{name}: torch's AOTI runner")
            r.update(_child("--child", "aoti", str(art), name))
        progress(f"{name}: ours, eager")
        rc, text = aoti_run(exe, art, name, ["--device-inputs", "--repeat", str(N_CALLS), "--warmup", str(WARMUP)])
        r["ours_us"] = parse_median(text) if rc == 0 else None
        if rc != 0:
            r["ours_us_error"] = text[-400:]
        for graphs, key in (("0", "python_us"), ("1", "python_graphs_us")):
            py = _child("--child", "python", str(art), name, graphs)
            r[key] = py.get("python_us", py.get("error"))
        floor_exe = Path(exe).resolve().parents[2] / "tests" / "graph_floor"
        runs: dict[str, list] = {"eager": [], "ours_graphs_us": [], "python_graphs_borrowed_us": [], "graph_floor": []}
        for k in range(PROCESS_ROUNDS):
            progress(f"{name}: torch eager and replay, aoti-run --cuda-graphs, Python borrowed, the floor "
                     f"({k + 1}/{PROCESS_ROUNDS})")
            runs["eager"].append(_child("--child", "eager", str(art), name))
            rc, text = aoti_run(exe, art, name, ["--device-inputs", "--repeat", str(N_CALLS), "--warmup", str(WARMUP),
                                                 "--cuda-graphs"])
            runs["ours_graphs_us"].append(parse_median(text) if rc == 0 else None)
            if rc != 0:
                r["ours_graphs_us_error"] = text[-400:]
            r["ours_graph_counters"] = next((ln for ln in text.splitlines() if ln.startswith("cuda_graphs:")), "")
            py = _child("--child", "python", str(art), name, "borrow")
            runs["python_graphs_borrowed_us"].append(py.get("python_us", py.get("error")))
            r["python_borrowed_counters"] = {k: py.get(k) for k in ("input_copies", "output_copies", "compiled_path")}
            runs["graph_floor"].append(graph_floor(floor_exe, art, name))
        r.update(runs["eager"][0])  # anything else the child says (an error)
        for key in ("eager_us", "torch_graph_replay_us"):
            r[key] = _median_of([e.get(key) for e in runs["eager"]])
            r[key + "_runs"] = [e.get(key) for e in runs["eager"]]
        for key in ("ours_graphs_us", "python_graphs_borrowed_us"):
            r[key] = _median_of(runs[key])
            r[key + "_runs"] = runs[key]
        floors = [f for f in runs["graph_floor"] if "error" not in f]
        r["graph_floor"] = ({k: _median_of([f.get(k) for f in floors]) for k in floors[0]} if floors
                            else runs["graph_floor"][0])
        for k in ("floor_us", "c_api_us"):
            r["graph_floor"][k + "_runs"] = [f.get(k) for f in floors]
        floor = r["graph_floor"].get("floor_us")
        if isinstance(floor, float) and isinstance(r.get("ours_graphs_us"), float):
            r["ratio_aoti_run_graphs_vs_floor"] = r["ours_graphs_us"] / floor
        if isinstance(floor, float) and isinstance(r["graph_floor"].get("c_api_us"), float):
            r["ratio_c_api_vs_floor_same_process"] = r["graph_floor"]["c_api_us"] / floor
        if isinstance(r.get("torch_graph_replay_us"), float):
            for key in ("ours_graphs_us", "python_graphs_borrowed_us", "python_graphs_us"):
                if isinstance(r.get(key), float):
                    r[f"ratio_{key}_vs_torch_replay"] = r[key] / r["torch_graph_replay_us"]
        ref_name = "torch_aoti_us" if isinstance(r.get("torch_aoti_us"), float) else "eager_us"
        if isinstance(r.get("ours_graphs_us"), float) and isinstance(r.get(ref_name), float):
            r["ratio_graphs_vs_" + ref_name] = r["ours_graphs_us"] / r[ref_name]
        results[name] = r
        print(f"  {name}: {json.dumps(r)}")
        save()
    # cold start: exec to first result, new process each time
    progress("cold start: ours")
    rc, _ = aoti_run(exe, art, "small_mlp", [])
    ours_cold = wall([exe, str(art / "small_mlp.pt2"), "--device", "cuda", "-i", str(art / "small_mlp.in0.npy"),
                      "-o", tempfile.mkdtemp(), "--quiet"], 5)
    progress("cold start: import torch")
    import_torch = wall([sys.executable, "-c", "import torch"], 3)
    progress("cold start: torch import + aoti_load_package + first result")
    torch_wall = float("nan") if QUICK else wall([sys.executable, __file__, "--child", "cold", str(art), "small_mlp"], 3)
    results["cold_start"] = {"ours_exec_to_result_s": ours_cold, "ours_rc": rc, "python_import_torch_s": import_torch,
                             "torch_exec_to_result_s": torch_wall, "ratio": ours_cold / torch_wall,
                             "ratio_vs_import_torch_alone": ours_cold / import_torch}
    print(f"  cold start: {json.dumps(results['cold_start'])}")
    save()
    weight_load(art, results)
    if QUICK:  # torch's runner (a minute per load there) is what QUICK leaves out
        save()
        return 0
    progress("torch's runner on its default plugin")
    d = _child("--child", "default", str(art))
    rc_ours, text_ours = aoti_run(exe, art, "small_mlp_default", [], inputs="small_mlp")
    results["torch_runner_default_plugin"] = {"torch": d, "ours_rc": rc_ours, "ours_msg": text_ours[-500:]}
    print(f"  torch runner on its default (libtorch-linked) plugin: {json.dumps(d)}")
    print(f"  our aoti-run on that plugin: rc={rc_ours}: {text_ours[-300:].strip()}")
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
