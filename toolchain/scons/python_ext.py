"""A CPython extension module on the limited API (the stable ABI of CPython 3.10 and later: one
`<name>.abi3.so` for every interpreter the package supports), built with the headers of the interpreter that
runs SCons and numpy's C API headers. Returns the installed file, or None (with a note) when numpy or Python.h
is missing: the Python runtime then uses its ctypes path alone."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

#: The oldest CPython whose stable ABI the module uses (pyproject's requires-python), as Py_LIMITED_API.
LIMITED_API = "0x030A0000"
#: The file suffix CPython >= 3.2 imports stable-ABI modules under (importlib.machinery.EXTENSION_SUFFIXES).
ABI3_SUFFIX = ".abi3.so"


def python_extension(env, dest, name: str, sources: list[str]):
    include = sysconfig.get_paths().get("include") or ""
    suffix = ABI3_SUFFIX
    # numpy's headers, asked of the interpreter (SCons's own process does not import numpy)
    proc = subprocess.run([sys.executable, "-c", "import numpy; print(numpy.get_include())"], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        print(f"scons: note: {name} not built: numpy is not importable by {sys.executable}")
        return None
    numpy_include = proc.stdout.strip()
    if not os.path.exists(os.path.join(include, "Python.h")):
        print(f"scons: note: {name} not built: no Python.h in {include} (install the Python development headers)")
        return None
    ext = env.Clone()
    # -isystem: the headers of Python and numpy are not held to this project's -Wextra -Werror
    ext.Append(AOTI_SYSTEM_CPPPATH=[include, numpy_include])
    ext.Append(CPPPATH=["#runtime/include", "$AOTI_GEN_DIR/include"])  # export.h; the generated c_api.h
    ext.Append(CPPDEFINES=[("Py_LIMITED_API", LIMITED_API)])
    objects = [ext.SharedObject(os.path.splitext(s)[0], s) for s in sources]
    module = ext.LoadableModule(f"lib/{name}", objects, SHLIBPREFIX="", SHLIBSUFFIX=suffix, LDMODULEPREFIX="",
                                LDMODULESUFFIX=suffix, LIBS=[], LINKFLAGS=[], LDMODULEFLAGS=["-shared"])
    return env.Install(dest, module)
