"""Symbol lookup through DT_GNU_HASH (toolchain.elf.symtab.DynSymTable.lookup, used by the resolver for every
library in a scope) finds what glibc's loader finds: the same entries as a full read of the symbol table on
real system libraries, and nothing where the loader's first test, the Bloom filter, rejects the name."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from tests.integration import elf_builders as eb
from toolchain.elf.reader import open_library
from toolchain.elf.resolve import Resolver
from toolchain.elf.symtab import gnu_hash
from toolchain.verify import verify_paths

SYSTEM = ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libgomp.so.1")


def _system_library(name: str) -> str:
    """The library the loader's default search finds (ld.so.conf's directories, then the default ones)."""
    for d in Resolver().search_dirs:
        if os.path.isfile(os.path.join(d, name)):
            return os.path.join(d, name)
    pytest.skip(f"{name} is not installed here")


@pytest.mark.parametrize("soname", SYSTEM)
def test_hash_lookup_equals_a_full_read(soname):
    """Every defined, non-local name of the library is found with exactly its entries from the full table;
    names it does not define (including near misses of its own) find nothing."""
    _elf, table = open_library(_system_library(soname))
    everything = table.all()
    defined: dict[str, list] = {}
    for s in everything:
        if s.defined and s.binding != "LOCAL":
            defined.setdefault(s.name, []).append(s)
    assert len(defined) > 20, soname
    for name, entries in defined.items():
        assert table.lookup(name) == entries, name
    absent = [f"{n}_not_here" for n in list(defined)[:500]] + [n[:-1] for n in list(defined)[:500] if n[:-1]]
    rejected_by_bloom = 0
    for name in absent:
        if name in defined:
            continue
        assert table.lookup(name) == [], name
        rejected_by_bloom += not table.may_define(gnu_hash(name))
    assert rejected_by_bloom > len(absent) // 2, "the Bloom filter rejected almost nothing: is it read?"


def _zero_bloom(path) -> None:
    """Clear every word of the library's DT_GNU_HASH Bloom filter in place (section found by readelf)."""
    out = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True, check=True).stdout
    (line,) = [ln for ln in out.splitlines() if " .gnu.hash " in ln]
    fields = line.split("]", 1)[1].split()
    offset = int(fields[3], 16)
    data = bytearray(path.read_bytes())
    _nbuckets, _symoffset, bloom_size, _shift = struct.unpack_from("<IIII", data, offset)
    assert bloom_size > 0
    data[offset + 16:offset + 16 + 8 * bloom_size] = bytes(8 * bloom_size)
    path.write_bytes(bytes(data))


def test_a_name_the_bloom_filter_rejects_is_not_bound(tmp_path):
    """With its Bloom filter cleared, a library's symbols are still in its buckets and chains, but the loader
    stops at the filter: dlsym finds nothing and a plugin importing the symbol fails to load. The resolver
    (and so verify) says the same; with the filter intact, both bind it."""
    lib = eb.build_lib(tmp_path / "lib", "libbloomed.so.1", "int bloomed_value(void) { return 7; }\n")
    plugin = eb.build(tmp_path, "uses_bloomed", imports=["bloomed_value"],
                      flags=["-Wl,-z,noexecstack", str(lib), f"-Wl,-rpath,{lib.parent}"])

    def load() -> subprocess.CompletedProcess:
        """dlsym of the name, then dlopen(RTLD_NOW) of the plugin, in a fresh process (this one never maps the
        library: it is rewritten below)."""
        return subprocess.run(
            [sys.executable, "-c", "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
             "print(hasattr(lib, 'bloomed_value')); ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_LOCAL)",
             str(lib), str(plugin)], capture_output=True, text=True)

    intact = load()
    assert intact.returncode == 0 and intact.stdout.strip() == "True", intact
    assert "unresolved-symbol" not in {f.rule for f in verify_paths([plugin]).findings}

    _zero_bloom(lib)
    _elf, table = open_library(str(lib))
    assert [s.name for s in table.all() if s.name == "bloomed_value" and s.defined]  # still in the table
    assert table.lookup("bloomed_value") == []
    cleared = load()
    assert cleared.stdout.strip() == "False", cleared
    assert cleared.returncode != 0 and "undefined symbol: bloomed_value" in cleared.stderr, cleared
    found = [f for f in verify_paths([plugin]).findings if f.rule == "unresolved-symbol"]
    assert [f.symbol for f in found] == ["bloomed_value"], found
