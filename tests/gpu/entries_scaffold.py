"""TEST SCAFFOLDING for the GPU tests: CUDA plugins with the constants-map entries call from a torch without it.

Torch 2.13 added AOTInductorModelContainerExtractConstantsMapEntries, through which the runtime reads a
plugin's constants: CUDA sessions and device weight sharing need it (tests/gpu/test_cuda_state.py). The GPU
machine's torch (2.11) writes plugins without it. `entries_call()` makes the exports inside it define the call:
inductor reads the plugin's C++ interface from torch/_inductor/codegen/aoti_runtime/interface.cpp while it
generates the wrapper, and inside the block that read gets the file with entries_call_scaffold.cpp (the call
as torch 2.13 defines it) appended. Nothing on disk changes; the exports outside the block, and every other
process, see torch's own file. With a torch that defines the call the block changes nothing.

    with entries_call() as patched:      # patched: True when this torch needed the addition
        export(...)
    require_entries_call(pt2)            # raises if the plugin does not define the call

Used by tests/gpu/prepare.py only; `python tests/gpu/entries_scaffold.py --print [INTERFACE_CPP]` prints the
interface source the exports compile (this torch's, or the file given: torch 2.11's, to compile-check it).
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

ENTRIES_CALL = "AOTInductorModelContainerExtractConstantsMapEntries"
MARKER = "aoti_toolchain_test_scaffold_entries_call"  # defined by the scaffold beside the call
SCAFFOLD = Path(__file__).with_name("entries_call_scaffold.cpp")
# What the appended definition uses from torch's interface.cpp (its includes and its error macro) and from
# model_container.h (the container's public methods): checked before anything is compiled with it.
NEEDS_IN_INTERFACE = ("#include <torch/csrc/inductor/aoti_runtime/model_container.h>",
                      "#define CONVERT_EXCEPTION_TO_ERROR_CODE", "AOTInductorModelContainerExtractConstantsMap(")


class ScaffoldError(RuntimeError):
    pass


def interface_path() -> Path:
    """torch/_inductor/codegen/aoti_runtime/interface.cpp of the torch this process imports."""
    import torch._inductor.codegen

    return Path(torch._inductor.codegen.__file__).parent / "aoti_runtime" / "interface.cpp"


def defines_entries_call(interface_source: str) -> bool:
    return f"AOTIRuntimeError {ENTRIES_CALL}(" in interface_source


def patched_source(interface_source: str) -> str:
    """torch's interface.cpp with the scaffold's definition of the entries call appended."""
    if defines_entries_call(interface_source):
        msg = f"this interface.cpp already defines {ENTRIES_CALL}: nothing to add"
        raise ScaffoldError(msg)
    missing = [s for s in NEEDS_IN_INTERFACE if s not in interface_source]
    if missing:
        msg = (f"interface.cpp lacks what {SCAFFOLD.name} relies on ({', '.join(missing)}): this torch's AOTI "
               "interface differs from 2.11's; adapt the scaffold to it")
        raise ScaffoldError(msg)
    return f"{interface_source.rstrip()}\n\n{SCAFFOLD.read_text()}"


@contextlib.contextmanager
def entries_call(interface_source: str | None = None) -> Iterator[bool]:
    """Inside the block, AOTInductor exports of this process define the entries call (see the module's doc);
    yields whether this torch needed the addition. interface_source: what inductor's interface.cpp is taken
    to hold instead of its text (a test stands in for an older torch with this torch's file less the call)."""
    from torch._inductor.codegen import cpp_wrapper_cpu

    path = interface_path()
    source = path.read_text() if interface_source is None else interface_source
    if defines_entries_call(source):
        yield False
        return
    patched = patched_source(source)
    if "open" in vars(cpp_wrapper_cpu):
        msg = "torch._inductor.codegen.cpp_wrapper_cpu.open is already replaced (nested entries_call blocks?)"
        raise ScaffoldError(msg)
    real = os.path.realpath(path)

    def scaffold_open(file, *args, **kwargs):
        # the wrapper generator reads interface.cpp with open(...).read(); every other file is read as usual
        if isinstance(file, str | os.PathLike) and os.path.realpath(file) == real:
            return io.StringIO(patched)
        return builtins.open(file, *args, **kwargs)

    cpp_wrapper_cpu.open = scaffold_open  # type: ignore[attr-defined]
    try:
        yield True
    finally:
        del cpp_wrapper_cpu.open


def _defined(pt2: Path) -> dict:
    from toolchain.elf.reader import parse_elf

    with zipfile.ZipFile(pt2) as zf:
        sos = [n for n in zf.namelist() if n.endswith(".so")]
        if len(sos) != 1:
            msg = f"{pt2}: expected one plugin .so in the package, found {sos}"
            raise ScaffoldError(msg)
        return parse_elf(zf.read(sos[0]), f"{pt2}!{sos[0]}").defined()


def require_entries_call(pt2: Path) -> bool:
    """Raise ScaffoldError unless the package's plugin defines (exports) the entries call; returns whether
    that definition is the scaffold's (else torch's own)."""
    defined = _defined(pt2)
    if ENTRIES_CALL not in defined:
        msg = (f"{pt2}: its plugin does not define {ENTRIES_CALL}: the scaffold did not reach the wrapper "
               "(inductor no longer reads interface.cpp through cpp_wrapper_cpu's open?)")
        raise ScaffoldError(msg)
    return MARKER in defined


def main(argv: list[str]) -> int:
    if argv[:1] != ["--print"] or len(argv) > 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    source = Path(argv[1]).read_text() if len(argv) == 2 else interface_path().read_text()
    sys.stdout.write(source if defines_entries_call(source) else patched_source(source))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    raise SystemExit(main(sys.argv[1:]))
