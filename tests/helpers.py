"""Helpers the tests (and a few benchmarks) share that need no pytest and change nothing on import: fixture
plugins rendered from templates/fixtures and compiled, inputs saved for aoti-run, free ports for servers."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def fixture_source(template: str, **params) -> str:
    """templates/fixtures/<template> rendered with `params` (jinja2; an undefined name is an error)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(REPO_ROOT / "templates")), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.get_template(f"fixtures/{template}").render(**params)


def build_fixture(template: str, out: Path, flags: tuple[str, ...] = (), **params) -> Path:
    """templates/fixtures/<template> rendered with `params` into out's .c beside it and compiled by gcc into the
    shared library `out` (with `flags`)."""
    src = out.with_suffix(".c")
    src.write_text(fixture_source(template, **params))
    subprocess.run(["gcc", "-shared", "-fPIC", *flags, "-o", str(out), str(src)], check=True)
    return out


def npy_args(inputs, folder: Path) -> list[str]:
    """Each input tensor saved as folder/in<i>.npy; the aoti-run (and `aoti-toolchain run`) arguments naming
    them in order: -i PATH ..."""
    import numpy as np

    args = []
    for i, x in enumerate(inputs):
        np.save(folder / f"in{i}.npy", x.numpy())
        args += ["-i", str(folder / f"in{i}.npy")]
    return args


def free_ports(n: int) -> list[int]:
    """`n` distinct ports that were free a moment ago: all are bound at once, so none is handed out twice."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def edited_copy(src: Path, dst: Path, old: str, new: str) -> Path:
    """`src`'s text with its first `old` (which must be there) replaced by `new`, written to `dst`: a spec
    file broken in one known place."""
    text = src.read_text()
    assert old in text, f"{old!r} is not in {src}"
    dst.write_text(text.replace(old, new, 1))
    return dst
