"""GPU benchmark: our CUDA runtime against eager torch and torch's own AOTI runner, in one run.

    python bench/bench_gpu.py --artifacts DIR --aoti-run PATH [--json OUT.json]
(tests/gpu/run.sh runs it after tests/gpu/prepare.py has exported the plugins into DIR.)

Every measurement runs in its own process, so torch and our runtime never share one (both define the
aoti_torch_* shims). Per-call latency includes a device synchronisation (median of N calls, device
inputs). Cold start: exec to the first result, new process each time. Weight upload: blob-mode weights
into device memory, against pinned host-to-device bandwidth measured in the same run. Ratios are
ours / reference, measured now; nothing is compared with remembered numbers.
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
# BENCH_QUICK=1: leave out torch's AOTI runner (about a minute per process to load a package on the
# H200 machine) and torch's cold start; everything else is measured as usual.
QUICK = os.environ.get("BENCH_QUICK") == "1"
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
            return json.loads(line)
    return {"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-600:]}", "rc": proc.returncode}


def _median_us(fn, sync, n: int = N_CALLS) -> float:
    for _ in range(50):
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
    from tests.gpu.models import MODELS

    torch.backends.cuda.matmul.allow_tf32 = False
    model, _ = MODELS[name][0]()
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
    import numpy as np

    from toolchain import runtime
    from toolchain.runtime import cuda

    prog = runtime.load(art / f"{name}.pt2", device="cuda", cuda_graphs=graphs == "1")
    x = cuda.DeviceArray.from_numpy(np.load(art / f"{name}.in0.npy"))
    us = _median_us(lambda: prog.run([x], device_outputs=True), prog.synchronize)
    st = prog.cuda_stats()
    return {"python_us": us, "replays": st.graph_replays, "off": st.graphs_disabled_reason}


def child_upload(art: Path) -> dict:
    from toolchain import runtime

    t0 = time.perf_counter()
    prog = runtime.load(art / "wide_mlp_blob.pt2", device="cuda")
    load_s = time.perf_counter() - t0
    st = prog.cuda_stats()
    return {"bytes": st.weight_upload_bytes, "stage_s": st.weight_stage_seconds, "upload_s": st.weight_upload_seconds,
            "weight_load_s": st.weight_load_seconds,
            "load_s": load_s}


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

def aoti_run(exe: str, art: Path, name: str, extra: list[str], inputs: str | None = None) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            proc = subprocess.run([exe, str(art / f"{name}.pt2"), "--device", "cuda", "-i",
                                   str(art / f"{inputs or name}.in0.npy"), "-o", tmp, "--quiet", *extra],
                                  capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return -1, "timed out after 120 s"
    return proc.returncode, proc.stdout + proc.stderr


def parse_median(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("latency_us:"):
            return float(line.split("median=")[1].split()[0])
    return None


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
              "pinned": child_pinned_bandwidth, "cold": lambda: child_torch_cold(art, rest[1]),
              "default": lambda: child_torch_default(art, *rest[1:])}[kind]
        print(json.dumps(fn()))
        return 0
    art, exe = a.artifacts.resolve(), a.aoti_run
    results: dict = {"n_calls": N_CALLS}
    if os.environ.get("BENCH_PART") == "upload":  # the host upload's ring: threads x chunk size, and the modes
        bw = _child("--child", "pinned")
        print(f"  pinned bandwidth: {json.dumps(bw)}")
        results["weight_upload_sweep"] = rows = []
        configs = [("host", t, c) for c in (8, 32) for t in (1, 2, 4, 8)] + [("stage", 0, 0), ("pageable", 0, 0)]
        for mode, threads, chunk in configs:
            env = {"AOTI_HOST_WEIGHT_UPLOAD": mode}
            if threads:
                env.update(AOTI_HOST_UPLOAD_THREADS=str(threads), AOTI_HOST_UPLOAD_CHUNK_MB=str(chunk))
            os.environ.update(env)
            runs = [_child("--child", "upload", str(art)) for _ in range(3)]
            for k in ("AOTI_HOST_UPLOAD_THREADS", "AOTI_HOST_UPLOAD_CHUNK_MB"):
                os.environ.pop(k, None)
            ok = [r for r in runs if r.get("upload_s")]
            row = {"mode": mode, "threads": threads, "chunk_mb": chunk, "runs": len(ok)}
            if ok:
                row["copy_ratio"] = statistics.median(r["bytes"] / r["upload_s"] / 1e9 for r in ok) / bw["pinned_GBps"]
                row["all_GBps"] = statistics.median(r["bytes"] / r["weight_load_s"] / 1e9 for r in ok)
            rows.append(row)
            print(f"  upload {json.dumps(row)}", flush=True)
        os.environ.pop("AOTI_HOST_WEIGHT_UPLOAD", None)
        if a.json:
            a.json.write_text(json.dumps({"bandwidth": bw, **results}, indent=1))
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
        if a.json:
            a.json.write_text(json.dumps(results, indent=1))
        return 0
    print(f"bench_gpu: per call = median of {N_CALLS} calls, each followed by a device sync; device inputs")
    for name in ("small_mlp", "wide_mlp_blob"):
        r: dict = {}
        progress(f"{name}: eager torch")
        r.update(_child("--child", "eager", str(art), name))
        if not QUICK:
            progress(f"{name}: torch's AOTI runner")
            r.update(_child("--child", "aoti", str(art), name))
        progress(f"{name}: ours")
        for graphs in (False, True):
            extra = ["--device-inputs", "--repeat", str(N_CALLS)] + (["--cuda-graphs"] if graphs else [])
            rc, text = aoti_run(exe, art, name, extra)
            key = "ours_graphs_us" if graphs else "ours_us"
            r[key] = parse_median(text) if rc == 0 else None
            if rc != 0:
                r[key + "_error"] = text[-400:]
            if graphs:
                r["ours_graph_counters"] = next((ln for ln in text.splitlines() if ln.startswith("cuda_graphs:")), "")
            py = _child("--child", "python", str(art), name, "1" if graphs else "0")
            r["python_graphs_us" if graphs else "python_us"] = py.get("python_us", py.get("error"))
        ref_name = "torch_aoti_us" if isinstance(r.get("torch_aoti_us"), float) else "eager_us"
        if isinstance(r.get("ours_graphs_us"), float) and isinstance(r.get(ref_name), float):
            r["ratio_graphs_vs_" + ref_name] = r["ours_graphs_us"] / r[ref_name]
        results[name] = r
        print(f"  {name}: {json.dumps(r)}")
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
    progress("weight upload (each mode of AOTI_HOST_WEIGHT_UPLOAD, new process each, 3 each)")
    bw = _child("--child", "pinned")
    results["weight_upload"] = {"bandwidth": bw}
    for mode in ("host", "stage", "pageable"):
        os.environ["AOTI_HOST_WEIGHT_UPLOAD"] = mode
        runs = [_child("--child", "upload", str(art)) for _ in range(3)]
        ok = [r for r in runs if r.get("upload_s")]
        up: dict = {"runs": runs}
        if ok and "pinned_GBps" in bw:
            # copy: host-to-device copy time (the copy engine's, from CUDA events, when the host uploads;
            # the plugin's UpdateConstantsFromBlob call when it does); all: the whole weight load.
            copy = statistics.median(r["bytes"] / r["upload_s"] / 1e9 for r in ok)
            whole = statistics.median(r["bytes"] / r["weight_load_s"] / 1e9 for r in ok)
            up.update(copy_GBps=copy, all_GBps=whole, copy_ratio_vs_pinned=copy / bw["pinned_GBps"],
                      all_ratio_vs_pinned=whole / bw["pinned_GBps"])
        results["weight_upload"][mode] = up
    os.environ.pop("AOTI_HOST_WEIGHT_UPLOAD", None)
    print(f"  weight upload: {json.dumps(results['weight_upload'])}")
    progress("torch's runner on its default plugin")
    d = _child("--child", "default", str(art))
    rc_ours, text_ours = aoti_run(exe, art, "small_mlp_default", [], inputs="small_mlp")
    results["torch_runner_default_plugin"] = {"torch": d, "ours_rc": rc_ours, "ours_msg": text_ours[-500:]}
    print(f"  torch runner on its default (libtorch-linked) plugin: {json.dumps(d)}")
    print(f"  our aoti-run on that plugin: rc={rc_ours}: {text_ours[-300:].strip()}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
