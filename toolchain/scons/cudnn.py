"""cuDNN's headers for the CUDA variant's attention through cuDNN's fused SDPA (runtime/src/shims/cuda/cudnn_sdpa.cpp):
cuDNN 9's C headers (cudnn_graph.h, cudnn_version.h, ...) and NVIDIA's header-only C++ graph API, cudnn-frontend
(cudnn_frontend.h). Both are needed at compile time only: the runtime never links cuDNN, the frontend's
dynamic-loading mode resolves every call in the libcudnn that the runtime opens at run time (docs/scons.md,
"cuDNN: attention on the GPU").

Where both are found, every translation unit gets AOTI_HAVE_CUDNN_FRONTEND=1 and the frontend's
NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING (one define set per variant: the frontend's inline functions differ between
its modes) and the two include folders as system includes. Where either is missing the CUDA variant still builds,
without that path (attention then runs on the runtime's own kernels, said once in the run-time log); the build
says once what is missing and the fix."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Where .ci/setup (.ci/cudnn_headers.py) extracts both wheels' include/ folders, under the build folder.
FETCHED = "cudnn-headers"
CUDNN_MAJOR = 9
#: Folders the compiler searches anyway (never passed with -isystem).
DEFAULT_INCLUDES = ("/usr/include", "/usr/local/include", "/usr/include/x86_64-linux-gnu")
FIX = ("bash .ci/setup (fetches both into build/cudnn-headers: python .ci/cudnn_headers.py), or pip install "
       "nvidia-cudnn-cu13 nvidia-cudnn-frontend, or point CUDNN_INCLUDE_DIR / CUDNN_FRONTEND_INCLUDE_DIR at them")


@dataclass(frozen=True)
class CudnnHeaders:
    cudnn_include: str | None  # holds cudnn_graph.h of cuDNN 9
    cudnn_version: str | None
    frontend_include: str | None  # holds cudnn_frontend.h
    frontend_version: str | None
    searched: tuple[str, ...]  # what was looked at, for the message where something is missing

    @property
    def found(self) -> bool:
        return self.cudnn_include is not None and self.frontend_include is not None

    def describe(self) -> str:
        if self.found:
            return (f"cuDNN {self.cudnn_version} headers ({self.cudnn_include}) and cudnn-frontend "
                    f"{self.frontend_version} ({self.frontend_include}): attention on cuda builds its cuDNN SDPA path")
        missing = [what for what, d in (("cuDNN 9's headers (cudnn_graph.h)", self.cudnn_include),
                                        ("cudnn-frontend's headers (cudnn_frontend.h)", self.frontend_include))
                   if d is None]
        return (f"{' and '.join(missing)} not found (searched {', '.join(self.searched) or 'nothing'}): the CUDA "
                f"variant builds without the cuDNN SDPA path, and attention on cuda runs on the runtime's own kernels; "
                f"fix: {FIX}")


def _defines(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    return dict(re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(\S+)", text, re.MULTILINE))


def cudnn_version(include: str) -> str | None:
    """"9.19.0" from include/cudnn_version.h, or None where the folder has no cuDNN 9 headers."""
    if not os.path.isfile(os.path.join(include, "cudnn_graph.h")):
        return None
    d = _defines(os.path.join(include, "cudnn_version.h"))
    try:
        version = (int(d["CUDNN_MAJOR"]), int(d["CUDNN_MINOR"]), int(d["CUDNN_PATCHLEVEL"]))
    except (KeyError, ValueError):
        return None
    return ".".join(map(str, version)) if version[0] == CUDNN_MAJOR else None


def frontend_version(include: str) -> str | None:
    """"1.32.0" from include/cudnn_frontend_version.h, or None where the folder has no cudnn_frontend.h."""
    if not os.path.isfile(os.path.join(include, "cudnn_frontend.h")):
        return None
    d = _defines(os.path.join(include, "cudnn_frontend_version.h"))
    parts = [d.get(f"CUDNN_FRONTEND_{k}_VERSION") for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts) if all(p and p.isdigit() for p in parts) else "unknown"


def _wheel_roots() -> list[str]:
    """The folders of installed nvidia-* wheels' `nvidia` namespace package (site-packages/nvidia)."""
    roots = []
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        roots += list(spec.submodule_search_locations)
    roots += [os.path.join(p, "nvidia") for p in sys.path if p]
    return roots


def candidates(environ: Mapping[str, str], cuda_home: str | None, build_dirs: Iterable[str],
               site_dirs: Iterable[str], wheel_roots: Iterable[str]) -> tuple[list[str], list[str]]:
    """(cuDNN include folders, frontend include folders) in search order: the environment's, the CUDA toolkit's,
    the installed wheels' (torch's nvidia-cudnn-cu13 puts cuDNN in site-packages/nvidia/cudnn/include; the
    nvidia-cudnn-frontend wheel puts the frontend in <site root>/include), the fetched copies, the system's."""
    fetched = [os.path.join(b, FETCHED) for b in build_dirs]
    cudnn = [environ.get("CUDNN_INCLUDE_DIR", ""), *(os.path.join(cuda_home, "include") for _ in [0] if cuda_home),
             *(os.path.join(r, "cudnn", "include") for r in wheel_roots),
             *(os.path.join(f, "cudnn", "include") for f in fetched), "/usr/include", "/usr/include/x86_64-linux-gnu"]
    frontend = [environ.get("CUDNN_FRONTEND_INCLUDE_DIR", ""), *(os.path.join(p, "include") for p in site_dirs),
                *(os.path.join(f, "frontend", "include") for f in fetched), "/usr/local/include", "/usr/include"]
    dedup = lambda xs: list(dict.fromkeys(os.path.abspath(x) for x in xs if x))  # noqa: E731
    return dedup(cudnn), dedup(frontend)


def find(environ: Mapping[str, str], cuda_home: str | None, build_dirs: Iterable[str],
         site_dirs: Iterable[str] | None = None, wheel_roots: Iterable[str] | None = None) -> CudnnHeaders:
    """The first cuDNN 9 include folder and the first cudnn-frontend include folder of candidates()."""
    site = [p for p in (sys.path if site_dirs is None else site_dirs) if p]
    cudnn_dirs, frontend_dirs = candidates(environ, cuda_home, build_dirs, site,
                                           _wheel_roots() if wheel_roots is None else wheel_roots)
    c = next(((d, v) for d in cudnn_dirs if (v := cudnn_version(d))), (None, None))
    f = next(((d, v) for d in frontend_dirs if (v := frontend_version(d))), (None, None))
    searched = tuple(d for d in (*cudnn_dirs, *frontend_dirs) if os.path.isdir(d)) if not (c[0] and f[0]) else ()
    return CudnnHeaders(c[0], c[1], f[0], f[1], searched)


def configure_cudnn(env, cuda_home: str, usage: dict) -> CudnnHeaders:
    """Finds the headers for the variant `env` builds, says what it found (one line), and where both are there
    adds the defines and system include folders to `env` and the CUDA usage requirements `usage`."""
    headers = find(os.environ, cuda_home, [env.Dir(env["build_dir"]).abspath])
    print(f"scons: {'' if headers.found else 'note: '}{headers.describe()}")
    if headers.found:
        defines = [("AOTI_HAVE_CUDNN_FRONTEND", "1"), "NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING"]
        env.Append(CPPDEFINES=defines)
        # Not the compiler's own folders: -isystem /usr/include reorders them and breaks libstdc++'s #include_next.
        extra = [d for d in dict.fromkeys((headers.cudnn_include, headers.frontend_include)) if d not in DEFAULT_INCLUDES]
        usage["AOTI_SYSTEM_CPPPATH"] = [*usage.get("AOTI_SYSTEM_CPPPATH", []), *extra]
    return headers
