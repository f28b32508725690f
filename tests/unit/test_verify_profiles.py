"""Profiles as data, numeric version order, and the ELF reader checked against binutils' readelf."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from toolchain.elf.reader import read_elf
from toolchain.errors import UsageError
from toolchain.verify.profiles import available, load_profile, parse_version

LIBSTDCXX = Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6")


def test_versions_compare_numerically():
    assert parse_version("GLIBCXX_3.4.9")[1] < parse_version("GLIBCXX_3.4.30")[1]
    assert parse_version("GLIBC_2.9")[1] < parse_version("GLIBC_2.34")[1]
    assert parse_version("GLIBC_PRIVATE") is None and parse_version("CXXABI_TM_1") is None


def test_named_profiles_load_with_sources():
    names = available()
    assert {"host", "debian12", "ubuntu22.04", "ubuntu24.04", "manylinux_2_28"} <= set(names)
    for name in names:
        if name == "host":
            continue
        p = load_profile(name)
        assert p.source and set(p.max_versions) == {"GLIBC", "GLIBCXX", "CXXABI", "GCC"}
        assert "libc.so.6" in p.allowed and "libstdc++.so.6" in p.allowed
    assert load_profile("manylinux_2_28").max_versions["GLIBC"] == (2, 28)
    assert load_profile("ubuntu24.04").max_versions["GLIBCXX"] > load_profile("debian12").max_versions["GLIBCXX"]


def test_unknown_profile_says_did_you_mean():
    with pytest.raises(UsageError, match="did you mean 'ubuntu24.04'"):
        load_profile("ubuntu24.4")


def test_host_profile_matches_this_machine():
    p = load_profile("host")
    out = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout
    glibc = tuple(int(x) for x in re.search(r"(\d+)\.(\d+)\s*$", out.splitlines()[0]).groups())
    assert p.max_versions["GLIBC"] == glibc
    if shutil.which("readelf") and LIBSTDCXX.exists():
        txt = subprocess.run(["readelf", "-V", "-W", str(LIBSTDCXX)], capture_output=True, text=True).stdout
        vers = {tuple(map(int, v.split("."))) for v in re.findall(r"Name: GLIBCXX_([\d.]+)", txt)}
        assert p.max_versions["GLIBCXX"] == max(vers)
    assert "version_d" in p.source


def test_host_profile_agrees_with_lief():
    import lief  # an independent reader as the oracle (the toolchain reads with its own)

    from toolchain.elf.reader import open_library

    for lib in (LIBSTDCXX, Path("/usr/lib/x86_64-linux-gnu/libc.so.6")):
        binary = lief.ELF.parse(str(lib.resolve()))
        theirs = {str(aux.name) for d in binary.symbols_version_definition for aux in d.auxiliary_symbols}
        # lief also lists each definition's parent (the second aux entry): compare the sets
        assert set(open_library(lib)[0].verdef) == theirs


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils not installed")
@pytest.mark.parametrize("path", [LIBSTDCXX, Path("/usr/lib/x86_64-linux-gnu/libc.so.6"), Path("/bin/ls")])
def test_reader_agrees_with_readelf(path):
    if not path.exists():
        pytest.skip(f"{path} not on this machine")
    elf = read_elf(path)
    dyn = subprocess.run(["readelf", "-d", "-W", str(path)], capture_output=True, text=True).stdout
    assert list(elf.needed) == re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dyn)
    syms = subprocess.run(["readelf", "--dyn-syms", "-W", str(path)], capture_output=True, text=True).stdout
    rows = [ln.split() for ln in syms.splitlines() if re.match(r"\s+\d+:", ln)]
    named = [r for r in rows if len(r) >= 8]
    assert len(elf.symbols) == len(named)
    undefined = {r[7].split("@")[0] for r in named if r[6] == "UND"}
    assert {s.name for s in elf.symbols if not s.defined} == undefined
    stack = subprocess.run(["readelf", "-l", "-W", str(path)], capture_output=True, text=True).stdout
    gnu_stack = next(ln for ln in stack.splitlines() if "GNU_STACK" in ln)
    assert elf.exec_stack == ("RWE" in gnu_stack)
