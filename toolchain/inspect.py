"""`aoti-toolchain inspect FILE`: what a plugin, .pt2, host program or shared library is and needs."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

from toolchain.elf.reader import PF_R, PF_W, PF_X, ElfError, ElfFile
from toolchain.spec import Spec, load_spec
from toolchain.torch_ops import op_of
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
        "ops": fallback_ops(elf, spec),
    }


# -- the ops a plugin calls ------------------------------------------------------------------------------

def fallback_ops(elf: ElfFile, spec: Spec) -> list[dict]:
    """The ATen ops a plugin calls through fallback shims (its imported aoti_torch_<device>_* that are one of
    torch's fallback ops, toolchain/torch_ops.json), each with whether this runtime implements it (shims.toml;
    a cuda shim only in the runtime's CUDA build)."""
    ours = {s.name for s in spec.shims}
    out = []
    for name in sorted({s.name for s in elf.symbols if not s.defined and s.name.startswith("aoti_torch_")}):
        known = op_of(name)
        if known is not None:
            op, device = known
            out.append({"op": op.label, "shim": name, "device": device, "since": op.since,
                        "implemented": name in ours})
    return out


def ops_text(ops: list[dict]) -> list[str]:
    """The ops section of the text output."""
    if not ops:
        return []
    lacking = sum(1 for o in ops if not o["implemented"])
    proxy = any(o["device"] == "proxy executor" for o in ops)
    lines = [f"  ops:          {len(ops)} called through fallback shims"
             + (" or torch's proxy executor" if proxy else "")
             + (f", {lacking} NOT implemented by this runtime" if lacking else ", all implemented by this runtime")]
    width = max(len(o["op"]) for o in ops)

    def note(o: dict) -> str:
        if o["implemented"]:
            return ""
        return "  (NOT implemented: only a libtorch host runs it)" if o["device"] == "proxy executor" else \
            "  (NOT implemented)"

    lines += [f"    {o['op']:{width}s}  {o['shim']}{note(o)}" for o in ops]
    return lines


def _dim_text(d) -> str:
    if isinstance(d, dict):
        span = f"{d.get('min', 0)}..{d['max'] if 'max' in d else ''}"
        return f"{d['expr']}={span}" if isinstance(d.get("expr"), str) else span
    return str(d)


def layout_name(strides: object, rank: int) -> str | None:
    """contiguous, channels_last, channels_last_3d or strides=[...]: the order of `strides` (the contract's, at
    the example sizes); None when there are none to read."""
    if not isinstance(strides, list) or len(strides) != rank or not all(type(x) is int for x in strides):
        return None
    order = sorted(range(rank), key=lambda d: (-strides[d], d))
    if order == list(range(rank)):
        return "contiguous"
    if rank in (4, 5) and order == [0, *range(2, rank), 1]:
        return "channels_last" if rank == 4 else "channels_last_3d"
    return f"strides={strides}"


def _tensors_of(entries: object) -> list[dict]:
    out: list[dict] = []
    if not isinstance(entries, list):
        return out
    for t in entries:
        if isinstance(t, dict):
            raw = t.get("shape")
            shape: list = raw if isinstance(raw, list) else []
            item = {"name": str(t.get("name", "")), "dtype": str(t.get("dtype", "?")), "shape": shape,
                    "sizes": "[" + ", ".join(_dim_text(d) for d in shape) + "]",
                    "strides": t.get("strides") if isinstance(t.get("strides"), list) else None,
                    "layout": layout_name(t.get("strides"), len(shape))}
            if isinstance(t.get("path"), list):
                item["path"] = t["path"]
            out.append(item)
    return out


def _symbols_of(contract: dict) -> list[dict]:
    """Each size symbol with its range and the input dimensions that give it (where the runtime binds it)."""
    raw = contract.get("symbols")
    out = []
    for sym in raw if isinstance(raw, list) else []:
        if not isinstance(sym, dict) or not isinstance(sym.get("name"), str):
            continue
        uses = [f"{t.get('name', i)}:{d}" for i, t in enumerate(contract.get("inputs") or []) if isinstance(t, dict)
                for d, dim in enumerate(t.get("shape") or []) if isinstance(dim, dict) and dim.get("expr") == sym["name"]]
        out.append({"name": sym["name"], "min": sym.get("min", 0), "max": sym.get("max"), "inputs": uses})
    return out


def model_facts(path: Path, plugin: dict | None = None) -> dict | None:
    """What a .pt2 package (or a bare plugin .so) holds as a model: its contract (inputs and outputs with dtypes
    and size ranges; None without one), its constants (count, bytes, embedded in the plugin or in a blob) and the
    torch that built it. `plugin`: describe()'s result for a bare plugin. None for a file that is neither."""
    from toolchain.export import CONSTANTS_ENTRY, CONTRACT_ENTRY, constant_layouts
    from toolchain.pt2 import PackageError, open_package

    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError:
        return None
    if magic == b"\x7fELF":
        if plugin is None:
            return None
        return {"has_contract": False, "inputs": None, "outputs": None,
                "constants": {"count": None, "bytes": None, "where": "embedded or in a separate blob (a bare "
                              "plugin doesn't record which: inspect its .pt2)"},
                "torch": ">= 2.13" if plugin["entry_points"]["entries_api"] else "< 2.13 (no entries API)"}
    if magic != b"PK\x03\x04":
        return None
    try:
        with open_package(path) as pkg:
            names = list(pkg.members)
            contract_name = next((n for n in names if n.endswith("/" + CONTRACT_ENTRY)), None)
            contract = None
            if contract_name is not None:
                try:
                    contract = json.loads(pkg.read(contract_name))
                except (ValueError, UnicodeDecodeError):
                    contract = None
            wrappers = [n for n in names if n.endswith(".wrapper.cpp")]
            wrapper_src = pkg.read(wrappers[0]).decode(errors="replace") if len(wrappers) == 1 else None
            layouts = constant_layouts(wrapper_src) if wrapper_src is not None else None
            blobs = [n for n in names if n.endswith("_weights.blob")]
            blob_bytes = sum(pkg.members[n].size for n in blobs) if blobs else 0
            has_layouts = any(n.endswith("/" + CONSTANTS_ENTRY) for n in names)
    except PackageError:
        return None
    constants: dict = {"count": len(layouts) if layouts is not None else None,
                       "bytes": sum(c["data_size"] for c in layouts) if layouts is not None else None,
                       "where": "blob" if blobs else "embedded"}
    if blobs:
        constants.update({"blob_bytes": blob_bytes, "layouts_recorded": has_layouts})
    if not isinstance(contract, dict):
        return {"has_contract": False, **_derived(wrapper_src), "constants": constants, "torch": None}
    return {"has_contract": True, "contract_source": "recorded", "inputs": _tensors_of(contract.get("inputs")),
            "outputs": _tensors_of(contract.get("outputs")), "symbols": _symbols_of(contract), "constants": constants,
            "torch": str(contract["torch"]) if contract.get("torch") else None}


def _derived(wrapper_src: str | None) -> dict:
    """A package without a recorded contract: the inputs and outputs derived from what torch generated
    (toolchain.torch_contract; outputs None where the source doesn't say), or why none can be."""
    from toolchain.torch_contract import Underivable, derive

    if wrapper_src is None:
        return {"contract_source": None, "inputs": None, "outputs": None,
                "contract_note": "no single generated wrapper source to derive a contract from"}
    try:
        c = derive(wrapper_src).contract
    except Underivable as exc:
        return {"contract_source": None, "inputs": None, "outputs": None, "contract_note": str(exc)}
    return {"contract_source": "derived", "inputs": _tensors_of(c["inputs"]),
            "outputs": _tensors_of(c["outputs"]) if c["outputs"] is not None else None, "symbols": _symbols_of(c)}


def model_text(m: dict) -> list[str]:
    """The model section of `inspect`'s text output."""
    lines = []
    if m["has_contract"]:
        lines.append("  contract:     yes (the host checks every input against it)")
        for sym in m.get("symbols") or []:
            span = f"{sym['min']}..{'' if sym['max'] is None else sym['max']}"
            where = f" (from {', '.join(sym['inputs'])})" if sym["inputs"] else ""
            lines.append(f"    size   {sym['name']}: {span}{where}")
        for kind in ("inputs", "outputs"):
            for t in m[kind]:
                layout = t.get("layout")
                extra = f" {layout} (strides {t['strides']} at the example sizes)" if layout not in (None, "contiguous") \
                    else ""
                lines.append(f"    {kind[:-1]:6s} {t['name'] or '?'}: {t['dtype']}{t['sizes']}{extra}")
    elif m.get("contract_source") == "derived":
        lines.append("  contract:     none recorded; derived from torch's generated input checks (the plugin checks "
                     "its own inputs; aoti-toolchain contract add records one, checked by the host)")
        for sym in m.get("symbols") or []:
            span = f"{sym['min']}..{'' if sym['max'] is None else sym['max']}"
            where = f" (from {', '.join(sym['inputs'])})" if sym["inputs"] else ""
            lines.append(f"    size   {sym['name']}: {span}{where}")
        for t in m["inputs"]:
            layout = f" {t['layout']}" if t.get("layout") not in (None, "contiguous") else ""
            lines.append(f"    input  {t['name'] or '?'}: {t['dtype']}{t['sizes']}{layout}")
        for t in m["outputs"] or []:
            lines.append(f"    output {t['name'] or '?'}: {t['dtype']}{t['sizes']}")
        if m["outputs"] is None:
            lines.append("    outputs: not determinable from the source (contract add records them from a run)")
    else:
        note = f": {m['contract_note']}" if m.get("contract_note") else ""
        lines.append(f"  contract:     none{note} (the plugin checks its own inputs; re-export with aoti-toolchain "
                     "export, or aoti-toolchain contract add, to record one)")
    c = m["constants"]
    if c["count"] is None:
        lines.append(f"  constants:    {c['where']}")
    else:
        lines.append(f"  constants:    {c['count']} ({c['bytes']:,} bytes), {c['where']}"
                     + (f" ({c['blob_bytes']:,} bytes of blob)" if c["where"] == "blob" else ""))
    lines.append(f"  torch:        {m['torch'] or 'not recorded'}")
    return lines


def inspect_path(path: Path) -> list[dict]:
    out: list[dict] = []
    for label, elf in elf_members(path):
        if isinstance(elf, ElfError):
            out.append({"file": label, "kind": "unreadable", "error": elf.rule, "message": str(elf)})
        else:
            out.append(describe(label, elf))
            _add_target(out[-1], path, label)
    _add_proxy_ops(path, out)
    plugins = [i for i in out if i["kind"] == "plugin"]
    if len(plugins) == 1:  # a .pt2 of one model, or a bare plugin
        facts = model_facts(path, plugins[0])
        if facts is not None:
            plugins[0]["model"] = facts
    _add_torch(plugins)
    return out


def _add_torch(plugins: list[dict]) -> None:
    """Each plugin's torch section (toolchain.torch_window): the release that wrote it (recorded by our export, else
    inferred against the torch-version matrix), the supported window, and the imports this runtime lacks."""
    from toolchain.torch_window import Record, verdict

    if not plugins:
        return
    record = Record.load()
    names = {s.name for s in load_spec().shims}
    for info in plugins:
        recorded = (info.get("model") or {}).get("torch") if (info.get("model") or {}).get("has_contract") else None
        info["torch"] = verdict(record, info["entry_points"]["exported"], info["shims"]["imported"], names, recorded)


def _add_proxy_ops(path: Path, infos: list[dict]) -> None:
    """The ops a plugin runs through torch's proxy executor (no C shim; only a libtorch host runs them): named
    from the package's <stem>.json, or one unnamed entry for a bare plugin."""
    from toolchain.verify import proxy_ops
    from toolchain.verify.checks import PROXY_EXECUTOR

    users = [i for i in infos if i.get("kind") == "plugin" and PROXY_EXECUTOR in i["shims"]["imported"]]
    if not users:
        return
    named = proxy_ops(path) if "!" in users[0]["file"] else {}
    for info in users:
        for op in named.get(info["file"]) or ("(ops without a C shim: inspect the .pt2 to name them)",):
            info["ops"].append({"op": op, "shim": PROXY_EXECUTOR, "device": "proxy executor", "since": None,
                                "implemented": False})


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
    lines += ops_text(info["ops"])
    if info.get("model") is not None:
        lines.extend(model_text(info["model"]))
    if info.get("torch") is not None:
        from toolchain.torch_window import verdict_text

        lines.extend(verdict_text(info["torch"]))
    from toolchain.inspect_target import target_lines

    lines += target_lines(info)
    return "\n".join(lines) + "\n"


__all__ = ["describe", "inspect_path", "vstr"]
