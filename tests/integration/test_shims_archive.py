"""What the shims archive holds: only what plugins call (every host whole-archives it, so anything else in it
is linked into every host). The program-level code (the C API, Program, the CUDA program state and weight
upload) lives in the runtime library: no symbol of the shims archive names the C API (aoti_host_*) or the
plugin's container API (AOTInductor*)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def shims_archive_violations(archive: Path) -> list[str]:
    """Symbols of the archive (mangled, so a C++ function taking an AOTInductor or aoti_host_ type counts too)
    that belong to the program level: aoti_host_* defined here, AOTInductor* defined or referenced."""
    assert archive.is_file(), f"{archive} was not built"
    proc = subprocess.run(["nm", "-A", str(archive)], capture_output=True, text=True, check=True)
    bad = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[-1], parts[-2]
        defined = kind != "U"
        if (defined and "aoti_host_" in name) or "AOTInductor" in name:
            bad.append(line)
    return bad


def test_cpu_shims_archive_holds_no_program_level_code(host_build):
    archive = host_build.variant_dir / "obj" / "lib" / "libaoti_host_shims.a"
    assert shims_archive_violations(archive) == []
    # and the archive is what the hosts whole-archive: it defines the shims
    names = subprocess.run(["nm", "--defined-only", str(archive)], capture_output=True, text=True).stdout
    assert " T aoti_torch_cpu_addmm_out" in names
