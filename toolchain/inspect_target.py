"""inspect's target section: what a plugin needs of the machine, as its package records it (export's target
record) and as its code proves it (decoded now: toolchain.isa, toolchain.cuda_bin)."""

from __future__ import annotations

from pathlib import Path


def target_info(path: Path, label: str) -> dict | None:
    """The section for one plugin (`label` = path or path!member); None for a file that is not x86-64 ELF."""
    from toolchain.isa import IsaDecodeError, load_isa_spec, scan_elf
    from toolchain.target import _plugin_cuda, highest_entry, read_record

    data, record, gpu = _read(path, label)
    if data is None:
        return None
    try:
        scan = scan_elf(data, label)
    except IsaDecodeError:
        return None
    from toolchain.elf.reader import ElfError, parse_elf

    try:
        needed = parse_elf(data, label).needed
    except ElfError:
        needed = ()
    spec = load_isa_spec()
    top = scan.highest(spec)
    decoded = {"cpu_isa": scan.level, "extensions": sorted(scan.extensions),
               "highest": highest_entry(top) if top else None,
               "cuda": _plugin_cuda(data, label, gpu, needed)}
    if "!" in label:
        record = read_record(path)
    return {"recorded": record, "decoded": decoded, "torch_cpu_isa": _torch_cpu_isa(path, label)}


def _torch_cpu_isa(path: Path, label: str) -> str | None:
    """AOTI_CPU_ISA of the plugin's *_metadata.json (torch's claim, shown only: its -march=native code can need
    more, so neither verify nor the runtime's preflight takes it for what the code needs)."""
    if "!" not in label:
        return None
    import json

    from toolchain.pt2 import open_package

    member = label.split("!", 1)[1]
    with open_package(path) as pkg:
        meta = next((n for n in pkg.members if n.endswith("_metadata.json")
                     and n.rsplit("/", 1)[0] == member.rsplit("/", 1)[0]), None)
        try:
            value = json.loads(pkg.read(meta)).get("AOTI_CPU_ISA") if meta else None
        except (ValueError, AttributeError):
            return None
    return value if isinstance(value, str) else None


def _read(path: Path, label: str):
    if "!" not in label:
        return path.read_bytes(), None, {}
    from toolchain.pt2 import open_package

    member = label.split("!", 1)[1]
    with open_package(path) as pkg:
        gpu = {n: pkg.read(n) for n in pkg.members if n.endswith((".cubin", ".fatbin"))}
        return pkg.read(member), None, gpu


def target_lines(info: dict) -> list[str]:
    from toolchain.spec.records import RECORDS

    t = info.get("target")
    if not t:
        return []
    d, r = t["decoded"], t["recorded"]
    rec, k, kh, kc = RECORDS.target, RECORDS.target_cpu, RECORDS.target_cpu_highest, RECORDS.target_cuda
    lines = []
    if r is None:
        lines.append("  target:       no record in the package (not exported by aoti-toolchain, or older); from its code:")
    else:
        cpu = r.get(rec.cpu) or {}
        bits = cpu.get(k.vector_bits)
        lines.append(f"  target:       exported with --cpu-isa {cpu.get(k.requested, '?')} (-march={cpu.get(k.march, '?')}, "
                     f"{bits or 'scalar'}{'-bit' if bits else ''} kernels); recorded: needs {cpu.get(k.isa, '?')}")
    hi = d["highest"]
    lines.append(f"  cpu isa:      {d['cpu_isa']} (decoded: {', '.join(d['extensions']) or 'baseline only'})"
                 + (f"; highest {hi[kh.extension]}: `{hi[kh.instruction]}` in {hi[kh.function]}" if hi else ""))
    if t.get("torch_cpu_isa"):
        lines.append(f"  torch says:   AOTI_CPU_ISA {t['torch_cpu_isa']} (its metadata; not trusted: the decoded code decides)")
    if r is not None and (r.get(rec.cpu) or {}).get(k.extensions) not in (None, d["extensions"]):
        lines.append("  cpu isa:      the RECORD DIFFERS from the code: the package was changed after export")
    cuda = d["cuda"]
    if cuda:
        lines.append(f"  cuda:         SASS {', '.join(f'sm_{a}' for a in cuda[kc.sass]) or 'none'}; PTX "
                     f"{', '.join(f'compute_{a}' for a in cuda[kc.ptx]) or 'none'}"
                     + (f" (PTX ISA {cuda[kc.ptx_isa]})" if cuda[kc.ptx_isa] else "")
                     + (f"; needs CUDA {cuda[kc.cuda]} (driver >= {cuda[kc.min_driver]})" if cuda[kc.cuda] else ""))
    return lines
