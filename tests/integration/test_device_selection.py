"""Choosing the device a program runs on, where no GPU is needed: device names parsed by one rule in aoti-run
(a usage error), the C API (AOTI_HOST_INVALID_ARGUMENT), the Python module and serve (InputError), each naming
the device and the fix; a CUDA device refused by a runtime built without CUDA, and by the CUDA build on a host
where no GPU is visible (when that build is here); serve's one-GPU-per-replica rule.

The refusals that need a GPU (cuda:N beyond the devices a host has) are in tests/gpu/test_multi_gpu.py."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from tests.conftest import BUILD_DIR
from toolchain.errors import InputError, LoadError
from toolchain.runtime.device import parse_device

MALFORMED = ["cuda:-1", "cuda:x", "cuda:99999999999", "gpu:0", "cuda:", "cuda:01", "cuda:+1", " cuda:0", "CUDA",
             "cuda:0 ", "tpu", ""]
FIX = "use cpu, cuda (cuda:0) or cuda:N with N a device index"
# the CUDA variant of this checkout, when it is built here (scons cuda=on; CI builds it in test_build_cuda.py)
CUDA_LIB = BUILD_DIR / "cuda-gcc-release" / "dist" / "lib" / "libaoti_host.so"
CUDA_RUN = BUILD_DIR / "cuda-gcc-release" / "dist" / "bin" / "aoti-run"


# ------------------------------------------------------------------------------------------------ the names

@pytest.mark.parametrize(("text", "index"), [("cpu", None), ("cuda", 0), ("cuda:0", 0), ("cuda:1", 1),
                                             ("cuda:63", 63), ("cuda:2147483647", 2**31 - 1)])
def test_well_formed_names(text, index):
    d = parse_device(text)
    assert d.index == index and d.cuda == (index is not None)
    assert d.name == ("cpu" if index is None else f"cuda:{index}")


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_names_are_refused_with_the_fix(text):
    with pytest.raises(InputError) as info:
        parse_device(text)
    assert f'device "{text}"' in str(info.value) and FIX in str(info.value)


def test_a_device_that_is_not_a_string_is_refused():
    with pytest.raises(InputError, match="give the device as a string"):
        parse_device(1)


# ------------------------------------------------------------------------------------------------ aoti-run

@pytest.mark.parametrize("text", MALFORMED)
def test_aoti_run_refuses_a_malformed_device_as_a_usage_error(host_build, mlp, tmp_path, text):
    pt2, x = mlp
    p = subprocess.run([str(host_build.aoti_run), str(pt2), f"--device={text}", "-i", str(x), "-o",
                        str(tmp_path / "o")], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    line = p.stderr.splitlines()[0]
    assert line.startswith(f'aoti-run: --device: device "{text}": ') and ("use cpu, cuda" in line or "out of range"
                                                                         in line), line
    assert not (tmp_path / "o").exists()


def test_aoti_run_cuda_n_on_a_cpu_build_says_to_build_with_cuda(host_build, mlp, tmp_path):
    pt2, x = mlp
    p = subprocess.run([str(host_build.aoti_run), str(pt2), "--device", "cuda:1", "-i", str(x), "-o",
                        str(tmp_path / "o")], capture_output=True, text=True)
    assert p.returncode == 4, p.stderr
    assert 'device "cuda:1": this runtime was built without CUDA (scons cuda=on)' in p.stderr


# ------------------------------------------------------------------------------------------------ the C API

def _c_load(lib, path, device: bytes | None) -> tuple[int, str]:
    from toolchain.runtime import _abi

    opts = _abi.LoadOptions(None, device, 1, 0)
    handle = ctypes.c_void_p()
    rc = lib.lib.aoti_host_program_load(os.fsencode(path), ctypes.byref(opts), ctypes.byref(handle))
    if rc == 0:
        lib.lib.aoti_host_program_free(handle)
    return rc, lib.lib.aoti_host_last_error().decode()


@pytest.mark.parametrize("text", ["cuda:-1", "cuda:x", "cuda:99999999999", "gpu:0", "cuda:01"])
def test_c_api_refuses_a_malformed_device_as_an_invalid_argument(host_lib, mlp, text):
    """The C API's own parser (not the Python one): the same words, AOTI_HOST_INVALID_ARGUMENT (1), before the
    package is read."""
    from toolchain import runtime

    lib = runtime.library(host_lib)
    rc, why = _c_load(lib, mlp[0], text.encode())
    assert rc == 1, why
    with pytest.raises(InputError) as info:
        parse_device(text)
    assert why.startswith(str(info.value).split("\n")[0])  # the Python message's words, then the fix
    assert FIX in why or "out of range" in why
    # refused before the file is read: a path that does not exist gets the same answer
    assert _c_load(lib, mlp[0].parent / "missing.pt2", text.encode()) == (rc, why)


def test_c_api_cuda_on_a_cpu_build_is_not_supported(host_lib, mlp):
    from toolchain import runtime

    lib = runtime.library(host_lib)
    for device in (b"cuda", b"cuda:0", b"cuda:1"):
        rc, why = _c_load(lib, mlp[0], device)
        assert rc == 6 and "built without CUDA" in why and "scons cuda=on" in why, (device, rc, why)
    rc, why = _c_load(lib, mlp[0], None)  # NULL: the cpu
    assert rc == 0, why


def test_c_api_per_method_stream_calls_on_a_cpu_program(host_lib, mlp):
    """A cpu program has no method stream (NOT_SUPPORTED, naming the fix), synchronising one method is a no-op,
    and a method index out of range is an invalid argument for both."""
    from toolchain import runtime
    from toolchain.runtime import _abi

    lib = runtime.library(host_lib).lib
    opts = _abi.LoadOptions(None, None, 1, 0)
    handle = ctypes.c_void_p()
    assert lib.aoti_host_program_load(os.fsencode(mlp[0]), ctypes.byref(opts), ctypes.byref(handle)) == 0
    try:
        stream = ctypes.c_void_p()
        assert lib.aoti_host_program_method_synchronize(handle, 0) == 0
        rc = lib.aoti_host_program_method_cuda_stream(handle, 0, ctypes.byref(stream))
        assert rc == 6 and "scons cuda=on" in lib.aoti_host_last_error().decode()
        assert lib.aoti_host_program_method_synchronize(handle, 1) == 1
        assert "method index 1 out of range (1 methods)" in lib.aoti_host_last_error().decode()
        assert lib.aoti_host_program_method_synchronize(None, 0) == 1
    finally:
        lib.aoti_host_program_free(handle)


# ------------------------------------------------------------------------------------------------ Python

def test_python_load_refuses_malformed_devices_before_the_runtime(host_lib, mlp):
    from toolchain import runtime

    for text in MALFORMED:
        with pytest.raises(InputError, match=FIX.replace("(", r"\(").replace(")", r"\)") + "|out of range"):
            runtime.load(mlp[0], library_path=host_lib, device=text)
    with pytest.raises(LoadError, match=r'device "cuda:3": this runtime was built without CUDA'):
        runtime.load(mlp[0], library_path=host_lib, device="cuda:3")
    prog = runtime.load(mlp[0], library_path=host_lib, device="cpu")
    assert prog.device == "cpu"


# ------------------------------------------------------------------------------------ the CUDA build, no GPU

def _gpus_here() -> int:
    from toolchain.runtime import cuda

    return cuda.device_count()


needs_cuda_build_without_gpu = pytest.mark.skipif(
    not CUDA_LIB.exists() or _gpus_here() > 0,
    reason=f"needs {CUDA_LIB} (scons cuda=on) on a host without a visible GPU; with GPUs, "
           "tests/gpu/test_multi_gpu.py checks the refusal")


@needs_cuda_build_without_gpu
def test_cuda_build_without_a_gpu_refuses_every_cuda_device(mlp, tmp_path):
    """The CUDA runtime where the driver sees no GPU: a clear NOT_SUPPORTED naming the fix, for Python and
    aoti-run (exit 4), never a crash; the cpu still runs."""
    pt2, x = mlp
    code = (
        "import sys\n"
        "from toolchain import runtime\n"
        "from toolchain.errors import LoadError\n"
        "for d in ('cuda', 'cuda:1'):\n"
        "    try:\n"
        f"        runtime.load({str(pt2)!r}, library_path={str(CUDA_LIB)!r}, device=d)\n"
        "    except LoadError as e:\n"
        "        print('REFUSED', d, str(e).splitlines()[0])\n"
        f"print('CPU', runtime.load({str(pt2)!r}, library_path={str(CUDA_LIB)!r}).run([__import__('numpy').load("
        f"{str(x)!r})])[0].shape)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("REFUSED")] == ["cuda", "cuda:1"], proc.stdout
    for ln in lines[:2]:
        assert "this process sees no CUDA device" in ln and "load the program on the cpu" in ln, ln
    assert lines[2].startswith("CPU (")
    p = subprocess.run([str(CUDA_RUN), str(pt2), "--device", "cuda:1", "-i", str(x), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 4 and "cuda:1: this process sees no CUDA device" in p.stderr, p.stderr


# ------------------------------------------------------------------------------------------------ serve

def test_serve_replicas_run_on_their_own_gpu_as_cuda_0():
    deploy = pytest.importorskip("toolchain.serve.deploy", reason="Ray Serve is not installed")
    assert deploy.replica_device("cpu") == "cpu"
    assert deploy.replica_device("cuda") == "cuda:0"
    assert deploy.replica_device("cuda:0") == "cuda:0"
    with pytest.raises(InputError) as info:
        deploy.replica_device("cuda:1")
    text = str(info.value)
    assert "Ray gives each replica one GPU of its own" in text and "CUDA_VISIBLE_DEVICES=1" in text
    with pytest.raises(InputError, match='device "gpu:0": not a device'):
        deploy.replica_device("gpu:0")


def test_serve_application_refuses_bad_devices_before_ray(mlp):
    deploy = pytest.importorskip("toolchain.serve.deploy", reason="Ray Serve is not installed")
    with pytest.raises(InputError, match='device "cuda:-1"'):
        deploy.application(mlp[0], device="cuda:-1")
    with pytest.raises(InputError, match="Ray gives each replica one GPU"):
        deploy.application(mlp[0], device="cuda:2")


@pytest.mark.long
def test_serve_cli_refuses_cuda_replicas_a_local_ray_has_no_gpu_for(mlp, tmp_path):
    """A local Ray instance on this host (no GPU here, or fewer than asked): refused at once, naming the count
    and the fix, instead of replicas left pending forever."""
    pytest.importorskip("ray", reason="Ray Serve is not installed")
    gpus = _gpus_here()
    replicas = gpus + 1
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "toolchain", "serve", str(mlp[0]), "--device", "cuda", "--replicas",
                           str(replicas), "--num-cpus", "1", "--port", "1"], capture_output=True, text=True,
                          timeout=300, env=env)
    if gpus == 0:
        assert proc.returncode == 4, proc.stderr[-3000:]
        assert "the Ray cluster has no GPU" in proc.stderr and "--device cpu" in proc.stderr
    else:
        assert proc.returncode == 3, proc.stderr[-3000:]
        assert f"has {gpus} GPU" in proc.stderr and f"--replicas {gpus}" in proc.stderr
