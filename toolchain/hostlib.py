"""Where this project's host runtime library (libaoti_host.so) is: one lookup for the Python runtime
(toolchain.runtime, which opens it), for verify (which assumes it as the default host and must start
without numpy or ctypes) and for the CLI's `--version`.

Order: $AOTI_HOST_LIBRARY; the runtime an installed wheel carries (toolchain/_host/ of the aoti-toolchain
wheel, aoti_toolchain_cuda/_host/ of the aoti-toolchain-cuda wheel); the builds of this checkout
(build/<variant>/dist/), so development keeps working through the same lookup."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
#: The runtime tree (lib/, bin/, include/, manifest.json) inside the installed aoti-toolchain wheel.
INSTALLED_HOST = PACKAGE_DIR / "_host"
LIBRARY_ENV = "AOTI_HOST_LIBRARY"
CUDA_DISTRIBUTION_PACKAGE = "aoti_toolchain_cuda"
_CPU = ("cpu-gcc-release", "cpu-clang-release", "cpu-gcc-debug")
_CUDA = ("cuda-gcc-release", "cuda-clang-release", "cuda-gcc-debug")


def _installed_cuda_host() -> Path | None:
    try:
        spec = importlib.util.find_spec(CUDA_DISTRIBUTION_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "_host"


def installed_trees() -> list[Path]:
    """The runtime trees the installed wheels hold (this package's, and aoti-toolchain-cuda's when present)."""
    cuda = _installed_cuda_host()
    return [INSTALLED_HOST, *([cuda] if cuda else [])]


def host_trees(device: str = "cpu") -> list[Path]:
    """The runtime trees (folders with lib/libaoti_host.so) in the order default_library prefers them:
    installed wheels first, then this checkout's builds."""
    installed = installed_trees()
    if device.startswith("cuda"):
        installed.reverse()
    variants = _CUDA + _CPU if device.startswith("cuda") else _CPU + _CUDA
    return [*installed, *(REPO_ROOT / "build" / v / "dist" for v in variants)]


def candidates(device: str = "cpu") -> list[Path]:
    """Every libaoti_host.so default_library looks for, in order."""
    return [t / "lib" / "libaoti_host.so" for t in host_trees(device)]


def find_library(device: str = "cpu") -> Path | None:
    """$AOTI_HOST_LIBRARY, else the first installed or built runtime that exists; None when there is none."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return Path(env)
    return next((c for c in candidates(device) if c.exists()), None)


def default_library(device: str = "cpu") -> Path:
    """find_library(), or the path the release build would have (for a clear "not built" message)."""
    return find_library(device) or REPO_ROOT / "build" / "cpu-gcc-release" / "dist" / "lib" / "libaoti_host.so"


def find_program(name: str = "aoti-run", device: str = "cpu") -> Path | None:
    """bin/<name> of the runtime tree find_library() chose (the program built with that library)."""
    lib = find_library(device)
    if lib is None:
        return None
    prog = lib.parent.parent / "bin" / name
    return prog if prog.is_file() else None


def build_info(library: Path) -> dict | None:
    """The manifest.json beside a runtime tree's lib/ (what the build recorded: version, variant,
    build_config, feature_defines); None when it has none or it is unreadable."""
    path = library.parent.parent / "manifest.json"
    try:
        if path.stat().st_size > (4 << 20):
            return None
        import json

        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def in_checkout() -> bool:
    """Whether this package runs from a source checkout (an editable install, or the checkout on sys.path): its
    SConstruct beside the package. False in an installed wheel (the package sits in site-packages)."""
    return (REPO_ROOT / "SConstruct").is_file()


def pip_install(extra: str) -> str:
    """The command that adds the optional dependencies `extra` (pyproject.toml's [project.optional-dependencies])
    to this installation: `pip install 'aoti-toolchain[extra]'` for an installed wheel, the editable install of
    this checkout when running from one (pip install -e '/path/to/checkout[extra]')."""
    import shlex

    if in_checkout():
        return f"pip install -e {shlex.quote(f'{REPO_ROOT}[{extra}]')}"
    return f"pip install {shlex.quote(f'aoti-toolchain[{extra}]')}"
