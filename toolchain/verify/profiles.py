"""Target profiles as data: the newest symbol version of each family a binary may need on a target, and the
libraries that target provides. Named profiles live in profiles/*.toml with their sources; `host` is read
from this machine's own libc, libstdc++ and libgcc_s (their version definitions, .gnu.version_d, read by
toolchain.elf.reader, which is fast to import where lief alone costs 0.7-0.85 s; a test checks the result
against lief's reading of the same files).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from toolchain import parsed_cache
from toolchain.errors import UsageError

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
DEFAULT_PROFILE = "host"
# Version families we compare, and the library whose version definitions give the host's maximum.
FAMILIES = {"GLIBC": "libc.so.6", "GLIBCXX": "libstdc++.so.6", "CXXABI": "libstdc++.so.6", "GCC": "libgcc_s.so.1"}
_VERSION_RE = re.compile(r"^(GLIBC|GLIBCXX|CXXABI|GCC)_(\d+(?:\.\d+)*)$")
GLIBC_REFUSES_EXEC_STACK = (2, 41)


def parse_version(name: str) -> tuple[str, tuple[int, ...]] | None:
    """`GLIBCXX_3.4.30` -> ("GLIBCXX", (3, 4, 30)); None for other version names (GLIBC_PRIVATE, ...)."""
    m = _VERSION_RE.match(name)
    if m is None:
        return None
    return m[1], tuple(int(x) for x in m[2].split("."))


def vstr(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


@dataclass(frozen=True)
class Profile:
    """A target: the newest symbol versions and the libraries it provides, and its CPU and GPUs."""

    name: str
    description: str
    source: str
    machine: str
    max_versions: dict[str, tuple[int, ...]]
    allowed: frozenset[str] | None  # None: whatever this machine resolves (the host profile)
    packages: dict[str, str] = field(default_factory=dict)
    exec_stack_refused: bool = False
    target: TargetProfile = field(default_factory=lambda: TargetProfile())

    def to_json(self) -> dict:
        out = {"name": self.name, "description": self.description, "source": self.source,
               "machine": self.machine, "max_versions": {k: vstr(v) for k, v in self.max_versions.items()}}
        if self.target.cpu_isa or self.target.cuda_arch or self.target.cuda_driver:
            out["target"] = self.target.to_json()
        return out


@dataclass(frozen=True)
class TargetProfile:
    """The target's CPUs and GPUs (the [cpu] and [cuda] tables): None/empty means not checked."""

    cpu_isa: str | None = None  # psABI level every target CPU has (toolchain/spec/cpu_isa.toml)
    cpu_extensions: frozenset[str] = frozenset()  # extensions beyond the level the target CPUs also have
    cuda_arch: tuple[int, ...] = ()  # compute capabilities of the target GPUs, as 90
    cuda_driver: tuple[int, int] | None = None  # the oldest driver on the target (535, 54)
    sources: dict[str, str] = field(default_factory=dict)  # field -> where the fact comes from

    def to_json(self) -> dict:
        return {"cpu_isa": self.cpu_isa, "cpu_extensions": sorted(self.cpu_extensions),
                "cuda_arch": list(self.cuda_arch),
                "cuda_driver": vstr(self.cuda_driver) if self.cuda_driver else None, "sources": self.sources}


def load_target(data: dict, path: Path) -> TargetProfile:
    """The [cpu] and [cuda] tables of a profile file; UsageError naming the file and field when malformed
    or without its source."""
    from toolchain.spec.cpu_isa import load_isa_spec

    spec = load_isa_spec()
    cpu, cuda = data.get("cpu", {}), data.get("cuda", {})
    sources: dict[str, str] = {}

    def bad(what: str) -> UsageError:
        return UsageError(f"{path}: {what}", fix="correct the profile (see toolchain/verify/profiles/dgx-h200.toml)")

    def cited(table: dict, key: str, source_key: str, name: str) -> None:
        if key in table:
            if not isinstance(table.get(source_key), str) or not table[source_key]:
                raise bad(f"{name} has no {source_key}: every fact of a profile cites where it comes from")
            sources[name] = table[source_key]

    cited(cpu, "isa", "source", "cpu_isa")
    cited(cpu, "extensions", "extensions_source", "cpu_extensions")
    cited(cuda, "arch", "arch_source", "cuda_arch")
    cited(cuda, "driver", "driver_source", "cuda_driver")
    isa = cpu.get("isa")
    if isa is not None and isa not in spec.levels:
        raise bad(f"[cpu] isa {isa!r} is not one of {', '.join(spec.levels)}")
    exts = cpu.get("extensions", [])
    if not isinstance(exts, list) or any(e not in spec.extensions for e in exts):
        raise bad(f"[cpu] extensions {exts!r}: names from toolchain/spec/cpu_isa.toml")
    arch = cuda.get("arch", [])
    if not isinstance(arch, list) or any(not isinstance(a, int) or not 10 <= a <= 999 for a in arch):
        raise bad(f"[cuda] arch {arch!r}: compute capabilities as integers (90 for 9.0)")
    driver = cuda.get("driver")
    m = re.match(r"^(\d{3})\.(\d{1,3})$", driver) if isinstance(driver, str) else None
    if driver is not None and m is None:
        raise bad(f"[cuda] driver {driver!r}: a driver version like \"580.65\"")
    return TargetProfile(cpu_isa=isa, cpu_extensions=frozenset(exts), cuda_arch=tuple(sorted(arch)),
                         cuda_driver=(int(m[1]), int(m[2])) if m else None, sources=sources)


def available() -> list[str]:
    """"host" and the profiles of PROFILE_DIR (each NAME.toml there)."""
    return ["host", *sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))]


def load_profile(name: str, read=None) -> Profile:
    """A profile by name ("host": this machine's, read from its libraries). `read`: path -> ElfFile or None,
    the reader of the run's Resolver, so that the libraries the host profile reads are parsed once."""
    if name == "host":
        return host_profile(read)
    path = PROFILE_DIR / f"{name}.toml"
    if not path.is_file():
        names = available()
        import difflib

        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        msg = f"unknown profile {name!r}{hint}"
        raise UsageError(msg, fix=f"use one of: {', '.join(names)}")
    data = parsed_cache.load("profile", (path,), lambda: _parse(path), dict)
    maxv = {}
    for fam, v in data["max_versions"].items():
        maxv[fam] = tuple(int(x) for x in v.split("."))
    libs = data.get("libraries", {})
    return Profile(name=data["name"], description=data["description"], source=data["source"],
                   machine=data["machine"], max_versions=maxv, allowed=frozenset(libs.get("allowed", ())),
                   packages=dict(libs.get("packages", {})), exec_stack_refused=bool(data.get("exec_stack_refused")),
                   target=load_target(data, path))


def _parse(path: Path) -> dict:
    import tomllib  # only when the file is parsed (not for an entry of the parsed cache)

    return tomllib.loads(path.read_text(encoding="utf-8"))


def host_profile(read=None) -> Profile:
    """This machine: the highest version each of its own runtime libraries defines. `read`: as load_profile's."""
    from toolchain.elf.reader import open_library
    from toolchain.elf.resolve import DEFAULT_DIRS, ld_so_conf_dirs

    def parse(path: str):
        return open_library(path)[0] if read is None else read(path)

    dirs = [*ld_so_conf_dirs(), *DEFAULT_DIRS]
    maxv: dict[str, tuple[int, ...]] = {}
    sources = []
    for fam, lib in FAMILIES.items():
        path = next((p for d in dirs if os.path.isfile(p := os.path.join(d, lib))), None)
        if path is None:
            continue
        real = os.path.realpath(path)  # Path.resolve()
        elf = parse(real)
        for vname in elf.verdef if elf is not None else ():
            parsed = parse_version(vname)
            if parsed and parsed[0] == fam and parsed[1] > maxv.get(fam, ()):
                maxv[fam] = parsed[1]
        if fam in maxv:
            sources.append(f"{fam}_{vstr(maxv[fam])} from {real}")
    glibc = maxv.get("GLIBC", (0,))
    arch = os.uname().machine  # platform.machine(), without importing platform
    return Profile(name="host", description=f"this machine ({arch})",
                   source="version definitions (.gnu.version_d) of this machine's libraries: " + "; ".join(sources),
                   machine={"x86_64": "x86_64", "aarch64": "aarch64"}.get(arch, arch),
                   max_versions=maxv, allowed=None, exec_stack_refused=glibc >= GLIBC_REFUSES_EXEC_STACK,
                   target=host_target())


def host_target() -> TargetProfile:
    """This machine's CPU, from the flags the kernel reports in /proc/cpuinfo (the same names as
    toolchain/spec/cpu_isa.toml; the kernel lists a flag only when the OS enabled its registers). GPUs are
    not probed: verify's host profile checks no CUDA rule."""
    from toolchain.spec.cpu_isa import load_isa_spec

    if os.uname().machine not in ("x86_64", "AMD64"):
        return TargetProfile()
    try:  # the first CPU's flags: the rest of the file (one block per CPU) is not read
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            line = next((ln.rstrip("\n") for ln in f if ln.startswith("flags")), "")
    except OSError:
        return TargetProfile()
    flags = set(line.partition(":")[2].split())
    aliases = {"sse3": "pni", "lzcnt": "abm"}  # the kernel's names for them
    spec = load_isa_spec()
    have = {e for e in spec.extensions if e in flags or aliases.get(e) in flags}
    level = spec.levels[0]
    for lv in spec.levels:
        if all(x.name in have for x in spec.extensions.values() if x.level == lv):
            level = lv
        else:
            break
    extra = frozenset(e for e in have if not spec.extensions[e].level or spec.rank(spec.extensions[e].level) > spec.rank(level))
    return TargetProfile(cpu_isa=level, cpu_extensions=extra,
                         sources={"cpu_isa": "this machine's /proc/cpuinfo flags",
                                  "cpu_extensions": "this machine's /proc/cpuinfo flags"})
