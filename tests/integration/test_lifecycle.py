"""Lifecycle (issue 5, point 6): loading and freeing a program 1,000 times in one process neither crashes
nor grows resident memory by 1 % (docs/performance.md, "Unloading"), and what unloading does is pinned down: a real torch
plugin called from the main thread stays mapped after its last dlclose (torch's thread_local error string
registers a destructor in it, and glibc keeps the object while that thread lives) and a reload reuses that
mapping, while a plugin with no GNU-unique symbols and no thread_local destructor is unmapped. Export's plugins
have no GNU-unique symbols (those made the first plugin loaded NODELETE for good):
tests/integration/test_unload_unique.py unloads them from threads that end.

The measurement starts after 100 warm-up cycles (the allocator's pools, OpenMP's threads and the runtime's
per-thread buffers are in place by then) and besides resident memory checks what a leak per cycle would
change at once: the open file descriptors and the plugin's mappings (equal), the number of mappings (a
leaked memfd or mapping shows there before it shows in resident memory). Measured here: +110 kB of
33 MB (0.33 %) over the first 1,000 cycles after warm-up, then flat over the next 2,000; the heap in use
(glibc's mallinfo2) grows by 1-4 kB."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO_ROOT
from tests.helpers import build_fixture

WARMUP, CYCLES, BOUND = 100, 1000, 0.01  # the documented bound (docs/performance.md): 1,000 cycles grow resident memory by < 1 %

_LOOP = """
import ctypes, json, os, sys, numpy as np
sys.path.insert(0, {root!r})
from toolchain import runtime
lib = runtime.library({lib!r})
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
class _Mallinfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
_libc = ctypes.CDLL(None)
_libc.mallinfo2.restype = _Mallinfo2
def heap_kb():  # bytes malloc has handed out and not taken back (glibc), main arena and mmapped chunks
    m = _libc.mallinfo2()
    return (m.uordblks + m.hblkhd) // 1024
def snapshot():
    maps = open("/proc/self/maps").read().splitlines()
    # a plugin from a package maps from its memfd ("/memfd:<leaf> (deleted)") or its cache entry
    plugin = sum(1 for line in maps if (line.rstrip().endswith(".so") or "/memfd:" in line) and {needle!r} in line)
    return dict(rss_kb=status("VmRSS"), heap_kb=heap_kb(), maps=len(maps), plugin_maps=plugin,
                fds=len(os.listdir("/proc/self/fd")))
def once():
    p = runtime.load({path!r}, library_path={lib!r})
    s = p.session() if {session} else None
    for k, name in enumerate(p.methods):
        n = p._arity[k][0]
        if n:
            shape = [d if d else 1 for d in p.inputs[0].shape]
            (s or p).run([np.ones(shape, np.float32)] * n, method=name)
    if s is not None:
        s.close()
    p.close()
for _ in range({warmup}):
    once()
before = snapshot()
for _ in range({n} // 2):
    once()
mid = snapshot()
for _ in range({n} - {n} // 2):
    once()
print(json.dumps([before, mid, snapshot()]))
"""


def loop(host_lib, path, n=CYCLES, session=False, needle="wrapper") -> tuple[dict, dict, dict]:
    code = _LOOP.format(root=str(REPO_ROOT), lib=str(host_lib), path=str(path), n=n, session=session, needle=needle,
                        warmup=WARMUP)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, mid, after = json.loads(proc.stdout)
    return before, mid, after


def assert_steady(before: dict, mid: dict, after: dict, cycles: int) -> None:
    grown = after["rss_kb"] - before["rss_kb"]
    assert grown < BOUND * before["rss_kb"], (
        f"resident memory grew by {grown} kB ({100 * grown / before['rss_kb']:.2f} %) over {cycles} load/free "
        f"cycles, from {before['rss_kb']} kB; the documented bound is {100 * BOUND:g} %")
    # RSS misses a small leak that fills the heap's free holes first; the bytes malloc has handed out do not:
    # measured +1 to +4 kB over 1,000 cycles, +1,020 kB with 1 kB leaked per load. Under 64 bytes per cycle, in
    # each half of the loop: a leak grows both halves alike, while a one-off allocation (a thread's first
    # buffers on a loaded machine, +129 kB seen once) lands in one half only.
    halves = (mid["heap_kb"] - before["heap_kb"], after["heap_kb"] - mid["heap_kb"])
    assert min(halves) < (cycles // 2) * 64 // 1024, (
        f"the heap in use grew by {halves[0]} and {halves[1]} kB over two halves of {cycles} cycles: "
        f"{before} -> {mid} -> {after}")
    assert after["fds"] == before["fds"], f"open descriptors changed over {cycles} cycles: {before} -> {after}"
    # the allocator may add or merge a mapping now and then; a leak adds one per cycle
    assert after["maps"] - before["maps"] < cycles // 100, f"mappings grew over {cycles} cycles: {before} -> {after}"
    assert after["plugin_maps"] == before["plugin_maps"] > 0, (
        "each load must reuse the one mapping of the plugin (content-addressed extraction)", before, after)


@pytest.mark.long  # 1,100 load/free cycles per case (a minute on 2 cores in all): `--long`, CI runs it
@pytest.mark.parametrize("model,weights", [("mlp", "embedded"), ("mutated_buffer", "embedded"), ("mlp", "blob")])
def test_load_free_1000_times(host_lib, export_example, model, weights):
    # blob: the weights are placed and handed over user-managed, which torch wraps in handles of its own
    pt2, _, _ = export_example(model, weights)
    assert_steady(*loop(host_lib, pt2, session=(model == "mutated_buffer")), CYCLES)


@pytest.mark.long  # an export of two methods and 1,100 load/free cycles
def test_multi_method_load_free_1000_times(host_lib, torch, tmp_path_factory):
    from tests.conftest import BUILD_DIR
    from toolchain import examples
    from toolchain.export import export_methods

    module, (x,) = examples.two_methods(64)
    out = tmp_path_factory.mktemp("lifecycle-methods")
    manifest = export_methods(module, {"forward": (x,), "embed": (x,)}, out, build_dir=BUILD_DIR)
    # shared weights: torch 2.13 wraps each user-managed constant in a handle its container never deletes; the
    # runtime deletes them after the container. Left alone they leak ~0.75 kB per load (2 %).
    assert_steady(*loop(host_lib, manifest), CYCLES)


_UNLOAD = """
import sys
sys.path.insert(0, {root!r})
from toolchain import runtime
lib = runtime.library({lib!r})
def mapped():
    return any(line.rstrip().endswith({so_name!r}) for line in open("/proc/self/maps"))
p = runtime.load({path!r}, library_path={lib!r})
print(mapped())
p.close()
print(mapped())
p = runtime.load({path!r}, library_path={lib!r})
print(mapped())
p.close()
"""


def _unload(host_lib, path, so_name):
    code = _UNLOAD.format(root=str(REPO_ROOT), lib=str(host_lib), path=str(path), so_name=so_name)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_real_plugin_stays_mapped_after_unload(host_lib, export_example, tmp_path):
    import zipfile

    pt2, _, _ = export_example("mlp")
    with zipfile.ZipFile(pt2) as zf:
        so = next(n for n in zf.namelist() if n.endswith(".wrapper.so"))
        (tmp_path / "plugin.so").write_bytes(zf.read(so))
    # the main thread's thread_local destructor: dlclose succeeds, the mapping stays, a reload reuses it
    assert _unload(host_lib, tmp_path / "plugin.so", "plugin.so") == ["True", "True", "True"]


def test_plugin_without_unique_symbols_is_unmapped(host_lib, tmp_path):
    so = build_fixture("constants_plugin.c.j2", tmp_path / "unloadable.so", mode="ok")
    # the container is deleted before the last dlclose, so the code is gone only when nothing uses it
    assert _unload(host_lib, so, "unloadable.so") == ["True", "False", "True"]
