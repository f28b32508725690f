"""The CUDA options of aoti-run, the C API and the Python module, on a runtime built without CUDA (CI):
each refuses with a message that says what to do, and CPU programs need no cuda-python."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest


@pytest.fixture()
def mlp(export_example, tmp_path):
    pt2, _module, inputs = export_example("mlp", "embedded")
    x = tmp_path / "x.npy"
    np.save(x, inputs[0].numpy())
    return pt2, x, inputs[0].numpy()


def aoti_run(host_build, *args):
    return subprocess.run([str(host_build.aoti_run), *map(str, args)], capture_output=True, text=True)


def test_aoti_run_device_cuda_on_a_cpu_build_is_refused_at_load(host_build, mlp, tmp_path):
    pt2, x, _ = mlp
    p = aoti_run(host_build, pt2, "--device", "cuda", "-i", x, "-o", tmp_path / "o")
    assert p.returncode == 4, p.stderr
    assert "built without CUDA" in p.stderr and "cuda=on" in p.stderr


def test_aoti_run_cuda_only_flags_need_device_cuda(host_build, mlp, tmp_path):
    pt2, x, _ = mlp
    for flag in ("--cuda-graphs", "--device-inputs"):
        p = aoti_run(host_build, pt2, flag, "-i", x, "-o", tmp_path / "o")
        assert p.returncode == 2, p.stderr
        assert f"{flag} needs --device cuda" in p.stderr


def test_aoti_run_rejects_an_unknown_device(host_build, mlp, tmp_path):
    """A malformed argument (exit 2), whatever the runtime was built with; more in test_device_selection.py."""
    pt2, x, _ = mlp
    p = aoti_run(host_build, pt2, "--device", "tpu", "-i", x, "-o", tmp_path / "o")
    assert p.returncode == 2, p.stderr
    assert 'device "tpu": not a device' in p.stderr


def test_python_cpu_program_runs_without_cuda_python(host_lib, mlp):
    """A fresh interpreter where importing cuda-python fails: CPU programs still load and run."""
    pt2, _, x = mlp
    code = (
        "import sys, numpy as np\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'cuda' or name.startswith('cuda.'): raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from toolchain import runtime\n"
        f"p = runtime.load({str(pt2)!r}, library_path={str(host_lib)!r})\n"
        f"out = p.run([np.load({str(mlp[1])!r})])\n"
        "print(out[0].shape, 'cuda' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{(x.shape[0], 8)} False"


def test_python_cuda_options_on_cpu(host_lib, mlp):
    from toolchain import runtime
    from toolchain.errors import InputError, LoadError

    pt2, _, x = mlp
    with pytest.raises(InputError, match="cuda_graphs=True needs device='cuda'"):
        runtime.load(pt2, library_path=host_lib, cuda_graphs=True)
    with pytest.raises(InputError, match='device "gpu": not a device'):
        runtime.load(pt2, library_path=host_lib, device="gpu")
    with pytest.raises(LoadError, match="built without CUDA"):
        runtime.load(pt2, library_path=host_lib, device="cuda")
    prog = runtime.load(pt2, library_path=host_lib)
    with pytest.raises(InputError, match="device_outputs=True needs a program loaded with device='cuda'"):
        prog.run([x], device_outputs=True)

    class FakeDeviceBuffer:  # anything with __cuda_array_interface__ is taken as device memory
        __cuda_array_interface__ = {"shape": x.shape, "typestr": "<f4", "data": (0, False), "version": 3}

    with pytest.raises(InputError, match="loaded on the CPU"):
        prog.run([FakeDeviceBuffer()])
    prog.synchronize()  # a no-op on the CPU
    with pytest.raises(LoadError, match="not loaded on a cuda device|built without CUDA"):
        prog.cuda_stats()


def test_export_device_cuda_without_a_cuda_torch(torch, tmp_path):
    from toolchain import examples
    from toolchain.errors import InputError
    from toolchain.export import export

    if torch.cuda.is_available():
        pytest.skip("this torch sees a CUDA device: the refusal is for CPU-only torch")
    module, inputs = examples.get("mlp")
    with pytest.raises(InputError, match="sees no CUDA device"):
        export(module, inputs, tmp_path / "m.pt2", device="cuda")
    with pytest.raises(InputError, match="use cpu, cuda or cuda:N"):
        export(module, inputs, tmp_path / "m.pt2", device="tpu")
    assert not (tmp_path / "m.pt2").exists()
