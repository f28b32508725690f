"""The dynamic symbol table and its version tables (reader.py parses the rest of the file).

Bounds-checked like the rest of the reader: malformed input raises MalformedError/TruncatedError.
"""

from __future__ import annotations

import struct
from functools import cache

from toolchain.elf.base import (
    MAX_SYMBOLS,
    SHT_DYNSYM,
    SHT_GNU_HASH,
    SHT_VERDEF,
    SHT_VERNEED,
    SHT_VERSYM,
    STB_NAMES,
    STT_NAMES,
    STV_NAMES,
    MalformedError,
    Symbol,
    _Section,
    _View,
)


class DynSymTable:
    """The dynamic symbol table of one file: every symbol (`all()`), or one name through DT_GNU_HASH
    (`lookup()`), reading only the entries probed, as the loader does. Bounds-checked like the rest."""

    def __init__(self, v: _View, is64: bool, sections: list[_Section], name: str) -> None:
        self.v, self.is64, self.name = v, is64, name
        self.count = 0
        self.names: dict[int, tuple[str, str | None]] = {}
        self.verneed: dict[str, list[str]] = {}
        self.verdef: list[str] = []
        self.gnu_hash: _Section | None = None
        self._gh: tuple | None | bool = False  # _hash_header(), once read
        dynsym = next((s for s in sections if s.type == SHT_DYNSYM), None)
        if dynsym is None:
            return
        if not 0 <= dynsym.link < len(sections):
            raise MalformedError(f"{name}: .dynsym links to section {dynsym.link}, which does not exist",
                                 fix="rebuild the file")
        st = sections[dynsym.link]
        v.need(st.offset, st.size, "the dynamic string table (.dynstr)")
        self.fmt = struct.Struct(v.e + ("IBBHQQ" if is64 else "IIIBBH"))
        count = dynsym.size // self.fmt.size
        if count > MAX_SYMBOLS:
            raise MalformedError(f"{name}: .dynsym claims {count} symbols", fix="rebuild the file")
        v.need(dynsym.offset, count * self.fmt.size, "the dynamic symbol table (.dynsym)")
        self.count, self.off, self.sto, self.sts = count, dynsym.offset, st.offset, st.size
        # Version indices -> (name, file): verdef gives this object's own versions, vernaux the required ones.
        for sec in sections:
            if sec.type == SHT_VERNEED:
                _read_verneed(v, sec, st, self.names, self.verneed)
            elif sec.type == SHT_VERDEF:
                _read_verdef(v, sec, st, self.names, self.verdef)
            elif sec.type == SHT_GNU_HASH:
                self.gnu_hash = sec
        versym = next((s for s in sections if s.type == SHT_VERSYM), None)
        self.vs_off, self.vs_len = -1, 0
        if versym is not None:
            self.vs_len = min(versym.size // 2, count)
            v.need(versym.offset, self.vs_len * 2, "the symbol version table (.gnu.version)")
            self.vs_off = versym.offset

    def _symbol(self, i: int, f: tuple, strtab: bytes | None = None) -> Symbol | None:
        """Entry `i` (`f`: its unpacked fields); `strtab`: .dynstr's bytes, where the caller read them once (a
        full read: one copy instead of a search of the mapping per name)."""
        if self.is64:
            nm, info, other, shndx, _val, _size = f
        else:
            nm, _val, _size, info, other, shndx = f
        if nm == 0:
            return None
        if nm >= self.sts:
            raise MalformedError(f"{self.name}: symbol {i}: name index {nm} outside .dynstr ({self.sts} bytes)",
                                 fix="rebuild the file")
        if strtab is None:
            buf = self.v.buf
            stop = buf.find(b"\0", self.sto + nm, self.sto + self.sts)
            raw = None if stop < 0 else bytes(buf[self.sto + nm:stop])
        else:
            stop = strtab.find(b"\0", nm)
            raw = None if stop < 0 else strtab[nm:stop]
        if raw is None:
            raise MalformedError(f"{self.name}: symbol {i}: unterminated name", fix="rebuild the file")
        sname = raw.decode("utf-8", "replace")
        buf = self.v.buf
        version, hidden, vfile = None, False, None
        if i < self.vs_len:
            lo, hi = buf[self.vs_off + 2 * i], buf[self.vs_off + 2 * i + 1]
            raw_idx = lo | (hi << 8) if self.v.e == "<" else (lo << 8) | hi
            idx = raw_idx & 0x7FFF
            hidden = bool(raw_idx & 0x8000)
            if idx >= 2:
                version, vfile = self.names.get(idx, (None, None))
        return Symbol(sname, shndx != 0, STB_NAMES.get(info >> 4, f"STB_{info >> 4}"),
                      STT_NAMES.get(info & 0xF, f"STT_{info & 0xF}"), STV_NAMES[other & 3], version, hidden, vfile)

    def all(self) -> tuple[Symbol, ...]:
        if not self.count:
            return ()
        raw = self.fmt.iter_unpack(self.v.buf[self.off:self.off + self.count * self.fmt.size])
        strtab = bytes(self.v.buf[self.sto:self.sto + self.sts])
        return tuple(s for i, f in enumerate(raw) if (s := self._symbol(i, f, strtab)) is not None)

    def _hash_header(self) -> tuple[int, int, int, int, tuple[int, ...] | None, int, int] | None:
        """DT_GNU_HASH's geometry, read once: (nbuckets, symoffset, buckets_at, chain_at, the Bloom filter's
        words or None where they do not lie inside the file, its shift, the bits per word), or None where the
        file has no usable table."""
        if self._gh is not False:
            return self._gh  # type: ignore[return-value]
        sec = self.gnu_hash
        if sec is None or not self.count:
            self._gh = None
            return None
        v = self.v
        # a header outside the file raises here, on every lookup (nothing is remembered)
        nbuckets, symoffset, bloom_size, shift = v.unpack("IIII", sec.offset, "the GNU hash table")
        word = 8 if self.is64 else 4
        buckets_at = sec.offset + 16 + bloom_size * word
        chain_at = buckets_at + 4 * nbuckets
        if nbuckets == 0 or chain_at > sec.offset + sec.size + 4 * self.count or symoffset > self.count or \
                bloom_size > MAX_SYMBOLS:
            self._gh = None  # lookups read every symbol instead
            return None
        bloom = None
        if bloom_size and buckets_at <= v.end:
            bloom = struct.unpack_from(f"{v.e}{bloom_size}{'Q' if self.is64 else 'I'}", v.buf, sec.offset + 16)
        self._gh = (nbuckets, symoffset, buckets_at, chain_at, bloom, shift, word * 8)
        return self._gh

    def bloom(self) -> tuple[tuple[int, ...], int, int] | None:
        """DT_GNU_HASH's Bloom filter as (words, shift, bits per word) for `bloom_passes`, or None where the
        file has no filter to test (every name passes)."""
        header = self._hash_header()
        return None if header is None or header[4] is None else (header[4], header[5], header[6])

    def names_hold(self, text: bytes) -> bool:
        """Whether `text` occurs in the dynamic string table: a symbol whose name contains it must (its name is
        a NUL-terminated run of that table, which may be the tail of a longer one, never split), so False
        means no symbol's name contains it."""
        return self.count > 0 and self.v.buf.find(text, self.sto, self.sto + self.sts) >= 0

    def may_define(self, h: int) -> bool:
        """False where the loader's first test, DT_GNU_HASH's Bloom filter, rejects hash `h` (gnu_hash): the
        loader then looks no further in this object (glibc's do_lookup_x), so neither does lookup(). True
        where the filter lets it through or the file has no filter to test."""
        f = self.bloom()
        return f is None or bloom_passes(f, h)

    def lookup(self, name: str) -> list[Symbol] | None:
        """Defined entries named `name` via DT_GNU_HASH, as the loader finds them (Bloom filter, bucket, chain);
        None when the file has no usable GNU hash table."""
        header = self._hash_header()
        if header is None:
            return None
        nbuckets, symoffset, buckets_at, chain_at = header[:4]
        v = self.v
        h = gnu_hash(name)
        out: list[Symbol] = []
        if not self.may_define(h):
            return out
        (idx,) = v.unpack("I", buckets_at + 4 * (h % nbuckets), "a GNU hash bucket")
        if idx < symoffset:
            return out
        for _ in range(self.count):
            if idx >= self.count:
                break
            (ch,) = v.unpack("I", chain_at + 4 * (idx - symoffset), "a GNU hash chain entry")
            if (ch | 1) == (h | 1):
                sym = self._symbol(idx, self.fmt.unpack_from(v.buf, self.off + idx * self.fmt.size))
                if sym is not None and sym.name == name and sym.defined and sym.binding != "LOCAL":
                    out.append(sym)
            if ch & 1:
                break
            idx += 1
        return out


def bloom_passes(f: tuple[tuple[int, ...], int, int], h: int) -> bool:
    """glibc's Bloom test of hash `h` against a filter from DynSymTable.bloom()."""
    words, shift, bits = f
    w = words[(h // bits) & (len(words) - 1)]  # the loader masks with (words - 1), as a power of two
    return bool((w >> (h % bits)) & (w >> ((h >> shift) % bits)) & 1)


@cache
def gnu_hash(name: str) -> int:
    """DT_GNU_HASH's hash of a symbol name (remembered: one name is looked up in every object of a scope)."""
    h = 5381
    for c in name.encode():
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def _read_verneed(v: _View, sec: _Section, st: _Section, names: dict, verneed: dict) -> None:
    off, seen = sec.offset, 0
    for _ in range(min(sec.info or 1 << 10, 1 << 10)):
        _ver, cnt, file_idx, aux, nxt = v.unpack("HHIII", off, "a version requirement (.gnu.version_r)")
        fname = v.cstr(st.offset, st.size, file_idx, "version requirement file")
        aoff = off + aux
        for _k in range(min(cnt, 1 << 10)):
            _h, _fl, other, name_idx, anext = v.unpack("IHHII", aoff, "a version requirement entry")
            vname = v.cstr(st.offset, st.size, name_idx, "version requirement name")
            names[other & 0x7FFF] = (vname, fname)
            verneed.setdefault(fname, []).append(vname)
            if anext == 0:
                break
            aoff += anext
        seen += 1
        if nxt == 0:
            break
        off += nxt


def _read_verdef(v: _View, sec: _Section, st: _Section, names: dict, verdef: list) -> None:
    off = sec.offset
    for _ in range(min(sec.info or 1 << 10, 1 << 10)):
        _ver, _fl, ndx, cnt, _h, aux, nxt = v.unpack("HHHHIII", off, "a version definition (.gnu.version_d)")
        if cnt:
            (name_idx, _anext) = v.unpack("II", off + aux, "a version definition name")
            vname = v.cstr(st.offset, st.size, name_idx, "version definition name")
            verdef.append(vname)
            if ndx >= 2:
                names[ndx & 0x7FFF] = (vname, None)
        if nxt == 0:
            break
        off += nxt
