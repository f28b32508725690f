"""What a user of the installed wheel meets, without building the wheel: the package laid out as the wheel lays it
out (toolchain/ with the templates in toolchain/_data/ and the runtime tree in toolchain/_host/, build_backend/
aoti_build.py), imported from a site directory, run from a directory outside the checkout. No SConstruct in reach.

- `demo` runs the example in the installed runtime (it used to stop at "No SConstruct file found"), and says what
  it needs when there is no runtime at all;
- the fix text for a missing extra names the installed distribution (pip install 'aoti-toolchain[serve]'), a
  checkout's editable install only in a checkout;
- `run --help` describes the default --library as it is resolved, and that resolution picks the installed runtime.

The full wheel (auditwheel-repaired, pip-installed in a fresh venv) is tests/integration/test_wheel.py (long)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from toolchain.errors import exit_code


def _git_files(top: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", top],
                         capture_output=True, check=True, cwd=REPO_ROOT).stdout.decode().split("\0")
    return [f for f in out if f and (REPO_ROOT / f).is_file() and "__pycache__" not in f]


def _lay_out(site: Path, dist: Path | None) -> Path:
    """toolchain/ as the wheel holds it, under `site`; with `dist` (a runtime tree) as toolchain/_host."""
    for rel in _git_files("toolchain"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, site / rel)
    for rel in _git_files("templates"):
        dest = site / "toolchain" / "_data" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, dest)
    if dist is not None:
        for top in ("lib", "bin", "include", "triton"):  # build_backend/aoti_build.py HOST_TREE_TOPS
            shutil.copytree(dist / top, site / "toolchain" / "_host" / top)
        shutil.copy2(dist / "manifest.json", site / "toolchain" / "_host" / "manifest.json")
    assert not (site / "SConstruct").exists()
    return site


class Layout:
    def __init__(self, root: Path, site: Path) -> None:
        self.root, self.site = root, site
        self.cwd = root / "elsewhere"
        self.cache = root / "cache"
        self.cwd.mkdir(parents=True, exist_ok=True)

    def env(self, *front: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("AOTI_HOST_LIBRARY", "PYTHONPATH")}
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*front, self.site))
        env["XDG_CACHE_HOME"] = str(self.cache)
        return env

    def run(self, *args, front: tuple[Path, ...] = (), timeout: float = 600) -> subprocess.CompletedProcess:
        """`python -m toolchain ARGS` (or `python -c` with args[0] == "-c") from the site, outside the checkout."""
        cmd = [sys.executable, *(args if args and args[0] == "-c" else ("-m", "toolchain", *args))]
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=self.cwd,
                              env=self.env(*front), timeout=timeout)


@pytest.fixture(scope="module")
def installed(host_build, tmp_path_factory) -> Layout:
    root = tmp_path_factory.mktemp("installed")
    layout = Layout(root, _lay_out(root / "site", host_build.variant_dir / "dist"))
    where = layout.run("-c", "import toolchain; print(toolchain.__file__)")
    assert where.stdout.strip() == str(layout.site / "toolchain" / "__init__.py"), where.stdout + where.stderr
    return layout


@pytest.fixture(scope="module")
def no_runtime(tmp_path_factory) -> Layout:
    root = tmp_path_factory.mktemp("installed-no-runtime")
    return Layout(root, _lay_out(root / "site", None))


@pytest.fixture(scope="module")
def no_ray(tmp_path_factory) -> Path:
    """A directory that, first on sys.path, makes `import ray` fail as it does where Ray is not installed."""
    d = tmp_path_factory.mktemp("no-ray")
    (d / "ray").mkdir()
    (d / "ray" / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\", name='ray')\n")
    return d


# -- demo --------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo(installed, torch) -> subprocess.CompletedProcess:
    return installed.run("demo", "--example", "mlp")


@pytest.mark.slow
def test_demo_runs_in_the_installed_runtime(installed, demo):
    text = demo.stdout + demo.stderr
    assert demo.returncode == 0, text[-4000:]
    assert "SConstruct" not in text and "Traceback" not in text
    host = installed.site / "toolchain" / "_host"
    assert f"[1/4] using the installed host runtime: {host}" in demo.stdout, demo.stdout
    assert f"verify --host {host / 'lib' / 'libaoti_host.so'}" in demo.stdout
    assert f"[4/4] running it in our LibTorch-free host: {host / 'bin' / 'aoti-run'}" in demo.stdout
    assert "verify verdict: PASS" in demo.stdout and "max error against eager PyTorch" in demo.stdout
    # everything went to the user's cache dir: nothing in the current directory, nothing beside the package
    work = installed.cache / "aoti-toolchain" / "demo" / "mlp"
    assert (work / "mlp.pt2").is_file() and list((work / "out").glob("output_*.npy"))
    assert not any(installed.cwd.iterdir()) and not (installed.site / "build").exists()


@pytest.mark.slow
def test_run_without_library_uses_the_installed_runtime(installed, demo):
    """`run`'s --library default, as its help says: the runtime the installed package carries."""
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-2000:]
    work = installed.cache / "aoti-toolchain" / "demo" / "mlp"
    out = installed.root / "run-out"
    proc = installed.run("run", work / "mlp.pt2", "-i", work / "input_0.npy", "-o", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (got,) = out.glob("output_*.npy")
    (ref,) = work.glob("expected_*.npy")
    np.testing.assert_allclose(np.load(got), np.load(ref), rtol=1e-4, atol=1e-5)


def test_demo_without_a_runtime_says_what_it_needs(no_runtime):
    proc = no_runtime.run("demo")
    assert proc.returncode == exit_code("bad_input"), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "SConstruct" not in proc.stderr
    assert "demo needs this project's host runtime" in proc.stderr and "lib/libaoti_host.so" in proc.stderr
    assert "AOTI_HOST_LIBRARY" in proc.stderr and "fix: pip install aoti-toolchain" in proc.stderr, proc.stderr
    # refused before exporting anything: at most the command line's parsed spec tables in the user's cache
    written = {p.relative_to(no_runtime.cache).parts[:2] for p in no_runtime.cache.rglob("*")} if no_runtime.cache.exists() else set()
    assert written <= {("aoti-toolchain",), ("aoti-toolchain", "parsed")}, written


# -- the Triton backend ------------------------------------------------------------------------------------------

def test_triton_backend_dir_is_the_installed_wheels(installed):
    """`triton-backend-dir` in an installed wheel: its runtime tree's triton/, which holds the backend and the
    runtime library it opens (what tritonserver's --backend-directory wants)."""
    proc = installed.run("triton-backend-dir")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    where = Path(proc.stdout.strip())
    assert where == installed.site / "toolchain" / "_host" / "triton", proc.stdout
    assert (where / "aoti_toolchain" / "libtriton_aoti_toolchain.so").is_file()
    assert (where / "aoti_toolchain" / "libaoti_host.so").is_file()


def test_triton_backend_dir_without_a_runtime_says_what_it_needs(no_runtime):
    proc = no_runtime.run("triton-backend-dir")
    assert proc.returncode == exit_code("load_failed"), proc.stdout + proc.stderr
    assert "no Triton backend found" in proc.stderr and "fix: " in proc.stderr and "Traceback" not in proc.stderr


# -- fix texts for a missing extra -------------------------------------------------------------------------------

def test_serve_without_ray_names_the_installed_extra(installed, no_ray, tmp_path):
    model = tmp_path / "model.pt2"
    model.write_bytes(b"")  # serve checks the model exists, then imports Ray
    proc = installed.run("serve", model, front=(no_ray,))
    assert proc.returncode == exit_code("load_failed") and "Traceback" not in proc.stderr, proc.stderr
    assert "fix: pip install 'aoti-toolchain[serve]'" in proc.stderr and "pip install -e" not in proc.stderr
    code = "from toolchain import serve\ntry:\n    serve.application('m.pt2')\nexcept Exception as e:\n    print(e)"
    proc = installed.run("-c", code, front=(no_ray,))
    assert "fix: pip install 'aoti-toolchain[serve]'" in proc.stdout, proc.stdout + proc.stderr


def test_serve_without_ray_in_a_checkout_names_its_editable_install(no_ray, tmp_path):
    model = tmp_path / "model.pt2"
    model.write_bytes(b"")
    env = {**os.environ, "PYTHONPATH": f"{no_ray}{os.pathsep}{REPO_ROOT}"}
    proc = subprocess.run([sys.executable, "-m", "toolchain", "serve", str(model)], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert proc.returncode == exit_code("load_failed"), proc.stderr
    assert f"fix: pip install -e '{REPO_ROOT}[serve]'" in proc.stderr, proc.stderr


def test_no_fix_text_assumes_a_checkout():
    """A user-facing "pip install -e '.[...]'" is right only in a checkout; toolchain.hostlib.pip_install says
    which (grep: every other fix text goes through it)."""
    hits = [f"{p.relative_to(REPO_ROOT)}:{n}" for p in sorted((REPO_ROOT / "toolchain").rglob("*.py"))
            if p.name != "hostlib.py"
            for n, line in enumerate(p.read_text().splitlines(), 1) if "pip install -e" in line]
    assert not hits, hits


# -- run --help --------------------------------------------------------------------------------------------------

def test_run_help_describes_the_library_default_as_resolved(installed):
    proc = installed.run("run", "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "checkout's build)" not in text
    assert ("default: $AOTI_HOST_LIBRARY, else the runtime the installed aoti-toolchain wheel carries, else the "
            "build of the checkout this runs from") in text, text
    # ... and that is where it resolves here: no variable, the installed runtime
    code = "from toolchain.runtime import library; print(library().path)"
    proc = installed.run("-c", code)
    assert proc.stdout.strip() == str(installed.site / "toolchain" / "_host" / "lib" / "libaoti_host.so"), \
        proc.stdout + proc.stderr
    version = installed.run("--version").stdout
    assert f"library: {installed.site / 'toolchain' / '_host' / 'lib' / 'libaoti_host.so'}" in version, version


# -- the CPU preflight's decoder ---------------------------------------------------------------------------------

ZYDIS = "libZydis.so.4.0"


def _system_zydis() -> bool:
    """Whether this build machine has Zydis 4 (.ci/setup installs Debian's libzydis4.0): the build then installs
    it into dist/lib, and the wheel carries it."""
    return any(Path(d).glob(ZYDIS) for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"))


@pytest.mark.slow
@pytest.mark.skipif(not _system_zydis(), reason="no Zydis 4 on this build machine (apt-get install libzydis4.0)")
def test_installed_runtime_decodes_with_the_zydis_beside_it(installed, torch, tmp_path):
    """The installed tree carries Zydis (a regular file with its licence text) beside libaoti_host.so, and both
    ways of running an installed package use that one, not the loader's: a torch-written package (no target
    record) is decoded at load, its verdict noted in the cache, under AOTI_HOST_ISA_SCAN=on (which refuses where
    no Zydis loads)."""
    from tests.integration.test_isa_preflight import _torch_package

    lib = installed.site / "toolchain" / "_host" / "lib"
    assert (lib / ZYDIS).is_file() and not (lib / ZYDIS).is_symlink()
    assert "MIT" in (lib / f"{ZYDIS}.copyright").read_text()
    # and beside the Triton backend directory's copy of the runtime
    backend = installed.site / "toolchain" / "_host" / "triton" / "aoti_toolchain"
    assert (backend / ZYDIS).read_bytes() == (lib / ZYDIS).read_bytes() and (backend / f"{ZYDIS}.copyright").is_file()
    pt2, x, expected = _torch_package(torch, tmp_path / "mlp-torch.pt2")
    np.save(tmp_path / "x.npy", x)
    runs = {"aoti-run": [str(installed.site / "toolchain" / "_host" / "bin" / "aoti-run")],
            "aoti-toolchain run": [sys.executable, "-m", "toolchain", "run"]}
    for i, (name, cmd) in enumerate(runs.items()):
        cache, out = tmp_path / f"cache-{i}", tmp_path / f"out-{i}"
        env = {**installed.env(), "XDG_CACHE_HOME": str(cache), "AOTI_HOST_LOG": "debug", "AOTI_HOST_ISA_SCAN": "on"}
        for var in ("AOTI_HOST_ZYDIS_LIBRARY", "AOTI_HOST_CACHE_DIR", "LD_LIBRARY_PATH"):
            env.pop(var, None)
        proc = subprocess.run([*cmd, str(pt2), "-i", str(tmp_path / "x.npy"), "-o", str(out)], capture_output=True,
                              text=True, cwd=installed.cwd, env=env, timeout=600)
        assert proc.returncode == 0, (name, proc.stderr[-3000:])
        used = re.search(r"isa scan: Zydis (4\.[0-9.]+) from (\S+)", proc.stderr)
        assert used and Path(used[2]).resolve() == (lib / ZYDIS).resolve(), (name, proc.stderr[-3000:])
        assert "ISA decoded from the code" in proc.stderr, (name, proc.stderr[-3000:])
        assert list((cache / "aoti-toolchain").glob("isa-*.json")), name
        np.testing.assert_allclose(np.load(out / "output_0.npy"), expected, rtol=1e-4, atol=1e-5)
