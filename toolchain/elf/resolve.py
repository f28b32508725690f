"""Find libraries and bind undefined symbols the way glibc's dynamic loader does (the parts that decide
whether `dlopen(plugin, RTLD_NOW)` succeeds).

Search order for a DT_NEEDED name without a slash (ld.so(8)): the requester's DT_RPATH (only when it has
no DT_RUNPATH), then LD_LIBRARY_PATH (as the loader in this environment would; `ldd` does the same), then
its DT_RUNPATH (not transitive), then the directories of /etc/ld.so.conf, then the
default directories. `$ORIGIN` expands to the requester's directory. A SONAME already in the scope
satisfies a DT_NEEDED without a search. A library of another class or machine is skipped, as the loader
skips it.

Lookup of a plugin opened RTLD_LOCAL: the global scope first (the host executable and its DT_NEEDED closure,
breadth-first), then the plugin's own scope (itself and its DT_NEEDED closure, breadth-first).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import NamedTuple

from toolchain.elf.reader import ElfError, ElfFile, Symbol, open_library
from toolchain.elf.symtab import DynSymTable, bloom_passes, gnu_hash

DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
SYSTEM_DIRS = frozenset(DEFAULT_DIRS) | {"/usr/local/lib", "/usr/local/lib64", "/usr/local/lib/x86_64-linux-gnu"}


def ld_so_conf_dirs(conf: str | os.PathLike[str] = "/etc/ld.so.conf", _depth: int = 0) -> list[str]:
    """Directories listed in ld.so.conf, following `include` globs."""
    out: list[str] = []
    if _depth > 8:
        return out
    try:
        with open(conf, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include "):
            pattern = line.split(None, 1)[1]
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.dirname(conf), pattern)
            for inc in sorted(glob.glob(pattern)):
                out.extend(ld_so_conf_dirs(inc, _depth + 1))
        elif line.startswith("/"):
            out.append(line)
    return out


class Loaded(NamedTuple):
    """An object in a lookup scope: the file, and why it is there."""

    path: str
    elf: ElfFile
    needed_by: str | None


@dataclass
class Scope:
    """The objects a DT_NEEDED closure loads, in load order, and the libraries not found."""

    objects: list[Loaded] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (DT_NEEDED name, needed by)

    def names(self) -> set[str]:
        out = set()
        for o in self.objects:
            out.add(os.path.basename(o.path))
            if o.elf.soname:
                out.add(o.elf.soname)
        return out


class Resolver:
    """Caches parsed libraries; one per verify run (no global state)."""

    def __init__(self, extra_dirs: tuple[str, ...] = (), env_path: str | None = None) -> None:
        self.search_dirs = list(dict.fromkeys([*extra_dirs, *ld_so_conf_dirs(), *DEFAULT_DIRS]))
        env_path = os.environ.get("LD_LIBRARY_PATH", "") if env_path is None else env_path
        # empty entries mean the current directory to the loader; a verifier should not depend on it
        self.env_dirs = [d for d in env_path.replace(";", ":").split(":") if d]
        self._cache: dict[str, ElfFile | None] = {}
        self._files: dict[str, tuple[ElfFile, DynSymTable] | None] = {}  # by real path
        self._defs: dict[str, dict[str, list[Symbol]]] = {}
        self._tables: dict[str, DynSymTable] = {}
        # path -> its Bloom filter (DynSymTable.bloom) for objects whose symbols are found through their table
        self._blooms: dict[str, tuple | None] = {}

    def read(self, path: str) -> ElfFile | None:
        """A library's headers (its symbols are looked up by name, through its GNU hash table); None where it
        does not read. A file reached by two paths (a symlink, /lib and /usr/lib) is parsed once."""
        if path not in self._cache:
            real = os.path.realpath(path)
            if real not in self._files:
                try:
                    self._files[real] = open_library(path)
                except (ElfError, OSError):
                    self._files[real] = None
            got = self._files[real]
            self._cache[path] = None if got is None else got[0]
            if got is not None:
                self._tables[path] = got[1]
        return self._cache[path]

    def defs(self, loaded: Loaded) -> dict[str, list[Symbol]]:
        """Every defined symbol of an object (parsed in full: for the files being verified)."""
        key = loaded.path
        if key not in self._defs:
            elf = loaded.elf
            if not elf.symbols and key in self._tables:
                elf_syms = self._tables[key].all()
                out: dict[str, list[Symbol]] = {}
                for s in elf_syms:
                    if s.defined and s.binding != "LOCAL":
                        out.setdefault(s.name, []).append(s)
                self._defs[key] = out
            else:
                self._defs[key] = elf.defined()
        return self._defs[key]

    def find_defs(self, loaded: Loaded, name: str) -> list[Symbol]:
        """The defined entries named `name` in one object: a GNU hash lookup for libraries."""
        table = self._tables.get(loaded.path)
        if table is not None and not loaded.elf.symbols and loaded.path not in self._defs:
            found = table.lookup(name)
            if found is not None:
                return found
        return self.defs(loaded).get(name, [])

    def _bloom(self, loaded: Loaded) -> tuple | None:
        """The object's DT_GNU_HASH Bloom filter, which the loader tests before anything else, for objects
        whose symbols are found through their table; None where there is none to test (a file read in full,
        no usable filter, or a header that does not read: find_defs reports that)."""
        path = loaded.path
        if path in self._blooms:
            return self._blooms[path]
        table = self._tables.get(path)
        f = None
        if table is not None and not loaded.elf.symbols:
            try:
                f = table.bloom()
            except ElfError:
                f = None
        self._blooms[path] = f
        return f

    def defined_among(self, loaded: Loaded, names: list[str]) -> dict[str, list[Symbol]]:
        """find_defs for many names: {name: its defined entries} for the names `loaded` defines (the Bloom
        filter read once for all of them; none looked up when their common prefix is in none of its names)."""
        table = self._tables.get(loaded.path)
        if table is not None and not loaded.elf.symbols and loaded.path not in self._defs and len(names) > 1:
            prefix = os.path.commonprefix(names)
            if prefix:
                try:
                    if not table.names_hold(prefix.encode()):
                        return {}
                except (ElfError, ValueError):
                    pass  # find_defs reports what does not read
        f = self._bloom(loaded)
        out: dict[str, list[Symbol]] = {}
        for name in names:
            if f is not None and not bloom_passes(f, gnu_hash(name)):
                continue
            found = self.find_defs(loaded, name)
            if found:
                out[name] = found
        return out

    def find(self, name: str, requester: ElfFile, requester_path: str) -> str | None:
        """Path of the library `requester` gets for DT_NEEDED `name`, or None."""
        if "/" in name:
            return name if self._compatible(name, requester) else None
        origin = os.path.dirname(os.path.abspath(requester_path))
        dirs = [] if requester.runpath else [expand_origin(d, origin) for d in requester.rpath]
        dirs += self.env_dirs
        dirs += [expand_origin(d, origin) for d in requester.runpath]
        dirs += self.search_dirs
        for d in dirs:
            cand = os.path.join(d, name)
            if os.path.isfile(cand) and self._compatible(cand, requester):
                return cand
        return None

    def _compatible(self, path: str, requester: ElfFile) -> bool:
        elf = self.read(path)
        return elf is not None and elf.machine_id == requester.machine_id and elf.elf_class == requester.elf_class

    def scope(self, root: ElfFile, root_path: str, already: set[str] | None = None) -> Scope:
        """The breadth-first DT_NEEDED closure of `root` (root first). `already`: SONAMEs loaded elsewhere."""
        sc = Scope([Loaded(root_path, root, None)])
        seen = set(already or ())
        seen.add(os.path.basename(root_path))
        if root.soname:
            seen.add(root.soname)
        queue = [sc.objects[0]]
        while queue:
            cur = queue.pop(0)
            for name in cur.elf.needed:
                if name in seen:
                    continue
                seen.add(name)
                path = self.find(name, cur.elf, cur.path)
                if path is None:
                    sc.missing.append((name, cur.path))
                    continue
                elf = self.read(path)
                assert elf is not None
                lo = Loaded(path, elf, cur.path)
                if elf.soname:
                    seen.add(elf.soname)
                sc.objects.append(lo)
                queue.append(lo)
        return sc

    def lookup(self, sym: Symbol, scopes: list[Loaded], skip: str | None = None) -> Loaded | None:
        """The first object in `scopes` whose definition binds `sym` (a reference), or None."""
        h = gnu_hash(sym.name)
        for lo in scopes:
            if skip is not None and lo.path == skip:
                continue
            f = self._bloom(lo)
            if f is not None and not bloom_passes(f, h):
                continue  # what find_defs would find: nothing (the Bloom filter, DynSymTable.lookup's first test)
            cands = self.find_defs(lo, sym.name)
            if not cands:
                continue
            for d in cands:
                if d.visibility in ("HIDDEN", "INTERNAL"):
                    continue
                if sym.version is None:
                    if not d.hidden:
                        return lo
                elif d.version == sym.version or not lo.elf.verdef:
                    return lo
        return None


def expand_origin(entry: str, origin: str) -> str:
    return entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


def is_system_dir(d: str) -> bool:
    return os.path.normpath(d) in SYSTEM_DIRS
