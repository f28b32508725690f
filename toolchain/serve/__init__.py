"""Serving programs at scale: the KServe/Triton v2 inference protocol over HTTP (`protocol`, an ASGI app
without Ray or torch), what a replica serves (`backend`), and Ray Serve deployments whose replicas load
the program through toolchain.runtime and never import torch (`deploy`, the optional extra `serve`).

    from ray import serve
    from toolchain.serve import application
    serve.run(application("model.pt2", replicas=2, max_batch=8), route_prefix="/")

Each method of a program is a v2 model: the program's name serves its first method, and a program of
several methods also serves every method as `<name>.<method>`. See docs/serving.md."""

from __future__ import annotations

from typing import Any

from toolchain.errors import LoadError


def application(model: Any, **options: Any) -> Any:
    """A Ray Serve application serving `model`; see toolchain.serve.deploy.application for the options."""
    try:
        from toolchain.serve import deploy
    except ImportError as exc:
        msg = f"serving needs Ray Serve, which is not importable here: {exc}"
        raise LoadError(msg, fix="pip install -e '.[serve]' (ray[serve])") from None
    return deploy.application(model, **options)
