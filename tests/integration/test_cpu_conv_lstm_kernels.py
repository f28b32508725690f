"""The CPU fast paths of real architectures against torch eager, through the C ABI: the direct depthwise
convolution kernel (runtime/src/shims/cpu/conv_depthwise.cpp: channel tails, channel multipliers,
stride, padding, dilation, 1-3 spatial dims, every input/output layout), grouped convolutions through the
per-group GEMM with the weight viewed in place or gathered, one-row and one-column GEMMs (the GEMV path
of cpu_gemm.cpp) and the LSTM layer as GEMMs (ops/rnn.cpp), chained the way torch's LSTM decomposition
calls it for multi-layer and bidirectional LSTMs.

Values are compared with eager and, for convolution, the output strides with ATen's (plugins reinterpret
fallback outputs with the strides torch had at compile time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_cpu_fallback_ops import Ops
from tests.integration.test_cpu_fallbacks import Runtime, _run_conv, _strided

torch = pytest.importorskip("torch")


@pytest.fixture
def rt(host_lib: Path):
    r = Runtime(host_lib)
    yield r
    r.release()


@pytest.fixture
def ops(rt):
    return Ops(rt)

TOL = {"float32": 1e-5, "float64": 1e-12}


def _close(got, want, dtype: str, tol: float | None = None) -> None:
    tol = TOL[dtype] if tol is None else tol
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def _operand(g, shape, dtype: str, layout: str):
    t = torch.randn(shape, generator=g, dtype=torch.float64).to(getattr(torch, dtype))
    if layout == "channels_last" and t.dim() == 3:
        layout = "transposed"  # a 1-d "channels last" is the transposed layout
    return _strided(t, layout, g)


def _check_conv(rt, x, w, b, stride, padding, dilation, groups, dtype, tol=None):
    got = _run_conv(rt, x, w, b, stride, padding, dilation, False, [0] * len(stride), groups)
    want = torch.ops.aten.convolution(x, w, b, stride, padding, dilation, False, [0] * len(stride), groups)
    assert tuple(got.shape) == tuple(want.shape)
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    _close(got, want, dtype, tol)


# Depthwise: (spatial sizes, kernel, stride, padding, dilation); channels 13 (one vector block and a
# tail), 24 (three whole blocks), 3 (a tail only), 35 (a group of four blocks and a tail) and 72 (two
# groups of four blocks and a whole block).
DW_CASES = [
    ((9, 11), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((10, 13), (3, 3), (2, 2), (1, 1), (1, 1)),      # MobileNet's strided 3x3
    ((12, 12), (5, 5), (2, 1), (2, 2), (1, 1)),      # 5x5, strides differ per dim
    ((11, 14), (3, 3), (1, 1), (2, 2), (2, 2)),      # dilated (LRASPP's last stage)
    ((14, 14), (5, 5), (1, 1), (4, 4), (2, 2)),      # 5x5 dilated: 4 interior positions of 14, one quad
    ((14, 14), (7, 7), (1, 1), (3, 3), (1, 1)),      # ConvNeXt's 7x7
    ((5, 6), (3, 3), (1, 1), (0, 0), (1, 1)),        # no padding
    ((4, 3), (3, 3), (1, 1), (3, 2), (1, 1)),        # padding wider than the input: rows of padding only
    ((7,), (3,), (2,), (1,), (1,)),                  # 1-d
    ((4, 5, 6), (3, 3, 3), (1, 2, 1), (1, 1, 1), (1, 1, 2)),  # 3-d
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", DW_CASES, ids=lambda c: f"{len(c[0])}d-k{c[1][0]}-s{c[2][0]}-d{c[4][-1]}")
@pytest.mark.parametrize("channels", [13, 24, 3, 35, 72])
@pytest.mark.parametrize("layout", ["channels_last", "contiguous", "stepped"])
def test_depthwise_matches_eager(rt, dtype, case, channels, layout):
    spatial, kernel, stride, padding, dilation = case
    g = torch.Generator().manual_seed(channels)
    x = _operand(g, (2, channels, *spatial), dtype, layout)
    w = _operand(g, (channels, 1, *kernel), dtype, "contiguous")
    b = _operand(g, (channels,), dtype, "contiguous")
    _check_conv(rt, x, w, b, list(stride), list(padding), list(dilation), channels, dtype)
    _check_conv(rt, x, w, None, list(stride), list(padding), list(dilation), channels, dtype)


@pytest.mark.parametrize("mult", [2, 3])
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_depthwise_channel_multiplier(rt, mult, layout):
    """groups == input channels with several output channels per group: channel co reads input co // mult."""
    g = torch.Generator().manual_seed(mult)
    x = _operand(g, (1, 5, 8, 9), "float32", layout)
    w = _operand(g, (5 * mult, 1, 3, 3), "float32", "contiguous")
    _check_conv(rt, x, w, _operand(g, (5 * mult,), "float32", "contiguous"), [2, 1], [1, 1], [1, 1], 5, "float32")


def test_depthwise_channel_slice(rt):
    """ShuffleNetV2's branch: a depthwise convolution of the second half of a channels-last tensor's
    channels (channel stride 1, position stride twice the channels)."""
    g = torch.Generator().manual_seed(7)
    full = _operand(g, (1, 2 * 58, 14, 14), "float32", "channels_last")
    x = full[:, 58:]
    assert x.stride()[1] == 1 and x.stride()[3] == 2 * 58
    w = _operand(g, (58, 1, 3, 3), "float32", "contiguous")
    _check_conv(rt, x, w, None, [1, 1], [1, 1], [1, 1], 58, "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("groups,cin,cout", [(2, 8, 6), (4, 16, 32), (8, 64, 64)])
@pytest.mark.parametrize("x_layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("w_layout", ["channels_last", "contiguous", "transposed"])
@pytest.mark.parametrize("geometry", [((1, 1), (1, 1), (1, 1)), ((2, 2), (1, 1), (1, 1)), ((1, 1), (2, 2), (2, 2))],
                         ids=["plain", "strided", "dilated"])
def test_grouped_matches_eager(rt, dtype, groups, cin, cout, x_layout, w_layout, geometry):
    """Grouped (not depthwise) convolutions: one GEMM per group, the weight viewed in place when its
    (kh, kw, ci) order has one stride (channels-last) and gathered otherwise."""
    stride, padding, dilation = geometry
    g = torch.Generator().manual_seed(groups)
    x = _operand(g, (2, cin, 9, 10), dtype, x_layout)
    w = _operand(g, (cout, cin // groups, 3, 3), dtype, w_layout)
    b = _operand(g, (cout,), dtype, "contiguous")
    _check_conv(rt, x, w, b, list(stride), list(padding), list(dilation), groups, dtype)


@pytest.mark.parametrize("w_layout", ["channels_last", "contiguous", "transposed"])
@pytest.mark.parametrize("kernel", [1, 3])
def test_dense_conv_weight_layouts(rt, w_layout, kernel):
    g = torch.Generator().manual_seed(kernel)
    x = _operand(g, (1, 6, 7, 8), "float32", "channels_last")
    w = _operand(g, (10, 6, kernel, kernel), "float32", w_layout)
    _check_conv(rt, x, w, None, [1, 1], [kernel // 2] * 2, [1, 1], 1, "float32")


# ---------------------------------------------------------------- one-row / one-column GEMMs

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 37, 23), (23, 37, 1), (1, 1, 5), (1, 5, 1)], ids=str)
@pytest.mark.parametrize("b_layout", ["contiguous", "transposed", "stepped"])
def test_gemv_shapes(rt, dtype, shape, b_layout):
    """M == 1 or N == 1 goes to GEMV; beta == 0 must ignore NaNs already in out."""
    m, k, n = shape
    g = torch.Generator().manual_seed(m * 100 + n)
    a = _operand(g, (m, k), dtype, "stepped")
    b = _operand(g, (k, n), dtype, b_layout)
    bias = _operand(g, (n,), dtype, "contiguous")
    for beta in (1.0, 0.0):
        out = torch.full((m, n), float("nan"), dtype=a.dtype)
        assert rt.lib.aoti_torch_cpu_addmm_out(rt.from_torch(out), rt.from_torch(bias), rt.from_torch(a),
                                               rt.from_torch(b), beta, 0.5) == 0, rt.last_error()
        _close(out, torch.addmm(bias, a, b, beta=beta, alpha=0.5), dtype)
    out = torch.full((m, n), float("nan"), dtype=a.dtype)
    assert rt.lib.aoti_torch_cpu_mm_out(rt.from_torch(out), rt.from_torch(a), rt.from_torch(b)) == 0
    _close(out, a @ b, dtype)


# ---------------------------------------------------------------- LSTM

def _layer(ops, x, lstm, layer: int, reverse: bool, h0, c0, batch_first: bool):
    sfx = f"_l{layer}" + ("_reverse" if reverse else "")
    w = [getattr(lstm, n + sfx).detach() for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    return ops("mkldnn_rnn_layer", x, *w, h0, c0, int(reverse), [], 2, lstm.hidden_size, 1, 1, 0,
               int(batch_first), 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("x_layout", ["contiguous", "transposed", "stepped"])
def test_lstm_multilayer_bidirectional(ops, dtype, batch_first, x_layout):
    """A 2-layer bidirectional LSTM run layer by layer and direction by direction through the shim, as
    torch's decomposition calls it: each layer's input is the previous layer's two outputs concatenated."""
    g = torch.Generator().manual_seed(41)
    torch.manual_seed(41)
    dt = getattr(torch, dtype)
    lstm = torch.nn.LSTM(12, 20, num_layers=2, bidirectional=True, batch_first=batch_first).to(dt)
    B, T = 3, 9
    x = _operand(g, (B, T, 12) if batch_first else (T, B, 12), dtype, x_layout)
    h0 = _operand(g, (4, B, 20), dtype, "contiguous")
    c0 = _operand(g, (4, B, 20), dtype, "contiguous")
    inp, hs, cs = x, [], []
    for layer in range(2):
        outs = []
        for d in range(2):
            k = 2 * layer + d
            out, hy, cy, _ = _layer(ops, inp, lstm, layer, bool(d), h0[k:k + 1], c0[k:k + 1], batch_first)
            outs.append(out)
            hs.append(hy)
            cs.append(cy)
        inp = torch.cat(outs, dim=-1)
    with torch.no_grad():
        ey, (eh, ec) = lstm(x, (h0, c0))
    _close(inp, ey, dtype)
    _close(torch.cat(hs), eh, dtype)
    _close(torch.cat(cs), ec, dtype)


@pytest.mark.parametrize("shape", [(1, 1, 7), (50, 1, 64), (4, 8, 33)], ids=str)
def test_lstm_layer_sizes(ops, shape):
    """Sequence lengths, batches and hidden sizes around the GEMV (batch 1) and GEMM (batch > 1) steps."""
    T, B, H = shape
    g = torch.Generator().manual_seed(T * B)
    torch.manual_seed(H)
    lstm = torch.nn.LSTM(16, H)
    x = _operand(g, (T, B, 16), "float32", "contiguous")
    h0, c0 = _operand(g, (1, B, H), "float32", "contiguous"), _operand(g, (1, B, H), "float32", "contiguous")
    out, hy, cy, _ = _layer(ops, x, lstm, 0, False, h0, c0, False)
    with torch.no_grad():
        ey, (eh, ec) = lstm(x, (h0, c0))
    tol = 2e-5  # float32 accumulated over up to 50 steps
    torch.testing.assert_close(out, ey, rtol=tol, atol=tol)
    torch.testing.assert_close(hy, eh, rtol=tol, atol=tol)
    torch.testing.assert_close(cy, ec, rtol=tol, atol=tol)


# ---------------------------------------------------------------- work split across threads

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("geometry", [((1, 1), (1, 1)), ((2, 2), (1, 1)), ((1, 1), (0, 0))], ids=["same", "strided",
                                                                                                  "valid"])
def test_large_conv_split_over_threads(rt, dtype, layout, geometry):
    """A batch-1 convolution above the threading threshold (16M multiply-adds): blocks of output positions
    per OpenMP thread, each with its own im2col rows and GEMM (the test process has one thread per core)."""
    stride, padding = geometry
    g = torch.Generator().manual_seed(5)
    x = _operand(g, (1, 64, 37, 41), dtype, layout)
    w = _operand(g, (48, 64, 3, 3), dtype, layout)
    tol = 1e-4 if dtype == "float32" else None  # sums of 576 products: float32 rounding differs from oneDNN's
    _check_conv(rt, x, w, _operand(g, (48,), dtype, "contiguous"), list(stride), list(padding), [1, 1], 1, dtype,
                tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(700, 300, 90), (20, 400, 3000)], ids=["by-rows", "by-columns"])
def test_large_gemm_split_over_threads(rt, dtype, shape):
    m, k, n = shape
    g = torch.Generator().manual_seed(6)
    a, b = _operand(g, (m, k), dtype, "transposed"), _operand(g, (k, n), dtype, "contiguous")
    out = torch.full((m, n), float("nan"), dtype=a.dtype)
    assert rt.lib.aoti_torch_cpu_mm_out(rt.from_torch(out), rt.from_torch(a), rt.from_torch(b)) == 0
    torch.testing.assert_close(out, a @ b, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-4)


# ---------------------------------------------------------------- dense convolutions into channels-last outputs

@pytest.mark.parametrize("cin,cout", [(1, 5), (3, 16), (13, 37), (64, 33), (40, 128)], ids=str)
@pytest.mark.parametrize("geometry", [((1, 1), (1, 1), (0, 0), (1, 1)), ((3, 3), (1, 1), (1, 1), (1, 1)),
                                      ((3, 3), (2, 2), (1, 1), (1, 1)), ((3, 3), (1, 1), (2, 2), (2, 2)),
                                      ((1, 1), (2, 2), (0, 0), (1, 1))],
                         ids=["pointwise", "3x3", "3x3-s2", "3x3-dilated", "1x1-s2"])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("w_layout", ["contiguous", "channels_last"])
def test_channels_last_conv_gemm(rt, cin, cout, geometry, batch, w_layout):
    """Channels-last convolutions as a GEMM of position rows against weight rows (on CPUs without AVX-512,
    packed_gemm.cpp's gemm_nt_avx2: 6-row x 16-column tiles, so row and column tails, K not a multiple of
    the unrolling, the bias in the epilogue and none, several samples)."""
    kernel, stride, padding, dilation = geometry
    g = torch.Generator().manual_seed(cin * 100 + cout)
    x = _operand(g, (batch, cin, 11, 7), "float32", "channels_last")
    w = _operand(g, (cout, cin, *kernel), "float32", w_layout)
    b = _operand(g, (cout,), "float32", "contiguous")
    for bias in (b, None):
        _check_conv(rt, x, w, bias, list(stride), list(padding), list(dilation), 1, "float32", 1e-4)
