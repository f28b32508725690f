"""Robustness: verify and inspect on mutated real plugins never crash or hang.

Mutations of a real torch plugin (and of the built host library): truncation, and byte flips aimed at the
ELF header, program headers, the dynamic section, the dynamic symbol/string tables, the version tables and
the section headers. Each case must end in a report or a clean not-elf/truncated/malformed finding, within
a time bound. AOTI_FUZZ_CASES sets the number of cases (default 2,000; `nox -s fuzz` runs more).
"""

from __future__ import annotations

import os
import random
import signal
import struct
import time
import zipfile

import pytest

from toolchain.elf.reader import SHT_DYNSYM, SHT_VERDEF, SHT_VERNEED, SHT_VERSYM, parse_elf
from toolchain.findings import RULES
from toolchain.inspect import describe
from toolchain.verify import make_context, verify_buffer

pytestmark = pytest.mark.long  # minutes of work: skipped unless --long (nox -s slow, CI)

CASES = int(os.environ.get("AOTI_FUZZ_CASES", "2000"))
PER_CASE_LIMIT_S = 5.0


def regions(data: bytes) -> dict[str, tuple[int, int]]:
    """Byte ranges of the structures the reader walks, from the unmutated file."""
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 54)
    out = {"elf-header": (0, 64), "program-headers": (phoff, phoff + phentsize * phnum),
           "section-headers": (shoff, shoff + shentsize * shnum)}
    for i in range(phnum):
        ptype, _f, off, _v, _p, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if ptype == 2:
            out["dynamic"] = (off, off + filesz)
    names = {SHT_DYNSYM: "dynsym", SHT_VERSYM: "versym", SHT_VERNEED: "verneed", SHT_VERDEF: "verdef"}
    for i in range(shnum):
        _n, stype, _fl, _a, off, size, link, *_ = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        if stype in names:
            out[names[stype]] = (off, off + size)
            if stype == SHT_DYNSYM:
                _n2, _t2, _f2, _a2, soff, ssize, *_ = struct.unpack_from("<IIQQQQIIQQ", data, shoff + link * shentsize)
                out["dynstr"] = (soff, soff + ssize)
    return {k: v for k, v in out.items() if v[1] > v[0]}


def mutate(data: bytes, regs: dict[str, tuple[int, int]], rng: random.Random) -> tuple[str, bytes]:
    if rng.random() < 0.2:
        cut = rng.choice([rng.randrange(0, 64), rng.randrange(0, len(data))])
        return f"truncate@{cut}", data[:cut]
    name = rng.choice(sorted(regs))
    lo, hi = regs[name]
    buf = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        pos = rng.randrange(lo, hi)
        buf[pos] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256), buf[pos] ^ (1 << rng.randrange(8))])
    return f"flip:{name}", bytes(buf)


class _Hang(Exception):
    pass


def _alarm(_sig, _frame):
    raise _Hang()


def run_cases(seeds: list[tuple[str, bytes]], n: int) -> dict[str, int]:
    ctx = make_context()
    rng = random.Random(20261130)
    stats: dict[str, int] = {}
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        for i in range(n):
            label, data = seeds[i % len(seeds)]
            what, mutated = mutate(data, regions(data), rng)
            signal.setitimer(signal.ITIMER_REAL, PER_CASE_LIMIT_S)
            t0 = time.perf_counter()
            try:
                res = verify_buffer(mutated, f"fuzz.pt2!{label}#{i}", ctx)
                if res.kind != "unreadable":
                    describe(f"{label}#{i}", parse_elf(mutated, label))
            except _Hang:
                pytest.fail(f"case {i} ({label}, {what}) ran over {PER_CASE_LIMIT_S} s")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            assert time.perf_counter() - t0 < PER_CASE_LIMIT_S
            assert all(f.rule in RULES and f.message and f.fix for f in res.findings), (i, what)
            outcome = res.kind if res.kind != "unreadable" else res.findings[0].rule
            stats[outcome] = stats.get(outcome, 0) + 1
    finally:
        signal.signal(signal.SIGALRM, old)
    return stats


@pytest.mark.slow
def test_fuzz_mutated_real_plugins(export_example, host_build):
    pt2, _m, _i = export_example("mlp", "embedded")
    with zipfile.ZipFile(pt2) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith(".so")]
        plugin = zf.read(member)
    seeds = [("mlp-plugin", plugin), ("mlp-plugin", plugin), ("mlp-plugin", plugin),
             ("libaoti_host", host_build.lib.read_bytes())]
    stats = run_cases(seeds, CASES)
    assert sum(stats.values()) == CASES
    # the mutations reach every outcome: still-readable plugins and each clean error
    assert stats.get("plugin", 0) > CASES // 10 and stats.get("truncated", 0) > 0 and stats.get("not-elf", 0) > 0, stats
    print(f"fuzz: {CASES} cases: {stats}")


@pytest.mark.slow
def test_fuzz_mutated_pt2_packages(export_example, tmp_path):
    """The .pt2 (zip) layer: truncated and flipped packages end in a report or a clean error too."""
    from toolchain.verify import verify_paths

    pt2, _m, _i = export_example("mlp", "embedded")
    data = pt2.read_bytes()
    rng = random.Random(7)
    outcomes: dict[str, int] = {}
    for i in range(60):
        buf = bytearray(data)
        if i % 2:
            buf = buf[: rng.randrange(0, len(buf))]
        else:
            for _ in range(rng.choice([1, 4, 16])):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        f = tmp_path / f"case{i}.pt2"
        f.write_bytes(bytes(buf))
        report = verify_paths([f])
        assert report.files and all(x.fix for x in report.findings)
        key = report.verdict
        outcomes[key] = outcomes.get(key, 0) + 1
    assert outcomes.get("unreadable", 0) > 0, outcomes
