"""What `aoti-toolchain export` leaves behind: torch's cache and temporary files in the user's cache dir (never
the current directory), a package whose top-level folder is the model's name, written with the user's umask;
and the packages are interchangeable with torch's own: torch's aoti_load_package runs ours (libtorch promoted
to the global scope, FACTS.md), and our runtime runs a package torch's aoti_compile_and_package wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.long]  # long: skipped unless --long (nox -s slow, CI)


def test_export_writes_only_the_package_with_the_umask_and_the_model_folder(tmp_path, torch):
    cwd, out_dir, cache = tmp_path / "cwd", tmp_path / "out", tmp_path / "cache"
    cwd.mkdir()
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(REPO_ROOT)}
    env.pop("TMPDIR", None)
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    cmd = f"umask 022 && exec {sys.executable} -m toolchain export example:mlp -o {out_dir / 'mlp.pt2'}"
    proc = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(cwd.iterdir()) == [], "export wrote into the current directory"
    assert [p.name for p in out_dir.iterdir()] == ["mlp.pt2"], "a temporary file or folder stayed"
    assert (cache / "aoti-toolchain" / "torch" / "inductor-cache").is_dir()
    assert (cache / "aoti-toolchain").stat().st_mode & 0o777 == 0o700  # the runtime's plugin cache shares it
    assert (out_dir / "mlp.pt2").stat().st_mode & 0o777 == 0o644
    with zipfile.ZipFile(out_dir / "mlp.pt2") as zf:
        tops = {n.split("/", 1)[0] for n in zf.namelist()}
    assert tops == {"mlp"}, tops


_TORCH_LOADS_OURS = r"""
import ctypes, os, sys, torch, torch._inductor
from toolchain import examples
ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"), mode=os.RTLD_GLOBAL)
module, inputs = examples.get("mlp")
runner = torch._inductor.aoti_load_package(sys.argv[1])
torch.testing.assert_close(runner(*inputs), module(*inputs), rtol=1e-4, atol=1e-5)
print("torch ran ours")
"""


def test_packages_interchange_with_torch(export_example, torch, tmp_path, host_lib):
    import numpy as np

    from toolchain import examples, runtime
    from toolchain.export import inductor_configs

    pt2, module, inputs = export_example("mlp")
    proc = subprocess.run([sys.executable, "-c", _TORCH_LOADS_OURS, str(pt2)], capture_output=True, text=True,
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert proc.returncode == 0 and "torch ran ours" in proc.stdout, proc.stderr[-3000:]

    # theirs: torch's own aoti_compile_and_package (our inductor configs: no libtorch), no contract entry
    module, inputs = examples.get("mlp")
    ep = torch.export.export(module.eval(), tuple(inputs))
    theirs = tmp_path / "theirs.pt2"
    torch._inductor.aoti_compile_and_package(ep, package_path=str(theirs), inductor_configs=inductor_configs("embedded"))
    with zipfile.ZipFile(theirs) as zf:
        assert not [n for n in zf.namelist() if n.endswith("aoti_toolchain_contract.json")]
    with runtime.load(theirs, library_path=host_lib) as prog:
        (out,) = prog.run([x.numpy() for x in inputs])
    np.testing.assert_allclose(out, module(*inputs).detach().numpy(), rtol=1e-4, atol=1e-5)
