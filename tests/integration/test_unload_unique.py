"""Exported plugins unload (issue 29): export rebinds the plugin's GNU_UNIQUE symbols to GLOBAL
(toolchain/elf/patcher.py, rebind_unique), so dlclose unmaps it and two plugins keep their own template statics.

Measured before the change (torch 2.13 CPU, two packages loaded through the runtime): the first plugin loaded
stays mapped after its last close (it registered the 17 unique symbols, so glibc marked it NODELETE), and the
second one's GOT slots for those symbols point into the FIRST plugin (its own copies are unused). The
control test below rebuilds that state with lief from the exported plugins, so the GOT check is shown to see
sharing where it exists.

Every check is on real plugins in a real process: the runtime (toolchain.runtime over libaoti_host.so) loads
them RTLD_LOCAL from a memfd or a file, the outputs are compared with eager torch, the mappings are read from
/proc/self/maps, and each GOT slot is read from the plugin's memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np

from tests.conftest import REPO_ROOT

MODELS = ("mlp", "convnet")

# A static local of an inline function or template (_ZZ...), its guard (_ZGVZ...), or an inline variable
# from a header: what gcc makes GNU_UNIQUE and export turns GLOBAL (inductor's own flag, std::piecewise_construct).
INLINE_VARIABLES = ("inductor_cpu_integer_div_error_flag", "_ZSt19piecewise_construct")


def _statics(lief_binary) -> set[str]:
    import lief

    out = set()
    for s in lief_binary.dynamic_symbols:
        if s.shndx == 0 or s.type != lief.ELF.Symbol.TYPE.OBJECT:
            continue
        if s.name.startswith(("_ZZ", "_ZGVZ")) or s.name in INLINE_VARIABLES:
            out.add(s.name)
    return out


def _slots(so: Path) -> tuple[list[list], dict[str, str]]:
    """(GOT slots of the plugin's statics: [name, slot offset, definition offset], binding by name), via lief."""
    import lief

    b = lief.ELF.parse(str(so))
    names = _statics(b)
    binding = {s.name: s.binding.name for s in b.dynamic_symbols if s.name in names and s.shndx != 0}
    value = {s.name: s.value for s in b.dynamic_symbols if s.name in names and s.shndx != 0}
    slots = [[r.symbol.name, r.address, value[r.symbol.name]] for r in b.dynamic_relocations
             if r.has_symbol and r.symbol.name in names and r.type == lief.ELF.Relocation.TYPE.X86_64_GLOB_DAT]
    return slots, binding


def _plugin_so(pt2: Path, out: Path) -> Path:
    with zipfile.ZipFile(pt2) as zf:
        member = next(n for n in zf.namelist() if n.endswith(".wrapper.so"))
        out.write_bytes(zf.read(member))
    return out


# Runs in a fresh process (no torch): loads, runs, unloads and reloads two plugins through the runtime and prints
# one JSON line per step: each plugin's mappings, where each of its GOT slots points (its own copy, the other
# plugin, elsewhere) and whether its outputs matched eager torch. Every call into a plugin is made on a thread
# that ends before the step is measured, and each step ends with a dlclose that unloads something (`sweep`):
# glibc keeps an object while a thread that ran one of its thread_local constructors is alive (torch's
# interface.cpp has `thread_local std::string g_aoti_last_error`, touched by every AOTInductor* call) and
# unloads it at the next dlclose once those threads are gone. The last step shows that limit on the main thread.
_SCRIPT = r"""
import ctypes, json, os, sys, threading, time
import numpy as np
sys.path.insert(0, {root!r})
from toolchain import runtime
cfg = json.load(open({cfg!r}))
lib = runtime.library(cfg["lib"])
libdl = ctypes.CDLL(None)
libdl.dlopen.restype = ctypes.c_void_p
libdl.dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
libdl.dlclose.argtypes = [ctypes.c_void_p]

def lines(needle):
    return [l.split() for l in open("/proc/self/maps") if needle in l]

def base(needle):
    starts = [int(f[0].split("-")[0], 16) for f in lines(needle) if int(f[2], 16) == 0]
    return min(starts) if starts else None

def ranges():
    out = {{}}
    for name, p in cfg["plugins"].items():
        for f in lines(p["needle"]):
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            out.setdefault(name, []).append((lo, hi))
    return out

def got(name):
    b = base(cfg["plugins"][name]["needle"])
    where = {{}}
    r = ranges()
    for sym, slot, value in cfg["plugins"][name]["slots"]:
        v = ctypes.c_uint64.from_address(b + slot).value
        if v == b + value:
            w = "own"
        else:
            w = next((o for o, rs in r.items() if o != name and any(lo <= v < hi for lo, hi in rs)), "elsewhere")
        where[w] = where.get(w, 0) + 1
    return where

def run(prog, name):
    p = cfg["plugins"][name]
    outs = prog.run([np.load(f) for f in p["inputs"]])
    return len(outs) == len(p["expected"]) and all(
        np.allclose(o, np.load(e), rtol=1e-4, atol=1e-5) for o, e in zip(outs, p["expected"]))

def sweep():  # a dlclose that unloads an object makes glibc unload every other unused one
    h = libdl.dlopen(cfg["sweep"].encode(), os.RTLD_NOW | os.RTLD_LOCAL)
    assert h and libdl.dlclose(h) == 0

def in_thread(fn):
    box = {{}}
    def body():
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = repr(exc)
    t = threading.Thread(target=body)
    t.start()
    t.join()
    # join returns before the OS thread has run its thread_local destructors: wait until it is gone
    for _ in range(2000):
        if not os.path.exists("/proc/self/task/%d" % t.native_id):
            break
        time.sleep(0.005)
    else:
        raise SystemExit("thread %d did not exit" % t.native_id)
    if "error" in box:
        raise SystemExit(box["error"])
    return box.get("value", {{}})

progs = {{}}
def load(name):
    progs[name] = runtime.load(cfg["plugins"][name]["path"], library_path=cfg["lib"])
    return run(progs[name], name)

def close(name):
    progs.pop(name).close()
    return True

def step(what, extra):
    sweep()
    state = {{n: dict(maps=len(lines(p["needle"]))) for n, p in cfg["plugins"].items()}}
    print(json.dumps(dict(step=what, state=state, **extra)), flush=True)

a, b = list(cfg["plugins"])
step("loaded both", in_thread(lambda: dict(ran=[load(a), load(b)], got={{a: got(a), b: got(b)}})))
step("closed " + a, in_thread(lambda: dict(ran=[close(a)])))
def again():
    extra = runtime.load(cfg["plugins"][b]["path"], library_path=cfg["lib"])  # Create again: std::regex in it
    ok = [run(progs[b], b), run(extra, b)]
    extra.close()
    return dict(ran=ok)
step(b + " still runs", in_thread(again))
step("reloaded " + a, in_thread(lambda: dict(ran=[load(a), run(progs[b], b)], got={{a: got(a), b: got(b)}})))
step("closed both", in_thread(lambda: dict(ran=[close(a), close(b)])))
step("cycled both again", in_thread(lambda: dict(ran=[load(b), load(a), close(a), close(b)])))
main = dict(ran=[load(a)])
close(a)
step("cycled " + a + " on the main thread", main)
"""


def _lifecycle(host_lib, tmp_path, plugins: dict[str, dict]) -> list[dict]:
    sweep = tmp_path / "sweep.so"
    (tmp_path / "sweep.c").write_text("int aoti_test_sweep_me;\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(sweep), str(tmp_path / "sweep.c")], check=True)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"lib": str(host_lib), "plugins": plugins, "sweep": str(sweep)}))
    code = _SCRIPT.format(root=str(REPO_ROOT), cfg=str(cfg))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _plugins(export_example, torch, tmp_path, paths: dict[str, Path] | None = None) -> dict[str, dict]:
    """What the subprocess needs per model: the file to load, the inputs and eager torch's outputs as .npy,
    the needle naming its mappings in /proc/self/maps, and its GOT slots."""
    out = {}
    for name in MODELS:
        pt2, module, inputs = export_example(name)
        so = _plugin_so(pt2, tmp_path / f"{name}.so")
        with torch.no_grad():
            expected = module(*inputs)
        expected = expected if isinstance(expected, (list, tuple)) else [expected]
        files = {}
        for kind, arrays in (("in", inputs), ("out", expected)):
            files[kind] = []
            for i, t in enumerate(arrays):
                f = tmp_path / f"{name}.{kind}{i}.npy"
                np.save(f, t.detach().numpy())
                files[kind].append(str(f))
        path = (paths or {}).get(name, pt2)
        # a package's plugin maps from its memfd, named after the member; a plugin file from its path
        with zipfile.ZipFile(pt2) as zf:
            member = Path(next(n for n in zf.namelist() if n.endswith(".wrapper.so"))).name
        needle = path.name if path.suffix == ".so" else member
        slots, _ = _slots(path if path.suffix == ".so" else so)
        out[name] = dict(path=str(path), needle=needle, slots=slots, inputs=files["in"], expected=files["out"])
    return out


def test_exported_plugins_have_no_unique_symbols(export_example, tmp_path):
    """lief reads both symbol tables of the exported plugins: no GNU_UNIQUE left, the statics are GLOBAL
    objects, and verify --strict passes on the packages."""
    import lief

    for name in MODELS:
        pt2, _m, _i = export_example(name)
        so = _plugin_so(pt2, tmp_path / f"{name}.so")
        b = lief.ELF.parse(str(so))
        unique = [s.name for s in [*b.dynamic_symbols, *b.symtab_symbols]
                  if s.binding == lief.ELF.Symbol.BINDING.GNU_UNIQUE]
        assert unique == [], unique
        _slots_, binding = _slots(so)
        assert len(binding) >= 15 and "inductor_cpu_integer_div_error_flag" in binding, binding
        assert set(binding.values()) == {"GLOBAL"}, binding
        r = subprocess.run([sys.executable, "-m", "toolchain", "verify", "--strict", str(pt2)],
                           capture_output=True, text=True)
        assert r.returncode == 0 and "cannot-unload" not in r.stdout, r.stdout + r.stderr


def test_two_plugins_load_run_unload_reload(host_lib, export_example, torch, tmp_path):
    """Two exported packages in one process: each runs right and uses its own statics (every GOT slot of a
    former GNU_UNIQUE symbol points into itself), one is unmapped while the other keeps running and creating
    new instances, and both load, run and unload again afterwards."""
    steps = _lifecycle(host_lib, tmp_path, _plugins(export_example, torch, tmp_path))
    a, b = MODELS
    by = {s["step"]: s for s in steps}
    assert len(steps) == 7, steps
    for s in steps:
        assert all(s["ran"]), s  # every output matched eager torch
        for name, where in s.get("got", {}).items():
            assert set(where) == {"own"}, (name, s)  # no slot points into the other plugin
    maps = {k: (v["state"][a]["maps"], v["state"][b]["maps"]) for k, v in by.items()}
    assert maps["loaded both"][0] > 0 and maps["loaded both"][1] > 0, maps
    assert maps[f"closed {a}"][0] == 0 and maps[f"closed {a}"][1] > 0, maps  # unmapped, the other one stays
    assert maps[f"{b} still runs"] == maps[f"closed {a}"], maps
    assert maps[f"reloaded {a}"][0] > 0, maps
    assert maps["closed both"] == maps["cycled both again"] == (0, 0), maps
    # glibc's limit, not the binding's: a thread that called into a plugin (its thread_local error string)
    # keeps it mapped while the thread lives; the main thread lives as long as the process
    assert maps[f"cycled {a} on the main thread"][0] > 0, maps


def test_control_unique_plugins_share_statics_and_stay_mapped(host_lib, export_example, torch, tmp_path):
    """The same plugins with their statics made GNU_UNIQUE again (lief), as torch builds them: the first one
    loaded is never unmapped and the second one binds to the first one's statics. What export removes."""
    import lief

    paths = {}
    for name in MODELS:
        pt2, _m, _i = export_example(name)
        so = _plugin_so(pt2, tmp_path / f"{name}.orig.so")
        b = lief.ELF.parse(str(so))
        names = _statics(b)
        for s in [*b.dynamic_symbols, *b.symtab_symbols]:
            if s.name in names and s.shndx != 0:
                s.binding = lief.ELF.Symbol.BINDING.GNU_UNIQUE
        paths[name] = tmp_path / f"{name}.unique.so"
        b.write(str(paths[name]))
    steps = _lifecycle(host_lib, tmp_path, _plugins(export_example, torch, tmp_path, paths))
    a, b_ = MODELS
    by = {s["step"]: s for s in steps}
    assert all(all(s["ran"]) for s in steps), steps
    got = by["loaded both"]["got"]
    assert set(got[a]) == {"own"}, got
    assert got[b_].get(a, 0) >= 15 and set(got[b_]) <= {a, "own"}, got  # b uses a's statics
    assert by[f"closed {a}"]["state"][a]["maps"] > 0  # NODELETE
    assert by["cycled both again"]["state"][a]["maps"] > 0


KEEP_SRC = r"""
#include <locale>
template <typename T> struct Counter { static int value; };
template <typename T> int Counter<T>::value = 0;
template <typename T> struct Facet : std::locale::facet { static std::locale::id id; };
template <typename T> std::locale::id Facet<T>::id;
extern "C" __attribute__((visibility("default"))) int bump(void) { return ++Counter<int>::value; }
extern "C" __attribute__((visibility("default"))) void* facet_id(void) { return &Facet<int>::id; }
"""
SHARED_SRC = r"""
// an object libstdc++.so.6 defines too (std::nothrow), made unique here
asm(".globl _ZSt7nothrow\n.type _ZSt7nothrow, @gnu_unique_object\n.size _ZSt7nothrow, 1\n.bss\n"
    "_ZSt7nothrow:\n.zero 1\n.text\n");
"""


def test_rebind_keeps_what_must_stay_unique(host_lib, tmp_path):
    """Only a template static that nothing else defines becomes GLOBAL; a locale facet id, a symbol that
    libstdc++.so.6 (in its DT_NEEDED) defines too, and every symbol of a plugin carrying its own C++ runtime
    stay GNU_UNIQUE. `patch --rebind-unique` does the same, writes only st_info bytes, and a second run changes
    nothing."""
    from tests.integration import elf_builders as eb
    from toolchain.elf import patcher
    from toolchain.elf.reader import read_elf

    so = eb.build(tmp_path, "keep", cxx=True, extra=KEEP_SRC + SHARED_SRC,
                  flags=["-Wl,-z,noexecstack", "-Wl,--no-as-needed", "-lstdc++"])
    safe, kept = patcher.unique_split(so.read_bytes(), str(so))
    assert safe == ["_ZN7CounterIiE5valueE"], (safe, kept)
    why = dict(kept)
    assert "facet id" in why["_ZN5FacetIiE2idE"] and "facet id" in why["_ZGVN5FacetIiE2idE"], why  # and its guard
    assert "libstdc++.so.6 defines it too" in why["_ZSt7nothrow"], why

    out = tmp_path / "out.so"
    r = subprocess.run([sys.executable, "-m", "toolchain", "patch", str(so), "--rebind-unique", "--host",
                        str(host_lib), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and "rebind-unique" in r.stdout, r.stdout + r.stderr
    binding = {s.name: s.binding for s in read_elf(out).symbols if s.defined}
    assert binding["_ZN7CounterIiE5valueE"] == "GLOBAL"
    assert binding["_ZN5FacetIiE2idE"] == binding["_ZSt7nothrow"] == "GNU_UNIQUE"
    before, after = so.read_bytes(), out.read_bytes()
    assert len(before) == len(after) and sum(x != y for x, y in zip(before, after, strict=True)) == 2  # .dynsym and .symtab
    again = subprocess.run([sys.executable, "-m", "toolchain", "patch", str(out), "--rebind-unique", "--host",
                            str(host_lib), "-o", str(tmp_path / "again.so")], capture_output=True, text=True)
    assert again.returncode == 0 and "nothing to change" in again.stdout, again.stdout + again.stderr

    uses_cerr = '#include <iostream>\nextern "C" void* cerr_seen(void) { return &std::cerr; }\n'
    static = eb.build(tmp_path, "static_cxx", cxx=True, extra=KEEP_SRC + uses_cerr,
                      flags=["-Wl,-z,noexecstack", "-static-libstdc++"])
    safe, kept = patcher.unique_split(static.read_bytes(), str(static))
    assert safe == [] and kept and all("its own C++ runtime" in w for _n, w in kept), kept
