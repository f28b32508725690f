"""The C++ runtime's floors (docs/architecture.md, "Runtime floors"): runtime/src/ is in layers, lowest first,
base/ < shims/ < host/ < the files on top (c_api.cpp, library.cpp), and an `#include "..."` never runs back
up. A file includes headers of its own layer and the layers below it; the public headers (aoti_host/...,
runtime/include/ and the generated ones) are allowed anywhere and include nothing internal. Internal headers
are named from runtime/src ("base/zip.h", "host/method.h"), so the layer of every include is its first
folder. What import-linter does for the Python floors (pyproject.toml)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "runtime" / "src"
PUBLIC = ROOT / "runtime" / "include"
#: the layers of runtime/src, lowest first; files directly in runtime/src are the top floor
LAYERS = ("base", "shims", "host")
TOP = len(LAYERS)
SUFFIXES = {".h", ".cpp", ".cu", ".inc"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(rel: str) -> int | None:
    """The floor of a path relative to runtime/src: its first folder's index, TOP for a file on top, None
    for a folder that is no layer."""
    parts = rel.split("/")
    if len(parts) == 1:
        return TOP
    return LAYERS.index(parts[0]) if parts[0] in LAYERS else None


def violations(files: dict[str, str], exists=None) -> list[str]:
    """What breaks the floors in ``files`` (path relative to runtime/src -> text): an include of a higher
    floor, one not named from runtime/src, one of a file that isn't there, a file outside every layer."""
    exists = exists or (lambda rel: rel in files)
    bad = []
    for rel, text in sorted(files.items()):
        mine = layer_of(rel)
        if mine is None:
            bad.append(f"{rel}: in no layer (runtime/src/{rel.split('/')[0]}/ is not one of {', '.join(LAYERS)})")
            continue
        for name in INCLUDE.findall(text):
            if name.startswith("aoti_host/"):
                continue  # a public or generated header: allowed anywhere
            if name.startswith(".") or not exists(name):
                bad.append(f'{rel}: #include "{name}" is not a header named from runtime/src '
                           f'(write it as "<layer>/...", e.g. "base/zip.h")')
                continue
            theirs = layer_of(name)
            if theirs is None or theirs > mine:
                where = "the top floor" if theirs == TOP else f"{name.split('/')[0]}/"
                bad.append(f'{rel}: #include "{name}" runs back up, from {rel.split("/")[0]}/ to {where}')
    return bad


def _sources(top: Path) -> dict[str, str]:
    return {p.relative_to(top).as_posix(): p.read_text(errors="replace")
            for p in sorted(top.rglob("*")) if p.is_file() and p.suffix in SUFFIXES}


def test_no_include_runs_back_up():
    files = _sources(SRC)
    assert {"c_api.cpp", "library.cpp"} <= set(files)
    assert all(any(rel.startswith(layer + "/") for rel in files) for layer in LAYERS), "a layer is empty"
    bad = violations(files)
    assert not bad, "\n".join(bad)


def test_public_headers_include_nothing_internal():
    """The public headers are allowed on every floor (and installed): they include only public ones."""
    for path in sorted(PUBLIC.rglob("*.h")):
        for name in INCLUDE.findall(path.read_text()):
            assert name.startswith("aoti_host/"), f"{path.relative_to(ROOT)}: #include \"{name}\""


def test_other_trees_name_internal_headers_from_runtime_src():
    """Tests, tools and fuzz targets include runtime/src's headers the same way ("base/zip.h"), never by a
    relative path into src/."""
    for path in sorted((ROOT / "runtime").rglob("*")):
        if not path.is_file() or path.suffix not in {".h", ".cpp", ".cu", ".c"} or SRC in path.parents:
            continue
        for name in INCLUDE.findall(path.read_text(errors="replace")):
            assert "src/" not in name, f"{path.relative_to(ROOT)}: #include \"{name}\""


def test_the_check_catches_each_kind_of_defect():
    """The checker itself, on a made-up tree: each defect is reported, the allowed includes are not."""
    ok = {
        "base/zip.h": '#include "base/crc32.h"\n#include "aoti_host/error.h"\n',
        "base/crc32.h": "",
        "shims/tensor.cpp": '#include "base/zip.h"\n#include "shims/cpu/strided.h"\n',
        "shims/cpu/strided.h": "",
        "host/method.h": '#include "aoti_host/c_api.h"\n#include "shims/cpu/strided.h"\n#include "base/zip.h"\n',
        "c_api.cpp": '#include "host/method.h"\n#include "shims/cpu/strided.h"\n',
    }
    assert violations(ok) == []
    cases = {
        "base/json.cpp": ('#include "shims/cpu/strided.h"\n', "runs back up, from base/ to shims/"),
        "shims/ops/pool.cpp": ('#if CUDA_AVAILABLE\n#  include "host/method.h"\n#endif\n',
                               "runs back up, from shims/ to host/"),
        "host/program.cpp": ('#include "c_api.cpp"\n', "runs back up, from host/ to the top floor"),
        "shims/cpu/conv.cpp": ('#include "../cpu_kernels.h"\n', "not a header named from runtime/src"),
        "shims/cpu/copy.cpp": ('#include "strided.h"\n', "not a header named from runtime/src"),
        "util/extra.cpp": ("", "in no layer"),
    }
    for rel, (text, why) in cases.items():
        bad = violations({**ok, rel: text})
        assert len(bad) == 1 and bad[0].startswith(rel + ":") and why in bad[0], (rel, bad)
