"""A user's own model, first class: a dynamic batch whose range holds (Dim(min=1) runs at batch 1 and at the
maximum, against eager), the README's new-user commands run verbatim in a fresh clone, `--dynamic` and the
factory from the command line, and what `inspect` shows of a package's model."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import BUILD_DIR, REPO_ROOT, VARIANT

pytestmark = pytest.mark.long  # minutes of work (a fresh clone, exports): skipped unless --long (nox -s slow, CI)

MODEL_SRC = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


def factory():
    torch.manual_seed(0)
    return Net(), (torch.randn(8, 16),)


def factory_dynamic():
    model, inputs = factory()
    return model, inputs, {"x": {0: torch.export.Dim("batch", min=1, max=64)}}


def factory_wrong():
    return factory()[0]
"""


def _net(torch):
    ns: dict = {}
    exec(compile(MODEL_SRC, "mymodel", "exec"), ns)  # the same model the CLI tests import from a file
    return ns["factory"]()


def _wrapper(pt2: Path) -> str:
    with zipfile.ZipFile(pt2) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith(".wrapper.cpp"))).decode()


def _ranges(shape: list) -> list:
    """A contract shape with each dynamic dimension's range only (its symbol's name is torch's choice)."""
    return [{k: v for k, v in d.items() if k != "expr"} if isinstance(d, dict) else d for d in shape]


def _contract(pt2: Path) -> dict:
    with zipfile.ZipFile(pt2) as zf:
        return json.loads(zf.read(next(n for n in zf.namelist() if n.endswith("aoti_toolchain_contract.json"))))


@pytest.fixture(scope="module")
def min1_package(torch, tmp_path_factory):
    """Net exported with Dim("batch", min=1, max=64) through the Python API."""
    from toolchain.export import export

    model, (x,) = _net(torch)
    out = tmp_path_factory.mktemp("min1") / "net.pt2"
    export(model, (x,), out, build_dir=BUILD_DIR,
           dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=64)}})
    return out, model


def test_dim_min1_is_compiled_for_1_and_runs_at_1_and_max(torch, host_build, min1_package):
    from toolchain import runtime

    pt2, model = min1_package
    # the compiled plugin's own check and the recorded contract both start at 1
    assert "expected it to be >= 1" in _wrapper(pt2)
    assert _ranges(_contract(pt2)["inputs"][0]["shape"]) == [{"min": 1, "max": 64}, 16]
    with runtime.load(pt2, library_path=host_build.lib) as prog:
        for batch in (1, 2, 64):
            x = torch.randn(batch, 16)
            (y,) = prog.run([x.numpy()])
            with torch.no_grad():
                ref = model(x).numpy()
            assert y.shape == (batch, 4)
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
        with pytest.raises(Exception, match=r"must be 1\.\.64"):
            prog.run([torch.randn(65, 16).numpy()])


def test_inspect_shows_the_contract_constants_and_torch(torch, min1_package):
    pt2, _ = min1_package
    text = subprocess.run([sys.executable, "-m", "toolchain", "inspect", str(pt2)], capture_output=True,
                          text=True, cwd=REPO_ROOT)
    assert text.returncode == 0, text.stderr
    assert "contract:     yes" in text.stdout and re.search(r"input  x: float32\[(s\d+)=1\.\.64, 16\]", text.stdout)
    sym = re.search(r"input  x: float32\[(s\d+)=", text.stdout).group(1)
    assert f"output output_0: float32[{sym}=1..64, 4]" in text.stdout and f"size   {sym}: 1..64 (from x:0)" in text.stdout
    assert re.search(r"constants:    6 \(3,008 bytes\), embedded", text.stdout), text.stdout
    assert f"torch:        {torch.__version__}" in text.stdout
    js = subprocess.run([sys.executable, "-m", "toolchain", "inspect", "--json", str(pt2)], capture_output=True,
                        text=True, cwd=REPO_ROOT)
    model = json.loads(js.stdout)["files"][0]["model"]
    assert model["has_contract"] and _ranges(model["inputs"][0]["shape"]) == [{"min": 1, "max": 64}, 16]
    assert model["symbols"] == [{"name": sym, "min": 1, "max": 64, "inputs": ["x:0"]}]
    assert model["constants"] == {"count": 6, "bytes": 3008, "where": "embedded"}
    assert model["torch"] == torch.__version__


def test_specialised_range_fails_the_export_or_is_recorded_when_allowed(torch, host_build, tmp_path, capfd):
    """Without size-oblivious compiling torch compiles Dim(min=1) for >= 2: export fails, naming the range that
    holds, and writes nothing; with allow_narrower the contract records 2..64 and export says so; the runtime's
    refusal of batch 1, with the contract or without it (the bare plugin checks its own inputs), explains the
    specialisation and how to re-export."""
    from toolchain import runtime
    from toolchain.errors import ExportError, InputError
    from toolchain.export import export

    model, (x,) = _net(torch)
    dyn = {"x": {0: torch.export.Dim("batch", min=1, max=64)}}
    with pytest.raises(ExportError) as refused:
        export(model, (x,), tmp_path / "spec.pt2", build_dir=BUILD_DIR, size_oblivious=False, dynamic_shapes=dyn)
    assert "input x dimension 0" in str(refused.value) and "asked 1..64" in str(refused.value)
    assert "accepts 2..64" in str(refused.value) and "--allow-narrower" in str(refused.value)
    assert not (tmp_path / "spec.pt2").exists()
    capfd.readouterr()
    pt2 = export(model, (x,), tmp_path / "spec.pt2", build_dir=BUILD_DIR, size_oblivious=False, dynamic_shapes=dyn,
                 allow_narrower=True)
    err = capfd.readouterr().err
    assert "expected it to be >= 2" in _wrapper(pt2)
    assert _ranges(_contract(pt2)["inputs"][0]["shape"]) == [{"min": 2, "max": 64}, 16]
    assert _ranges(_contract(pt2)["outputs"][0]["shape"]) == [{"min": 2, "max": 64}, 4]
    assert "asked 1..64, the plugin torch compiled accepts 2..64 (accepted: allow_narrower)" in err, err
    one = torch.randn(1, 16).numpy()
    with runtime.load(pt2, library_path=host_build.lib) as prog, pytest.raises(InputError) as exc:
        prog.run([one])
    assert "must be 2..64" in str(exc.value) and "specialises sizes 0 and 1" in str(exc.value)
    with zipfile.ZipFile(pt2) as zf:
        so = tmp_path / "plugin.so"
        so.write_bytes(zf.read(next(n for n in zf.namelist() if n.endswith(".so"))))
    with runtime.load(so, library_path=host_build.lib) as bare, pytest.raises(InputError) as exc:
        bare.run([one])
    msg = str(exc.value)
    assert "dim value is too small" in msg and "specialises sizes 0 and 1" in msg and "re-export" in msg, msg


def _cli(args, cwd, **kw):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "toolchain", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, **kw)


def test_export_cli_refuses_bad_dynamic_and_factories_clearly(torch, tmp_path):
    (tmp_path / "mymodel.py").write_text(MODEL_SRC)
    cases = [
        (["mymodel:factory", "-o", "m.pt2", "--dynamic", "x:0=1-64"], 2, "expected NAME:DIM=MIN..MAX"),
        (["mymodel:factory", "-o", "m.pt2", "--dynamic", "y:0=1..64"], 2, "y: not a parameter of Net.forward"),
        (["mymodel:factory", "-o", "m.pt2", "--dynamic", "x:0=9..64"], 2,
         "--dynamic x:0=9..64: the example input has size 8 there, outside the range"),
        # the upper bound too: an example of batch 8 is outside 1..4
        (["mymodel:factory", "-o", "m.pt2", "--dynamic", "x:0=1..4"], 2,
         "--dynamic x:0=1..4: the example input has size 8 there, outside the range"),
        (["mymodel:factory", "-o", "m.pt2", "--dynamic", "x:2=1..64"], 2, "x has 2 dimensions"),
        (["mymodel:factory_dynamic", "-o", "m.pt2", "--dynamic", "x:0=1..64"], 2, "dynamic shapes in one place"),
        (["mymodel:factory_wrong", "-o", "m.pt2"], 3, "the factory returned Net"),
        (["mymodel:nope", "-o", "m.pt2"], 3, "has no function 'nope'"),
        (["nomodel:factory", "-o", "m.pt2"], 3, "cannot import module 'nomodel'"),
    ]
    for args, code, text in cases:
        p = _cli(["export", *args], tmp_path)
        assert p.returncode == code, (args, p.stderr)
        assert text in p.stderr, (args, p.stderr)
        assert "Traceback" not in p.stderr and "error: aoti-toolchain" not in p.stderr, p.stderr
    assert not (tmp_path / "m.pt2").exists()


def _readme_blocks() -> tuple[str, list[str], str]:
    """The README's new-user path: the model file (the block starting `# mymodel.py`), the three commands
    after it and the Python block."""
    text = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```(\w+)\n(.*?)```", text, re.S)
    model = next(b for lang, b in blocks if lang == "python" and b.startswith("# mymodel.py\n"))
    i = next(k for k, (lang, b) in enumerate(blocks) if b.startswith("# mymodel.py\n"))
    commands = [ln for ln in blocks[i + 1][1].splitlines() if ln.strip()]
    python = blocks[i + 2][1]
    assert blocks[i + 1][0] == "bash" and blocks[i + 2][0] == "python"
    return model, commands, python


def test_readme_new_user_path_runs_verbatim_in_a_fresh_clone(torch, host_build, tmp_path):
    """The README's "Your own model" commands, run as written from the root of a fresh clone.

    The README's set-up command (`bash .ci/setup`) would create `.venv` and build the runtime; here the clone
    gets them from this checkout instead: `.venv` is a symlink to this checkout's virtual environment, the
    built runtime (`build/cpu-gcc-release/dist`) is copied, and `build/torch` (inductor's cache) is a symlink,
    so the exports reuse compiled kernels. PYTHONPATH points at the clone because the shared venv's editable
    install points at another checkout; `bash .ci/setup` in a real clone installs the clone itself."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
    # the working tree under test, committed or not: changed and untracked (not ignored) files over HEAD
    listed = subprocess.run(["git", "ls-files", "-z", "-m", "-o", "-d", "--exclude-standard"], cwd=REPO_ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src, dst = REPO_ROOT / rel, clone / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        elif dst.exists():
            dst.unlink()
    (clone / ".venv").symlink_to(Path(sys.prefix))
    (clone / "build" / VARIANT).mkdir(parents=True)
    shutil.copytree(host_build.variant_dir / "dist", clone / "build" / VARIANT / "dist", symlinks=True)
    (clone / "build" / "torch").symlink_to(BUILD_DIR / "torch")
    model, commands, python = _readme_blocks()
    (clone / "mymodel.py").write_text(model)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "AOTI_HOST_LIBRARY")}
    env["PYTHONPATH"] = str(clone)
    assert len(commands) == 3 and all(c.startswith(".venv/bin/aoti-toolchain ") for c in commands), commands
    for cmd in commands:
        p = subprocess.run(["bash", "-c", cmd], cwd=clone, env=env, capture_output=True, text=True)
        assert p.returncode == 0, f"{cmd}\n{p.stdout}\n{p.stderr}"
        if " export " in f" {cmd} ":
            assert "compiling with AOTInductor" in p.stderr and "FutureWarning" not in p.stderr, p.stderr
    assert "output_0: max abs error" in p.stdout and "(ok)" in p.stdout, p.stdout
    contract = _contract(clone / "mymodel.pt2")
    assert _ranges(contract["inputs"][0]["shape"])[0] == {"min": 1, "max": 64}
    p = subprocess.run([".venv/bin/python", "-c", python], cwd=clone, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    errors = {int(b): float(e) for b, e in (ln.split() for ln in p.stdout.splitlines())}
    assert set(errors) == {1, 64} and max(errors.values()) < 1e-5, p.stdout
