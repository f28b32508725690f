"""Where this project's host runtime library (libaoti_host.so) is: one lookup for the Python runtime
(toolchain.runtime, which opens it), for verify (which assumes it as the default host and must start
without numpy or ctypes) and for the CLI's `--version`.

Order: $AOTI_HOST_LIBRARY; the runtime an installed wheel carries (toolchain/_host/ of the aoti-toolchain
wheel, aoti_toolchain_cuda/_host/ of the aoti-toolchain-cuda wheel); the builds of this checkout
(build/<variant>/dist/), so development keeps working through the same lookup."""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
LIBRARY_ENV = "AOTI_HOST_LIBRARY"
#: The runtime tree (lib/, bin/, include/, manifest.json) inside the installed aoti-toolchain wheel.
INSTALLED_HOST = PACKAGE_DIR / "_host"
CUDA_DISTRIBUTION_PACKAGE = "aoti_toolchain_cuda"
_CPU = ("cpu-gcc-release", "cpu-clang-release", "cpu-gcc-debug")
_CUDA = ("cuda-gcc-release", "cuda-clang-release", "cuda-gcc-debug")


def _installed_cuda_host() -> Path | None:
    try:
        spec = find_spec(CUDA_DISTRIBUTION_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "_host"


def find_spec(name: str):
    """importlib.util.find_spec(name) of a top-level module name (an imported module's __spec__, else the first
    of sys.meta_path's finders that finds it), without importing importlib.util (and its contextlib): every
    verify without $AOTI_HOST_LIBRARY asks it."""
    if "." in name:
        raise ValueError(f"{name!r}: a top-level module name only")
    module = sys.modules.get(name)
    if module is not None:
        spec = getattr(module, "__spec__", None)
        if spec is None:
            raise ValueError(f"{name}.__spec__ is None")
        return spec
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = None if find is None else find(name, None)
        if spec is not None:
            return spec
    return None


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
    builds = [REPO_ROOT / "build" / v / "dist" for v in (_CUDA + _CPU if device.startswith("cuda") else _CPU + _CUDA)]
    return [*installed, *builds]


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
