"""The runtime's CPU fallbacks for sorting, scans, lookups, embedding bags, scatter/index updates, pooling,
the LSTM layer, int8 products, FFTs and complex views, order statistics and distances (generated wrappers over runtime/src/shims/ops) against torch eager, through the C ABI.

Operands are strided views (transposed, stepped with a storage offset, channels-last) handed over with
aoti_torch_create_tensor_from_blob, as a plugin would. Every returned tensor is compared with ATen's
result in values, dtype, sizes and strides: plugins reinterpret fallback outputs with the strides torch
had at compile time."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tests.integration.test_cpu_fallbacks import I64P, Runtime, _strided
from tests.shim_kinds import marshal, shim_kinds

torch = pytest.importorskip("torch")
F = torch.nn.functional

# Shim name -> argument kinds, in prototype order: from the prototypes in toolchain/spec/shims.toml (torch
# 2.13's generated/c_shim_cpu.h), through tests/shim_kinds.py.
SIGS = shim_kinds("cpu")
H = ctypes.c_void_p
PH = ctypes.POINTER(H)
I32, I64, F64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_double


class Ops:
    """Calls aoti_torch_cpu_<name> with torch tensors; returns the returned tensors as torch tensors."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def __call__(self, name: str, *args):
        fn = getattr(self.rt.lib, f"aoti_torch_cpu_{name}")
        fn.argtypes, cargs, rets = marshal(SIGS[name], args, self.rt.from_torch, self.rt.keep)
        rc = fn(*cargs)
        if rc != 0:
            raise RuntimeError(f"aoti_torch_cpu_{name} failed: {self.rt.last_error()}")
        out = []
        for kind, cell in rets:
            if kind == "return":
                self.rt.handles.append(cell.value)
                out.append(self.rt.to_torch(cell.value))
            else:
                out.append(cell.value)
        return out[0] if len(out) == 1 else tuple(out)


@pytest.fixture
def ops(host_lib: Path):
    rt = Runtime(host_lib)
    yield Ops(rt)
    rt.release()


def same(got, want, *, rtol: float = 0.0, atol: float = 0.0, values: bool = True) -> None:
    """Same dtype, sizes and strides as ATen's result, and the same values (within tolerance)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    if got.numel() > 1:
        assert got.stride() == want.stride(), (got.stride(), want.stride())
    if values:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


FLOATS = ["float32", "float64", "bfloat16", "float16"]
ALL = [*FLOATS, "int64", "int32"]
LAYOUTS = ["contiguous", "transposed", "stepped"]
TOL = {"float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12), "bfloat16": (2e-2, 2e-2), "float16": (2e-3, 2e-3)}


def data(gen, shape, dtype: str, layout: str = "contiguous", unique: bool = False):
    if dtype.startswith("int"):
        n = 1
        for s in shape:
            n *= s
        t = (torch.randperm(n, generator=gen) - n // 2).reshape(shape) if unique else torch.randint(
            -4, 5, shape, generator=gen)
        t = t.to(getattr(torch, dtype))
    else:
        t = torch.randn(shape, generator=gen, dtype=torch.float64).to(getattr(torch, dtype))
    return _strided(t, layout, gen)


# ---------------------------------------------------------------- sort, topk

@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(ops, dtype, layout, dim, descending):
    g = torch.Generator().manual_seed(10)
    x = data(g, (6, 9), dtype, layout)  # integers repeat: stable order matters
    if dtype.startswith("float"):
        x[2, 3] = float("nan")
    v, i = ops("sort_stable", x, 1, dim, int(descending))
    ev, ei = torch.sort(x, dim=dim, descending=descending, stable=True)
    same(v, ev)
    same(i, ei)
    v2, i2 = ops("sort", x, dim, int(descending))
    same(v2, ev)
    same(i2, torch.sort(x, dim=dim, descending=descending, stable=True).indices)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("largest", [False, True])
def test_topk(ops, dtype, layout, largest):
    g = torch.Generator().manual_seed(11)
    x = data(g, (5, 12), dtype, layout, unique=True)
    for dim, k in [(1, 4), (0, 2), (-1, 12), (1, 0)]:
        v, i = ops("topk", x, k, dim, int(largest), 1)
        ev, ei = torch.topk(x, k, dim=dim, largest=largest, sorted=True)
        same(v, ev)
        same(i, ei)


def test_topk_nan_is_largest(ops):
    x = torch.tensor([1.0, float("nan"), 3.0, -1.0])
    v, i = ops("topk", x, 2, 0, 1, 1)
    ev, ei = torch.topk(x, 2)
    same(v, ev)
    same(i, ei)


def test_topk_bad_k_is_refused(ops):
    with pytest.raises(RuntimeError, match=r"aoti_torch_cpu_topk: k 7 is out of range"):
        ops("topk", torch.zeros(3, 4), 7, 1, 1, 1)


# ---------------------------------------------------------------- scans

@pytest.mark.parametrize("dtype", [*ALL, "bool"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_cumsum_cumprod(ops, dtype, layout, op):
    g = torch.Generator().manual_seed(12)
    x = data(g, (4, 7), "int64" if dtype == "bool" else dtype, layout)
    if dtype == "bool":
        x = x > 0
    elif op == "cumprod" and dtype.startswith("float"):
        x = (x.double().abs() * 0.5 + 0.7).to(x.dtype)  # products that stay finite
    for dim in (0, 1):
        got = ops(op, x, dim, None)
        want = getattr(torch, op)(x, dim)
        rtol, atol = TOL.get(dtype, (0, 0))
        same(got, want, rtol=rtol, atol=atol)
    # an explicit output dtype
    got = ops(op, x, 1, 7)  # float64
    same(got, getattr(torch, op)(x, 1, dtype=torch.float64), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_cummin(ops, dtype, layout, op):
    g = torch.Generator().manual_seed(13)
    x = data(g, (5, 8), dtype, layout)
    if dtype.startswith("float"):
        x = torch.round(x.double() * 2).to(x.dtype)  # ties
        x[1, 2] = float("nan")
        x[1, 5] = float("nan")
    for dim in (0, 1):
        v, i = ops(op, x, dim)
        ev, ei = getattr(torch, op)(x, dim)
        same(v, ev)
        same(i, ei)


# ---------------------------------------------------------------- searchsorted, bucketize, histc, ...

@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "bfloat16"])
@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("out_int32", [False, True])
def test_searchsorted_bucketize(ops, dtype, right, out_int32):
    g = torch.Generator().manual_seed(14)
    edges = torch.sort(data(g, (9,), dtype)).values
    x = _strided(data(g, (4, 6), dtype), "transposed", g)
    got = ops("searchsorted_Tensor", edges, x, int(out_int32), int(right), None, None)
    same(got, torch.searchsorted(edges, x, out_int32=out_int32, right=right))
    got = ops("bucketize_Tensor", x, edges, int(out_int32), int(right))
    same(got, torch.bucketize(x, edges, out_int32=out_int32, right=right))
    # a batch of sequences (one per row), with side= and a sorter
    seqs = data(g, (4, 9), dtype)
    sorter = torch.argsort(seqs, dim=-1, stable=True)
    side = "right" if right else "left"
    got = ops("searchsorted_Tensor", seqs, x.contiguous(), int(out_int32), 0, side, sorter)
    same(got, torch.searchsorted(seqs, x.contiguous(), out_int32=out_int32, side=side, sorter=sorter))
    got = ops("searchsorted_Scalar", edges, 0.25, int(out_int32), int(right), None, None)
    same(got, torch.searchsorted(edges, 0.25, out_int32=out_int32, right=right))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_histc(ops, dtype, layout):
    g = torch.Generator().manual_seed(15)
    x = data(g, (7, 11), dtype, layout)
    x[0, 0] = 3.0  # the upper edge lands in the last bin
    for bins, lo, hi in [(10, -3.0, 3.0), (7, -1.0, 0.5), (5, 0.0, 0.0)]:
        same(ops("histc", x, bins, lo, hi), torch.histc(x, bins=bins, min=lo, max=hi))


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_repeat_interleave(ops, dtype):
    r = torch.tensor([2, 0, 3, 1], dtype=getattr(torch, dtype))
    same(ops("repeat_interleave_Tensor", r, None), torch.repeat_interleave(r))
    same(ops("repeat_interleave_Tensor", r[::2], 5), torch.repeat_interleave(r[::2]))
    with pytest.raises(RuntimeError, match="output_size is 5 but the repeats sum to 6"):
        ops("repeat_interleave_Tensor", r, 5)


@pytest.mark.parametrize("dtype", [*ALL, "bool"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_nonzero_masked_select(ops, dtype, layout):
    g = torch.Generator().manual_seed(16)
    x = data(g, (5, 6), "int64" if dtype == "bool" else dtype, layout)
    x = x > 0 if dtype == "bool" else torch.where(x.double() > 0.3, x, torch.zeros_like(x))
    same(ops("nonzero", x), torch.nonzero(x))
    same(ops("nonzero", torch.zeros(3, 0, 2)), torch.nonzero(torch.zeros(3, 0, 2)))
    mask = data(g, (5, 6), "float64", layout) > 0
    same(ops("masked_select", x, mask), torch.masked_select(x, mask))
    row = torch.tensor([True, False, True, True, False, True])  # broadcast over rows
    same(ops("masked_select", x, row), torch.masked_select(x, row))


# ---------------------------------------------------------------- embedding bags

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("variant", ["plain", "last_offset", "padding", "weights"])
@pytest.mark.parametrize("shim", ["_embedding_bag", "_embedding_bag_forward_only"])
def test_embedding_bag(ops, dtype, mode, variant, shim):
    if variant == "weights" and mode != 0:
        pytest.skip("per-sample weights are for mode sum only")
    g = torch.Generator().manual_seed(17)
    weight = data(g, (20, 6), dtype, "transposed" if variant == "plain" else "contiguous")
    indices = torch.randint(0, 20, (13,), generator=g)
    indices[4] = 3
    offsets = torch.tensor([0, 2, 2, 7, 11])
    last = variant == "last_offset"
    if last:
        offsets = torch.tensor([0, 2, 2, 7, 11, 13])
    pad = 3 if variant == "padding" else -1
    psw = data(g, (13,), dtype) if variant == "weights" else None
    got = ops(shim, weight, indices, offsets, 0, mode, 0, psw, int(last), pad)
    want = getattr(torch.ops.aten, shim)(weight, indices, offsets, False, mode, False, psw, last, pad)
    rtol, atol = TOL[dtype]
    same(got[0], want[0], rtol=rtol, atol=atol)
    same(got[1], want[1], values=got[1].numel() > 0)
    if mode in (1, 2):  # bag sizes (the sum path's are ATen-internal, uninitialised for forward_only)
        same(got[2], want[2])
    else:
        same(got[2], want[2], values=False)  # ATen leaves it uninitialised
    same(got[3], want[3], values=mode == 2)


# ---------------------------------------------------------------- scatter and index updates

@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16", "int64", "int32"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [False, True])
def test_scatter_reduce(ops, dtype, layout, reduce, include_self):
    g = torch.Generator().manual_seed(18)
    self_ = data(g, (4, 6), dtype, layout)
    src = data(g, (5, 6), dtype, layout)
    index = torch.randint(0, 4, (5, 6), generator=g)
    for dim, idx, s in [(0, index[:3, :5], src), (1, torch.randint(0, 6, (4, 3), generator=g), src)]:
        out = torch.zeros_like(self_)
        ops("scatter_reduce_two_out", out, self_, dim, idx, s, reduce, int(include_self))
        want = torch.scatter_reduce(self_, dim, idx, s, reduce, include_self=include_self)
        rtol, atol = TOL.get(dtype, (0, 0))
        torch.testing.assert_close(out, want, rtol=rtol * 4, atol=atol * 4)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int64"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scatter(ops, dtype, layout):
    g = torch.Generator().manual_seed(19)
    self_ = data(g, (4, 6), dtype, layout)
    src = data(g, (4, 6), dtype, layout)
    idx = torch.stack([torch.randperm(4, generator=g)[:3] for _ in range(5)], 1)  # distinct targets per column
    out = _strided(torch.zeros(4, 6, dtype=self_.dtype), "transposed", g)
    ops("scatter_src_out", out, self_, 0, idx, src)
    torch.testing.assert_close(out, torch.scatter(self_, 0, idx, src))
    ops("scatter_value_out", out, self_, 0, idx, 2.5)
    torch.testing.assert_close(out, torch.scatter(self_, 0, idx, 2.5))
    bad = idx.clone()
    bad[0, 0] = 9
    with pytest.raises(RuntimeError, match="index 9 is out of bounds for dimension 0 with size 4"):
        ops("scatter_src_out", out, self_, 0, bad, src)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(ops, dtype, layout, accumulate):
    g = torch.Generator().manual_seed(20)
    self_ = data(g, (5, 4, 3), dtype, layout)
    i0 = torch.tensor([0, 2, 4, 2]) if accumulate else torch.tensor([0, 2, 4, 1])
    i2 = torch.tensor([1, 0, 2, 2])
    mask = torch.tensor([True, False, True, True, False])
    mask2d = torch.rand(5, 4, generator=g) > 0.5
    cases = [
        ([i0], data(g, (4, 4, 3), dtype)),               # leading index
        ([None, torch.tensor([3, 1])], data(g, (3,), dtype)),  # a middle index, values broadcast
        ([i0, None, i2], data(g, (4, 4), dtype)),         # non-adjacent: broadcast dims first
        ([mask], data(g, (1, 3), dtype)),                 # a boolean mask
        ([mask2d], data(g, (3,), dtype)),                 # a 2-d boolean mask covering two dimensions
        ([i0[:, None], torch.tensor([0, 3])], data(g, (4, 2, 3), dtype)),  # broadcast index shapes
    ]
    rtol, atol = TOL.get(dtype, (0, 0))
    for indices, values in cases:
        got = ops("index_put", self_, indices, values, int(accumulate))
        want = torch.ops.aten.index_put(self_, indices, values, accumulate)
        same(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [False, True])
def test_index_reduce(ops, dtype, layout, reduce, include_self):
    g = torch.Generator().manual_seed(21)
    self_ = data(g, (5, 4), dtype, layout)
    index = torch.tensor([0, 4, 0, 2, 4, 4])
    source = data(g, (6, 4), dtype, layout)
    rtol, atol = TOL.get(dtype, (0, 0))
    got = ops("index_reduce", self_, 0, index, source, reduce, int(include_self))
    same(got, self_.index_reduce(0, index, source, reduce, include_self=include_self), rtol=rtol, atol=atol)
    src1 = data(g, (5, 4), dtype, layout)
    got = ops("index_reduce", self_.t(), 1, index[:5] % 5, src1.t(), reduce, int(include_self))
    same(got, self_.t().index_reduce(1, index[:5] % 5, src1.t(), reduce, include_self=include_self),
         rtol=rtol, atol=atol)


# ---------------------------------------------------------------- pooling

POOL_LAYOUTS = ["contiguous", "channels_last", "stepped"]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", POOL_LAYOUTS)
@pytest.mark.parametrize(("k", "s", "p", "d", "ceil"), [([3], [2], [1], [1], False), ([3, 2], [2, 1], [1, 0], [2, 1], True),
                                                       ([2], [], [0], [1], False)])
def test_max_pool2d_with_indices(ops, dtype, layout, k, s, p, d, ceil):
    g = torch.Generator().manual_seed(22)
    x = data(g, (2, 3, 11, 10), dtype, layout)
    x[0, 1, 4, 4] = float("nan")
    v, i = ops("max_pool2d_with_indices", x, k, s, p, d, int(ceil))
    ev, ei = torch.ops.aten.max_pool2d_with_indices(x, k, s, p, d, ceil)
    same(v, ev)
    same(i, ei)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", POOL_LAYOUTS)
@pytest.mark.parametrize("out_size", [[3, 5], [4, 4], [11, 1]])
def test_adaptive_pools(ops, dtype, layout, out_size):
    g = torch.Generator().manual_seed(23)
    x = data(g, (2, 3, 11, 10), dtype, layout)
    v, i = ops("adaptive_max_pool2d", x, out_size)
    ev, ei = torch.ops.aten.adaptive_max_pool2d(x, out_size)
    same(v, ev)
    same(i, ei)
    rtol, atol = TOL[dtype]
    same(ops("_adaptive_avg_pool2d", x, out_size), torch.ops.aten._adaptive_avg_pool2d(x, out_size), rtol=rtol, atol=atol)
    x3 = data(g, (3, 9, 7), dtype)
    same(ops("_adaptive_avg_pool2d", x3, out_size), torch.ops.aten._adaptive_avg_pool2d(x3, out_size),
         rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last_3d", "stepped"])
@pytest.mark.parametrize("out_size", [[2, 3, 3], [3, 2, 2], [7, 1, 5]])
def test_adaptive_pools_3d(ops, dtype, layout, out_size):
    g = torch.Generator().manual_seed(49)
    if layout == "channels_last_3d":
        x = data(g, (2, 3, 7, 9, 8), dtype).contiguous(memory_format=torch.channels_last_3d)
    else:
        x = data(g, (2, 3, 7, 9, 8), dtype, layout)
    x[1, 2, 3, 4, 5] = float("nan")
    x4 = data(g, (3, 5, 6, 4), dtype)  # [C, T, H, W]
    aten = torch.ops.aten
    for got, want in zip(ops("adaptive_max_pool3d", x, out_size), aten.adaptive_max_pool3d(x, out_size), strict=True):
        same(got, want)  # the values and their indices, exactly
    rtol, atol = TOL[dtype]
    for t in (x, x4):
        same(ops("_adaptive_avg_pool3d", t, out_size), aten._adaptive_avg_pool3d(t, out_size), rtol=rtol, atol=atol)
    with pytest.raises(RuntimeError, match="must have 3 values"):
        ops("_adaptive_avg_pool3d", x, [2, 2])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", POOL_LAYOUTS)
@pytest.mark.parametrize(("k", "s", "p", "ceil", "include", "div"),
                         [([3], [2], [1], False, True, None), ([3, 2], [2, 3], [1, 1], True, False, None),
                          ([2], [], [0], False, True, 3)])
def test_avg_pool(ops, dtype, layout, k, s, p, ceil, include, div):
    g = torch.Generator().manual_seed(24)
    rtol, atol = TOL[dtype]
    x = data(g, (2, 3, 11, 10), dtype, layout)
    same(ops("avg_pool2d", x, k, s, p, int(ceil), int(include), div),
         torch.ops.aten.avg_pool2d(x, k, s, p, ceil, include, div), rtol=rtol, atol=atol)
    if dtype not in ("float32", "float64"):
        return  # ATen's CPU avg_pool3d computes on float32/float64 only
    x5 = _strided(data(g, (2, 3, 5, 8, 7), dtype), layout, g)
    k3, s3, p3 = (k * 3)[:3], (s * 3)[:3], (p * 3)[:3]
    same(ops("avg_pool3d", x5, k3, s3, p3, int(ceil), int(include), div),
         torch.ops.aten.avg_pool3d(x5, k3, s3, p3, ceil, include, div), rtol=rtol, atol=atol)


# ---------------------------------------------------------------- LSTM layer, int8 products

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("has_biases", [False, True])
def test_mkldnn_rnn_layer(ops, dtype, reverse, batch_first, has_biases):
    g = torch.Generator().manual_seed(25)
    dt = getattr(torch, dtype)
    lstm = torch.nn.LSTM(5, 4, bias=has_biases, batch_first=batch_first).to(dt)
    x = data(g, (3, 6, 5), dtype, "stepped")
    h0, c0 = data(g, (1, 3 if batch_first else 6, 4), dtype), data(g, (1, 3 if batch_first else 6, 4), dtype)
    w = [lstm.weight_ih_l0.detach(), lstm.weight_hh_l0.detach()]
    w += [lstm.bias_ih_l0.detach(), lstm.bias_hh_l0.detach()] if has_biases else [torch.zeros_like(w[0]),
                                                                                  torch.zeros_like(w[1])]
    out, hy, cy, ws = ops("mkldnn_rnn_layer", x, *w, h0, c0, int(reverse), [], 2, 4, 1, int(has_biases), 0,
                          int(batch_first), 0)
    with torch.no_grad():
        xin = x.flip(1 if batch_first else 0) if reverse else x
        ey, (eh, ec) = lstm(xin, (h0, c0))
        if reverse:
            ey = ey.flip(1 if batch_first else 0)
    tol = 1e-5 if dtype == "float32" else 1e-12
    same(out, ey.contiguous(), rtol=tol, atol=tol)
    same(hy, eh, rtol=tol, atol=tol)
    same(cy, ec, rtol=tol, atol=tol)
    assert ws.numel() == 0 and ws.dtype == torch.uint8


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_weight_int8pack_mm(ops, dtype, layout):
    g = torch.Generator().manual_seed(26)
    x = data(g, (5, 32), dtype, layout)
    w = torch.randint(-128, 128, (12, 32), generator=g, dtype=torch.int8)
    scales = (torch.rand(12, generator=g) * 0.02 + 0.001).to(x.dtype)
    got = ops("_weight_int8pack_mm", x, w, scales)
    want = torch.ops.aten._weight_int8pack_mm(x.contiguous(), w, scales)
    rtol, atol = {"float32": (1e-5, 1e-4), "bfloat16": (2e-2, 2e-2), "float16": (2e-3, 2e-3)}[dtype]
    same(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_int_mm(ops, layout):
    g = torch.Generator().manual_seed(27)
    a = _strided(torch.randint(-128, 128, (32, 24), generator=g, dtype=torch.int8), layout, g)
    b = _strided(torch.randint(-128, 128, (24, 40), generator=g, dtype=torch.int8), layout, g)
    out = _strided(torch.zeros(32, 40, dtype=torch.int32), layout, g)
    ops("_int_mm_out", out, a, b)
    torch.testing.assert_close(out, torch._int_mm(a.contiguous(), b.contiguous()))


# ---------------------------------------------------------------- FFTs and complex views

FFT_CASES = [  # input sizes, dims (as a plugin passes them), onesided
    ((4, 12, 5), [2], True), ((4, 12, 5), [1], True), ((3, 8, 7), [2, 1], True), ((3, 8, 7), [0, 2], False),
    ((2, 400), [1], True), ((6, 9, 16), [1, 2], True), ((5,), [0], False),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("shape", "dims", "onesided"), FFT_CASES)
@pytest.mark.parametrize("norm", [0, 1, 2])
def test_fft_r2c(ops, dtype, layout, shape, dims, onesided, norm):
    g = torch.Generator().manual_seed(40)
    x = data(g, shape, dtype, layout if len(shape) > 1 else "contiguous")
    got = ops("_fft_r2c", x, dims, norm, int(onesided))
    want = torch.ops.aten._fft_r2c(x, dims, norm, onesided)
    tol = 1e-4 if dtype == "float32" else 1e-10
    same(got, want, rtol=tol, atol=tol)
    # a real signal's exactly-real bins carry +0.0 imaginary parts, so angle() is 0 or pi as with ATen
    real_bins = want.imag == 0
    torch.testing.assert_close(got.angle()[real_bins], want.angle()[real_bins])


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize(("shape", "dims"), [((4, 12, 5), [1]), ((3, 8, 7), [2, 0]), ((6, 10), [0, 1]), ((7,), [0])])
@pytest.mark.parametrize("forward", [True, False])
@pytest.mark.parametrize("norm", [0, 2])
def test_fft_c2c(ops, dtype, shape, dims, forward, norm):
    g = torch.Generator().manual_seed(41)
    real = torch.float32 if dtype == "complex64" else torch.float64
    x = torch.complex(torch.randn(shape, generator=g, dtype=real), torch.randn(shape, generator=g, dtype=real))
    if len(shape) > 1:
        x = x.transpose(0, 1).contiguous().transpose(0, 1)  # a transposed layout: the output follows its strides
    got = ops("_fft_c2c", x, dims, norm, int(forward))
    want = torch.ops.aten._fft_c2c(x, dims, norm, forward)
    tol = 1e-4 if dtype == "complex64" else 1e-10
    same(got, want, rtol=tol, atol=tol)


def test_fft_refuses_bad_arguments(ops):
    x = torch.randn(4, 6)
    for args, message in [((x, [], 0, 1), "dim is empty"), ((x, [2], 0, 1), "out of range"),
                          ((x, [1, 1], 0, 1), "repeats"), ((x, [1], 5, 1), "fft_norm_mode"),
                          ((x.to(torch.int32), [1], 0, 1), "float32 or float64")]:
        with pytest.raises(RuntimeError, match=message):
            ops("_fft_r2c", *args)
    with pytest.raises(RuntimeError, match="complex64 or complex128"):
        ops("_fft_c2c", x, [1], 0, 1)


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "float32"])
def test_abs_and_angle(ops, dtype):
    g = torch.Generator().manual_seed(42)
    x = torch.randn(5, 6, generator=g, dtype=torch.float64)
    x = (torch.complex(x, torch.randn(5, 6, generator=g, dtype=torch.float64)) if dtype.startswith("complex")
         else x).to(getattr(torch, dtype))
    x[0, 0] = x[0, 0] * 0  # a zero, and (below) a negative real with a +0 imaginary part
    x[1, 1] = -2.0
    xt = x.t()
    from torch._subclasses.fake_tensor import FakeTensorMode

    for op in ("abs", "angle"):
        got, want = ops(op, xt), getattr(torch, op)(xt)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        # A plugin reads the result with the strides torch's fake tensors gave it at compile time (eager's
        # complex angle returns contiguous, its fake/meta kernel keeps self's layout).
        with FakeTensorMode() as mode:
            compile_time = getattr(torch, op)(mode.from_tensor(xt))
        assert got.dtype == want.dtype and got.stride() == compile_time.stride(), (op, got.stride())


def test_permute_and_complex_views_share_storage(ops):
    g = torch.Generator().manual_seed(43)
    base = torch.randn(3, 4, 2, 6, generator=g)[..., 1:5:2].contiguous()  # [3, 4, 2, 2]
    c = torch.view_as_complex(base[..., 0, :].contiguous())  # [3, 4] complex64
    rt = ops.rt

    def view(name, x, *args):
        """The view's values, and its (sizes, strides, storage offset, data pointer) as the runtime has them."""
        fn = getattr(rt.lib, f"aoti_torch_cpu_{name}")
        h, ret = rt.from_torch(x), H()
        if args:
            fn.argtypes = [H, I64P, I64, PH]
            assert fn(h, (I64 * len(args[0]))(*args[0]), len(args[0]), ctypes.byref(ret)) == 0, rt.last_error()
        else:
            fn.argtypes = [H, PH]
            assert fn(h, ctypes.byref(ret)) == 0, rt.last_error()
        rt.handles.append(ret.value)
        ptr = ctypes.c_void_p()
        rt.lib.aoti_torch_get_data_ptr(ret.value, ctypes.byref(ptr))
        sizes, strides, off, _ = rt.meta(ret.value)
        return rt.to_torch(ret.value), (sizes, strides, off, ptr.value)

    for name, x, args, want in [("permute", c, ([1, 0],), c.permute(1, 0)),
                                ("view_as_real", c[:, 1:], (), torch.view_as_real(c[:, 1:])),
                                ("view_as_complex", torch.view_as_real(c)[1:], (),
                                 torch.view_as_complex(torch.view_as_real(c)[1:]))]:
        got, (sizes, strides, off, ptr) = view(name, x, *args)
        torch.testing.assert_close(got, want)
        assert (sizes, strides, off) == (list(want.shape), list(want.stride()), want.storage_offset()), name
        assert ptr == want.data_ptr(), name  # a view of the same storage, not a copy
    with pytest.raises(RuntimeError, match="permute|dims"):
        ops("permute", c, [0, 0])
    with pytest.raises(RuntimeError, match="last dimension of size 2 and stride 1"):
        ops("view_as_complex", torch.randn(3, 4))
    with pytest.raises(RuntimeError, match="complex"):
        ops("view_as_real", torch.randn(3, 2))


@pytest.mark.parametrize(("src", "dst"), [("float32", "complex64"), ("complex64", "complex128"),
                                          ("complex128", "float32"), ("int64", "complex64")])
def test_copy_converts_complex(ops, src, dst):
    g = torch.Generator().manual_seed(44)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64)
    x = torch.complex(x, -x) if src.startswith("complex") else x * 10
    x = x.to(getattr(torch, src)).t()
    out = torch.zeros(5, 4, dtype=getattr(torch, dst))
    rt = ops.rt
    rt.lib.aoti_torch_copy_.argtypes = [H, H, I32]
    assert rt.lib.aoti_torch_copy_(rt.from_torch(out), rt.from_torch(x), 0) == 0, rt.last_error()
    want = x.real if (src.startswith("complex") and not dst.startswith("complex")) else x
    torch.testing.assert_close(out, want.to(out.dtype), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- order statistics, distances, baddbmm

@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("k", "dim", "keepdim"), [(1, 1, False), (3, -1, True), (4, 0, False), (6, 0, True)])
def test_kthvalue(ops, dtype, layout, k, dim, keepdim):
    g = torch.Generator().manual_seed(45)
    x = data(g, (6, 9), dtype, layout, unique=True)  # distinct values: the index is then ATen's too
    if dtype.startswith("float"):
        x[2, 3] = float("nan")  # NaN sorts last
    v, i = ops("kthvalue", x, k, dim, int(keepdim))
    ev, ei = torch.kthvalue(x, k, dim, keepdim)
    same(v, ev)
    same(i, ei)
    with pytest.raises(RuntimeError, match="out of range"):
        ops("kthvalue", x, 10, 1, 0)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("n", [1, 7, 8])
def test_median(ops, dtype, n):
    g = torch.Generator().manual_seed(46)
    x = data(g, (n, 3), dtype, "transposed")
    same(ops("median", x), torch.median(x))
    if dtype.startswith("float"):
        x[0, 0] = float("nan")
        same(ops("median", x), torch.median(x))
    with pytest.raises(RuntimeError, match="empty"):
        ops("median", torch.zeros(0, 3))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, 3.5, float("inf")])
@pytest.mark.parametrize(("s1", "s2"), [((5, 8), (30, 8)), ((2, 1, 4, 3), (3, 6, 3)), ((3, 7, 2), (1, 26, 2))])
def test_cdist(ops, dtype, p, s1, s2):
    g = torch.Generator().manual_seed(47)
    x1, x2 = data(g, s1, dtype, "transposed"), data(g, s2, dtype, "stepped")
    want = torch.ops.aten._cdist_forward(x1, x2, p, None)
    tol = 1e-5 if dtype == "float32" else 1e-10
    same(ops("_cdist_forward", x1, x2, p, None), want, rtol=tol, atol=tol)
    same(ops("_cdist_forward", x1, x2, p, 2), want, rtol=tol, atol=tol)


def test_cdist_refuses_bad_arguments(ops):
    for a, b, p, message in [(torch.randn(3, 4), torch.randn(5, 3), 2.0, "same last dimension"),
                             (torch.randn(3, 4), torch.randn(5, 4), -1.0, "non-negative"),
                             (torch.randn(2, 3, 4), torch.randn(3, 5, 4), 2.0, "broadcast"),
                             (torch.randn(4), torch.randn(5, 4), 2.0, "at least 2")]:
        with pytest.raises(RuntimeError, match=message):
            ops("_cdist_forward", a, b, p, None)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("self_shape", "beta", "alpha"), [((3, 4, 6), 0.5, 2.0), ((6,), 1.0, 1.0), ((4, 1), 0.0, 1.5)])
def test_baddbmm(ops, dtype, layout, self_shape, beta, alpha):
    g = torch.Generator().manual_seed(48)
    b1, b2 = data(g, (3, 4, 5), dtype, layout), data(g, (3, 5, 6), dtype, layout)
    self_ = data(g, self_shape, dtype)
    if beta == 0:
        self_[0] = float("nan")  # ignored when beta is 0
    out = torch.zeros(3, 4, 6, dtype=b1.dtype)
    rt = ops.rt
    fn = rt.lib.aoti_torch_cpu_baddbmm_out
    fn.argtypes = [H, H, H, H, F64, F64]
    assert fn(rt.from_torch(out), rt.from_torch(self_), rt.from_torch(b1), rt.from_torch(b2), beta, alpha) == 0, \
        rt.last_error()
    want = torch.baddbmm(self_.double(), b1.double(), b2.double(), beta=beta, alpha=alpha).to(b1.dtype)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(out, want, rtol=rtol * 4, atol=atol * 4)
    bad = torch.zeros(3, 4, 7, dtype=b1.dtype)
    assert fn(rt.from_torch(bad), rt.from_torch(self_), rt.from_torch(b1), rt.from_torch(b2), beta, alpha) != 0
    assert "out is 3x4x7, expected 3x4x6 (batch1 is 3x4x5, batch2 is 3x5x6)" in rt.last_error(), rt.last_error()


def test_every_declared_op_is_exported(host_lib: Path):
    """Each shim added here is in the spec and defined by the runtime library."""
    from toolchain.spec import load_spec

    names = {s.name for s in load_spec().shims}
    lib = ctypes.CDLL(str(host_lib))
    for short in SIGS:
        name = f"aoti_torch_cpu_{short}"
        assert name in names, name
        assert hasattr(lib, name), name
