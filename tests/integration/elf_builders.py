"""Real ELF artifacts for the verifier's tests: fake plugins rendered from templates/fixtures and compiled
with gcc/g++, one per failure the verifier must name, plus their clean counterparts."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers import fixture_source
from toolchain.spec import load_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
ENTRIES_API = "AOTInductorModelContainerExtractConstantsMapEntries"


def required_entry_points() -> list[str]:
    return [e.name for e in load_spec().entry_points if e.required]


def render_plugin_source(name: str, imports=(), entry_points=None, weak_imports=()) -> str:
    eps = list(entry_points) if entry_points is not None else [*required_entry_points(), ENTRIES_API]
    src = fixture_source("fake_plugin.c.j2", description=name, imports=list(imports), entry_points=eps)
    for sym in weak_imports:
        src += f"\nextern void {sym}(void) __attribute__((weak));\n" \
               f"__attribute__((visibility(\"default\"))) void* weak_ref_{sym} = (void*)&{sym};\n"
    return src


def build(tmp: Path, name: str, *, imports=(), entry_points=None, extra: str = "", flags=(), cxx: bool = False,
          driver: str | None = None, weak_imports=(), shared: bool = True) -> Path:
    """Compile a fake plugin: the template's entry points and imports + `extra` source, with `flags`."""
    tmp.mkdir(parents=True, exist_ok=True)
    src = tmp / f"{name}.{'cpp' if cxx else 'c'}"
    body = render_plugin_source(name, imports, entry_points, weak_imports)
    if cxx:
        body = 'extern "C" {\n' + body + "\n}\n"
    src.write_text(body + "\n" + extra)
    out = tmp / (f"{name}.so" if shared else name)
    cc = driver or ("g++" if cxx else "gcc")
    cmd = [cc, *(["-shared", "-fPIC"] if shared else []), "-o", str(out), str(src), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return out


def build_lib(tmp: Path, soname: str, source: str, flags=()) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    src = tmp / f"{soname}.c"
    src.write_text(source)
    out = tmp / soname
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out), str(src), *flags],
                   check=True)
    return out


def set_machine(src: Path, dst: Path, machine: int) -> Path:
    data = bytearray(src.read_bytes())
    data[18:20] = machine.to_bytes(2, "little")
    dst.write_bytes(bytes(data))
    return dst
