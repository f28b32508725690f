"""The runtime's CPU fallbacks (aoti_torch_cpu_*) against torch, through the C ABI a plugin uses.

Operands are built with aoti_torch_create_tensor_from_blob over numpy/torch memory with arbitrary
strides (transposed, sliced with steps, channels-last, storage offsets), so the kernels see exactly
what a plugin would hand them. Outputs are compared with torch's values and, for convolution, with
torch's output strides (a plugin indexes the result with the strides torch had at compile time).
"""

from __future__ import annotations

import ctypes
import itertools
from pathlib import Path

import numpy as np
import pytest

from tests.shim_kinds import HandleOwner

try:
    import torch
    import torch.nn.functional as F  # noqa: N812
except ImportError:  # pragma: no cover - exercised only where torch is absent
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not importable: no reference to compare with")

H = ctypes.c_void_p  # AtenTensorHandle
I64P = ctypes.POINTER(ctypes.c_int64)

DTYPE_CODES = {"uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5, "float32": 6, "float64": 7,
               "complex64": 9, "complex128": 10, "bool": 11, "bfloat16": 15}


class Runtime(HandleOwner):
    """ctypes view of the shims this test needs; keeps every buffer alive as long as its handle."""

    def __init__(self, path: Path) -> None:
        super().__init__(ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL))
        lib = self.lib
        lib.aoti_torch_create_tensor_from_blob.argtypes = [ctypes.c_void_p, ctypes.c_int64, I64P, I64P, ctypes.c_int64,
                                                           ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                                           ctypes.POINTER(H)]
        for name in ("aoti_torch_cpu_mm_out", "aoti_torch_cpu_bmm_out"):
            getattr(lib, name).argtypes = [H, H, H]
        lib.aoti_torch_cpu_addmm_out.argtypes = [H, H, H, H, ctypes.c_double, ctypes.c_double]
        lib.aoti_torch_cpu_convolution.argtypes = [H, H, ctypes.POINTER(H), I64P, ctypes.c_int64, I64P, ctypes.c_int64,
                                                   I64P, ctypes.c_int64, ctypes.c_int32, I64P, ctypes.c_int64,
                                                   ctypes.c_int64, ctypes.POINTER(H)]
        for name in ("aoti_torch_get_sizes", "aoti_torch_get_strides"):
            getattr(lib, name).argtypes = [H, ctypes.POINTER(I64P)]
        for name in ("aoti_torch_get_dim", "aoti_torch_get_storage_offset", "aoti_torch_get_storage_size"):
            getattr(lib, name).argtypes = [H, ctypes.POINTER(ctypes.c_int64)]
        lib.aoti_torch_get_dtype.argtypes = [H, ctypes.POINTER(ctypes.c_int32)]
        lib.aoti_torch_get_data_ptr.argtypes = [H, ctypes.POINTER(ctypes.c_void_p)]
        lib.aoti_torch_delete_tensor_object.argtypes = [H]

    def blob(self, base_ptr: int, sizes, strides, offset: int, dtype: str, keep: object) -> int:
        n = len(sizes)
        s = (ctypes.c_int64 * max(n, 1))(*sizes)
        st = (ctypes.c_int64 * max(n, 1))(*strides)
        h = H()
        self.check(self.lib.aoti_torch_create_tensor_from_blob(base_ptr, n, s, st, offset, DTYPE_CODES[dtype], 0, 0,
                                                               ctypes.byref(h)), "create_tensor_from_blob")
        self.handles.append(h.value)
        self.keep.append(keep)
        return h.value

    def from_numpy(self, base: np.ndarray, view: np.ndarray) -> int:
        """A handle for `view`, a strided view into the contiguous array `base` (storage = base)."""
        item = base.itemsize
        offset_bytes = view.__array_interface__["data"][0] - base.ctypes.data
        assert offset_bytes % item == 0 and all(s % item == 0 for s in view.strides)
        return self.blob(base.ctypes.data, view.shape, [s // item for s in view.strides], offset_bytes // item,
                         str(base.dtype), (base, view))

    def from_torch(self, t) -> int:
        return self.blob(t.untyped_storage().data_ptr(), list(t.shape), list(t.stride()), t.storage_offset(),
                         str(t.dtype).removeprefix("torch."), t)

    def meta(self, h: int) -> tuple[list[int], list[int], int, int]:
        dim = ctypes.c_int64()
        self.check(self.lib.aoti_torch_get_dim(h, ctypes.byref(dim)), "get_dim")
        sp, stp = I64P(), I64P()
        self.check(self.lib.aoti_torch_get_sizes(h, ctypes.byref(sp)), "get_sizes")
        self.check(self.lib.aoti_torch_get_strides(h, ctypes.byref(stp)), "get_strides")
        off = ctypes.c_int64()
        self.check(self.lib.aoti_torch_get_storage_offset(h, ctypes.byref(off)), "get_storage_offset")
        dt = ctypes.c_int32()
        self.check(self.lib.aoti_torch_get_dtype(h, ctypes.byref(dt)), "get_dtype")
        return [sp[i] for i in range(dim.value)], [stp[i] for i in range(dim.value)], off.value, dt.value

    def to_torch(self, h: int):
        """Copy of a runtime-owned tensor as a torch tensor with the same sizes and strides."""
        sizes, strides, off, dt = self.meta(h)
        tdtype = {v: getattr(torch, k) for k, v in DTYPE_CODES.items()}[dt]
        item = torch.empty((), dtype=tdtype).element_size()
        ptr, nbytes = ctypes.c_void_p(), ctypes.c_int64()
        self.check(self.lib.aoti_torch_get_data_ptr(h, ctypes.byref(ptr)), "get_data_ptr")
        self.check(self.lib.aoti_torch_get_storage_size(h, ctypes.byref(nbytes)), "get_storage_size")
        raw = bytearray(ctypes.string_at(ptr.value - off * item, nbytes.value))
        flat = torch.frombuffer(raw, dtype=tdtype) if raw else torch.empty(0, dtype=tdtype)
        return torch.as_strided(flat, sizes, strides, off).clone(memory_format=torch.preserve_format)

    def last_error(self) -> str:
        """The runtime's thread-local message (libaoti_host.so always exports aoti_host_last_error)."""
        fn = self.lib.aoti_host_last_error
        fn.restype = ctypes.c_char_p
        return (fn() or b"").decode(errors="replace")


@pytest.fixture
def rt(host_lib: Path):
    r = Runtime(host_lib)
    yield r
    r.release()


TOL = {"float32": (1e-4, 1e-4), "float64": (1e-10, 1e-10), "bfloat16": (2e-2, 5e-2), "float16": (5e-3, 1e-2)}
FLOAT_DTYPES = ["float32", "float64", "bfloat16", "float16"]


def _strided(t, layout: str, gen):
    """The same values as `t`, stored with another layout (a view into a larger buffer)."""
    if layout == "contiguous":
        return t.contiguous()
    if layout == "transposed":  # last two dims swapped in memory
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "stepped":  # every other element of a buffer twice as wide, with a storage offset
        big = torch.randn(*t.shape[:-1], t.shape[-1] * 2 + 1, generator=gen).to(t.dtype)
        view = big[..., 1::2]
        view.copy_(t)
        return view
    if layout == "channels_last":
        fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
        return t.contiguous(memory_format=fmt)
    if layout == "offset":  # a slice starting in the middle of its storage
        big = torch.randn(t.numel() + 7, generator=gen).to(t.dtype)
        view = big[7:].view(t.shape)
        view.copy_(t)
        return view
    raise AssertionError(layout)


def _rand(gen, *shape, dtype: str):
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float64).to(getattr(torch, dtype))


def _close(actual, expected, dtype: str) -> None:
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol)


# ---------------- numpy-only (no torch needed) ----------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mm_numpy_strided(rt: Runtime, dtype: str) -> None:
    rng = np.random.default_rng(0)
    base_a = rng.standard_normal((7, 5)).astype(dtype)
    a = base_a.T[1:4]                      # 3x7, transposed storage, offset
    base_b = rng.standard_normal((14, 9)).astype(dtype)
    b = base_b[::2, 1:8:3]                 # 7x3, stepped rows and columns, offset
    base_o = np.zeros((4, 6), dtype=dtype)
    o = base_o.T[1:4, 1:4]                 # 3x3, column-major, offset
    rc = rt.lib.aoti_torch_cpu_mm_out(rt.from_numpy(base_o, o), rt.from_numpy(base_a, a), rt.from_numpy(base_b, b))
    assert rc == 0
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(o, a.astype(np.float64) @ b.astype(np.float64), rtol=tol, atol=tol)
    assert base_o[0].tolist() == [0.0] * 6, "wrote outside the output view"


# ---------------- torch comparisons ----------------

@needs_torch
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("la,lb,lo", [("contiguous", "contiguous", "contiguous"), ("transposed", "stepped", "offset"),
                                      ("stepped", "transposed", "transposed"), ("offset", "offset", "stepped")])
def test_mm(rt: Runtime, dtype: str, la: str, lb: str, lo: str) -> None:
    g = torch.Generator().manual_seed(1)
    a, b = _rand(g, 5, 11, dtype=dtype), _rand(g, 11, 4, dtype=dtype)
    out = _strided(torch.zeros(5, 4, dtype=a.dtype), lo, g)
    assert rt.lib.aoti_torch_cpu_mm_out(rt.from_torch(out), rt.from_torch(_strided(a, la, g)),
                                        rt.from_torch(_strided(b, lb, g))) == 0
    _close(out, torch.mm(a.double(), b.double()).to(a.dtype), dtype)


@needs_torch
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("bias_kind", ["row", "full", "expanded", "column", "scalar"])
@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, -2.0), (0.0, 1.5)])
def test_addmm(rt: Runtime, dtype: str, bias_kind: str, beta: float, alpha: float) -> None:
    g = torch.Generator().manual_seed(2)
    a, b = _rand(g, 6, 3, dtype=dtype), _rand(g, 3, 5, dtype=dtype)
    bias = {"row": lambda: _rand(g, 5, dtype=dtype),
            "full": lambda: _strided(_rand(g, 6, 5, dtype=dtype), "transposed", g),
            "expanded": lambda: _rand(g, 1, 5, dtype=dtype).expand(6, 5),  # stride 0, as inductor passes biases
            "column": lambda: _rand(g, 6, 1, dtype=dtype),
            "scalar": lambda: _rand(g, dtype=dtype)}[bias_kind]()
    out = _strided(torch.zeros(6, 5, dtype=a.dtype), "transposed", g)
    assert rt.lib.aoti_torch_cpu_addmm_out(rt.from_torch(out), rt.from_torch(bias), rt.from_torch(_strided(a, "stepped", g)),
                                           rt.from_torch(b), beta, alpha) == 0
    expected = torch.addmm(bias.double(), a.double(), b.double(), beta=beta, alpha=alpha)
    _close(out, expected.to(a.dtype), dtype)


@needs_torch
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "stepped", "offset"])
def test_bmm(rt: Runtime, dtype: str, layout: str) -> None:
    g = torch.Generator().manual_seed(3)
    a, b = _rand(g, 3, 4, 6, dtype=dtype), _rand(g, 3, 6, 2, dtype=dtype)
    a_in = a.permute(1, 0, 2).contiguous().permute(1, 0, 2) if layout == "transposed" else _strided(a, layout, g)
    out = _strided(torch.zeros(3, 4, 2, dtype=a.dtype), layout, g)
    assert rt.lib.aoti_torch_cpu_bmm_out(rt.from_torch(out), rt.from_torch(a_in), rt.from_torch(_strided(b, layout, g))) == 0
    _close(out, torch.bmm(a.double(), b.double()).to(a.dtype), dtype)


@needs_torch
def test_mm_errors(rt: Runtime) -> None:
    a, b, o = torch.zeros(4, 16), torch.zeros(15, 8), torch.zeros(4, 8)
    assert rt.lib.aoti_torch_cpu_mm_out(rt.from_torch(o), rt.from_torch(a), rt.from_torch(b)) == 1
    assert rt.last_error() == "aoti_torch_cpu_mm_out: mat1 is 4x16, mat2 is 15x8: inner dimensions differ"
    b2, o2 = torch.zeros(16, 8, dtype=torch.float64), torch.zeros(4, 8)
    assert rt.lib.aoti_torch_cpu_mm_out(rt.from_torch(o2), rt.from_torch(a), rt.from_torch(b2)) == 1
    o3 = torch.zeros(4, 7)
    assert rt.lib.aoti_torch_cpu_mm_out(rt.from_torch(o3), rt.from_torch(a), rt.from_torch(torch.zeros(16, 8))) == 1


# (spatial dims, transposed, groups, stride, padding, dilation, output_padding)
CONV_CASES = [
    (1, False, 1, [1], [0], [1], [0]),
    (1, False, 2, [2], [1], [2], [0]),
    (1, True, 2, [2], [1], [1], [1]),
    (2, False, 1, [1, 1], [1, 1], [1, 1], [0, 0]),
    (2, False, 2, [2, 1], [0, 2], [1, 2], [0, 0]),
    (2, False, 4, [1, 1], [1, 1], [1, 1], [0, 0]),  # depthwise
    (2, True, 1, [2, 2], [1, 0], [1, 1], [1, 0]),
    (2, True, 2, [1, 2], [0, 1], [2, 1], [0, 1]),
    (3, False, 1, [1, 1, 1], [1, 0, 1], [1, 1, 1], [0, 0, 0]),
    (3, False, 2, [2, 1, 1], [0, 1, 0], [1, 1, 2], [0, 0, 0]),
    (3, True, 2, [2, 1, 2], [1, 0, 0], [1, 1, 1], [1, 0, 0]),
]


def _conv_operands(g, nd: int, transposed: bool, groups: int, dtype: str, batch: int):
    cin, cout = 4, 12 if not transposed else 4
    spatial = [7, 6, 5][:nd]
    x = _rand(g, batch, cin, *spatial, dtype=dtype)
    w = (_rand(g, cin, cout // groups, *[3, 2, 2][:nd], dtype=dtype) if transposed
         else _rand(g, cout, cin // groups, *[3, 2, 2][:nd], dtype=dtype))
    b = _rand(g, cout, dtype=dtype)
    return x, w, b


def _run_conv(rt: Runtime, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    def arr(v):
        return (ctypes.c_int64 * len(v))(*v)

    bias_h = H(rt.from_torch(b)) if b is not None else None
    ret = H()
    rc = rt.lib.aoti_torch_cpu_convolution(rt.from_torch(x), rt.from_torch(w),
                                           ctypes.byref(bias_h) if bias_h is not None else None,
                                           arr(stride), len(stride), arr(padding), len(padding), arr(dilation),
                                           len(dilation), int(transposed), arr(output_padding), len(output_padding),
                                           groups, ctypes.byref(ret))
    assert rc == 0, f"aoti_torch_cpu_convolution failed: {rt.last_error()}"
    rt.handles.append(ret.value)
    return rt.to_torch(ret.value)


@needs_torch
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}d{'T' if c[1] else ''}-g{c[2]}")
@pytest.mark.parametrize("x_layout", ["contiguous", "channels_last", "stepped", "offset", "transposed"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_convolution_matches_torch(rt: Runtime, dtype: str, case, x_layout: str, with_bias: bool) -> None:
    nd, transposed, groups, stride, padding, dilation, output_padding = case
    if x_layout == "channels_last" and nd == 1:
        x_layout = "transposed"  # a 1-d "channels last" is the transposed layout
    g = torch.Generator().manual_seed(4)
    x, w, b = _conv_operands(g, nd, transposed, groups, dtype, batch=2)
    xs = _strided(x, x_layout, g)
    got = _run_conv(rt, xs, w, b if with_bias else None, stride, padding, dilation, transposed, output_padding, groups)
    ref = torch.ops.aten.convolution(xs.float() if dtype in ("bfloat16", "float16") else xs,
                                     w.float() if dtype in ("bfloat16", "float16") else w,
                                     (b.float() if dtype in ("bfloat16", "float16") else b) if with_bias else None,
                                     stride, padding, dilation, transposed, output_padding, groups)
    _close(got, ref.to(x.dtype), dtype)
    # Layout: exactly the strides torch gives for the same operands in this dtype.
    torch_out = torch.ops.aten.convolution(xs, w, b if with_bias else None, stride, padding, dilation, transposed,
                                           output_padding, groups)
    assert got.shape == torch_out.shape
    assert got.stride() == torch_out.stride(), f"strides {got.stride()} != torch's {torch_out.stride()}"


@needs_torch
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("nd,transposed", [(2, False), (2, True), (3, False), (3, True)])
@pytest.mark.parametrize("x_cl,w_cl", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("batch", [1, 2])
def test_convolution_channels_last_output(rt: Runtime, dtype: str, nd: int, transposed: bool, x_cl: bool, w_cl: bool,
                                          batch: int) -> None:
    g = torch.Generator().manual_seed(5)
    x, w, b = _conv_operands(g, nd, transposed, 2, dtype, batch=batch)
    if x_cl:
        x = _strided(x, "channels_last", g)
    if w_cl:
        w = _strided(w, "channels_last", g)
    args = ([1] * nd, [1] * nd, [1] * nd, transposed, [0] * nd, 2)
    got = _run_conv(rt, x, w, b, *args)
    torch_out = torch.ops.aten.convolution(x, w, b, *args)
    assert got.stride() == torch_out.stride(), f"strides {got.stride()} != torch's {torch_out.stride()}"
    if nd == 2:  # every 2-d CPU backend of ATen: channels_last if input or weight is
        assert got.is_contiguous(memory_format=torch.channels_last)
    # Values against the float32 result rounded once (torch's own bfloat16/float16 kernel rounds per its
    # backend, and its answer differs from machine to machine: oneDNN with or without AVX-512 BF16).
    half = dtype in ("bfloat16", "float16")
    ref = torch.ops.aten.convolution(x.float() if half else x, w.float() if half else w,
                                     (b.float() if half else b) if b is not None else None, *args)
    _close(got, ref.to(x.dtype), dtype)


@needs_torch
def test_channels_last_output_f32_f64_2d(rt: Runtime) -> None:
    """The contract plugins rely on: a channels-last input gives a channels-last output."""
    for dtype in ("float32", "float64"):
        g = torch.Generator().manual_seed(6)
        x = _rand(g, 1, 3, 8, 8, dtype=dtype).contiguous(memory_format=torch.channels_last)
        w = _rand(g, 5, 3, 3, 3, dtype=dtype)
        got = _run_conv(rt, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        assert got.is_contiguous(memory_format=torch.channels_last) and not got.is_contiguous()
        _close(got, F.conv2d(x, w, padding=1), dtype)


@needs_torch
@pytest.mark.parametrize("cout,groups", [(40, 1), (70, 2), (16, 1), (33, 3)])
@pytest.mark.parametrize("stride,padding,dilation", [(1, 1, 1), (2, 1, 1), (1, 2, 2), (2, 0, 1)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv_channels_last_wide(rt: Runtime, cout: int, groups: int, stride: int, padding: int, dilation: int,
                                 with_bias: bool) -> None:
    """Channels-last float32 convolutions with output channels past one 16/32-column panel of the packed
    kernel (tails included) and a batch: the implicit-GEMM path (no im2col) against ATen."""
    g = torch.Generator().manual_seed(7)
    x = _rand(g, 3, 6 * groups, 11, 9, dtype="float32").contiguous(memory_format=torch.channels_last)
    w = _rand(g, cout, 6, 3, 3, dtype="float32")
    b = _rand(g, cout, dtype="float32") if with_bias else None
    args = ([stride] * 2, [padding] * 2, [dilation] * 2, False, [0, 0], groups)
    got = _run_conv(rt, x, w, b, *args)
    ref = torch.ops.aten.convolution(x, w, b, *args)
    assert got.stride() == ref.stride()
    _close(got, ref, "float32")


@needs_torch
def test_functional_wrappers(rt: Runtime) -> None:
    g = torch.Generator().manual_seed(7)
    x1, w1 = _rand(g, 2, 4, 9, dtype="float64"), _rand(g, 6, 2, 3, dtype="float64")
    _close(_run_conv(rt, x1, w1, None, [2], [1], [2], False, [0], 2),
           F.conv1d(x1, w1, stride=2, padding=1, dilation=2, groups=2), "float64")
    x2, w2 = _rand(g, 1, 4, 5, 5, dtype="float64"), _rand(g, 4, 3, 3, 3, dtype="float64")
    _close(_run_conv(rt, x2, w2, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
           F.conv_transpose2d(x2, w2, stride=2, padding=1, output_padding=1), "float64")
    x3, w3 = _rand(g, 1, 2, 4, 5, 6, dtype="float64"), _rand(g, 4, 1, 2, 2, 3, dtype="float64")
    _close(_run_conv(rt, x3, w3, None, [1, 2, 1], [1, 0, 1], [2, 1, 1], False, [0, 0, 0], 2),
           F.conv3d(x3, w3, stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1), groups=2), "float64")


@needs_torch
@pytest.mark.parametrize("bad,needle", [("channels", "but weight of shape [6, 3, 3, 3] with groups=1 expects 3"), ("groups", "not divisible by groups=4"),
                                        ("kernel", "smaller than the dilated kernel"), ("dtype", "dtypes must be"),
                                        ("bias", "bias has shape [5]")])
def test_convolution_errors(rt: Runtime, bad: str, needle: str) -> None:
    x, w, b = torch.zeros(1, 4, 5, 5), torch.zeros(6, 4, 3, 3), None
    groups = 1
    if bad == "channels":
        w = torch.zeros(6, 3, 3, 3)
    elif bad == "groups":
        groups = 4  # 6 output channels are not divisible by 4
        w = torch.zeros(6, 1, 3, 3)
    elif bad == "kernel":
        w = torch.zeros(6, 4, 7, 7)
    elif bad == "dtype":
        w = torch.zeros(6, 4, 3, 3, dtype=torch.float64)
    elif bad == "bias":
        b = torch.zeros(5)
    with pytest.raises(AssertionError, match="aoti_torch_cpu_convolution failed") as info:
        _run_conv(rt, x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], groups)
    assert needle in str(info.value)


def test_all_shapes_listed() -> None:
    # Guards against an accidental edit that empties the parametrisation.
    assert len(CONV_CASES) >= 10 and len(list(itertools.product(FLOAT_DTYPES, CONV_CASES))) >= 40


# ---------------- BLAS edge cases (float32/float64 go through cblas) ----------------

@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(0, 3, 4), (3, 0, 4), (3, 4, 0), (1, 1, 1), (1, 7, 1), (9, 1, 5)])
def test_mm_degenerate_shapes(rt: Runtime, dtype: str, shape) -> None:
    m, k, n = shape
    g = torch.Generator().manual_seed(8)
    a, b = _rand(g, m, k, dtype=dtype), _rand(g, k, n, dtype=dtype)
    out = torch.full((m, n), float("nan"), dtype=a.dtype)
    assert rt.lib.aoti_torch_cpu_mm_out(rt.from_torch(out), rt.from_torch(a), rt.from_torch(b)) == 0, rt.last_error()
    _close(out, torch.mm(a, b), dtype)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mm_operands_blas_cannot_take(rt: Runtime, dtype: str) -> None:
    """Operands no BLAS takes as they are (stride-0 rows, an output strided both ways) get packed."""
    g = torch.Generator().manual_seed(9)
    a = _rand(g, 1, 6, dtype=dtype).expand(5, 6)                       # stride 0 rows
    b = _rand(g, 6, 4, dtype=dtype)
    big = torch.zeros(12, 10, dtype=a.dtype)
    out = big[::2, ::2][:5, :4]                                         # strided in both dims
    assert rt.lib.aoti_torch_cpu_mm_out(rt.from_torch(out), rt.from_torch(a), rt.from_torch(b)) == 0, rt.last_error()
    _close(out, torch.mm(a, b), dtype)
    assert big[1::2].abs().sum() == 0, "wrote outside the output view"
    # beta = 0 never reads out (NaNs in it must not propagate), as ATen defines addmm
    out2 = torch.full((5, 4), float("nan"), dtype=a.dtype)
    bias = _rand(g, 4, dtype=dtype)
    assert rt.lib.aoti_torch_cpu_addmm_out(rt.from_torch(out2), rt.from_torch(bias), rt.from_torch(a),
                                           rt.from_torch(b), 0.0, 1.0) == 0
    _close(out2, torch.mm(a, b), dtype)


# ---------------- flash attention ----------------

def _sdpa_shim(rt: Runtime, q, k, v, *, causal=False, mask=None, scale=None, dropout=0.0):
    lib = rt.lib
    fn = lib.aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu
    fn.argtypes = [H, H, H, ctypes.c_double, ctypes.c_int32, ctypes.POINTER(H), ctypes.POINTER(ctypes.c_double),
                   ctypes.POINTER(H), ctypes.POINTER(H)]
    mask_h = H(rt.from_torch(mask)) if mask is not None else None
    sc = ctypes.c_double(scale) if scale is not None else None
    r0, r1 = H(), H()
    rc = fn(rt.from_torch(q), rt.from_torch(k), rt.from_torch(v), dropout, int(causal),
            ctypes.byref(mask_h) if mask_h is not None else None, ctypes.byref(sc) if sc is not None else None,
            ctypes.byref(r0), ctypes.byref(r1))
    if rc != 0:
        return None, rt.last_error()
    rt.handles += [r0.value, r1.value]
    return (rt.to_torch(r0.value), rt.to_torch(r1.value)), ""


def _qkv_layout(t, layout: str, g):
    if layout == "bhld":
        return t.contiguous()
    if layout == "blhd":  # what inductor usually passes: a permuted view of [B, L, H, D]
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return _strided(t, layout, g)


SDPA_CASES = [
    # (B, Hq, Hk, L, S, E, causal, mask)
    (2, 3, 3, 5, 7, 8, False, None),
    (1, 4, 4, 6, 6, 16, True, None),
    (2, 2, 2, 7, 4, 8, True, None),        # causal with L > S: top-left aligned, as ATen
    (2, 4, 2, 5, 9, 8, False, None),       # grouped-query attention
    (1, 2, 2, 5, 6, 4, False, "float4d"),
    (2, 2, 2, 3, 5, 4, False, "float2d"),  # broadcast over batch and heads
    (2, 2, 2, 4, 4, 4, True, "float4d"),
    (1, 2, 2, 3, 21, 8, True, None),       # softmax rows of whole vectors and a tail, -inf past the diagonal
]


@needs_torch
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", SDPA_CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("layout", ["bhld", "blhd", "stepped", "offset"])
def test_flash_attention_matches_aten(rt: Runtime, dtype: str, case, layout: str) -> None:
    b, hq, hk, lq, s, e, causal, mask_kind = case
    g = torch.Generator().manual_seed(10)
    q, k, v = _rand(g, b, hq, lq, e, dtype=dtype), _rand(g, b, hk, s, e, dtype=dtype), _rand(g, b, hk, s, e, dtype=dtype)
    mask = None
    if mask_kind == "float4d":
        mask = _rand(g, b, hq, lq, s, dtype=dtype)
    elif mask_kind == "float2d":
        mask = _rand(g, lq, s, dtype=dtype)
    qs, ks, vs = (_qkv_layout(t, layout, g) for t in (q, k, v))
    got, err = _sdpa_shim(rt, qs, ks, vs, causal=causal, mask=mask, scale=0.3 if e == 4 else None)
    assert got is not None, err
    sc = 0.3 if e == 4 else None
    # Layout: what ATen gives for these very operands. Values: ATen on packed copies, because torch
    # 2.13's kernel reads inputs whose last dimension isn't unit-stride wrongly ("stepped" here).
    layout_ref = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(qs, ks, vs, 0.0, causal, attn_mask=mask,
                                                                            scale=sc)
    ref = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask, scale=sc)
    for name, mine, theirs, lay in (("output", got[0], ref[0], layout_ref[0]),
                                    ("logsumexp", got[1], ref[1], layout_ref[1])):
        assert mine.shape == theirs.shape, name
        assert mine.dtype == theirs.dtype, name
        assert mine.stride() == lay.stride(), f"{name}: strides {mine.stride()} != ATen's {lay.stride()}"
        finite = torch.isfinite(theirs)
        assert torch.equal(finite, torch.isfinite(mine)), f"{name}: -inf/nan pattern differs from ATen"
        _close(mine[finite], theirs[finite], dtype if name == "output" else "float32" if dtype != "float64" else dtype)


@needs_torch
def test_flash_attention_errors(rt: Runtime) -> None:
    q = torch.randn(1, 2, 3, 4)
    _, err = _sdpa_shim(rt, q, q, q, dropout=0.1)
    assert "dropout_p" in err and "inference" in err
    _, err = _sdpa_shim(rt, q, torch.randn(1, 3, 3, 4), torch.randn(1, 3, 3, 4))
    assert "multiple of the key/value heads" in err
    _, err = _sdpa_shim(rt, q, q, q.double())
    assert "dtypes must be the same" in err
    _, err = _sdpa_shim(rt, q[0], q[0], q[0])
    assert "must be 4-d" in err


_THREAD_COUNTER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
static long created;
long counted_threads(void) { return __atomic_load_n(&created, __ATOMIC_SEQ_CST); }
int pthread_create(pthread_t* t, const pthread_attr_t* a, void* (*fn)(void*), void* arg) {
  static int (*real)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  if (!real) real = (int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*))dlsym(RTLD_NEXT, "pthread_create");
  __atomic_add_fetch(&created, 1, __ATOMIC_SEQ_CST);
  return real(t, a, fn, arg);
}
"""

_GEMM_LOOP = r"""
import ctypes, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from tests.integration.test_cpu_fallbacks import Runtime
rt = Runtime(sys.argv[1])
counted = ctypes.CDLL(None).counted_threads
counted.restype = ctypes.c_long
g = np.random.default_rng(0)
a, b = g.standard_normal((256, 256), dtype=np.float32), g.standard_normal((256, 256), dtype=np.float32)
bias, out = g.standard_normal(256, dtype=np.float32), np.zeros((256, 256), dtype=np.float32)
handles = [rt.from_numpy(x, x) for x in (out, bias, a, b)]
before = counted()
for _ in range(20):
    assert rt.lib.aoti_torch_cpu_addmm_out(*handles, 1.0, 1.0) == 0, rt.last_error()
np.testing.assert_allclose(out, bias + a @ b, rtol=1e-4, atol=1e-3)
print("threads-created", counted() - before)
"""


def test_gemm_split_reuses_the_thread_pool(host_lib: Path, tmp_path: Path) -> None:
    """A GEMM large enough to split over the OpenMP threads (256^3 multiply-adds), called 20 times at
    OMP_NUM_THREADS=2, starts at most the pool's one worker: a region opened inside another region (even an
    inactive `parallel if (false)`) is a nested team, for which libgomp starts fresh threads every time."""
    import os
    import shutil
    import subprocess
    import sys

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the pthread_create counter")
    (tmp_path / "counter.c").write_text(_THREAD_COUNTER)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(tmp_path / "counter.so"), str(tmp_path / "counter.c"),
                    "-ldl"], check=True)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "2", "LD_PRELOAD": str(tmp_path / "counter.so")}
    p = subprocess.run([sys.executable, "-c", _GEMM_LOOP, str(host_lib), str(repo)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    created = int(p.stdout.split("threads-created")[1].split()[0])
    assert created <= 1, f"{created} threads started for 20 GEMMs: the split opens nested OpenMP teams"
