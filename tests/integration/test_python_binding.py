"""The Python module's per-call path (runtime/python/fastrun.c, docs/python-runtime.md): zero-copy inputs and
outputs, outputs owned through their capsule (alive after the program is closed), the GIL released during a
run, threads on one program giving the serial results; the ctypes path (AOTI_HOST_PYTHON_FAST=0, or no
extension built) giving the same results."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from toolchain.errors import InputError


@pytest.fixture(scope="module")
def runtime_lib(host_build):
    from toolchain import runtime

    lib = runtime.library(host_build.lib)
    assert lib.fast_run is not None, "the SCons build did not give the compiled per-call path next to the library"
    return lib


@pytest.fixture(scope="module")
def alias_mm(torch, tmp_path_factory):
    """A model whose first output is a view of its first input (inductor hands the input's memory back) and
    whose second is a 768x768 matmul (tens of ms: long enough to watch another Python thread during it)."""
    from tests.conftest import BUILD_DIR
    from toolchain.export import export

    class AliasMM(torch.nn.Module):
        def forward(self, x, y):
            return x[1:], torch.relu(y @ y)

    inputs = (torch.randn(4, 8), torch.randn(768, 768) / 30)
    pt2 = export(AliasMM(), inputs, tmp_path_factory.mktemp("alias-mm") / "alias_mm.pt2", build_dir=BUILD_DIR)
    return pt2, inputs


def _load(runtime_lib, pt2, **kw):
    from toolchain import runtime

    return runtime.load(pt2, library_path=runtime_lib.path, **kw)


def _handle_data_ptr(runtime_lib, arr: np.ndarray) -> int:
    """The data pointer of the runtime tensor that `arr`'s base capsule owns."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    handle = get(arr.base, b"aoti_host.tensor")
    data = ctypes.c_void_p()
    assert runtime_lib.lib.aoti_torch_get_data_ptr(handle, ctypes.byref(data)) == 0
    return data.value or 0


def test_outputs_are_the_runtime_buffers_and_inputs_are_not_copied(runtime_lib, alias_mm):
    pt2, (x, y) = alias_mm
    prog = _load(runtime_lib, pt2)
    assert prog._fast is not None
    xn, yn = x.numpy(), y.numpy()
    view, mm = prog.run([xn, yn])
    np.testing.assert_allclose(mm, np.maximum(yn @ yn, 0), rtol=1e-4, atol=1e-4)
    # the matmul's output: the array's memory is the runtime tensor's, owned through the base capsule
    assert mm.__array_interface__["data"][0] == _handle_data_ptr(runtime_lib, mm)
    # the view output points into the input array itself: nothing copied on the way in nor out
    assert view.__array_interface__["data"][0] == xn.__array_interface__["data"][0] + xn.strides[0]
    np.testing.assert_array_equal(view, xn[1:])
    # torch tensors in (DLPack) are read in place too
    view_t, _ = prog.run([x, y], output_type="torch")
    assert view_t.data_ptr() == x.data_ptr() + x.stride(0) * 4


def test_outputs_outlive_the_program(runtime_lib, export_example):
    pt2, module, inputs = export_example("two_outputs")
    xs = [t.numpy() for t in inputs]
    want = [t.detach().numpy() for t in module(*inputs)]
    for fast in (True, False):
        prog = _load(runtime_lib, pt2)
        if not fast:
            prog._fast = prog._plain = None  # the ctypes path: the same ownership through its own owner object
        outs = prog.run(xs)
        prog.close()
        del prog
        gc.collect()
        for got, w in zip(outs, want, strict=True):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
            got += 1  # writable memory of its own
        del outs
        gc.collect()


def test_threads_on_one_program_equal_serial_runs(runtime_lib, export_example):
    pt2, _, inputs = export_example("two_outputs")
    prog = _load(runtime_lib, pt2)
    rng = np.random.default_rng(1)
    cases = [[rng.standard_normal(t.shape).astype(np.float32) for t in inputs] for _ in range(16)]
    serial = [prog.run(c) for c in cases]
    errors: list[str] = []

    def work(k: int) -> None:
        for r in range(300):
            i = (r * 7 + k) % len(cases)
            got = prog.run(cases[i])
            if not all(np.array_equal(a, b) for a, b in zip(got, serial[i], strict=True)):
                errors.append(f"thread {k} case {i}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_gil_is_released_during_a_run(runtime_lib, alias_mm):
    pt2, (x, y) = alias_mm
    prog = _load(runtime_lib, pt2)
    xn, yn = x.numpy(), y.numpy()
    prog.run([xn, yn])
    ticks: list[float] = []
    stop = threading.Event()

    def counter() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())

    runs = []
    t = threading.Thread(target=counter)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)  # the GIL changes hands quickly around the call: only the call's own gap stays
    t.start()
    try:
        for _ in range(7):
            start = time.perf_counter()
            prog.run([xn, yn])
            runs.append((start, time.perf_counter()))
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(interval)
    # With the GIL held through the C call no Python bytecode of another thread runs inside it: the counter's
    # ticks leave a gap as long as the call. Released, they fill the run (gaps of a scheduler slice at most).
    # Measured on the loaded 2-core machine: released, the largest gap is 0.13-0.25 of a run; held, 0.4-0.8
    # with the default switch interval (the GIL's hand-over around the call adds ticks outside it).
    worst = []
    for s, e in runs:
        points = [s, *(tick for tick in ticks if s < tick < e), e]
        worst.append(max(b - a for a, b in zip(points[:-1], points[1:], strict=True)) / (e - s))
    assert sorted(worst)[len(worst) // 2] < 0.5, (f"another Python thread made no progress through a run: the "
                                                  f"largest gap between its ticks is {[round(w, 2) for w in worst]} of each run's "
                                                  f"{[round(e - s, 3) for s, e in runs]} s")


def test_fast_and_ctypes_paths_agree_and_refuse_alike(runtime_lib, export_example):
    pt2, module, inputs = export_example("two_outputs")
    prog = _load(runtime_lib, pt2)
    xs = [t.numpy() for t in inputs]
    fast = prog.run(xs)
    strided = [np.asfortranarray(a) for a in xs]  # another layout: the runtime converts it
    fast_strided = prog.run(strided)
    keep = prog._fast, prog._plain
    prog._fast = prog._plain = None  # the ctypes path
    try:
        slow = prog.run(xs)
        slow_strided = prog.run(strided)
    finally:
        prog._fast, prog._plain = keep
    for a, b, c, d in zip(fast, slow, fast_strided, slow_strided, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(a, d)
    with pytest.raises(InputError, match=r"dtype float64, the model was exported for float32"):
        prog.run([xs[0].astype(np.float64), xs[1]])
    with pytest.raises(InputError, match="takes 2 input"):
        prog.run(xs[:1])
    with pytest.raises(InputError, match="num_models"):
        _load(runtime_lib, pt2, num_models=0)


_ENV_RUN = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from toolchain import runtime
lib = runtime.library({lib!r})
xs = [np.load(p) for p in {inputs!r}]
with runtime.load({pt2!r}, library_path={lib!r}) as prog:
    print("fast" if lib.fast_run is not None and prog._fast is not None else "ctypes")
    outs = prog.run(xs) + prog.run([np.asfortranarray(a) for a in xs])
np.savez({out!r}, *outs)
"""


def test_python_fast_env_off_gives_the_fast_paths_results(runtime_lib, export_example, tmp_path):
    """AOTI_HOST_PYTHON_FAST=0, as a user sets it (the environment of a fresh process, which the module reads
    when it binds the library), takes the ctypes path, and its outputs are the compiled path's, bit for bit."""
    from tests.conftest import REPO_ROOT

    pt2, _module, inputs = export_example("two_outputs")
    paths = []
    for i, t in enumerate(inputs):
        paths.append(str(tmp_path / f"x{i}.npy"))
        np.save(paths[-1], t.numpy())
    outs, paths_taken = {}, {}
    for setting in ("default", "0"):
        env = {k: v for k, v in os.environ.items() if k != "AOTI_HOST_PYTHON_FAST"}
        if setting == "0":
            env["AOTI_HOST_PYTHON_FAST"] = "0"
        out = tmp_path / f"{setting}.npz"
        code = _ENV_RUN.format(root=str(REPO_ROOT), lib=str(runtime_lib.path), inputs=paths, pt2=str(pt2),
                               out=str(out))
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        paths_taken[setting] = proc.stdout.split()[-1]
        with np.load(out) as z:
            outs[setting] = [z[k] for k in sorted(z.files, key=lambda k: int(k.split("_")[1]))]
    assert paths_taken == {"default": "fast", "0": "ctypes"}, paths_taken
    assert len(outs["default"]) == 4, len(outs["default"])  # two outputs, of two runs each
    for a, b in zip(outs["default"], outs["0"], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        np.testing.assert_array_equal(a, b)


def test_dlpack_export_is_a_view_that_keeps_its_owner(runtime_lib, torch):
    """to_dlpack (what DeviceArray.__dlpack__ hands torch.from_dlpack, cupy, JAX for device outputs) views the
    memory without a copy, in the given layout, and holds its owner until the consumer's tensor goes; exercised
    here on host memory (device type kDLCPU), the same code as for kDLCUDA."""
    fast = runtime_lib.fast
    base = np.arange(24, dtype=np.float32).reshape(4, 6)

    class Owner:
        alive = 0

        def __init__(self) -> None:
            Owner.alive += 1

        def __del__(self) -> None:
            Owner.alive -= 1

    owner = Owner()
    view = base[:, 1::2]  # a strided view: shape (4, 3), element strides (6, 2)
    cap = fast.to_dlpack(owner, view.ctypes.data, (4, 3), (6, 2), np.dtype(np.float32), 1, 0)
    del owner
    assert Owner.alive == 1, "the capsule holds its owner"
    t = torch.from_dlpack(cap)
    del cap
    assert t.shape == (4, 3) and t.stride() == (6, 2) and t.dtype == torch.float32
    np.testing.assert_array_equal(t.numpy(), view)
    base[0, 1] = -1.0
    assert t[0, 0].item() == -1.0, "a view, not a copy"
    assert Owner.alive == 1
    del t
    gc.collect()
    assert Owner.alive == 0, "the consumer's tensor released the owner"
    # an unconsumed capsule releases its owner too; bad arguments are refused, nothing leaks
    owner = Owner()
    cap = fast.to_dlpack(owner, base.ctypes.data, (4, 6), (6, 1), np.dtype(np.float32), 1, 0)
    del owner, cap
    gc.collect()
    assert Owner.alive == 0
    with pytest.raises(ValueError, match="tuples"):
        fast.to_dlpack(Owner(), base.ctypes.data, (4, 6), (6,), np.dtype(np.float32), 1, 0)
    with pytest.raises(TypeError, match="no DLPack dtype"):
        fast.to_dlpack(Owner(), base.ctypes.data, (4,), (1,), np.dtype("U1"), 1, 0)
    gc.collect()
    assert Owner.alive == 0


def test_the_common_call_and_the_general_one_agree(runtime_lib, export_example):
    """run(inputs) takes a shorter way into the compiled path than a call naming its method, session or
    output type: the same outputs; a wrong number of inputs and a closed program are refused the same way."""
    pt2, module, inputs = export_example("two_outputs")
    prog = _load(runtime_lib, pt2)
    assert prog._plain is not None
    xs = [t.numpy() for t in inputs]
    for a, b in zip(prog.run(xs), prog.run(xs, method=prog.methods[0]), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(InputError, match=r"input\(s\), got"):
        prog.run([*xs, xs[0]])
    prog.synchronize()  # a no-op on the CPU, through the same tuple
    prog.close()
    assert prog._plain is None and prog._plain_sync is None
    with pytest.raises(Exception, match="closed"):
        prog.run(xs)
