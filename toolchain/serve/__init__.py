"""Serving programs at scale: the KServe/Triton v2 inference protocol over HTTP (`protocol`, an ASGI app
without Ray or torch), what a replica serves (`backend`), and Ray Serve deployments whose replicas load
the program through toolchain.runtime and never import torch (`deploy`, the optional extra `serve`).

    from ray import serve
    from toolchain.serve import application
    serve.run(application("model.pt2", replicas=2, max_batch=8), route_prefix="/")

Each method of a program is a v2 model: the program's name serves its first method, and a program of
several methods also serves every method as `<name>.<method>`. See docs/serving.md."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from toolchain.errors import LoadError

# A local Ray instance puts its Unix sockets at <temp dir>/session_<date>_<time>_<us>_<pid>/sockets/plasma_store,
# and an AF_UNIX path holds at most 107 bytes: the temp dir gets what the rest leaves (pid up to 7 digits).
_RAY_SOCKET_TAIL = len("/session_2026-12-01_20-13-05_950791_4194304/sockets/plasma_store")
_AF_UNIX_PATH_MAX = 107


def private_ray_temp_dir() -> str:
    """A fresh private directory (mkdtemp: mode 0700, random name) for a local Ray instance's sockets, logs
    and spilled objects, instead of Ray's shared, predictable /tmp/ray that another user can pre-create or
    link. Under $TMPDIR when Ray's socket paths fit there, else under /tmp; the caller removes it."""
    candidates = [tempfile.gettempdir(), "/tmp"]
    for base in candidates:
        if len(os.path.join(base, "aoti-ray-12345678")) + _RAY_SOCKET_TAIL <= _AF_UNIX_PATH_MAX and os.path.isdir(base):
            return tempfile.mkdtemp(prefix="aoti-ray-", dir=base)
    msg = (f"no temp directory short enough for Ray's sockets ({_AF_UNIX_PATH_MAX}-byte AF_UNIX limit): "
           f"tried {', '.join(candidates)}")
    raise LoadError(msg, fix="set TMPDIR to a short directory, or RAY_TMPDIR for Ray alone")


def application(model: Any, **options: Any) -> Any:
    """A Ray Serve application serving `model`; see toolchain.serve.deploy.application for the options."""
    try:
        from toolchain.serve import deploy
    except ImportError as exc:
        msg = f"serving needs Ray Serve, which is not importable here: {exc}"
        from toolchain.hostlib import pip_install

        raise LoadError(msg, fix=f"{pip_install('serve')} (Ray Serve)") from None
    return deploy.application(model, **options)
