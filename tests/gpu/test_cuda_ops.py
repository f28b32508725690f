"""The runtime's CUDA fallback ops (runtime/src/shims/cuda/ops/, transposed convolution in conv.cpp)
against torch's ATen on the GPU, through the C ABI.

Operands are torch CUDA tensors (contiguous, transposed, stepped views with a storage offset) handed to
libaoti_host.so with aoti_torch_create_tensor_from_blob, as a plugin would; every returned tensor is
compared with ATen's in values, dtype, sizes, strides and device, since plugins reinterpret fallback
outputs with the layout torch had at compile time.

Needs the GPU machine (tests/gpu/run.sh sets AOTI_HOST_LIBRARY to the CUDA build); skips elsewhere.
"""

from __future__ import annotations

import ctypes
import math
import os

import pytest

from tests.shim_kinds import HandleOwner, marshal, shim_kinds

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: these tests run on the GPU machine via tests/gpu/run.sh", allow_module_level=True)
if not os.environ.get("AOTI_HOST_LIBRARY"):
    pytest.skip("AOTI_HOST_LIBRARY is not set: run tests/gpu/run.sh, which builds the CUDA runtime",
                allow_module_level=True)

H = ctypes.c_void_p
PH = ctypes.POINTER(H)
I32, I64, F64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_double
I64P = ctypes.POINTER(I64)
CODES = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
         torch.float32: 6, torch.float64: 7, torch.complex64: 9, torch.complex128: 10, torch.bool: 11,
         torch.bfloat16: 15, torch.uint64: 29}
DTYPES = {v: k for k, v in CODES.items()}
R, RI = "return", "int64 return"

# Shim name -> argument kinds in prototype order: from the prototypes in toolchain/spec/shims.toml (torch's
# generated/c_shim_cuda.h), through tests/shim_kinds.py.
SIGS = shim_kinds("cuda")


class ShimError(RuntimeError):
    pass


class Host(HandleOwner):
    """Calls aoti_torch_cuda_<name> on torch tensors; returned tensors come back as torch tensors."""

    def __init__(self) -> None:
        super().__init__(ctypes.CDLL(os.environ["AOTI_HOST_LIBRARY"], mode=ctypes.RTLD_GLOBAL))
        lib = self.lib
        lib.aoti_torch_create_tensor_from_blob.argtypes = [H, I64, I64P, I64P, I64, I32, I32, I32, PH]
        for name in ("aoti_torch_get_sizes", "aoti_torch_get_strides"):
            getattr(lib, name).argtypes = [H, ctypes.POINTER(I64P)]
        for name in ("aoti_torch_get_dim", "aoti_torch_get_storage_offset", "aoti_torch_get_storage_size"):
            getattr(lib, name).argtypes = [H, ctypes.POINTER(I64)]
        for name in ("aoti_torch_get_dtype", "aoti_torch_get_device_type"):
            getattr(lib, name).argtypes = [H, ctypes.POINTER(I32)]
        lib.aoti_torch_get_data_ptr.argtypes = [H, ctypes.POINTER(H)]
        lib.aoti_torch_delete_tensor_object.argtypes = [H]
        lib.aoti_host_last_error.restype = ctypes.c_char_p

    def ok(self, rc: int, what: str) -> None:
        if rc != 0:
            raise ShimError(f"{what} failed: {(self.lib.aoti_host_last_error() or b'').decode()}")

    check = ok  # release()'s deletions too

    def from_torch(self, t) -> int:
        n = t.dim()
        sizes = (I64 * max(n, 1))(*t.shape)
        strides = (I64 * max(n, 1))(*t.stride())
        dev = (1, t.device.index) if t.is_cuda else (0, 0)
        h = H()
        self.ok(self.lib.aoti_torch_create_tensor_from_blob(t.untyped_storage().data_ptr(), n, sizes, strides,
                                                            t.storage_offset(), CODES[t.dtype], dev[0], dev[1],
                                                            ctypes.byref(h)), "create_tensor_from_blob")
        self.handles.append(h.value)
        self.keep.append(t)
        return h.value

    def to_torch(self, h: int):
        """A copy of a runtime-owned tensor with its sizes, strides and device."""
        dim, off, nbytes = I64(), I64(), I64()
        self.ok(self.lib.aoti_torch_get_dim(h, ctypes.byref(dim)), "get_dim")
        sp, stp = I64P(), I64P()
        self.ok(self.lib.aoti_torch_get_sizes(h, ctypes.byref(sp)), "get_sizes")
        self.ok(self.lib.aoti_torch_get_strides(h, ctypes.byref(stp)), "get_strides")
        self.ok(self.lib.aoti_torch_get_storage_offset(h, ctypes.byref(off)), "get_storage_offset")
        self.ok(self.lib.aoti_torch_get_storage_size(h, ctypes.byref(nbytes)), "get_storage_size")
        dt, devt = I32(), I32()
        self.ok(self.lib.aoti_torch_get_dtype(h, ctypes.byref(dt)), "get_dtype")
        self.ok(self.lib.aoti_torch_get_device_type(h, ctypes.byref(devt)), "get_device_type")
        ptr = H()
        self.ok(self.lib.aoti_torch_get_data_ptr(h, ctypes.byref(ptr)), "get_data_ptr")
        sizes, strides = [sp[i] for i in range(dim.value)], [stp[i] for i in range(dim.value)]
        dtype = DTYPES[dt.value]
        item = torch.empty((), dtype=dtype).element_size()
        base = (ptr.value or 0) - off.value * item
        if devt.value == 1:
            if nbytes.value == 0:
                raw = torch.empty(0, dtype=torch.uint8, device="cuda")
            else:
                class View:
                    __cuda_array_interface__ = {"shape": (nbytes.value,), "typestr": "|u1", "data": (base, False),
                                                "version": 3, "strides": None}

                raw = torch.as_tensor(View(), device="cuda").clone()
        else:
            raw = torch.frombuffer(bytearray(ctypes.string_at(base, nbytes.value)), dtype=torch.uint8) \
                if nbytes.value else torch.empty(0, dtype=torch.uint8)
        flat = raw.view(dtype) if raw.numel() else torch.empty(0, dtype=dtype, device=raw.device)
        return torch.as_strided(flat, sizes, strides, off.value)

    def __call__(self, name: str, *args):
        return self.launch(name, *args, fetch=True)

    def launch(self, name: str, *args, fetch: bool = False):
        """Calls the shim; with fetch, waits for the GPU and returns copies of the outputs, else only
        keeps the returned handles (for timing: no synchronisation, no copies)."""
        fn = getattr(self.lib, f"aoti_torch_cuda_{name}")
        fn.argtypes, cargs, rets = marshal(SIGS[name], args, self.from_torch, self.keep)
        self.ok(fn(*cargs), f"aoti_torch_cuda_{name}")
        if not fetch:
            self.handles.extend(cell.value for k, cell in rets if k == R and cell.value is not None)
            return None
        torch.cuda.synchronize()
        out = []
        for k, cell in rets:
            if k == RI:
                out.append(cell.value)
            elif cell.value is None:
                out.append(None)
            else:
                self.handles.append(cell.value)
                out.append(self.to_torch(cell.value))
        return out[0] if len(out) == 1 else tuple(out)


@pytest.fixture
def host():
    h = Host()
    yield h
    h.release()


@pytest.fixture(autouse=True)
def _no_tf32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def same(got, want, *, rtol: float = 0.0, atol: float = 0.0, values: bool = True, layout: bool = True) -> None:
    """ATen's dtype, sizes, strides and device, and its values within tolerance."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    assert got.device.type == want.device.type, (got.device, want.device)
    if layout and got.numel() > 1:
        assert got.stride() == want.stride(), (got.stride(), want.stride())
    if values:
        torch.testing.assert_close(got.cpu(), want.cpu(), rtol=rtol, atol=atol, equal_nan=True)


TOL = {torch.float32: (2e-5, 2e-5), torch.float64: (1e-12, 1e-12), torch.float16: (2e-3, 2e-3),
       torch.bfloat16: (1.6e-2, 1.6e-2)}
ATTN_TOL = {torch.float32: (1e-4, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}


def gen(seed: int = 0):
    return torch.Generator(device="cuda").manual_seed(seed)


def rand(shape, dtype, layout: str = "contiguous", g=None, *, unique: bool = False):
    """A CUDA tensor of `shape` in the given layout: contiguous, transposed (last two dims swapped in
    memory), or stepped (every other element along the last dim, with a storage offset)."""
    g = g or gen()
    n = math.prod(shape)
    if dtype.is_floating_point:
        base = (torch.randperm(max(n, 1) * 3, generator=g, device="cuda")[:n].double() / n - 1.5) if unique \
            else torch.randn(n, generator=g, device="cuda", dtype=torch.float64)
        base = base.reshape(shape).to(dtype)
    else:
        base = (torch.randperm(max(n, 1) * 3, generator=g, device="cuda")[:n] - n) if unique \
            else torch.randint(-20, 20, (n,), generator=g, device="cuda")
        base = base.reshape(shape).to(dtype)
    if layout == "contiguous" or len(shape) < 2:
        if layout == "stepped":
            buf = torch.zeros(2 * n + 3, dtype=dtype, device="cuda")
            v = buf[3::2][:n].reshape(shape) if n else buf[:0].reshape(shape)
            v.copy_(base)
            return v
        return base
    if layout == "transposed":
        t = base.transpose(-1, -2).contiguous().transpose(-1, -2)
        assert not t.is_contiguous()
        return t
    buf = torch.zeros(*shape[:-1], 2 * shape[-1] + 1, dtype=dtype, device="cuda")
    v = buf[..., 1::2]
    v.copy_(base)
    return v


LAYOUTS = ["contiguous", "transposed", "stepped"]


# --- attention -------------------------------------------------------------------------------------

def qkv(b, h, m, n, d, dv, dtype, layout, g):
    def one(s, e):
        if layout == "bmhd":  # as a plugin's q/k/v come out of a [B, S, H*D] projection
            return torch.randn(b, s, h, e, generator=g, device="cuda").to(dtype).transpose(1, 2)
        if layout == "transposed":  # head dim outermost in memory: cuBLAS takes these transposed
            return rand((b, h, s, e), dtype, "transposed", g)
        return rand((b, h, s, e), dtype, "contiguous", g)
    return one(m, d), one(n, d), one(n, dv)


EFF_CASES = [
    # b, h, m, n, d, dv, layout, bias, causal
    (2, 4, 20, 20, 16, 16, "bmhd", None, False),
    (2, 4, 20, 20, 16, 16, "bmhd", None, True),
    (2, 3, 33, 47, 64, 64, "contiguous", "full", False),
    (1, 2, 40, 24, 32, 48, "contiguous", None, True),  # M > N, top-left causal, Dv != D
    (2, 4, 20, 20, 64, 64, "bmhd", "padded", True),  # sdpa's mask padded to a multiple of 16, sliced
    (2, 4, 17, 31, 128, 128, "contiguous", "broadcast", False),
    (1, 1, 70, 70, 256, 256, "contiguous", "full", True),  # more than 48 KiB of shared memory
    # larger sizes (the automatic choice is the cuBLAS path from a quarter million scores, B * H * M * N, on)
    (2, 4, 300, 300, 64, 64, "bmhd", None, True),
    (2, 3, 257, 190, 64, 64, "contiguous", "full", False),
    (1, 2, 400, 200, 32, 48, "contiguous", None, True),  # M > N, top-left causal, Dv != D
    (2, 2, 200, 500, 64, 64, "bmhd", "broadcast", True),  # M < N: early rows see few keys
    (2, 2, 160, 130, 32, 32, "transposed", "padded", False),
    (1, 3, 129, 300, 128, 128, "bmhd", None, False),
    (2, 8, 1100, 1100, 64, 64, "bmhd", "padded", True),  # causal: blocks of rows, each over the keys it sees
    (2, 16, 1100, 1100, 64, 64, "contiguous", None, False),  # more than the 128 MiB scratch: blocks of rows
    (2, 16, 1100, 1100, 64, 64, "bmhd", None, False),
]

# AOTI_HOST_CUDA_ATTENTION: unset (chosen by size), the fused kernel, or the cuBLAS path
ATTN_PATHS = ["auto", "kernel", "gemm"]


def attention_path(monkeypatch, path: str) -> None:
    if path == "auto":
        monkeypatch.delenv("AOTI_HOST_CUDA_ATTENTION", raising=False)
    else:
        monkeypatch.setenv("AOTI_HOST_CUDA_ATTENTION", path)


def make_bias(kind, b, h, m, n, dtype, g):
    if kind is None:
        return None
    # rows padded to a multiple of 16 elements (the efficient kernel's alignment), as sdpa pads masks
    padded = (n + 15) // 16 * 16 + (16 if kind == "padded" else 0)
    if kind == "broadcast":  # [B, 1, 1, N] key padding, expanded as sdpa does
        return torch.randn(b, 1, 1, padded, generator=g, device="cuda").to(dtype)[..., :n].expand(b, h, m, n)
    return torch.randn(b, h, m, padded, generator=g, device="cuda").to(dtype)[..., :n]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", EFF_CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("lse", [True, False], ids=["lse", "nolse"])
@pytest.mark.parametrize("path", ATTN_PATHS)
def test_efficient_attention(host, monkeypatch, dtype, case, lse, path):
    b, h, m, n, d, dv, layout, bias_kind, causal = case
    attention_path(monkeypatch, path)
    g = gen(1)
    q, k, v = qkv(b, h, m, n, d, dv, dtype, layout, g)
    bias = make_bias(bias_kind, b, h, m, n, dtype, g)
    scale = 0.3 if bias_kind == "full" else None
    # ATen's kernel wants each row's head dim contiguous; its output layout does not depend on the inputs'
    want = torch.ops.aten._scaled_dot_product_efficient_attention(q.contiguous(), k.contiguous(), v.contiguous(),
                                                                   bias, lse, 0.0, causal, scale=scale)
    got = host("_scaled_dot_product_efficient_attention", q, k, v, bias, int(lse), 0.0, int(causal), scale)
    rtol, atol = ATTN_TOL[dtype]
    same(got[0], want[0], rtol=rtol, atol=atol)
    same(got[1], want[1], values=False)
    if lse:
        torch.testing.assert_close(got[1][..., :m], want[1][..., :m], rtol=1e-4, atol=1e-4)
    for gs, ws in zip(got[2:], want[2:], strict=True):  # philox seed and offset: 0-d int64, no dropout
        same(gs, ws, values=False)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", [(2, 4, 20, 20, 64, "bmhd", False), (2, 4, 20, 20, 64, "bmhd", True),
                                  (1, 3, 33, 33, 128, "contiguous", True), (2, 2, 16, 40, 32, "bmhd", True),
                                  (2, 2, 40, 24, 32, "contiguous", True), (1, 2, 24, 24, 256, "bmhd", False),
                                  (2, 4, 300, 300, 64, "bmhd", True), (2, 2, 200, 500, 128, "bmhd", True),
                                  (1, 2, 600, 300, 64, "contiguous", True),  # bottom-right: rows with no keys
                                  (4, 8, 700, 700, 64, "bmhd", False), (2, 8, 1100, 1100, 64, "bmhd", True)],
                         ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("path", ATTN_PATHS)
def test_flash_attention(host, monkeypatch, dtype, case, path):
    b, h, m, n, d, layout, causal = case
    attention_path(monkeypatch, path)
    q, k, v = qkv(b, h, m, n, d, d, dtype, layout, gen(2))
    want = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
    got = host("_scaled_dot_product_flash_attention", q, k, v, 0.0, int(causal), 0, None)
    rtol, atol = ATTN_TOL[dtype]
    same(got[0], want[0], rtol=rtol, atol=atol)
    same(got[1], want[1], rtol=1e-4, atol=1e-4)
    assert got[2] is None and got[3] is None  # cum_seq_q/k: undefined in ATen (dense batch)
    assert got[4:6] == tuple(want[4:6])
    for gs, ws in zip(got[6:8], want[6:8], strict=True):
        same(gs, ws, values=False)
    same(got[8], want[8], values=False)


@pytest.mark.parametrize("b,h,layout", [(1, 2200, "contiguous"), (2, 1100, "bmhd")])
def test_efficient_attention_many_heads(host, monkeypatch, b, h, layout):
    """More heads than one block of the cuBLAS path's 128 MiB scratch holds, even a row each: groups of entries
    (a strided batch over the B * H entries for a single batch; pointer arrays otherwise, as the output's
    [B, M, H, D] layout does not step uniformly over B * H), a group starting inside a batch."""
    attention_path(monkeypatch, "gemm")
    m, n, d = 3, 16384, 8
    q, k, v = qkv(b, h, m, n, d, d, torch.float32, layout, gen(4))
    want = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, False)
    got = host("_scaled_dot_product_efficient_attention", q, k, v, None, 1, 0.0, 0, None)
    same(got[0], want[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[1][..., :m], want[1][..., :m], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "bmhd"])
def test_efficient_attention_long_rows(host, monkeypatch, dtype, layout):
    """Rows of more scores than the cuBLAS path's softmax holds in registers (its two-pass kernel), with a bias
    broadcast over heads and rows; both ways of batching the products (one stride, pointer arrays)."""
    attention_path(monkeypatch, "gemm")
    b, h, m, n, d = 2, 2, 24, 40000, 32
    g = gen(5)
    q, k, v = qkv(b, h, m, n, d, d, dtype, layout, g)
    bias = make_bias("broadcast", b, h, m, n, dtype, g)
    want = torch.ops.aten._scaled_dot_product_efficient_attention(q.contiguous(), k.contiguous(), v.contiguous(),
                                                                   bias, True, 0.0, False)
    got = host("_scaled_dot_product_efficient_attention", q, k, v, bias, 1, 0.0, 0, None)
    rtol, atol = ATTN_TOL[dtype]
    same(got[0], want[0], rtol=rtol, atol=atol)
    torch.testing.assert_close(got[1][..., :m], want[1][..., :m], rtol=1e-4, atol=1e-4)


def test_attention_path_setting_is_checked(host, monkeypatch):
    monkeypatch.setenv("AOTI_HOST_CUDA_ATTENTION", "fast")
    q, k, v = qkv(1, 2, 8, 8, 16, 16, torch.float32, "contiguous", gen(3))
    with pytest.raises(ShimError, match="AOTI_HOST_CUDA_ATTENTION"):
        host("_scaled_dot_product_efficient_attention", q, k, v, None, 1, 0.0, 0, None)


def test_attention_refuses_dropout_and_bad_shapes(host):
    q, k, v = qkv(1, 2, 8, 8, 36, 36, torch.float16, "contiguous", gen(3))
    with pytest.raises(RuntimeError, match="multiple of 8"):  # ATen refuses it too
        torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False)
    with pytest.raises(ShimError, match="multiple of 8"):
        host("_scaled_dot_product_flash_attention", q, k, v, 0.0, 0, 0, None)
    q, k, v = qkv(1, 2, 8, 8, 16, 16, torch.float32, "contiguous", gen(3))
    with pytest.raises(ShimError, match="dropout_p"):
        host("_scaled_dot_product_efficient_attention", q, k, v, None, 1, 0.1, 0, None)
    with pytest.raises(ShimError, match="do not fit"):
        host("_scaled_dot_product_efficient_attention", q, k[:, :1], v, None, 1, 0.0, 0, None)
    with pytest.raises(ShimError, match="does not broadcast"):
        host("_scaled_dot_product_efficient_attention", q, k, v, torch.zeros(3, 8, device="cuda"), 1, 0.0, 0, None)


# --- transposed convolution ------------------------------------------------------------------------

CONV_T = [
    # input sizes, c_out per group, kernel, stride, padding, output_padding, dilation, groups, bias
    ((2, 4, 9), 3, (3,), (2,), (1,), (1,), (1,), 1, True),
    ((2, 4, 9, 7), 6, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 1, True),
    ((1, 6, 5, 6), 2, (3, 3), (2, 1), (1, 0), (1, 0), (1, 2), 3, False),
    ((1, 4, 3, 4, 5), 2, (3, 2, 3), (2, 2, 1), (1, 0, 1), (0, 1, 0), (1, 1, 1), 2, True),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("case", CONV_T, ids=lambda c: "x".join(map(str, c[0])))
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "stepped"])
def test_transposed_convolution(host, dtype, case, layout):
    sizes, cpg, kernel, stride, padding, out_pad, dil, groups, with_bias = case
    g = gen(4)
    x = rand(sizes, dtype, "stepped" if layout == "stepped" else "contiguous", g)
    w = rand((sizes[1], cpg, *kernel), dtype, "contiguous", g)
    if layout == "channels_last" and len(sizes) == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    bias = rand((cpg * groups,), dtype, "contiguous", g) if with_bias else None
    want = torch.ops.aten.convolution(x, w, bias, stride, padding, dil, True, out_pad, groups)
    got = host("convolution", x, w, bias, list(stride), list(padding), list(dil), 1, list(out_pad), groups)
    rtol, atol = (1e-4, 1e-4) if dtype == torch.float32 else (5e-3, 5e-3)
    same(got, want, rtol=rtol, atol=atol, layout=layout != "stepped")


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("k", [3, 1])  # a 1x1 kernel's contiguous weight is also channels-last strided
def test_convolution_still_matches(host, layout, groups, k):
    g = gen(12)
    x = rand((2, 4, 16, 12), torch.float32, "contiguous", g)
    w = rand((6, 4 // groups, k, k), torch.float32, "contiguous", g)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    bias = rand((6,), torch.float32, "contiguous", g)
    want = torch.ops.aten.convolution(x, w, bias, [2, 2], [1, 1], [1, 1], False, [0, 0], groups)
    got = host("convolution", x, w, bias, [2, 2], [1, 1], [1, 1], 0, [0, 0], groups)
    same(got, want, rtol=1e-4, atol=1e-4)


# --- sort / topk -----------------------------------------------------------------------------------

SORT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32]


@pytest.mark.parametrize("dtype", SORT_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim,descending", [(-1, False), (-1, True), (0, True), (1, False)])
def test_sort_stable(host, dtype, layout, dim, descending):
    x = rand((5, 300, 7), dtype, layout, gen(5))
    if dtype.is_floating_point:
        x[0, 3, :] = float("nan")
    want = torch.sort(x, dim=dim, descending=descending, stable=True)
    got = host("sort_stable", x, 1, dim, int(descending))
    same(got[0], want.values)
    same(got[1], want.indices)
    got_unstable = host("sort", x, dim, int(descending))
    same(got_unstable[0], want.values)
    same(got_unstable[1].to(torch.int64), want.indices, values=False)
    assert torch.equal(torch.gather(x, dim, got_unstable[1]).cpu().float().nan_to_num(7.5),
                       want.values.cpu().float().nan_to_num(7.5))


@pytest.mark.parametrize("dtype", SORT_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k,dim,largest", [(5, -1, True), (1, 0, False), (40, 1, True), (0, -1, True)])
def test_topk(host, dtype, layout, k, dim, largest):
    x = rand((4, 50, 9), dtype, layout, gen(6), unique=True)
    want = torch.topk(x, k, dim=dim, largest=largest, sorted=True)
    got = host("topk", x, k, dim, int(largest), 1)
    same(got[0], want.values)
    if dtype in (torch.float16, torch.bfloat16):  # rounding can make values equal: indices of ties may differ
        same(got[1], want.indices, values=False)
        assert torch.equal(torch.gather(x, dim, got[1]), want.values)
    else:
        same(got[1], want.indices)  # unique values: the indices are determined


def test_topk_k_out_of_range(host):
    with pytest.raises(ShimError, match="out of range"):
        host("topk", torch.randn(3, 4, device="cuda"), 5, 1, 1, 1)


# --- scans -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype,out_dtype", [(torch.float32, None), (torch.float64, None), (torch.float16, None),
                                             (torch.bfloat16, None), (torch.int32, None), (torch.int64, None),
                                             (torch.float32, torch.float64), (torch.int32, torch.float32)],
                         ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [0, -1])
def test_cumsum_cumprod(host, op, dtype, out_dtype, layout, dim):
    x = rand((6, 37), dtype, layout, gen(7))
    if op == "cumprod":
        x = (x.double().abs() / 20 + 0.6).to(dtype) if dtype.is_floating_point else (x.abs() % 3 + 1).to(dtype)
    want = getattr(torch, op)(x, dim, dtype=out_dtype)
    got = host(op, x, dim, None if out_dtype is None else CODES[out_dtype])
    rtol, atol = TOL.get(want.dtype, (0, 0))
    if want.dtype in (torch.float16, torch.bfloat16):
        rtol, atol = rtol * 4, atol * 4  # ATen's parallel scan rounds partial sums differently
    same(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("dtype", SORT_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cummax_cummin(host, op, dtype, layout):
    x = rand((5, 33), dtype, layout, gen(8), unique=True)
    want = getattr(torch, op)(x, 1)
    got = host(op, x, 1)
    same(got[0], want.values)
    same(got[1], want.indices)


# --- embedding bag ---------------------------------------------------------------------------------

EB_CASES = [
    # mode, per-sample weights, include_last_offset, padding_idx, index dtype, offsets dtype
    (0, False, False, -1, torch.int64, torch.int64),
    (0, True, False, -1, torch.int64, torch.int64),
    (1, False, False, 3, torch.int64, torch.int64),
    (2, False, False, -1, torch.int64, torch.int64),
    (0, False, True, -1, torch.int32, torch.int32),
    (1, False, True, 5, torch.int32, torch.int64),
    (2, False, True, 2, torch.int32, torch.int32),
]


@pytest.mark.parametrize("case", EB_CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("weight_layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("forward_only", [False, True])
def test_embedding_bag(host, case, dtype, weight_layout, forward_only):
    mode, with_psw, last, pad, idt, odt = case
    g = gen(9)
    w = rand((20, 12), dtype, weight_layout, g)
    idx = torch.randint(0, 20, (17,), generator=g, device="cuda").to(idt)
    offsets = torch.tensor([0, 3, 3, 9, 12] + ([17] if last else []), device="cuda").to(odt)  # bag 1 empty
    psw = rand((17,), dtype, "contiguous", g) if with_psw else None
    op = "_embedding_bag_forward_only" if forward_only else "_embedding_bag"
    want = getattr(torch.ops.aten, op)(w, idx, offsets, False, mode, False, psw, last, pad)
    got = host(op, w, idx, offsets, 0, mode, 0, psw, int(last), pad)
    rtol, atol = TOL[dtype]
    same(got[0], want[0], rtol=rtol, atol=atol)
    same(got[1], want[1])
    bags = want[0].shape[0]
    same(got[2], want[2], values=False)
    assert torch.equal(got[2][:bags].cpu(), want[2][:bags].cpu())
    same(got[3], want[3], values=mode == 2)


def test_embedding_bag_bad_index(host):
    w = torch.randn(5, 4, device="cuda")
    with pytest.raises(ShimError, match="out of range"):
        host("_embedding_bag", w, torch.tensor([0, 7], device="cuda"), torch.tensor([0], device="cuda"),
             0, 0, 0, None, 0, -1)


# --- scatter ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.float16], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scatter_reduce(host, reduce, include_self, dtype, layout):
    g = gen(10)
    self_ = rand((6, 8), dtype, layout, g)
    src = rand((9, 7), dtype, layout, g)
    if reduce == "prod":
        self_ = (self_.double().abs() % 2 + 0.5).to(dtype)
        src = (src.double().abs() % 2 + 0.5).to(dtype)
    index = torch.randint(0, 6, (7, 5), generator=g, device="cuda")
    want = torch.scatter_reduce(self_, 0, index, src[:7, :5], reduce, include_self=include_self)
    out = torch.full_like(self_, 99)
    host("scatter_reduce_two_out", out, self_, 0, index, src[:7, :5], reduce, int(include_self))
    rtol, atol = TOL.get(dtype, (0, 0))
    torch.testing.assert_close(out, want, rtol=rtol * 4, atol=atol * 4)
    inplace = self_.clone()
    host("scatter_reduce_two_out", inplace, inplace, 0, index, src[:7, :5], reduce, int(include_self))
    torch.testing.assert_close(inplace, want, rtol=rtol * 4, atol=atol * 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_src_and_value(host, dtype, dim):
    g = gen(11)
    self_ = rand((6, 8), dtype, "transposed", g)
    src = rand((6, 8), dtype, "contiguous", g)
    # a permutation along dim: every target written once, so the result is determined
    index = torch.argsort(torch.rand(6, 8, generator=g, device="cuda"), dim=dim)
    out = torch.empty_like(self_)
    host("scatter_src_out", out, self_, dim, index, src)
    torch.testing.assert_close(out, torch.scatter(self_, dim, index, src))
    host("scatter_value_out", out, self_, dim, index[:3, :3], 2.5)
    torch.testing.assert_close(out, torch.scatter(self_, dim, index[:3, :3], 2.5))


def test_scatter_bad_index(host):
    x = torch.zeros(4, 3, device="cuda")
    with pytest.raises(ShimError, match="out of range"):
        host("scatter_reduce_two_out", x, x, 0, torch.tensor([[9, 0, 1]], device="cuda"),
             torch.ones(1, 3, device="cuda"), "sum", 1)


# --- searchsorted / bucketize ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("right,side", [(False, None), (True, None), (False, "right"), (False, "left")])
@pytest.mark.parametrize("rows", [False, True], ids=["1d", "rows"])
@pytest.mark.parametrize("with_sorter", [False, True], ids=["plain", "sorter"])
def test_searchsorted(host, dtype, right, side, rows, with_sorter):
    g = gen(13)
    raw = rand((3, 17) if rows else (17,), dtype, "contiguous", g)
    raw[..., 4] = raw[..., 5]  # a repeated boundary: left and right differ there
    if with_sorter:
        seq, sorter = raw, torch.argsort(raw, dim=-1, stable=True)
    else:
        seq, sorter = torch.sort(raw, dim=-1).values, None
    values = rand((3, 9) if rows else (4, 9), dtype, "transposed", g)
    values[..., 0] = seq.flatten()[6]  # exactly on a boundary
    want = torch.searchsorted(seq, values, right=right, side=side, sorter=sorter)
    got = host("searchsorted_Tensor", seq, values, 0, int(right), side, sorter)
    same(got, want)
    got32 = host("searchsorted_Tensor", seq, values, 1, int(right), side, sorter)
    same(got32, torch.searchsorted(seq, values, out_int32=True, right=right, side=side, sorter=sorter))


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_bucketize(host, right, layout):
    g = gen(14)
    boundaries = torch.linspace(-2, 2, 9, device="cuda")
    x = rand((5, 12), torch.float32, layout, g)
    x[0, :3] = boundaries[2:5]
    same(host("bucketize_Tensor", x, boundaries, 0, int(right)), torch.bucketize(x, boundaries, right=right))
    same(host("bucketize_Tensor", x, boundaries, 1, int(right)),
         torch.bucketize(x, boundaries, out_int32=True, right=right))


def test_searchsorted_refuses_bad_sorter(host):
    seq = torch.arange(5.0, device="cuda")
    with pytest.raises(ShimError, match="out of range"):
        host("searchsorted_Tensor", seq, torch.tensor([2.5], device="cuda"), 0, 0, None,
             torch.tensor([0, 1, 9, 3, 4], device="cuda"))


def test_searchsorted_scalar(host):
    g = gen(18)
    for dtype in (torch.float32, torch.float16, torch.int64):
        seq = torch.sort(rand((17,), dtype, "contiguous", g)).values
        values = [0.25, 0.1, float(seq[5]), -100.0, 100.0] + ([2.5, 3.0] if dtype == torch.int64 else [])
        for value in values:
            for right in (False, True):
                for out_int32 in (False, True):
                    got = host("searchsorted_Scalar", seq, value, int(out_int32), int(right), None, None)
                    same(got, torch.searchsorted(seq, value, out_int32=out_int32, right=right))
        sorter = torch.randperm(17, generator=g, device="cuda")
        unsorted = seq[torch.argsort(sorter)]  # unsorted[sorter] == seq
        got = host("searchsorted_Scalar", unsorted, 0.1, 0, 0, "right", sorter)
        same(got, torch.searchsorted(unsorted, 0.1, side="right", sorter=sorter))


# --- histc / repeat_interleave ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_histc(host, dtype, layout):
    x = rand((7, 11), dtype, layout, gen(15))
    x[0, 0] = 3.0  # the upper edge lands in the last bin
    x[1, 1] = -1.0  # exactly on an edge
    for bins, lo, hi in [(10, -3.0, 3.0), (7, -1.0, 0.5), (5, 0.0, 0.0), (1, -10.0, 10.0)]:
        same(host("histc", x, bins, lo, hi), torch.histc(x, bins=bins, min=lo, max=hi))
    big = rand((300, 333), dtype, layout, gen(16))  # many blocks: atomics and the data's range
    same(host("histc", big, 64, 0.0, 0.0), torch.histc(big, bins=64))
    same(host("histc", torch.full((4,), 2.0, dtype=dtype, device="cuda"), 3, 0.0, 0.0),
         torch.histc(torch.full((4,), 2.0, dtype=dtype, device="cuda"), bins=3))  # one value: [v - 1, v + 1]


def test_histc_refuses_bad_arguments(host):
    x = torch.randn(10, device="cuda")
    with pytest.raises(ShimError, match="less than min"):
        host("histc", x, 5, 1.0, 0.0)
    with pytest.raises(ShimError, match="bins"):
        host("histc", x, 0, 0.0, 1.0)
    x[3] = float("nan")
    with pytest.raises(ShimError, match="not finite"):
        host("histc", x, 5, 0.0, 0.0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=str)
def test_repeat_interleave(host, dtype):
    r = torch.tensor([2, 0, 3, 1], dtype=dtype, device="cuda")
    same(host("repeat_interleave_Tensor", r, None), torch.repeat_interleave(r))
    same(host("repeat_interleave_Tensor", r[::2], 5), torch.repeat_interleave(r[::2], output_size=5))
    big = torch.randint(0, 4, (5000,), generator=gen(17), device="cuda").to(dtype)
    same(host("repeat_interleave_Tensor", big, None), torch.repeat_interleave(big))
    same(host("repeat_interleave_Tensor", r[:0], None), torch.repeat_interleave(r[:0]))
    with pytest.raises(ShimError, match="negative"):
        host("repeat_interleave_Tensor", torch.tensor([1, -2, 3], dtype=dtype, device="cuda"), None)
    with pytest.raises(ShimError, match="output_size"):
        host("repeat_interleave_Tensor", r, 5)


# --- nonzero / masked_select -----------------------------------------------------------------------

def nonzero_input(shape, dtype, layout, g):
    """A tensor of `dtype` in `layout` with about half its elements zero (and for floating dtypes a -0.0,
    which is zero, and a NaN, which is not)."""
    base = torch.bool if dtype == torch.bool else dtype
    x = rand(shape, torch.float64 if base == torch.bool else base, layout, g)
    if dtype == torch.bool:
        out = torch.zeros_like(x, dtype=torch.bool)
        out.copy_(x > 0)
        return out
    if dtype == torch.uint8:
        return x.clamp(min=0).to(torch.uint8)
    x.masked_fill_(x.double() <= 0.3, 0)
    if dtype.is_floating_point:
        x[(0,) * (len(shape) - 1) + (1,)] = -0.0
        x[(0,) * (len(shape) - 1) + (2,)] = float("nan")
    return x


NZ_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8,
             torch.bool]


@pytest.mark.parametrize("dtype", NZ_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_nonzero(host, dtype, layout):
    g = gen(19)
    for shape in [(5, 6), (3, 1000), (4, 70, 5)]:  # the larger ones span many blocks of 256 elements
        x = nonzero_input(shape, dtype, layout, g)
        same(host("nonzero", x), torch.nonzero(x))
    empty = torch.zeros(3, 0, 2, device="cuda", dtype=dtype)
    same(host("nonzero", empty), torch.nonzero(empty))
    for v in (0, 1):
        scalar = torch.tensor(v, device="cuda").to(dtype)
        same(host("nonzero", scalar), torch.nonzero(scalar))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool, torch.float64], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_masked_select(host, dtype, layout):
    g = gen(20)
    for shape in [(5, 6), (3, 1000)]:
        x = nonzero_input(shape, dtype, layout, g)
        mask = rand(shape, torch.float64, layout, g) > 0
        same(host("masked_select", x, mask), torch.masked_select(x, mask))
        row = rand(shape[-1:], torch.float64, "contiguous", g) > 0  # broadcast over rows
        same(host("masked_select", x, row), torch.masked_select(x, row))
        col = rand((shape[0], 1), torch.float64, "contiguous", g) > 0  # mask broadcast the other way
        same(host("masked_select", x[:1], col), torch.masked_select(x[:1], col))
    with pytest.raises(ShimError, match="bool mask"):
        host("masked_select", x, mask.int())


# --- index_put / index_reduce ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int32], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(host, dtype, layout, accumulate):
    g = gen(21)
    dev = "cuda"
    self_ = rand((5, 4, 3), dtype, layout, g)
    i0 = torch.tensor([0, 2, 4, 2] if accumulate else [0, 2, 4, 1], device=dev)  # repeats only when adding
    i2 = torch.tensor([1, 0, 2, 2], device=dev)
    mask = torch.tensor([True, False, True, True, False], device=dev)
    mask2d = torch.rand(5, 4, generator=g, device=dev) > 0.5
    cases = [
        ([i0], rand((4, 4, 3), dtype, "contiguous", g)),  # leading index
        ([None, torch.tensor([3, -3], device=dev)], rand((3,), dtype, "contiguous", g)),  # middle, negative, broadcast
        ([i0, None, i2], rand((4, 4), dtype, "transposed", g)),  # non-adjacent: broadcast dims first
        ([mask], rand((1, 3), dtype, "contiguous", g)),  # a boolean mask
        ([mask2d], rand((3,), dtype, "contiguous", g)),  # a 2-d boolean mask covering two dimensions
        ([i0[:, None], torch.tensor([0, 3], device=dev)], rand((4, 2, 3), dtype, "contiguous", g)),  # broadcast
        ([i0.int()], rand((4, 4, 3), dtype, "stepped", g)),  # int32 index, strided values
    ]
    rtol, atol = TOL[dtype] if dtype.is_floating_point else (0, 0)
    for indices, values in cases:
        got = host("index_put", self_, indices, values, int(accumulate))
        want = torch.ops.aten.index_put(self_, indices, values, accumulate)
        same(got, want, rtol=rtol, atol=atol)


def test_index_put_bad_index(host):
    x = torch.zeros(4, 3, device="cuda")
    with pytest.raises(ShimError, match="out of bounds"):
        host("index_put", x, [torch.tensor([1, 7], device="cuda")], torch.ones(3, device="cuda"), 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [False, True])
def test_index_reduce(host, dtype, layout, reduce, include_self):
    g = gen(22)
    self_ = rand((5, 4), dtype, layout, g)
    index = torch.tensor([0, 4, 0, 2, 4, 4], device="cuda")
    source = rand((6, 4), dtype, layout, g)
    rtol, atol = TOL[dtype] if dtype.is_floating_point else (0, 0)
    got = host("index_reduce", self_, 0, index, source, reduce, int(include_self))
    same(got, self_.index_reduce(0, index, source, reduce, include_self=include_self), rtol=rtol, atol=atol)
    src1 = rand((5, 4), dtype, layout, g)
    idx1 = index[:5] % 5
    got = host("index_reduce", self_.t(), 1, idx1, src1.t(), reduce, int(include_self))
    same(got, self_.t().index_reduce(1, idx1, src1.t(), reduce, include_self=include_self), rtol=rtol, atol=atol)


def test_index_reduce_refuses_bad_arguments(host):
    x = torch.zeros(4, 3, device="cuda")
    with pytest.raises(ShimError, match="not one of prod, mean, amax, amin"):
        host("index_reduce", x, 0, torch.tensor([1], device="cuda"), torch.ones(1, 3, device="cuda"), "sum", 1)
    with pytest.raises(ShimError, match="source has sizes"):
        host("index_reduce", x, 0, torch.tensor([1], device="cuda"), torch.ones(2, 3, device="cuda"), "prod", 1)
    with pytest.raises(ShimError, match="out of range"):
        host("index_reduce", x, 0, torch.tensor([9], device="cuda"), torch.ones(1, 3, device="cuda"), "amax", 1)


# --- pooling ---------------------------------------------------------------------------------------

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
POOL_LAYOUTS = ["contiguous", "channels_last", "stepped"]


def pool_input(shape, dtype, layout, g):
    if layout == "channels_last":
        return rand(shape, dtype, "contiguous", g).contiguous(memory_format=torch.channels_last)
    return rand(shape, dtype, layout, g)


@pytest.mark.parametrize("dtype", [*FLOATS, torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("layout", POOL_LAYOUTS)
@pytest.mark.parametrize(("k", "s", "p", "d", "ceil"), [([3], [2], [1], [1], False),
                                                       ([3, 2], [2, 1], [1, 0], [2, 1], True), ([2], [], [0], [1], False)])
def test_max_pool2d_with_indices(host, dtype, layout, k, s, p, d, ceil):
    x = pool_input((2, 3, 11, 10), dtype, layout, gen(30))
    if dtype.is_floating_point:
        x[0, 1, 4, 4] = float("nan")
    v, i = host("max_pool2d_with_indices", x, k, s, p, d, int(ceil))
    if dtype.is_floating_point:
        ev, ei = torch.ops.aten.max_pool2d_with_indices(x, k, s, p, d, ceil)
        same(v, ev)
        same(i, ei)
        return
    # ATen's CUDA kernel takes floating dtypes only: integer values against its CPU kernel, the layout
    # against its CUDA kernel's for the same input as float32 (integer windows have ties, where ATen's
    # first-or-last choice of index is its own, so indices are checked to point at the maximum)
    ev, _ = torch.ops.aten.max_pool2d_with_indices(x.cpu(), k, s, p, d, ceil)
    same(v.cpu(), ev, layout=False)
    fv, fi = torch.ops.aten.max_pool2d_with_indices(x.float(), k, s, p, d, ceil)
    assert v.stride() == fv.stride() and i.stride() == fi.stride(), (v.stride(), fv.stride(), i.stride(), fi.stride())
    planes = x.flatten(2)
    picked = planes.gather(2, i.flatten(2).to(torch.int64)).view_as(v)
    same(picked, v, layout=False)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", POOL_LAYOUTS)
@pytest.mark.parametrize("out_size", [[3, 5], [4, 4], [11, 1]])
def test_adaptive_pools(host, dtype, layout, out_size):
    x = pool_input((2, 3, 11, 10), dtype, layout, gen(31))
    v, i = host("adaptive_max_pool2d", x, out_size)
    ev, ei = torch.ops.aten.adaptive_max_pool2d(x, out_size)
    same(v, ev)
    same(i, ei)
    rtol, atol = TOL[dtype]
    same(host("_adaptive_avg_pool2d", x, out_size), torch.ops.aten._adaptive_avg_pool2d(x, out_size),
         rtol=rtol, atol=atol)
    x3 = rand((3, 9, 7), dtype, "contiguous", gen(32))
    same(host("_adaptive_avg_pool2d", x3, out_size), torch.ops.aten._adaptive_avg_pool2d(x3, out_size),
         rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("out_size", [[2, 3, 3], [7, 1, 5]])
def test_adaptive_pools_3d(host, dtype, out_size):
    x = rand((2, 3, 7, 9, 8), dtype, "stepped", gen(37))
    v, i = host("adaptive_max_pool3d", x, out_size)
    ev, ei = torch.ops.aten.adaptive_max_pool3d(x, out_size)
    same(v, ev)
    same(i, ei)
    rtol, atol = TOL[dtype]
    same(host("_adaptive_avg_pool3d", x, out_size), torch.ops.aten._adaptive_avg_pool3d(x, out_size), rtol=rtol,
         atol=atol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", POOL_LAYOUTS)
@pytest.mark.parametrize(("k", "s", "p", "ceil", "include", "div"),
                         [([3], [2], [1], False, True, None), ([3, 2], [2, 3], [1, 1], True, False, None),
                          ([2], [], [0], False, True, 3)])
def test_avg_pool(host, dtype, layout, k, s, p, ceil, include, div):
    rtol, atol = TOL[dtype]
    x = pool_input((2, 3, 11, 10), dtype, layout, gen(33))
    same(host("avg_pool2d", x, k, s, p, int(ceil), int(include), div),
         torch.ops.aten.avg_pool2d(x, k, s, p, ceil, include, div), rtol=rtol, atol=atol)
    x5 = rand((2, 3, 5, 8, 7), dtype, "stepped" if layout == "stepped" else "contiguous", gen(34))
    k3, s3, p3 = (k * 3)[:3], (s * 3)[:3], (p * 3)[:3]
    same(host("avg_pool3d", x5, k3, s3, p3, int(ceil), int(include), div),
         torch.ops.aten.avg_pool3d(x5, k3, s3, p3, ceil, include, div), rtol=rtol, atol=atol)


def test_pools_refuse_bad_arguments(host):
    x = torch.randn(2, 3, 8, 8, device="cuda")
    with pytest.raises(ShimError, match="at most half of kernel_size"):
        host("max_pool2d_with_indices", x, [2], [1], [2], [1], 0)
    with pytest.raises(ShimError, match="must be positive"):
        host("avg_pool2d", x, [0], [1], [0], 0, 1, None)
    with pytest.raises(ShimError, match="divisor_override"):
        host("avg_pool2d", x, [2], [1], [0], 0, 1, 0)
    with pytest.raises(ShimError, match="dimensions"):
        host("_adaptive_avg_pool2d", torch.randn(8, device="cuda"), [2, 2])
    with pytest.raises(ShimError, match="dtype"):
        host("avg_pool2d", x.to(torch.int32), [2], [1], [0], 0, 1, None)


# --- addmm: the bias-epilogue path (cublasLt) and the general one ----------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("bias", ["row", "row2d", "expanded", "full", "stepped_row"])
@pytest.mark.parametrize(("m", "k", "n", "beta", "alpha"),
                         [(8, 64, 64, 1.0, 1.0), (33, 70, 17, 1.0, 0.5), (1, 5, 1, 1.0, 1.0), (7, 1, 3, 1.0, 1.0),
                          (16, 32, 24, 0.5, 1.0), (5, 9, 6, 0.0, 2.0)])
def test_addmm(host, dtype, layout, bias, m, k, n, beta, alpha):
    """beta * bias + alpha * a @ b into a contiguous out: a bias row with beta 1 goes through one cublasLt
    matmul with a bias epilogue (as ATen's gemm_and_bias), everything else through the copy + gemm path."""
    g = gen(37)
    # a transposed view of a matrix with a unit dim is still contiguous (rand() insists it is not)
    a = rand((m, k), dtype, layout if min(m, k) > 1 else "contiguous", g)
    b = rand((k, n), dtype, layout if min(k, n) > 1 else "contiguous", g)
    s = {"row": lambda: rand((n,), dtype, "contiguous", g), "row2d": lambda: rand((1, n), dtype, "contiguous", g),
         "expanded": lambda: rand((n,), dtype, "contiguous", g).expand(m, n),
         "full": lambda: rand((m, n), dtype, layout if min(m, n) > 1 else "contiguous", g), "stepped_row": lambda: rand((n,), dtype, "stepped", g)}[bias]()
    out = torch.empty(m, n, dtype=dtype, device="cuda")
    host("addmm_out", out, s, a, b, beta, alpha)
    torch.cuda.synchronize()
    want = (beta * s.double() + alpha * (a.double() @ b.double())).to(dtype) if beta else \
        (alpha * (a.double() @ b.double())).to(dtype)
    rtol, atol = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 4e-3), torch.bfloat16: (1.6e-2, 3e-2)}[dtype]
    torch.testing.assert_close(out.cpu(), want.cpu(), rtol=rtol, atol=atol * max(1, k ** 0.5))
    # the same call into an out that cuBLAS cannot write in place (transposed): the general path
    out_t = torch.empty(n, m, dtype=dtype, device="cuda").t()
    host("addmm_out", out_t, s, a, b, beta, alpha)
    torch.cuda.synchronize()
    torch.testing.assert_close(out_t.cpu(), want.cpu(), rtol=rtol, atol=atol * max(1, k ** 0.5))


# --- int8 matrix products --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("m", "k", "n"), [(5, 32, 12), (33, 70, 17)])
def test_weight_int8pack_mm(host, dtype, layout, m, k, n):
    g = gen(35)
    x = rand((m, k), dtype, layout, g)
    w = torch.randint(-128, 128, (n, k), generator=g, device="cuda").to(torch.int8)
    scales = (torch.rand(n, generator=g, device="cuda") * 0.02 + 0.001).to(dtype)
    want = ((x.double() @ w.double().t()) * scales.double()).to(dtype)
    rtol, atol = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}[dtype]
    same(host("_weight_int8pack_mm", x, w, scales), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("m", "k", "n"), [(32, 24, 40), (17, 0, 9), (65, 129, 33)])
def test_int_mm(host, layout, m, k, n):
    g = gen(36)
    a = rand((m, k), torch.int8, layout, g) if k else torch.zeros(m, 0, dtype=torch.int8, device="cuda")
    b = rand((k, n), torch.int8, layout, g) if k else torch.zeros(0, n, dtype=torch.int8, device="cuda")
    out = rand((m, n), torch.int32, layout, g)
    host("_int_mm_out", out, a, b)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.cpu(), (a.cpu().long() @ b.cpu().long()).int())


def test_int8_products_refuse_bad_arguments(host):
    a = torch.zeros(4, 8, dtype=torch.int8, device="cuda")
    with pytest.raises(ShimError, match="expected self"):
        host("_int_mm_out", torch.zeros(4, 4, dtype=torch.int32, device="cuda"), a, a)
    with pytest.raises(ShimError, match="dtype"):
        host("_int_mm_out", torch.zeros(4, 4, dtype=torch.int64, device="cuda"), a, a.t().contiguous())
    with pytest.raises(ShimError, match="scales"):
        host("_weight_int8pack_mm", torch.randn(2, 8, device="cuda"), a, torch.ones(3, device="cuda"))


# --- FFTs and complex views --------------------------------------------------------------------------

def compile_time_layout(op, *args):
    """The strides a plugin expects: ATen's kernel's on an input of the same sizes and strides whose data is
    aligned as complex (torch's meta function, which the compiler records, does not model the kernel's copy
    of an unaligned real input; torch 2.11's meta functions mis-stride multi-dim transforms, fixed by 2.13)."""
    aligned = [torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device).copy_(a)
               if isinstance(a, torch.Tensor) else a for a in args]
    return op(*aligned).stride()


FFT_CASES = [  # input sizes, dims (as a plugin passes them), onesided
    ((4, 12, 5), [2], True), ((4, 12, 5), [1], True), ((3, 8, 7), [2, 1], True), ((3, 8, 7), [0, 2], False),
    ((2, 400), [1], True), ((6, 9, 16), [1, 2], True), ((5,), [0], False), ((3, 7, 6), [0, 1, 2], True),
    ((3, 7, 6), [0, 1], True), ((2, 3, 4, 6), [0, 1, 2, 3], True), ((2, 3, 4, 6), [1, 2, 3, 0], False),
    ((6, 1031), [1], True),  # a prime length (cuFFT's Bluestein path)
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "stepped"])
@pytest.mark.parametrize(("shape", "dims", "onesided"), FFT_CASES)
@pytest.mark.parametrize("norm", [0, 1, 2])
def test_fft_r2c(host, dtype, layout, shape, dims, onesided, norm):
    x = rand(shape, dtype, layout if len(shape) > 1 else "contiguous", gen(40))
    got = host("_fft_r2c", x, dims, norm, int(onesided))
    want = torch.ops.aten._fft_r2c(x, dims, norm, onesided)
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    # the layout against compile_time_layout (eager's differs for a stepped input not aligned as complex)
    same(got, want, rtol=tol, atol=tol * max(1, math.prod(shape[d] for d in dims)) ** 0.5, layout=False)
    assert got.stride() == compile_time_layout(torch.ops.aten._fft_r2c, x, dims, norm, onesided)


def test_fft_r2c_of_unaligned_input_has_the_compile_time_layout(host):
    # data 4 bytes past an 8-byte boundary: ATen's kernel copies it first (its result's layout then follows the
    # copy), the meta function does not; the plugin reads the result with the meta function's strides
    assert torch.randn(7, device="cuda")[1:].data_ptr() % 8 == 4
    x = torch.randn(6 * 40 + 1, device="cuda")[1:].view(40, 6).t()
    got = host("_fft_r2c", x, [1], 0, 1)
    assert got.stride() == compile_time_layout(torch.ops.aten._fft_r2c, x, [1], 0, True)
    torch.testing.assert_close(got.cpu(), torch.ops.aten._fft_r2c(x, [1], 0, True).cpu(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize(("shape", "dims"), [((4, 12, 5), [1]), ((3, 8, 7), [2, 0]), ((6, 10), [0, 1]), ((7,), [0]),
                                             ((2, 3, 4, 5), [3, 1, 0, 2]), ((5, 6), [])])
@pytest.mark.parametrize("forward", [True, False])
@pytest.mark.parametrize("norm", [0, 2])
def test_fft_c2c(host, dtype, shape, dims, forward, norm):
    g = gen(41)
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    x = torch.complex(torch.randn(shape, generator=g, device="cuda", dtype=real),
                      torch.randn(shape, generator=g, device="cuda", dtype=real))
    if len(shape) > 1:
        x = x.transpose(0, 1).contiguous().transpose(0, 1)  # a transposed layout: the output follows its strides
    got = host("_fft_c2c", x, dims, norm, int(forward))
    want = torch.ops.aten._fft_c2c(x, dims, norm, forward)
    tol = 1e-4 if dtype == torch.complex64 else 1e-10
    same(got, want, rtol=tol, atol=tol * max(1, math.prod(shape[d] for d in dims)) ** 0.5)
    assert got.stride() == compile_time_layout(torch.ops.aten._fft_c2c, x, dims, norm, forward)


def test_fft_layouts_match_aten_on_random_cases(host):
    """Random ranks, dim subsets and orders, and memory layouts (permuted, and with a size-2 or size-1 dim, where
    the one-sided half is the whole): every output has ATen's sizes, strides and values."""
    import random

    rng = random.Random(45)
    bad: list[str] = []
    for case in range(150):
        nd = rng.randint(1, 4)
        shape = [rng.choice([1, 2, 3, 4, 5, 6, 8]) for _ in range(nd)]
        perm = list(range(nd))
        rng.shuffle(perm)
        x = torch.randn([shape[p] for p in perm], device="cuda", dtype=torch.float64).permute(
            [perm.index(d) for d in range(nd)])
        dims = rng.sample(range(nd), rng.randint(1, nd))
        onesided, norm = rng.random() < 0.7, rng.randint(0, 2)
        what = f"case {case}: sizes {tuple(x.shape)} strides {x.stride()} dims {dims} onesided {onesided}"
        c = torch.complex(x, x.flip(0))
        for op, arg in (("_fft_r2c", x), ("_fft_c2c", c)):
            got = host(op, arg, dims, norm, int(onesided))
            want = getattr(torch.ops.aten, op)(arg, dims, norm, onesided)
            same(got, want, rtol=1e-10, atol=1e-10, layout=False)
            # the stride of a size-1 dim addresses nothing; where strides tie, ATen's kernel orders such a dim
            # by its unstable std::partition, the meta function (what plugins record) and the runtime stably
            strided = [(g, w) for g, w, n in zip(got.stride(), want.stride(), got.shape, strict=True) if n > 1]
            if any(g != w for g, w in strided):
                bad.append(f"{op} {what}: strides {got.stride()}, ATen's {want.stride()}")
    assert not bad, "\n".join(bad)


def test_fft_refuses_bad_arguments(host):
    x = torch.randn(4, 6, device="cuda")
    for args, message in [((x, [], 0, 1), "dim is empty"), ((x, [2], 0, 1), "out of range"),
                          ((x, [1, 1], 0, 1), "repeats"), ((x, [1], 5, 1), "fft_norm_mode"),
                          ((x.to(torch.int32), [1], 0, 1), "float32 or float64"),
                          ((x.half(), [1], 0, 1), "half-precision"),
                          ((torch.randn(4, 0, device="cuda"), [1], 0, 1), "at least one point")]:
        with pytest.raises(ShimError, match=message):
            host("_fft_r2c", *args)
    with pytest.raises(ShimError, match="complex64 or complex128"):
        host("_fft_c2c", x, [1], 0, 1)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.float32], ids=str)
def test_abs_and_angle(host, dtype):
    g = gen(42)
    x = torch.randn(5, 6, generator=g, device="cuda", dtype=torch.float64)
    if dtype.is_complex:
        x = torch.complex(x, torch.randn(5, 6, generator=g, device="cuda", dtype=torch.float64))
    x = x.to(dtype)
    x[0, 0] = x[0, 0] * 0  # a zero, and a negative real with a +0 imaginary part
    x[1, 1] = -2.0
    xt = x.t()
    for op in ("abs", "angle"):
        got, want = host(op, xt), getattr(torch, op)(xt)
        torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-6, atol=1e-6)
        # torch's fake tensors give the layout the plugin reads with (eager's complex angle returns contiguous,
        # its meta kernel keeps self's layout)
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode() as mode:
            recorded = getattr(torch, op)(mode.from_tensor(xt)).stride()
        assert got.dtype == want.dtype and got.stride() == recorded, (op, got.stride(), recorded)


def test_permute_and_complex_views(host):
    base = torch.randn(3, 4, 2, 6, device="cuda")[..., 1:5:2]  # [3, 4, 2, 2], stepped
    c = torch.view_as_complex(base[..., 0, :].contiguous())  # [3, 4] complex64
    same(host("permute", base, [2, 0, 3, 1]), base.permute(2, 0, 3, 1))
    same(host("view_as_real", c.t()), torch.view_as_real(c.t()))
    same(host("view_as_complex", torch.view_as_real(c)), c)
    with pytest.raises(ShimError, match="last dimension of size 2"):
        host("view_as_complex", base[..., 0])
    with pytest.raises(ShimError, match="complex"):
        host("view_as_real", base)


CONVERT = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
           torch.float64, torch.complex64]


@pytest.mark.parametrize("src_dt", CONVERT, ids=str)
@pytest.mark.parametrize("dst_dt", CONVERT, ids=str)
def test_copy_converts_dtypes(host, src_dt, dst_dt):
    """aoti_torch_copy_ between dtypes (a plugin's casts around fallbacks, e.g. real into complex buffers), on
    the device and across host and device, strided and broadcast, against torch's copy_."""
    import warnings

    g = gen(44)
    base = torch.rand(4, 6, generator=g, device="cuda", dtype=torch.float64) * 100  # in every dtype's range
    base[0, 0], base[1, 2] = 0.0, 1.0
    src = torch.complex(base, base.flip(0)).to(src_dt) if src_dt.is_complex else base.to(src_dt)
    lib = host.lib
    lib.aoti_torch_copy_.argtypes = [H, H, I32]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "casting complex values to real discards the imaginary part"
        for s_dev, d_dev, s_view in [("cuda", "cuda", src.t()), ("cpu", "cuda", src.t()), ("cuda", "cpu", src.t()),
                                     ("cuda", "cuda", src[1])]:  # the last broadcasts a row over the rows
            s_t = s_view.to(s_dev)
            dst = torch.zeros(s_view.shape if s_view.dim() == 2 else (3, s_view.shape[0]), dtype=dst_dt, device=d_dev)
            dst = dst.t().contiguous().t() if dst.dim() == 2 and d_dev == "cuda" else dst  # a strided target
            host.ok(lib.aoti_torch_copy_(host.from_torch(dst), host.from_torch(s_t), 0), "aoti_torch_copy_")
            torch.cuda.synchronize()
            want = torch.zeros_like(dst).copy_(s_t)
            torch.testing.assert_close(dst.cpu(), want.cpu(), rtol=0, atol=0, equal_nan=True,
                                       msg=f"{s_dev} {src_dt} -> {d_dev} {dst_dt}")
