"""bfloat16 and float16 models, exported by plain torch, in and out of every front end: aoti-run and
`aoti-toolchain run` with .npy files (float16 native '<f2'; bfloat16 as ml_dtypes writes it, '<V2'), and the
Python module with torch tensors, numpy arrays (ml_dtypes.bfloat16) and other DLPack producers. Each matches
torch's eager result; malformed bfloat16 files are refused naming the file and the fix."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import BUILD_DIR
from tests.models_corpus import fallback_shims, half_conv_mlp
from toolchain import runtime
from toolchain.errors import InputError, exit_code

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed (pip install -e .)")
pytestmark = pytest.mark.slow

BAD_INPUT = exit_code("bad_input")
BF16 = np.dtype(ml_dtypes.bfloat16)
# (rtol, atol) against eager in the same dtype: eager rounds every op's result to the dtype, the plugin fuses
# and keeps float in between, so they differ by a few units in the last place of the output dtype.
TOL = {"bfloat16": (1e-2, 1e-2), "float16": (2e-3, 2e-3)}


@pytest.fixture(scope="module")
def models(torch, tmp_path_factory):
    """dtype -> (pt2, module, inputs, eager outputs as torch tensors); each exported once."""
    from toolchain.export import export

    root = tmp_path_factory.mktemp("half")
    out = {}
    for dtype in TOL:
        module, inputs = half_conv_mlp(dtype)
        pt2 = export(module, inputs, root / f"convmlp_{dtype}.pt2", build_dir=BUILD_DIR)
        with torch.no_grad():
            expected = module(*inputs)
        out[dtype] = (pt2, module, inputs, expected)
    return out


def as_f32(a) -> np.ndarray:
    """float32 values of a numpy array (ml_dtypes bfloat16 included) or a torch tensor."""
    if hasattr(a, "detach"):
        return a.detach().float().numpy()
    return np.asarray(a).astype(np.float32)


def check_close(got, expected, dtype, what):
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(as_f32(got), as_f32(expected), rtol=rtol, atol=atol, err_msg=what)


class Producer:
    """A DLPack producer that is not a torch tensor nor a numpy array: exports `inner`'s capsule."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __dlpack__(self, **kwargs):
        return self.inner.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


class LegacyProducer(Producer):
    """A producer from before DLPack 1.0: no max_version keyword, an unversioned 'dltensor' capsule."""

    def __dlpack__(self, stream=None):
        return self.inner.__dlpack__(stream=stream)


@pytest.mark.parametrize("dtype", list(TOL))
def test_fallbacks_are_called_in_the_dtype(models, dtype):
    pt2, *_ = models[dtype]
    shims = fallback_shims(pt2)
    assert "aoti_torch_cpu_convolution" in shims and "aoti_torch_cpu_addmm_out" in shims, shims


@pytest.mark.parametrize("dtype", list(TOL))
def test_python_module_takes_torch_numpy_and_dlpack(torch, host_build, models, dtype):
    pt2, _, (x,), expected = models[dtype]
    want_np = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    with runtime.load(pt2, library_path=host_build.lib) as prog:
        assert prog.inputs[0].dtype == want_np and prog.outputs[0].dtype == want_np
        # a torch tensor in, numpy out (bfloat16 as ml_dtypes.bfloat16)
        (got,) = prog.run([x])
        assert isinstance(got, np.ndarray) and got.dtype == want_np and got.shape == tuple(expected.shape)
        check_close(got, expected, dtype, "torch in, numpy out")
        # torch out: the dtype torch gave in, bit for bit the numpy result
        (got_t,) = prog.run([x], output_type="torch")
        assert isinstance(got_t, torch.Tensor) and got_t.dtype == expected.dtype
        assert torch.equal(got_t, runtime.to_torch(got))
        # numpy in (ml_dtypes for bfloat16): same bits, same result
        xn = runtime.to_numpy(x)
        assert xn.dtype == want_np
        np.testing.assert_array_equal(xn.view(np.uint16), x.view(torch.int16).numpy().view(np.uint16))
        (got_n,) = prog.run([xn])
        np.testing.assert_array_equal(got_n.view(np.uint16), got.view(np.uint16))
        # other DLPack producers, versioned and legacy capsules, and a strided (transposed) view
        for producer in (Producer(x), LegacyProducer(x), Producer(x.transpose(2, 3).contiguous().transpose(2, 3))):
            (got_d,) = prog.run([producer])
            np.testing.assert_array_equal(got_d.view(np.uint16), got.view(np.uint16))
        # a session runs the same way and takes output_type too
        with prog.session() as s:
            (got_s,) = s.run([x], output_type="torch")
            assert torch.equal(got_s, got_t)


@pytest.mark.parametrize("dtype", list(TOL))
def test_transformer_layer_with_a_causal_mask(torch, host_build, tmp_path, dtype):
    """Attention in the dtype: the plugin calls the CPU flash-attention, mm and addmm fallbacks with bf16/fp16
    operands (they convert and accumulate in float) and matches eager within the dtype's tolerance."""
    from toolchain.export import export

    torch.manual_seed(0)
    dt = getattr(torch, dtype)

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)

        def forward(self, x, mask):
            return self.layer(x, src_mask=mask)

    module = Encoder().to(dt).eval()
    inputs = (torch.randn(2, 5, 32).to(dt), torch.nn.Transformer.generate_square_subsequent_mask(5).to(dt))
    pt2 = export(module, inputs, tmp_path / f"encoder_{dtype}.pt2", build_dir=BUILD_DIR)
    shims = fallback_shims(pt2)
    assert {"aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu", "aoti_torch_cpu_mm_out"} <= set(shims)
    with torch.no_grad():
        expected = module(*inputs)
    with runtime.load(pt2, library_path=host_build.lib) as prog:
        (got,) = prog.run(list(inputs), output_type="torch")
    assert got.dtype == dt
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(as_f32(got), as_f32(expected), rtol=rtol, atol=2 * atol)


def test_python_module_refuses_what_it_cannot_read(torch, host_build, models):
    pt2, _, (x,), _ = models["bfloat16"]
    with runtime.load(pt2, library_path=host_build.lib) as prog:
        with pytest.raises(InputError, match=r"dtype \|V2 is not supported"):  # raw void is not bfloat16
            prog.run([np.zeros(x.shape, "V2")])
        with pytest.raises(InputError, match="input 0: cannot export it through DLPack") as info:
            prog.run([x.clone().requires_grad_(True)])  # torch refuses to export it
        assert "detach" in str(info.value.fix)
        with pytest.raises(InputError, match=r"input 0: DLPack dtype \(code 5, 64 bits"):
            prog.run([torch.zeros(x.shape, dtype=torch.complex64)])
        # the contract checks the dtype a DLPack producer gives, like any other input
        with pytest.raises(InputError, match="input 0 .*dtype float16, the model was exported for bfloat16"):
            prog.run([x.half()])


def _save_bf16_or_f16(path, tensor):
    np.save(path, runtime.to_numpy(tensor))  # bfloat16: ml_dtypes writes descr '<V2'


def _descr(path) -> str:
    import ast

    with open(path, "rb") as f:
        f.seek(8)
        n = int.from_bytes(f.read(2), "little")
        return ast.literal_eval(f.read(n).decode("latin1"))["descr"]


@pytest.mark.parametrize("dtype", list(TOL))
def test_aoti_run_reads_and_writes_the_dtype(host_build, models, tmp_path, dtype):
    pt2, _, (x,), expected = models[dtype]
    src = tmp_path / "x.npy"
    _save_bf16_or_f16(src, x)
    want_descr = "<V2" if dtype == "bfloat16" else "<f2"
    assert _descr(src) == want_descr  # what numpy.save (with ml_dtypes) writes: the form the readers accept
    proc = subprocess.run([str(host_build.aoti_run), str(pt2), "-i", str(src), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"output_0: {dtype}[2, 10]" in proc.stdout
    out = tmp_path / "out" / "output_0.npy"
    assert _descr(out) == want_descr
    got = np.load(out)
    if dtype == "bfloat16":  # numpy reads '<V2' as raw void: the documented view gives bfloat16
        assert got.dtype == np.dtype("V2")
        got = got.view(ml_dtypes.bfloat16)
    check_close(got, expected, dtype, "aoti-run")


@pytest.mark.parametrize("dtype", list(TOL))
def test_toolchain_run_compares_in_the_dtype(host_build, models, tmp_path, dtype):
    pt2, _, (x,), expected = models[dtype]
    _save_bf16_or_f16(tmp_path / "x.npy", x)
    _save_bf16_or_f16(tmp_path / "ref.npy", expected)
    rtol, atol = TOL[dtype]
    cmd = [sys.executable, "-m", "toolchain", "run", "--library", str(host_build.lib), str(pt2),
           "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out"), "--compare", str(tmp_path / "ref.npy"),
           "--rtol", str(rtol), "--atol", str(atol)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"output_0: {dtype}[2, 10]" in proc.stdout and "(ok)" in proc.stdout
    # the output file is the same as aoti-run's: the same descr, readable back as the dtype
    assert _descr(tmp_path / "out" / "output_0.npy") == ("<V2" if dtype == "bfloat16" else "<f2")
    # a reference off by more than the tolerance is a mismatch, not a pass
    bad = expected.clone()
    bad[0, 0] += 1
    _save_bf16_or_f16(tmp_path / "bad.npy", bad)
    cmd[cmd.index(str(tmp_path / "ref.npy"))] = str(tmp_path / "bad.npy")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == exit_code("compare_failed"), proc.stdout + proc.stderr
    assert "MISMATCH" in proc.stdout + proc.stderr


def _npy(header: str, body: bytes) -> bytes:
    text = header.encode()
    total = ((10 + len(text) + 1 + 63) // 64) * 64 - 10
    text += b" " * (total - len(text) - 1) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + body


MALFORMED = {
    # raw 2-byte void (what re-saving np.load's result without the view gives): refused, the fix names the view
    "void.npy": ("{'descr': '|V2', 'fortran_order': False, 'shape': (2, 3, 6, 6), }", 216,
                 ["'|V2'", "arr.view(ml_dtypes.bfloat16)"]),
    "bigendian.npy": ("{'descr': '>V2', 'fortran_order': False, 'shape': (2, 3, 6, 6), }", 216,
                      ["'>V2'", "ml_dtypes.bfloat16"]),
    "void4.npy": ("{'descr': '<V4', 'fortran_order': False, 'shape': (2, 3, 6, 6), }", 432, ["'<V4'", "raw bytes"]),
    "short.npy": ("{'descr': '<V2', 'fortran_order': False, 'shape': (2, 3, 6, 6), }", 215, ["truncated"]),
    "long.npy": ("{'descr': '<V2', 'fortran_order': False, 'shape': (2, 3, 6, 6), }", 217, ["bytes after"]),
    "structured.npy": ("{'descr': [('a', '<V2')], 'fortran_order': False, 'shape': (2, 3, 6, 6), }", 216,
                       ["structured"]),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
@pytest.mark.parametrize("cli", ["aoti-run", "aoti-toolchain run"])
def test_malformed_bf16_npy_is_refused(host_build, models, tmp_path, name, cli):
    pt2 = models["bfloat16"][0]
    header, n_halves, needles = MALFORMED[name]
    path = tmp_path / name
    path.write_bytes(_npy(header, bytes(range(256)) * (n_halves * 2 // 256) + bytes(n_halves * 2 % 256)))
    if cli == "aoti-run":
        cmd = [str(host_build.aoti_run)]
    else:
        cmd = [sys.executable, "-m", "toolchain", "run", "--library", str(host_build.lib)]
    proc = subprocess.run([*cmd, str(pt2), "-i", str(path), "-o", str(tmp_path / "out")], capture_output=True,
                          text=True)
    if cli == "aoti-toolchain run" and name == "structured.npy":
        # numpy reads a structured array; the runtime then refuses its dtype, naming it
        needles = ["input 0", "not supported"]
    assert proc.returncode == BAD_INPUT, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    if not (cli == "aoti-toolchain run" and name == "structured.npy"):
        assert name in proc.stderr, proc.stderr
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)
    assert not (tmp_path / "out" / "output_0.npy").exists()
