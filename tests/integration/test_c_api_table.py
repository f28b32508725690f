"""The C API's function table (aoti_host_get_api, c_api.toml [[table]]) in the built runtime: its entries are
the exported functions in the header's order, a caller newer than the runtime is refused with both versions
named, and the Python module's compiled path (runtime/python/fastrun.c), which binds the runtime through it,
refuses a table older than its own header with a clear error instead of calling past its end."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from toolchain import codegen
from toolchain.runtime import _abi
from toolchain.spec import load_c_api, load_spec

ROOT = Path(__file__).resolve().parents[2]
C_API = load_c_api()


@pytest.fixture(scope="module")
def lib(host_build) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(host_build.lib), mode=ctypes.RTLD_GLOBAL)
    _abi.bind(lib)
    return lib


def test_table_entries_are_the_exported_functions(lib):
    address = lib.aoti_host_get_api(_abi.API_VERSION)
    assert address
    names = [n for row in C_API.table for n in row]
    version, size = (ctypes.c_uint32 * 2).from_address(address)
    assert version == _abi.API_VERSION and size == 8 + ctypes.sizeof(ctypes.c_void_p) * len(names)
    entries = (ctypes.c_void_p * len(names)).from_address(address + 8)
    exported = [ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in names]
    assert list(entries) == exported and all(exported)
    assert lib.aoti_host_get_api(1) == address  # every version up to the runtime's gets the same table


def test_a_caller_newer_than_the_runtime_is_refused_naming_both_versions(lib):
    assert lib.aoti_host_get_api(_abi.API_VERSION + 1) is None
    msg = lib.aoti_host_last_error().decode()
    assert f"version {_abi.API_VERSION + 1}" in msg and f"versions 1 to {_abi.API_VERSION}" in msg
    assert "use a runtime at least as new as the caller" in msg
    assert lib.aoti_host_get_api(0) is None and "pass AOTI_HOST_API_VERSION" in lib.aoti_host_last_error().decode()
    assert lib.aoti_host_get_api(_abi.API_VERSION) and lib.aoti_host_last_error() == b""


def test_the_compiled_path_refuses_an_older_table(host_build):
    """A table whose version or size is below the module's header: bind() raises before using any entry."""
    from toolchain import runtime

    fast = runtime.library(host_build.lib).fast
    assert fast is not None and fast.API_VERSION == _abi.API_VERSION
    old = (ctypes.c_uint32 * 2)(_abi.API_VERSION - 1, 8)
    with pytest.raises(ValueError, match=rf"table is version {_abi.API_VERSION - 1} \(8 bytes\); this module was "
                                         rf"built for version {_abi.API_VERSION}.*rebuild the runtime and the module"):
        fast.bind(ctypes.addressof(old), {}, {})
    short = (ctypes.c_uint32 * 2)(_abi.API_VERSION, 16)
    with pytest.raises(ValueError, match=r"\(16 bytes\)"):
        fast.bind(ctypes.addressof(short), {}, {})


def _newer_header(tmp_path: Path) -> Path:
    """The generated headers of a spec one table version ahead of this runtime (a function appended)."""
    text = (ROOT / "toolchain/spec/c_api.toml").read_text()
    text = text.replace("\n[[table]]\nversion = 1", '\n[[function]]\nname = "aoti_host_later"\n'
                        'prototype = "int aoti_host_later(void)"\n\n[[table]]\nversion = 1')
    text += f'\n[[table]]\nversion = {_abi.API_VERSION + 1}\nfunctions = ["aoti_host_later"]\n'
    spec = tmp_path / "c_api.toml"
    spec.write_text(text)
    rendered = codegen.render(load_spec(), ("core", "cpu"), c_api=load_c_api(spec))
    out = tmp_path / "gen"
    for rel, body in rendered.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(body)
    return out / "include"


def test_a_module_built_for_a_newer_runtime_fails_to_load_with_the_fix(host_build, tmp_path):
    """The real mismatch: the compiled path built from a newer header beside an older runtime. Loading the
    library says which versions disagree and how to fix it, instead of binding a table without the entries."""
    cc = shutil.which("cc") or shutil.which("gcc")
    np = pytest.importorskip("numpy")
    include = sysconfig.get_paths().get("include") or ""
    if cc is None or not (Path(include) / "Python.h").is_file():
        pytest.skip("needs a C compiler and Python.h (as the SCons build of the module does)")
    gen_include = _newer_header(tmp_path)
    assert f"#define AOTI_HOST_API_VERSION {_abi.API_VERSION + 1}" in (gen_include / "aoti_host/c_api.h").read_text()
    place = tmp_path / "lib"
    place.mkdir()
    shutil.copy2(host_build.lib, place / "libaoti_host.so")  # the runtime as built: this version's table
    subprocess.run([cc, "-std=c11", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-DPy_LIMITED_API=0x030A0000",
                    f"-I{ROOT / 'runtime/include'}", f"-I{gen_include}", f"-isystem{include}",
                    f"-isystem{np.get_include()}", "-o", str(place / "_aoti_fastrun.abi3.so"),
                    str(ROOT / "runtime/python/fastrun.c")], check=True)
    script = textwrap.dedent(f"""
        from toolchain.errors import LoadError
        from toolchain.runtime import Library
        try:
            Library({str(place / "libaoti_host.so")!r})
        except LoadError as exc:
            print("LoadError:", exc)
            print("fix:", exc.fix)
        else:
            print("loaded")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    out = proc.stdout
    assert "LoadError:" in out, out + proc.stderr
    assert f"asks for C API table version {_abi.API_VERSION + 1}" in out
    assert f"provides versions 1 to {_abi.API_VERSION}" in out
    assert "_aoti_fastrun.abi3.so" in out and "AOTI_HOST_PYTHON_FAST=0" in out and "scons" in out
