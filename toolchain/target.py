"""What a plugin needs of the machine it runs on, and the export options that choose it (docs/targets.md).

`cpu_isa_configs` turns `--cpu-isa` into inductor's configs; `describe` reads a built package back (the
plugin's code, decoded by toolchain.isa, and the GPU images it carries, read by toolchain.cuda_bin) into the
record export writes as `<model>/extra/aoti_toolchain_target.json` and the runtime's preflight reads before
dlopen; `read_record` reads that entry back (inspect, verify).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolchain.errors import InputError
from toolchain.spec import load_abi
from toolchain.spec.cpu_isa import NATIVE, load_isa_spec
from toolchain.spec.records import RECORDS

_ISA = load_isa_spec()  # the --cpu-isa choices, their -march and the default: toolchain/spec/cpu_isa.toml
CPU_ISA_CHOICES = _ISA.export_choices
DEFAULT_CPU_ISA = _ISA.default_export
_ARCH_RE = re.compile(r"^(?:sm_)?(\d{2,3})$")
# No vector ISA anywhere, the wrapper's compile included. vec_isa_ok=False alone is not enough: inductor's
# list of working ISAs (cpu_vec_isa.valid_vec_isa_list, cached per process) is first computed outside the
# export's config patch, so the wrapper would still get the widest ISA's -m flags (measured: an x86-64-v2
# export used AVX-512 in AOTInductorModel::const_run_impl). A simdlen no ISA has makes pick_vec_isa() choose
# none whatever that cache holds.
_SCALAR: dict[str, Any] = {"cpp.vec_isa_ok": False, "cpp.simdlen": 1}


def cpu_isa_configs(cpu_isa: str, probed: tuple[str, int] | None, vector: bool = True) -> tuple[dict[str, Any], str]:
    """Inductor configs for `cpu_isa` and the -march they compile with ("native" for native).

    vector=False (a CUDA plugin, or scalar kernels asked for): only -march, and no vector kernels.
    `probed` is export's probe result (the widest vector ISA whose kernels build and load here): a
    requested ISA wider than it can't be built on this machine (inductor only builds ISAs its CPU has)."""
    if cpu_isa not in CPU_ISA_CHOICES:
        msg = f"cpu_isa={cpu_isa!r}: not one of {', '.join(CPU_ISA_CHOICES)}"
        raise InputError(msg, fix=f"use one of {', '.join(CPU_ISA_CHOICES)} (default {DEFAULT_CPU_ISA})")
    march = _ISA.march(cpu_isa)
    if cpu_isa == NATIVE:
        if not vector:
            return dict(_SCALAR), march
        return ({"cpp.vec_isa_ok": True, "cpp.simdlen": probed[1]} if probed else {}), march
    bits = _ISA.vec_bits[march]
    cfg: dict[str, Any] = {"cpp.march": march}
    if bits == 0 or not vector:
        cfg.update(_SCALAR)  # inductor has no SSE kernels on x86: scalar, compiled for the level
        return cfg, march
    if probed is None or probed[1] < bits:
        have = f"{probed[0]} ({probed[1]} bits)" if probed else "no vector ISA"
        msg = (f"cpu_isa={cpu_isa!r}: this machine builds {have} kernels against the host's Sleef; inductor "
               f"only compiles vector kernels for ISAs the build machine has")
        raise InputError(msg, fix=f"export on a machine with {cpu_isa}, or pass a lower --cpu-isa "
                         f"({', '.join(CPU_ISA_CHOICES[CPU_ISA_CHOICES.index(cpu_isa) + 1:])})")
    cfg.update({"cpp.vec_isa_ok": True, "cpp.simdlen": bits})
    return cfg, march


def parse_cuda_arch(text: str | Sequence[int | str] | None) -> list[int]:
    """"80,90" / ["sm_80", 90] -> [80, 90] (sorted, unique); InputError naming the bad entry."""
    if text is None:
        return []
    items = text.split(",") if isinstance(text, str) else list(text)
    out = set()
    for item in items:
        m = _ARCH_RE.match(str(item).strip())
        if m is None:
            msg = f"cuda_arch: {item!r} is not an architecture"
            raise InputError(msg, fix="give compute capabilities as 80,90 (or sm_80,sm_90)")
        out.add(int(m[1]))
    return sorted(out)


def cuda_arch_configs(archs: list[int], device_cc: int, ptx: bool) -> dict[str, Any]:
    """torch's own options: `cuda.arch` (the SASS inductor builds) and `aot_inductor.emit_multi_arch_kernel`
    (a fatbin per kernel with SASS and PTX of that arch). Inductor's Triton kernels are generated for the GPU
    the export runs on, so the architectures asked for must be that GPU's."""
    other = [a for a in archs if a != device_cc]
    if other:
        msg = (f"cuda_arch: sm_{', sm_'.join(map(str, other))} asked for, but inductor generates its Triton "
               f"kernels for the GPU it exports on (sm_{device_cc})")
        raise InputError(msg, fix=f"export on a GPU of each architecture (one package each), or give "
                         f"--cuda-arch {device_cc} --cuda-ptx so that newer GPUs JIT-compile its PTX")
    cfg: dict[str, Any] = {"cuda.arch": str(device_cc)}
    if ptx:
        cfg["aot_inductor.emit_multi_arch_kernel"] = True
    return cfg


def _plugin_cuda(so: bytes, label: str, members: dict[str, bytes], needed: tuple[str, ...]) -> dict[str, Any] | None:
    from toolchain.cuda_bin import cuda_of_ptx, driver_for_cuda, member_images, plugin_images

    images, problems = plugin_images(so, label)
    for name, data in members.items():
        found, bad = member_images(data, f"{label}:{name}")
        images += found
        problems += bad
    runtime = next((int(n.rsplit(".", 1)[1]) for n in needed if re.match(r"^libcudart\.so\.\d+$", n)), None)
    if not images and runtime is None and not any(n.startswith("libcuda.so") for n in needed):
        return None
    sass = sorted({i.sm for i in images if i.kind == "sass"})
    ptx = sorted({i.sm for i in images if i.kind == "ptx"})
    ptx_isa = max((i.ptx_version for i in images if i.ptx_version), default=None)
    cuda = [(runtime, 0)] if runtime else []
    if ptx_isa and cuda_of_ptx(ptx_isa):
        cuda.append(cuda_of_ptx(ptx_isa))  # type: ignore[arg-type]
    need = max(cuda, default=None)
    driver = driver_for_cuda(need) if need else None
    k = RECORDS.target_cuda
    return {k.sass: sass, k.ptx: ptx, k.ptx_isa: f"{ptx_isa[0]}.{ptx_isa[1]}" if ptx_isa else None,
            k.runtime: runtime, k.cuda: f"{need[0]}.{need[1]}" if need else None,
            k.min_driver: f"{driver[0]}.{driver[1]:02d}" if driver else None, k.problems: problems}


def describe(package: Path, requested: str | None = None, march: str | None = None,
             vec_bits: int | None = None) -> dict[str, Any]:
    """The target record of a .pt2: what its plugin's code uses (decoded, not assumed)."""
    from toolchain.elf.reader import parse_elf
    from toolchain.isa import load_isa_spec, scan_elf
    from toolchain.pt2 import open_package

    with open_package(package) as pkg:
        sos = [n for n in pkg.members if n.endswith(".so")]
        if len(sos) != 1:
            msg = f"{package}: {len(sos)} plugin .so members; a package holds one"
            raise InputError(msg, fix="re-export the package")
        so = pkg.read(sos[0])
        gpu = {n: pkg.read(n) for n in pkg.members if n.endswith((".cubin", ".fatbin"))}
    label = f"{package}!{sos[0]}"
    scan = scan_elf(so, label)
    spec = load_isa_spec()
    k, t = RECORDS.target_cpu, RECORDS.target
    cpu: dict[str, Any] = {k.isa: scan.level, k.extensions: sorted(scan.extensions),
                           k.beyond_isa: spec.beyond(list(scan.extensions), scan.level)}
    if requested is not None:
        cpu.update({k.requested: requested, k.march: march, k.vector_bits: vec_bits})
    top = scan.highest(spec)
    if top is not None:
        cpu[k.highest] = highest_entry(top)
    needed = parse_elf(so, label).needed
    return {t.schema: load_abi().package.target_schema, t.producer: "aoti-toolchain", t.cpu: cpu,
            t.cuda: _plugin_cuda(so, label, gpu, needed)}


def highest_entry(top: tuple[str, Any]) -> dict[str, str]:
    """target.cpu.highest: the highest extension the code uses, an instruction and the function it is in."""
    k = RECORDS.target_cpu_highest
    return {k.extension: top[0], k.instruction: top[1].example, k.function: top[1].function}


def add_record(package: Path, record: dict[str, Any]) -> None:
    import zipfile

    layout = load_abi().package
    with zipfile.ZipFile(package) as zf:
        prefixes = {n.split("/", 1)[0] for n in zf.namelist() if layout.plugin_dir in n}
    if len(prefixes) != 1:
        msg = f"{package}: expected one model directory in the package, found {sorted(prefixes)}"
        raise InputError(msg, fix="re-export the package")
    prefix = prefixes.pop()
    with zipfile.ZipFile(package, "a", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{prefix}/{load_abi().package.target_entry}", json.dumps(record, indent=1, sort_keys=True))


def read_record(package: Path) -> dict[str, Any] | None:
    """The target record of a package, None when it has none (not exported by us, or older)."""
    from toolchain.pt2 import open_package

    entry = load_abi().package.target_entry
    with open_package(package) as pkg:
        name = next((n for n in pkg.members if n.endswith("/" + entry)), None)
        if name is None:
            return None
        try:
            doc = json.loads(pkg.read(name))
        except ValueError as exc:
            msg = f"{package}!{name}: not JSON: {exc}"
            raise InputError(msg, fix="re-export the package") from exc
    return doc if isinstance(doc, dict) else None
