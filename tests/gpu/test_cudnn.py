"""Convolutions through cuDNN (runtime/src/shims/cuda/cudnn_conv.cpp, cudnn_graph_conv.cpp) against torch's eager
convolutions.

aoti_torch_cuda_convolution is called through the C ABI (tests/gpu/test_cuda_ops.py's Host) on torch CUDA
tensors: forward and transposed, 1-d/2-d/3-d, grouped and depthwise, with and without bias, NCHW,
channels-last and mixed or non-packed layouts, float32 (with and without TF32, as torch's allow_tf32 flag),
float16, bfloat16 and float64, through cuDNN's graph API (the default) and its legacy API
(AOTI_HOST_CUDNN_GRAPH=0). Every output is compared with ATen's in values, sizes and strides. Which path each
shape took (the runtime's debug log), the loader's behaviour (cuDNN found and used for every case; missing: the
direct kernel with one warning naming the package, or an error with AOTI_HOST_CUDNN=on) and the graph path
under CUDA graph capture (aoti-run --cuda-graphs on exported convolution models) are checked in child
processes, whose log and environment are their own.

Needs the GPU machine (tests/gpu/run.sh sets AOTI_HOST_LIBRARY to the CUDA build); skips elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.test_cuda_ops import Host, gen, rand, same

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]

# name: (input sizes, c_out, kernel, stride, padding, dilation, groups, bias, transposed, output_padding)
CASES = {
    "conv2d": ((2, 16, 20, 20), 32, (3, 3), (2, 2), (1, 1), (1, 1), 1, True, False, (0, 0)),
    "conv2d_1x1": ((4, 64, 14, 14), 128, (1, 1), (1, 1), (0, 0), (1, 1), 1, False, False, (0, 0)),
    "conv2d_stem": ((2, 3, 32, 32), 16, (7, 7), (2, 2), (3, 3), (1, 1), 1, False, False, (0, 0)),
    "conv2d_dilated": ((2, 8, 17, 15), 8, (3, 3), (1, 1), (2, 2), (2, 2), 1, True, False, (0, 0)),
    "depthwise": ((2, 32, 17, 17), 32, (3, 3), (1, 1), (1, 1), (1, 1), 32, True, False, (0, 0)),
    "depthwise_x2": ((2, 16, 12, 12), 32, (5, 5), (2, 2), (2, 2), (1, 1), 16, False, False, (0, 0)),
    "grouped": ((2, 16, 12, 12), 24, (3, 3), (1, 1), (1, 1), (1, 1), 4, True, False, (0, 0)),
    "conv1d": ((2, 8, 33), 12, (5,), (1,), (4,), (2,), 1, True, False, (0,)),
    "conv1d_depthwise": ((3, 12, 40), 12, (3,), (2,), (1,), (1,), 12, False, False, (0,)),
    "conv3d": ((1, 4, 6, 8, 8), 8, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1, True, False, (0, 0, 0)),
    "transposed2d": ((2, 16, 9, 9), 8, (4, 4), (2, 2), (1, 1), (1, 1), 1, True, True, (0, 0)),
    "transposed2d_outpad": ((2, 8, 7, 6), 6, (3, 3), (2, 2), (1, 1), (1, 1), 1, False, True, (1, 1)),
    "transposed2d_grouped": ((1, 8, 5, 6), 4, (3, 3), (2, 1), (1, 0), (1, 2), 2, True, True, (1, 0)),
    "transposed1d": ((2, 4, 9), 3, (3,), (2,), (1,), (1,), 1, True, True, (1,)),
    "transposed3d": ((1, 4, 3, 4, 5), 4, (3, 2, 3), (2, 2, 1), (1, 0, 1), (1, 1, 1), 2, True, True, (0, 1, 0)),
}
SPATIAL_2D = [n for n, c in CASES.items() if len(c[0]) == 4]

# (rtol, scale of atol by the output's largest magnitude): eager and cuDNN may pick different algorithms,
# so results differ by accumulation order (and TF32 rounding where allowed on both sides).
TOL = {"float32": (1e-5, 1e-5), "float32_tf32": (2e-3, 2e-3), "float16": (2e-3, 2e-3),
       "bfloat16": (1.6e-2, 1.6e-2), "float64": (1e-12, 1e-12)}
DTYPES = {"float32": torch.float32, "float32_tf32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "float64": torch.float64}


def skip_without_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: these tests run on the GPU machine via tests/gpu/run.sh")
    if not os.environ.get("AOTI_HOST_LIBRARY"):
        pytest.skip("AOTI_HOST_LIBRARY is not set: run tests/gpu/run.sh, which builds the CUDA runtime")


@pytest.fixture
def host():
    skip_without_gpu()
    h = Host()
    yield h
    h.release()


def operands(case, dtype, layout: str, seed: int = 3):
    sizes, c_out, kernel, stride, padding, dil, groups, with_bias, transposed, out_pad = case
    g = gen(seed)
    x = rand(sizes, dtype, "stepped" if layout == "stepped" else "contiguous", g)
    w_sizes = (sizes[1], c_out // groups, *kernel) if transposed else (c_out, sizes[1] // groups, *kernel)
    w = rand(w_sizes, dtype, "contiguous", g)
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(len(sizes))
    if layout in ("channels_last", "mixed") and fmt is not None:
        x = x.contiguous(memory_format=fmt)
    if layout == "channels_last" and fmt is not None:
        w = w.contiguous(memory_format=fmt)
    bias = rand((c_out,), dtype, "contiguous", g) if with_bias else None
    args = (list(stride), list(padding), list(dil), int(transposed), list(out_pad), groups)
    return x, w, bias, args


def eager(x, w, bias, args):
    stride, padding, dil, transposed, out_pad, groups = args
    return torch.ops.aten.convolution(x, w, bias, stride, padding, dil, bool(transposed), out_pad, groups)


def check(host, name: str, dtype_name: str, layout: str, graph: bool = True) -> None:
    case = CASES[name]
    dtype = DTYPES[dtype_name]
    tf32 = dtype_name == "float32_tf32"
    prev = torch.backends.cudnn.allow_tf32
    prev_env = {k: os.environ.get(k) for k in ("AOTI_HOST_CUDNN_ALLOW_TF32", "AOTI_HOST_CUDNN_GRAPH")}
    torch.backends.cudnn.allow_tf32 = tf32
    os.environ["AOTI_HOST_CUDNN_ALLOW_TF32"] = "1" if tf32 else "0"  # the runtime reads both on every call
    os.environ["AOTI_HOST_CUDNN_GRAPH"] = "1" if graph else "0"
    try:
        x, w, bias, args = operands(case, dtype, layout)
        want = eager(x, w, bias, args)
        got = host("convolution", x, w, bias, *args)
    finally:
        torch.backends.cudnn.allow_tf32 = prev
        for k, v in prev_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    rtol, scale = TOL[dtype_name]
    atol = scale * max(want.abs().max().item(), 1.0)
    same(got, want, rtol=rtol, atol=atol, layout=layout != "stepped")


@pytest.mark.parametrize("dtype_name", list(TOL))
@pytest.mark.parametrize("name", list(CASES))
def test_convolution_matches_eager(host, name, dtype_name):
    check(host, name, dtype_name, "contiguous")


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["channels_last", "mixed", "stepped"])
@pytest.mark.parametrize("name", SPATIAL_2D + ["conv3d", "transposed3d"])
def test_convolution_layouts(host, name, layout, dtype_name):
    check(host, name, dtype_name, layout)


@pytest.mark.parametrize("dtype_name", ["float32", "float32_tf32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("name", list(CASES))
def test_legacy_api_matches_eager(host, name, layout, dtype_name):
    """AOTI_HOST_CUDNN_GRAPH=0: the same cases through cuDNN's legacy convolution API."""
    if layout == "channels_last" and len(CASES[name][0]) == 3:
        pytest.skip("a 1-d convolution has no channels-last layout")
    check(host, name, dtype_name, layout, graph=False)


def test_plan_cache_serves_repeated_and_interleaved_shapes(host):
    """Plans are per shape: the same shapes again, interleaved, give the results of the first time (to rounding:
    some algorithms, such as backward-data ones for transposed convolutions, accumulate in no fixed order)."""
    names = ["conv2d", "depthwise", "transposed2d", "conv2d", "transposed2d", "depthwise"]
    first: dict[str, torch.Tensor] = {}
    for name in names:
        x, w, bias, args = operands(CASES[name], torch.float32, "contiguous")
        got = host("convolution", x, w, bias, *args)
        if name in first:
            torch.testing.assert_close(got, first[name], rtol=1e-5, atol=1e-5 * first[name].abs().max().item())
        else:
            first[name] = got


def test_large_resnet_layer(host):
    """A ResNet stage's 3x3 convolution at batch 8 (where the direct kernel took milliseconds)."""
    g = gen(5)
    x = rand((8, 128, 28, 28), torch.float16, "contiguous", g)
    w = rand((128, 128, 3, 3), torch.float16, "contiguous", g)
    want = torch.ops.aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    got = host("convolution", x, w, None, [1, 1], [1, 1], [1, 1], 0, [0, 0], 1)
    same(got, want, rtol=2e-3, atol=2e-3 * want.abs().max().item())


# --- the loader, in child processes ------------------------------------------------------------------

CHILD = r"""
import json, sys, torch
from tests.gpu.test_cuda_ops import Host
from tests.gpu.test_cudnn import CASES, operands, eager
torch.backends.cudnn.allow_tf32 = False
host = Host()
results = {}
for name in json.loads(sys.argv[1]):
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for layout in ("contiguous", "channels_last"):
            x, w, bias, args = operands(CASES[name], dtype, layout)
            try:
                got = host("convolution", x, w, bias, *args)
            except Exception as exc:
                results[f"{name}/{dtype}/{layout}"] = str(exc)
                continue
            want = eager(x, w, bias, args)
            err = ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp(min=1)).item()
            results[f"{name}/{dtype}/{layout}"] = err
            host.release()
print("RESULTS " + json.dumps(results))
"""


def run_child(names: list[str], **env_extra: str) -> tuple[dict, str]:
    skip_without_gpu()
    env = {**os.environ, "PYTHONPATH": str(REPO), "AOTI_HOST_LOG": "info", "AOTI_HOST_CUDNN_ALLOW_TF32": "0",
           **env_extra}
    for key in ("AOTI_HOST_CUDNN", "AOTI_HOST_CUDNN_LIBRARY", "AOTI_HOST_CUDNN_BENCHMARK", "AOTI_HOST_CUDNN_GRAPH"):
        if key not in env_extra:
            env.pop(key, None)
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(names)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):]), proc.stderr


def graph_api_compiled(log: str) -> bool:
    """Whether the child's runtime was built with cudnn-frontend (its info line says which APIs it uses)."""
    assert "convolutions on cuda run through cuDNN 9." in log, log[-3000:]
    return "its graph API first" in log


def plan_lines(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if "cuDNN plan for the" in ln]


def test_every_case_runs_through_cudnn():
    """With cuDNN required, every case of this file runs through it (no shape is refused) and matches."""
    results, log = run_child(list(CASES), AOTI_HOST_CUDNN="on")
    assert "convolutions on cuda run through cuDNN 9." in log, log[-3000:]
    assert "refuses" not in log, log[-3000:]
    bad = {k: v for k, v in results.items() if not isinstance(v, float) or v > 2e-2}
    assert not bad, bad


def test_every_case_runs_through_the_graph_api():
    """Every case of this file, in float32/float16/bfloat16, NCHW and channels-last, takes cuDNN's graph API
    (one plan each, an engine named), none falls back to the legacy API."""
    results, log = run_child(list(CASES), AOTI_HOST_CUDNN="on", AOTI_HOST_LOG="debug")
    if not graph_api_compiled(log):
        pytest.skip("this runtime was built without cudnn-frontend's headers (scons: note: ...)")
    bad = {k: v for k, v in results.items() if not isinstance(v, float) or v > 2e-2}
    assert not bad, bad
    refusals = [ln for ln in log.splitlines() if "refuses" in ln]
    assert not refusals, refusals
    plans = plan_lines(log)
    layouts = sum(2 if len(c[0]) > 3 else 1 for c in CASES.values())
    assert len(plans) == 3 * layouts, "\n".join(plans)
    assert all(": graph API engine " in ln for ln in plans), [ln for ln in plans if "graph API" not in ln]


def test_legacy_api_when_graph_api_is_off():
    """AOTI_HOST_CUDNN_GRAPH=0: every case through the legacy API (its algorithms named), matching eager."""
    results, log = run_child(list(CASES), AOTI_HOST_CUDNN="on", AOTI_HOST_LOG="debug", AOTI_HOST_CUDNN_GRAPH="0")
    bad = {k: v for k, v in results.items() if not isinstance(v, float) or v > 2e-2}
    assert not bad, bad
    plans = plan_lines(log)
    assert plans and all(": legacy API algorithm " in ln for ln in plans), plans
    assert "graph API" not in "\n".join(plans)


def test_algorithms_ranked_by_default_and_measured_with_benchmark_on():
    """Each new shape's engine (graph API) or algorithm (legacy API) is the heuristics' first;
    AOTI_HOST_CUDNN_BENCHMARK=1 takes the fastest measured instead (the graph API's engines timed by the
    frontend's autotune, the legacy API's by cudnnFind). All match eager."""
    names = ["conv2d", "depthwise", "transposed2d", "conv1d"]
    for graph in ("1", "0"):
        measured = "(measured)" if graph == "1" else "(cudnnFind)"
        for bench, want in (("1", measured), ("0", "(heuristics)")):
            results, log = run_child(names, AOTI_HOST_LOG="debug", AOTI_HOST_CUDNN_BENCHMARK=bench,
                                     AOTI_HOST_CUDNN_GRAPH=graph)
            if graph == "1" and not graph_api_compiled(log):
                continue
            bad = {k: v for k, v in results.items() if not isinstance(v, float) or v > 2e-2}
            assert not bad, (graph, bench, bad)
            plans = plan_lines(log)
            # one plan per shape, dtype and layout (a 1-d case's two layouts are one: it has no channels-last form)
            layouts = sum(2 if len(CASES[n][0]) > 3 else 1 for n in names)
            assert len(plans) == 3 * layouts, log[-3000:]
            assert all(want in ln for ln in plans), (graph, bench, plans)


@pytest.mark.parametrize("name", ["convnet", "convnet_channels_last", "upsample_decoder"])
def test_graph_api_under_cuda_graph_capture(name, tmp_path):
    """Exported convolution models (forward, channels-last, transposed) through aoti-run with CUDA graphs: the
    plans are built by the eager warm-up calls, the capture records the graph API's executions, the replays
    run them; outputs match eager and every plan is a graph-API one."""
    skip_without_gpu()
    art = os.environ.get("AOTI_GPU_ARTIFACTS")
    if not art:
        pytest.skip("AOTI_GPU_ARTIFACTS is not set: run tests/gpu/run.sh, which exports the models")
    from tests.gpu.test_cuda import AOTI_RUN, MANIFEST, assert_close, refs

    if name not in MANIFEST:
        pytest.fail(f"{name} was not exported (see prepare.py's output in the run log)")
    import numpy as np

    args = [AOTI_RUN, str(Path(art) / f"{name}.pt2"), "--device", "cuda", "-o", str(tmp_path), "--quiet",
            "--cuda-graphs", "--device-inputs", "--repeat", "5"]
    for k in range(MANIFEST[name]["inputs"]):
        args += ["-i", str(Path(art) / f"{name}.in{k}.npy")]
    env = {**os.environ, "AOTI_HOST_LOG": "debug", "AOTI_HOST_CUDNN": "on"}
    env.pop("AOTI_HOST_CUDNN_GRAPH", None)
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"aoti-run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert "captures=1 replays=4" in proc.stdout, proc.stdout
    got = [np.load(tmp_path / f"output_{k}.npy") for k in range(len(refs(name)))]
    assert_close(got, refs(name), f"aoti-run {name}")
    if not graph_api_compiled(proc.stderr):
        pytest.skip("this runtime was built without cudnn-frontend's headers")
    plans = plan_lines(proc.stderr)
    assert plans and all(": graph API engine " in ln for ln in plans), plans


def test_missing_cudnn_runs_the_direct_kernel_and_says_so_once():
    """cuDNN absent (AOTI_HOST_CUDNN_LIBRARY names no file): the same results from the direct kernel, and one
    warning naming the package to install."""
    results, log = run_child(["conv2d", "transposed2d"], AOTI_HOST_CUDNN_LIBRARY="/nonexistent/libcudnn.so.9")
    bad = {k: v for k, v in results.items() if not isinstance(v, float) or v > 2e-2}
    assert not bad, bad
    warnings = [ln for ln in log.splitlines() if "direct kernel" in ln]
    assert len(warnings) == 1, log[-3000:]
    assert "aoti-host: warning:" in warnings[0] and "was not found" in warnings[0], warnings
    cuda_major = torch.version.cuda.split(".")[0]
    assert f"pip install nvidia-cudnn-cu{cuda_major}" in log, log[-3000:]


def test_missing_cudnn_is_an_error_when_required():
    results, _ = run_child(["conv2d"], AOTI_HOST_CUDNN="on", AOTI_HOST_CUDNN_LIBRARY="/nonexistent/libcudnn.so.9")
    msgs = set(results.values())
    assert all(isinstance(m, str) and "AOTI_HOST_CUDNN=on asks for cuDNN" in m and "nvidia-cudnn-cu" in m
               for m in msgs), msgs


def test_off_and_bad_values():
    results, log = run_child(["conv2d"], AOTI_HOST_CUDNN="off")
    assert all(isinstance(v, float) and v < 2e-2 for v in results.values()), results
    assert "cuDNN" not in log, log[-3000:]  # off is quiet
    results, _ = run_child(["conv2d"], AOTI_HOST_CUDNN="maybe")
    assert all(isinstance(v, str) and "AOTI_HOST_CUDNN=maybe is not one of auto|on|off" in v
               for v in results.values()), results
