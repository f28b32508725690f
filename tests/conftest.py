"""Shared fixtures: the SCons-built host runtime, torch in the build dir, exported example plugins."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import build_fixture
from toolchain.atomic import locked as file_lock  # the xdist workers' (and concurrent runs') lock on a shared thing

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = REPO_ROOT / "build"
VARIANT = "cpu-gcc-release"

# Inductor writes ~500 MB to TMPDIR even with TORCHINDUCTOR_CACHE_DIR set: keep both in the build dir.
_TORCH_DIR = BUILD_DIR / "torch"
(_TORCH_DIR / "tmp").mkdir(parents=True, exist_ok=True)
os.environ["TMPDIR"] = str(_TORCH_DIR / "tmp")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_TORCH_DIR / "inductor-cache"))
# Plugins load from a sealed memfd (nothing on disk); the file cache (cubins, or AOTI_HOST_CACHE_DIR) defaults
# to $XDG_CACHE_HOME/aoti-toolchain: keep that in the build dir too.
os.environ["XDG_CACHE_HOME"] = str(BUILD_DIR / "xdg-cache")


def pytest_addoption(parser) -> None:
    parser.addoption("--long", action="store_true",
                     help="also run the tests marked long (other build variants, lifecycle loops, fuzzing, fresh venvs "
                     "and clones, Ray, the release); `nox -s slow` and CI run them, AOTI_TESTS_LONG=1 does the same")


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked `long` are skipped, with the reason, unless --long (or AOTI_TESTS_LONG=1) is given: the
    default run stays a few minutes on a 2-core machine; CI runs both."""
    if config.getoption("--long") or os.environ.get("AOTI_TESTS_LONG") == "1":
        return
    skip = pytest.mark.skip(reason="long test: run with --long (nox -s slow; CI runs it)")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


def cpu_has(flag: str) -> bool:
    """Whether this machine's CPU reports `flag` (e.g. avx512f) in /proc/cpuinfo."""
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and flag in line.split() for line in f)


def scons_command() -> list[str]:
    exe = shutil.which("scons") or str(Path(sys.executable).with_name("scons"))
    return [exe]


@dataclass(frozen=True)
class HostBuild:
    variant_dir: Path

    @property
    def lib(self) -> Path:
        return self.variant_dir / "dist" / "lib" / "libaoti_host.so"

    @property
    def aoti_run(self) -> Path:
        return self.variant_dir / "dist" / "bin" / "aoti-run"

    @property
    def tests_dir(self) -> Path:
        return self.variant_dir / "tests"

    @property
    def gen_dir(self) -> Path:
        return self.variant_dir / "gen"


def build_lock():
    """Held around every SCons run in this checkout's build/ and every reader of a file such a run rewrites:
    two SCons processes in one build dir would write the same objects and .sconsign database at once."""
    return file_lock(BUILD_DIR / ".pytest-build.lock")


def repo_scons(*args: str, timeout: float | None = None, locked: bool = False) -> subprocess.CompletedProcess:
    """`scons ARGS` in the checkout (its build/), under build_lock() (`locked`: the caller holds it already);
    output captured as text."""
    with contextlib.nullcontext() if locked else build_lock():
        return subprocess.run([*scons_command(), *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=timeout)


def shared_dir(tmp_path_factory, name: str) -> Path:
    """A directory of this test run that every xdist worker sees (the run's base temp dir, the parent of each
    worker's own), or the session's base temp dir without xdist; removed with it when the run passes. What
    goes in it is made under file_lock() by the first worker that needs it and reused by the others."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / f"shared-{name}"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def host_build() -> HostBuild:
    """The default build (`scons`), brought up to date once per session (a second xdist worker waits for the
    first one's build and finds it up to date)."""
    proc = repo_scons("-Q", f"-j{os.cpu_count() or 2}")
    assert proc.returncode == 0, f"scons failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return HostBuild(BUILD_DIR / VARIANT)


@pytest.fixture(scope="session")
def host_lib(host_build: HostBuild) -> Path:
    return host_build.lib


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[torch]')")


def shared_export(pt2: Path, module, inputs, **kwargs) -> Path:
    """`pt2` exported from (module, inputs) unless another worker already did (under a lock beside it):
    export writes the package atomically, so an existing one is complete."""
    from toolchain.export import export

    with file_lock(pt2.with_name(pt2.name + ".lock")):
        if not pt2.is_file():
            export(module, inputs, pt2, build_dir=BUILD_DIR, **kwargs)
    return pt2


@pytest.fixture(scope="session")
def export_example(torch, tmp_path_factory):
    """export_example(name, weights) -> (pt2 path, module, example inputs); each exported once per test run,
    by the first xdist worker that needs it (the examples are seeded: every worker's module is the same)."""
    from toolchain import examples

    cache: dict[tuple[str, str], tuple[Path, object, tuple]] = {}
    root = shared_dir(tmp_path_factory, "plugins")

    def get(name: str, weights: str = "embedded"):
        key = (name, weights)
        if key not in cache:
            module, inputs = examples.get(name)
            pt2 = shared_export(root / f"{name}-{weights}.pt2", module, inputs, weights=weights)
            cache[key] = (pt2, module, inputs)
        return cache[key]

    return get


@pytest.fixture()
def mlp(export_example, tmp_path):
    """(pt2, x.npy): the mlp example exported with embedded weights, and its example input saved for aoti-run's -i."""
    import numpy as np

    pt2, _module, inputs = export_example("mlp", "embedded")
    x = tmp_path / "x.npy"
    np.save(x, inputs[0].numpy())
    return pt2, x


@pytest.fixture(scope="session")
def missing_op_package(torch, tmp_path_factory):
    """(pt2, inputs): a plain-torch package calling an ATen fallback op the host does not implement: 3-d grid
    sampling, which torch 2.13 keeps as a fallback (aten.grid_sampler_3d.default, aoti_torch_cpu_grid_sampler_3d)."""

    class Warp(torch.nn.Module):
        def forward(self, vol, grid):
            return torch.nn.functional.grid_sample(vol, grid, align_corners=False)

    inputs = (torch.randn(1, 2, 4, 5, 6), torch.rand(1, 3, 3, 3, 3) * 2 - 1)
    pt2 = shared_export(shared_dir(tmp_path_factory, "missing-op") / "warp3d.pt2", Warp(), inputs)
    return pt2, inputs


@pytest.fixture(scope="session")
def fake_plugin(tmp_path_factory):
    """fake_plugin(name, imports=[...]) -> path of a real .so compiled from templates/fixtures."""
    from toolchain.spec import load_spec

    spec = load_spec()
    root = tmp_path_factory.mktemp("fake-plugins")

    def build(name: str, imports: list[str] = (), entry_points: list[str] | None = None) -> Path:
        eps = entry_points if entry_points is not None else [e.name for e in spec.entry_points if e.required]
        return build_fixture("fake_plugin.c.j2", root / f"{name}.so", description=name, imports=list(imports),
                             entry_points=eps)

    return build
