"""`aoti-toolchain inspect FILE`: what a plugin, .pt2, host program or shared library is and needs."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from toolchain.elf.reader import PF_R, PF_W, PF_X, ElfError, ElfFile
from toolchain.spec import load_spec
from toolchain.verify import elf_members
from toolchain.verify.checks import ENTRIES_API, classify
from toolchain.verify.profiles import parse_version, vstr

FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC")


def _flags(f: int) -> str:
    return ("R" if f & PF_R else "") + ("W" if f & PF_W else "") + ("E" if f & PF_X else "")


def describe(label: str, elf: ElfFile) -> dict:
    spec = load_spec()
    kind = classify(elf)
    if kind == "host" and elf.is_program:
        kind = "host program"
    elif kind == "library" and elf.is_program:
        kind = "program"
    defined = elf.defined()
    undefined = [s for s in elf.symbols if not s.defined]
    eps = sorted(n for n in defined if n.startswith("AOTInductor"))
    required = [e.name for e in spec.entry_points if e.required]
    providers = {p.name: p for p in spec.providers}
    by_provider: dict[str, list[str]] = {}
    for s in undefined:
        if s.name.startswith("aoti_torch_"):
            continue
        for p in providers.values():
            if any(fnmatch.fnmatchcase(s.name, pat) for pat in p.symbol_patterns):
                by_provider.setdefault(p.name, []).append(s.name)
                break
    highest: dict[str, dict] = {}
    for s in undefined:
        parsed = parse_version(s.version) if s.version else None
        if parsed is None:
            continue
        fam, ver = parsed
        cur = highest.get(fam)
        if cur is None or ver > cur["_v"]:
            highest[fam] = {"_v": ver, "version": s.version, "symbol": s.name, "library": s.version_file}
    for h in highest.values():
        h.pop("_v")
    stack = elf.gnu_stack
    cxx = by_provider.get("libstdc++", [])
    return {
        "file": label,
        "kind": kind,
        "format": f"ELF{elf.elf_class} {'LSB' if elf.little_endian else 'MSB'} {elf.etype}",
        "machine": elf.machine,
        "interpreter": elf.interp,
        "soname": elf.soname,
        "needed": list(elf.needed),
        "runpath": list(elf.runpath),
        "rpath": list(elf.rpath),
        "entry_points": {"exported": eps, "missing_required": [n for n in required if n not in defined] if eps else [],
                         "entries_api": ENTRIES_API in defined},
        "shims": {"imported": sorted(s.name for s in undefined if s.name.startswith("aoti_torch_")),
                  "defined": sorted(n for n in defined if n.startswith("aoti_torch_"))},
        "cxx_runtime": {"libstdcxx_in_needed": "libstdc++.so.6" in elf.needed, "imported_symbols": len(cxx),
                        "examples": cxx[:8]},
        "imports_by_provider": {k: len(v) for k, v in sorted(by_provider.items())},
        "highest_versions": {f: highest[f] for f in FAMILIES if f in highest},
        "stack": {"gnu_stack": _flags(stack.flags) if stack else None, "executable": elf.exec_stack},
        "textrel": elf.textrel,
        "nodelete": elf.nodelete,
        "gnu_unique_symbols": sum(1 for s in elf.symbols if s.defined and s.binding == "GNU_UNIQUE"),
        "dynamic_symbols": len(elf.symbols),
    }


def inspect_path(path: Path) -> list[dict]:
    out = []
    for label, elf in elf_members(path):
        if isinstance(elf, ElfError):
            out.append({"file": label, "kind": "unreadable", "error": elf.rule, "message": str(elf)})
        else:
            out.append(describe(label, elf))
            _add_target(out[-1], path, label)
    return out


def _add_target(info: dict, path: Path, label: str) -> None:
    """The target section (toolchain.inspect_target) for plugins."""
    from toolchain.inspect_target import target_info

    if info.get("kind") == "plugin" or "!" in label:
        info["target"] = target_info(path, label)


def to_text(info: dict) -> str:
    if info["kind"] == "unreadable":
        return f"{info['file']}: unreadable [{info['error']}]: {info['message']}\n"
    ep = info["entry_points"]
    lines = [
        f"{info['file']}",
        f"  kind:         {info['kind']} ({info['format']}, {info['machine']})",
        f"  needed:       {', '.join(info['needed']) or '-'}",
        f"  runpath:      {':'.join(info['runpath']) or '-'}" + (f"  rpath: {':'.join(info['rpath'])}" if info["rpath"] else ""),
        f"  entry points: {len(ep['exported'])} exported"
        + (f"; missing required: {', '.join(ep['missing_required'])}" if ep["missing_required"] else "")
        + ("" if not ep["exported"] else ("; has the entries API" if ep["entries_api"] else "; NO entries API")),
        f"  shims:        {len(info['shims']['imported'])} imported"
        + (f" ({', '.join(info['shims']['imported'][:6])}{', ...' if len(info['shims']['imported']) > 6 else ''})"
           if info["shims"]["imported"] else "") + f", {len(info['shims']['defined'])} defined",
        f"  C++ runtime:  {info['cxx_runtime']['imported_symbols']} symbols imported, libstdc++.so.6 "
        + ("in DT_NEEDED" if info["cxx_runtime"]["libstdcxx_in_needed"] else "NOT in DT_NEEDED"),
    ]
    if info["imports_by_provider"]:
        lines.append("  imports from: " + ", ".join(f"{k} ({v})" for k, v in info["imports_by_provider"].items()))
    for fam, h in info["highest_versions"].items():
        lines.append(f"  needs {fam:8s}{h['version']} (first symbol needing it: {h['symbol']})")
    st = info["stack"]
    lines.append(f"  stack:        {st['gnu_stack'] or 'no PT_GNU_STACK'}"
                 + (" (EXECUTABLE)" if st["executable"] else "") + f"; textrel {'yes' if info['textrel'] else 'no'}"
                 + f"; NODELETE {'yes' if info['nodelete'] else 'no'}; GNU_UNIQUE {info['gnu_unique_symbols']}")
    from toolchain.inspect_target import target_lines

    lines += target_lines(info)
    return "\n".join(lines) + "\n"


__all__ = ["describe", "inspect_path", "vstr"]
