"""Scaled-dot-product attention through cuDNN's fused SDPA (runtime/src/shims/cuda/cudnn_sdpa.cpp) against torch.

aoti_torch_cuda__scaled_dot_product_efficient_attention / _flash_attention / _cudnn_attention are called through
the C ABI (tests/gpu/test_cuda_ops.py's Host) on torch CUDA tensors, and compared with torch's own kernels (values,
sizes, strides of the output and the logsumexp): float16, bfloat16 (cuDNN) and float32 (cuDNN refuses it: the
runtime's own kernel), causal and not, M != N (top-left causal for the efficient and cuDNN entries, bottom-right for
the flash entry, as ATen's kernels align them), head sizes 64 and 128, an additive bias (full and broadcast over
heads and rows), query layouts BHSD, BSHD-transposed and packed (the cuDNN entry's output strides are torch's).
What runs where is read from the runtime's log in child processes (their log and environment are their own):
with AOTI_HOST_CUDNN_SDPA=on every float16/bfloat16 case runs through cuDNN and the refused ones are said once;
=off never touches cuDNN; a bad value is refused by name. A float16 attention plugin exported with torch runs
under the runtime's CUDA-graph capture and replay and matches eager.

Needs the GPU machine (tests/gpu/run.sh sets AOTI_HOST_LIBRARY to the CUDA build, with the frontend's headers:
docs/scons.md, "cuDNN: attention on the GPU"); skips elsewhere, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.test_cuda_ops import ATTN_TOL, SIGS, Host, gen, qkv, same

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]

# name: (kind, B, H, M, N, D, causal, bias): kind efficient (top-left causal) or flash (bottom-right causal)
CASES = {
    "eff-64": ("efficient", 2, 4, 128, 128, 64, False, None),
    "eff-64-causal": ("efficient", 2, 4, 128, 128, 64, True, None),
    "eff-128-m<n-causal": ("efficient", 2, 3, 96, 200, 128, True, None),
    "eff-64-m>n-causal": ("efficient", 1, 4, 200, 96, 64, True, None),
    "eff-64-bias": ("efficient", 2, 4, 64, 80, 64, False, "full"),
    "eff-64-bias-keys": ("efficient", 2, 4, 64, 80, 64, False, "keys"),
    "flash-64": ("flash", 2, 4, 256, 256, 64, False, None),
    "flash-128-causal": ("flash", 2, 2, 256, 256, 128, True, None),
    "flash-64-m<n-causal": ("flash", 2, 2, 100, 300, 64, True, None),
    "flash-long": ("flash", 1, 8, 2048, 2048, 64, True, None),
}
# Refused before cuDNN is asked: rows with every key masked (bottom-right causal with more queries than keys)
REFUSED = {"flash-64-m>n-causal": ("flash", 1, 2, 300, 100, 64, True, None)}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def skip_without_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: these tests run on the GPU machine via tests/gpu/run.sh")
    if not os.environ.get("AOTI_HOST_LIBRARY"):
        pytest.skip("AOTI_HOST_LIBRARY is not set: run tests/gpu/run.sh, which builds the CUDA runtime")


def make_bias(kind, b, h, m, n, dtype, g):
    if kind is None:
        return None
    padded = (n + 15) // 16 * 16  # rows padded to 16 elements, as sdpa pads masks
    if kind == "keys":  # [B, 1, 1, N] key padding, expanded as sdpa does
        return (torch.randn(b, 1, 1, padded, generator=g, device="cuda").to(dtype)[..., :n]).expand(b, h, m, n)
    return torch.randn(b, h, m, padded, generator=g, device="cuda").to(dtype)[..., :n]


def run_case(host, case, dtype):
    """(ours, torch's) outputs of one case: the efficient entry returns (out, lse, seed, offset), flash 9 values."""
    kind, b, h, m, n, d, causal, bias_kind = case
    g = gen(7)
    q, k, v = qkv(b, h, m, n, d, d, dtype, "bmhd", g)
    if kind == "efficient":
        bias = make_bias(bias_kind, b, h, m, n, dtype, g)
        want = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, causal)
        got = host("_scaled_dot_product_efficient_attention", q, k, v, bias, 1, 0.0, int(causal), None)
    else:
        want = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
        got = host("_scaled_dot_product_flash_attention", q, k, v, 0.0, int(causal), 0, None)
    return got, want


def compare(got, want, case, dtype) -> None:
    m = case[3]
    rtol, atol = ATTN_TOL[dtype]
    same(got[0], want[0], rtol=rtol, atol=atol)
    same(got[1], want[1], values=False)
    torch.testing.assert_close(got[1][..., :m], want[1][..., :m], rtol=1e-4, atol=1e-4)


@pytest.fixture
def host(monkeypatch):
    skip_without_gpu()
    monkeypatch.delenv("AOTI_HOST_CUDA_ATTENTION", raising=False)  # the runtime's own paths skip cuDNN
    monkeypatch.setenv("AOTI_HOST_CUDNN_SDPA", "on")  # read on every call: cuDNN missing is an error here
    h = Host()
    yield h
    h.release()


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name", list(CASES) + list(REFUSED))
def test_matches_torch(host, name, dtype_name):
    case = {**CASES, **REFUSED}[name]
    if case[0] == "flash" and dtype_name == "float32":
        pytest.skip("ATen's flash kernel takes float16/bfloat16 only")
    dtype = DTYPES[dtype_name]
    got, want = run_case(host, case, dtype)
    compare(got, want, case, dtype)


def test_plan_cache_serves_repeated_and_interleaved_problems(host):
    """Plans are per problem: the same problems again, interleaved, give the first time's results exactly."""
    first = {}
    for name in ["eff-64", "flash-64", "eff-64-bias", "eff-64", "eff-64-bias", "flash-64"]:
        got, _ = run_case(host, CASES[name], torch.float16)
        if name in first:
            torch.testing.assert_close(got[0], first[name], rtol=0, atol=0)
        else:
            first[name] = got[0].clone()


# --- the cuDNN attention entry (what scaled_dot_product_attention exports to in half precision on sm90) -------

# name: (B, H, M, N, D, Dv, layout, causal, bias): layout as tests/gpu/test_cuda_ops.py's qkv (contiguous: BHSD;
# bmhd: a [B, S, H, D] projection transposed), or packed (q, k, v slices of one [B, S, 3, H, D] projection: not
# dense, so torch's empty_like does not keep the query's strides). Causal masking is top-left for M != N.
CUDNN_CASES = {
    "bhsd": (2, 4, 128, 128, 64, 64, "contiguous", False, None),
    "bhsd-causal": (2, 4, 128, 128, 64, 64, "contiguous", True, None),
    "bshd": (2, 4, 128, 128, 64, 64, "bmhd", False, None),
    "bshd-causal-128": (2, 2, 256, 256, 128, 128, "bmhd", True, None),
    "bshd-m<n-causal": (2, 3, 96, 200, 64, 64, "bmhd", True, None),
    "bshd-m>n-causal": (1, 4, 200, 96, 64, 64, "bmhd", True, None),
    "packed-causal": (2, 4, 64, 64, 64, 64, "packed", True, None),
    "bshd-dv128": (2, 2, 64, 80, 64, 128, "bmhd", False, None),  # sizes differ from the query's: stride order
    "bhsd-bias": (2, 4, 64, 80, 64, 64, "contiguous", False, "full"),
}


def cudnn_inputs(case, dtype, g):
    b, h, m, n, d, dv, layout, causal, bias_kind = case
    if layout == "packed":
        assert m == n and d == dv
        qkv_ = torch.randn(b, m, 3, h, d, generator=g, device="cuda").to(dtype)
        q, k, v = (qkv_[:, :, i].transpose(1, 2) for i in range(3))
    else:
        q, k, v = qkv(b, h, m, n, d, dv, dtype, layout, g)
    return q, k, v, make_bias(bias_kind, b, h, m, n, dtype, g)


@pytest.mark.parametrize("path", ["cudnn", "kernel"])
@pytest.mark.parametrize("lse", [True, False], ids=["lse", "no-lse"])
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(CUDNN_CASES))
def test_cudnn_entry_matches_torch(host, monkeypatch, name, dtype_name, lse, path):
    """aoti_torch_cuda__scaled_dot_product_cudnn_attention against torch's: the output's values and strides (AOTI
    indexes it with the strides torch's meta function predicts), the logsumexp [B, H, M, 1] where computed, the
    undefined cum_seq_q/k and debug mask, the sequence lengths, the 0-d int64 philox seed and offset. path kernel
    runs the runtime's own kernel (the fallback where cuDNN refuses a problem)."""
    if path == "kernel":
        monkeypatch.setenv("AOTI_HOST_CUDA_ATTENTION", "kernel")
    case = CUDNN_CASES[name]
    b, h, m, n, d, dv, layout, causal, bias_kind = case
    dtype = DTYPES[dtype_name]
    q, k, v, bias = cudnn_inputs(case, dtype, gen(11))
    try:
        want = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, bias, lse, 0.0, causal, False)
    except RuntimeError as exc:  # torch's own cuDNN refusing a case is not ours to test
        pytest.skip(f"torch's cuDNN attention refuses {name}: {str(exc).splitlines()[0]}")
    meta = torch.ops.aten._scaled_dot_product_cudnn_attention(
        *(t.to("meta") if t is not None else None for t in (q, k, v, bias)), lse, 0.0, causal, False)
    got = host("_scaled_dot_product_cudnn_attention", q, k, v, bias, int(lse), 0.0, int(causal), 0, None)
    assert len(got) == 9
    rtol, atol = ATTN_TOL[dtype]
    same(got[0], want[0], rtol=rtol, atol=atol)
    assert got[0].stride() == meta[0].stride(), (got[0].stride(), meta[0].stride())
    assert got[1].dtype == torch.float32 and tuple(got[1].shape) == (b, h, m, 1) == tuple(meta[1].shape)
    if lse:
        same(got[1], want[1], values=False)
        torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)
    assert got[2] is None and got[3] is None and got[8] is None, got
    assert (got[4], got[5]) == (m, n)
    for t in got[6:8]:
        assert t.dtype == torch.int64 and t.dim() == 0, t


def test_cudnn_entry_default_scale_and_refusals(host):
    """scale None is 1/sqrt(D) (an explicit scale is honoured); dropout and the debug mask are refused by name."""
    q, k, v, _ = cudnn_inputs(CUDNN_CASES["bshd"], torch.float16, gen(12))
    for scale in (None, 0.3):
        want = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, False, 0.0, False, False,
                                                                  scale=scale)
        got = host("_scaled_dot_product_cudnn_attention", q, k, v, None, 0, 0.0, 0, 0, scale)
        same(got[0], want[0], rtol=ATTN_TOL[torch.float16][0], atol=ATTN_TOL[torch.float16][1])
    with pytest.raises(Exception, match="dropout_p"):
        host("_scaled_dot_product_cudnn_attention", q, k, v, None, 0, 0.1, 0, 0, None)
    with pytest.raises(Exception, match="return_debug_mask"):
        host("_scaled_dot_product_cudnn_attention", q, k, v, None, 0, 0.0, 0, 1, None)


def test_cudnn_entry_takes_null_output_pointers(host):
    """AOTInductor's generated code passes nullptr for the outputs torch's meta says are None (cum_seq_q/k, the
    debug mask): the call succeeds and fills the others (here also max_q left null)."""
    from tests.shim_kinds import marshal

    q, k, v, _ = cudnn_inputs(CUDNN_CASES["bshd-causal-128"], torch.float16, gen(13))
    want = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False)
    name = "aoti_torch_cuda__scaled_dot_product_cudnn_attention"
    fn = getattr(host.lib, name)
    fn.argtypes, cargs, rets = marshal(SIGS["_scaled_dot_product_cudnn_attention"],
                                       (q, k, v, None, 1, 0.0, 1, 0, None), host.from_torch, host.keep)
    for i in (2, 3, 4, 8):  # ret2, ret3, ret4 (max_q), ret8
        cargs[len(cargs) - 9 + i] = None
    host.ok(fn(*cargs), name)
    torch.cuda.synchronize()
    cells = [cell for _, cell in rets]
    for i in (0, 1, 6, 7):
        host.handles.append(cells[i].value)
    same(host.to_torch(cells[0].value), want[0], rtol=ATTN_TOL[torch.float16][0], atol=ATTN_TOL[torch.float16][1])
    torch.testing.assert_close(host.to_torch(cells[1].value), want[1], rtol=1e-4, atol=1e-4)
    assert cells[5].value == k.shape[2]


# --- what runs where, in child processes ------------------------------------------------------------------

CHILD = r"""
import json, sys, torch
from tests.gpu.test_cuda_ops import Host
from tests.gpu.test_cudnn_sdpa import CASES, REFUSED, DTYPES, run_case, compare
host = Host()
results = {}
names, dtypes = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in names:
    case = {**CASES, **REFUSED}[name]
    for dt in dtypes:
        if case[0] == "flash" and dt == "float32":
            continue
        try:
            got, want = run_case(host, case, DTYPES[dt])
            compare(got, want, case, DTYPES[dt])
            results[f"{name}/{dt}"] = "ok"
        except Exception as exc:
            results[f"{name}/{dt}"] = str(exc)
        host.release()
print("RESULTS " + json.dumps(results))
"""


def run_child(names: list[str], dtypes: list[str], **env_extra: str) -> tuple[dict, str]:
    skip_without_gpu()
    env = {**os.environ, "PYTHONPATH": str(REPO), "AOTI_HOST_LOG": "info", **env_extra}
    for key in ("AOTI_HOST_CUDNN", "AOTI_HOST_CUDNN_LIBRARY", "AOTI_HOST_CUDNN_SDPA", "AOTI_HOST_CUDA_ATTENTION"):
        if key not in env_extra:
            env.pop(key, None)
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(names), json.dumps(dtypes)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):]), proc.stderr


# A key-padding bias ([B, 1, 1, N] expanded: stride 0 along the queries) goes to cuDNN as ATen hands it over; a
# cuDNN that refuses that layout sends it to the runtime's kernel (logged), which is allowed.
KEYS_BIAS = "with a bias of sizes [2, 1, 64, 80] and strides [96, 80, 0, 1]"


def test_half_precision_runs_through_cudnn_and_refusals_are_said_once():
    """float16/bfloat16 cases all run through cuDNN (no refusal named for them); float32 and the bottom-right
    M > N case run on the runtime's kernel, each problem said once (a warning for the first, info after), and
    still match torch."""
    names = list(CASES) + list(REFUSED)
    results, log = run_child(names, list(DTYPES), AOTI_HOST_CUDNN_SDPA="on")
    assert set(results.values()) == {"ok"}, {k: v for k, v in results.items() if v != "ok"}
    assert "attention on cuda runs through cuDNN 9." in log, log[-3000:]
    refusals = [ln for ln in log.splitlines() if "cuDNN refuses the attention" in ln]
    print("\n".join(refusals))  # what cuDNN refused, and why, in the test's output
    half = [ln for ln in refusals if "float32" not in ln]
    assert not [ln for ln in half if "bottom-right" not in ln and KEYS_BIAS not in ln], refusals
    # one line per refused problem (float32: every efficient case; the bottom-right M > N case in half precision)
    n_f32 = sum(1 for c in CASES.values() if c[0] == "efficient")
    n_keys = sum(KEYS_BIAS in ln for ln in half)
    assert len(refusals) == n_f32 + 2 + n_keys and n_keys in (0, 2), refusals
    assert "aoti-host: warning:" in refusals[0] and all("warning" not in ln for ln in refusals[1:]), refusals
    assert all("the runtime's own kernel" in ln for ln in refusals), refusals


def test_off_never_uses_cudnn_and_bad_values_are_refused():
    results, log = run_child(["eff-64", "flash-64-m<n-causal"], ["float16"], AOTI_HOST_CUDNN_SDPA="off")
    assert set(results.values()) == {"ok"}, results
    assert "cuDNN" not in log, log[-3000:]  # off is quiet
    results, log = run_child(["eff-64"], ["float16"], AOTI_HOST_CUDNN="off")  # cuDNN off for everything: quiet too
    assert set(results.values()) == {"ok"}, results
    assert "cuDNN" not in log, log[-3000:]
    results, _ = run_child(["eff-64"], ["float16"], AOTI_HOST_CUDNN_SDPA="maybe")
    assert all("AOTI_HOST_CUDNN_SDPA=maybe is not one of auto|on|off" in v for v in results.values()), results


def test_missing_cudnn_runs_our_kernel_and_says_why_once():
    results, log = run_child(["eff-64", "flash-64"], ["float16"], AOTI_HOST_CUDNN_LIBRARY="/nonexistent/libcudnn.so.9")
    assert set(results.values()) == {"ok"}, results
    lines = [ln for ln in log.splitlines() if "attention on cuda runs on the runtime's own kernels" in ln]
    assert len(lines) == 1 and "was not found" in lines[0], log[-3000:]
    results, _ = run_child(["eff-64"], ["float16"], AOTI_HOST_CUDNN_SDPA="on",
                           AOTI_HOST_CUDNN_LIBRARY="/nonexistent/libcudnn.so.9")
    assert all("AOTI_HOST_CUDNN_SDPA=on asks for cuDNN" in v for v in results.values()), results


# --- under the runtime's CUDA-graph capture ---------------------------------------------------------------


# The model, as source: each export runs in a fresh process (inductor keeps one precompiled-header path per
# process, so a second in-process export under another build folder was pointed at a header that folder never
# had: "precompiled_headers/....h: No such file", seen on the H200), and the test compares with the same class.
ATTN_SOURCE = """
import torch


class Attn(torch.nn.Module):
    def __init__(self, layout):
        super().__init__()
        self.layout = layout

    def forward(self, q, k, v):
        if self.layout == "bshd":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) * 2.0
        return o.transpose(1, 2) if self.layout == "bshd" else o
"""

EXPORT_ATTN = """
import sys
import torch
from toolchain import export
ns = {}
exec(sys.argv[1], ns)
layout, pt2, build = sys.argv[2], sys.argv[3], sys.argv[4]
shape = (2, 4, 256, 64) if layout == "bhsd" else (2, 256, 4, 64)
g = torch.Generator().manual_seed(0)
example = [torch.randn(shape, generator=g).half().cuda() for _ in range(3)]
export.export(ns["Attn"](layout).eval(), example, pt2, build_dir=build, device="cuda")
"""


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_exported_attention_under_cuda_graphs(tmp_path, layout):
    """A float16 causal attention plugin exported by torch (its SDPA is a call of the cuDNN-attention shim where
    cuDNN is torch's preferred backend, as on sm90, else of the flash-attention shim) runs warm-up, capture and
    replays through cuDNN, each call with new inputs matching eager torch. bshd: q, k, v come in as [B, S, H, D]
    and are transposed inside, so the generated code indexes an output whose strides torch's meta predicted."""
    skip_without_gpu()
    import numpy as np

    from toolchain import runtime
    from toolchain.runtime import cuda

    ns: dict = {}
    exec(ATTN_SOURCE, ns)
    Attn = ns["Attn"]
    shape = (2, 4, 256, 64) if layout == "bhsd" else (2, 256, 4, 64)
    g = torch.Generator().manual_seed(1)
    pt2 = tmp_path / "attn.pt2"
    done = subprocess.run([sys.executable, "-c", EXPORT_ATTN, ATTN_SOURCE, layout, str(pt2), str(tmp_path / "build")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    prog = runtime.load(pt2, device="cuda", cuda_graphs=True)
    for call in range(5):
        xs = [torch.randn(shape, generator=g).half() for _ in range(3)]
        want = Attn(layout)(*[x.cuda() for x in xs]).float().cpu().numpy()
        got = prog.run([cuda.DeviceArray.from_numpy(x.numpy()) for x in xs], device_outputs=True)[0].numpy()
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=4e-3, err_msg=f"call {call}")
    st = prog.cuda_stats()
    assert st.graphs_disabled_reason == "" and st.graph_replays >= 2, st
    prog.close()
