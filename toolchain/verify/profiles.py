"""Target profiles as data: the newest symbol version of each family a binary may need on a target, and the
libraries that target provides. Named profiles live in profiles/*.toml with their sources; `host` is read
from this machine's own libc, libstdc++ and libgcc_s (their version definitions, .gnu.version_d, read by
toolchain.elf.reader, which is fast to import where lief alone costs 0.7-0.85 s; a test checks the result
against lief's reading of the same files).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

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
    name: str
    description: str
    source: str
    machine: str
    max_versions: dict[str, tuple[int, ...]]
    allowed: frozenset[str] | None  # None: whatever this machine resolves (the host profile)
    packages: dict[str, str] = field(default_factory=dict)
    exec_stack_refused: bool = False

    def to_json(self) -> dict:
        return {"name": self.name, "description": self.description, "source": self.source,
                "machine": self.machine, "max_versions": {k: vstr(v) for k, v in self.max_versions.items()}}


def available() -> list[str]:
    return ["host", *sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))]


def load_profile(name: str) -> Profile:
    if name == "host":
        return host_profile()
    path = PROFILE_DIR / f"{name}.toml"
    if not path.is_file():
        names = available()
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        msg = f"unknown profile {name!r}{hint}"
        raise UsageError(msg, fix=f"use one of: {', '.join(names)}")
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    maxv = {}
    for fam, v in data["max_versions"].items():
        maxv[fam] = tuple(int(x) for x in v.split("."))
    libs = data.get("libraries", {})
    return Profile(name=data["name"], description=data["description"], source=data["source"],
                   machine=data["machine"], max_versions=maxv, allowed=frozenset(libs.get("allowed", ())),
                   packages=dict(libs.get("packages", {})), exec_stack_refused=bool(data.get("exec_stack_refused")))


def host_profile() -> Profile:
    """This machine: the highest version each of its own runtime libraries defines."""
    import platform

    from toolchain.elf.reader import open_library
    from toolchain.elf.resolve import DEFAULT_DIRS, ld_so_conf_dirs

    dirs = [*ld_so_conf_dirs(), *DEFAULT_DIRS]
    maxv: dict[str, tuple[int, ...]] = {}
    sources = []
    for fam, lib in FAMILIES.items():
        path = next((Path(d) / lib for d in dirs if (Path(d) / lib).is_file()), None)
        if path is None:
            continue
        for vname in open_library(path.resolve())[0].verdef:
            parsed = parse_version(vname)
            if parsed and parsed[0] == fam and parsed[1] > maxv.get(fam, ()):
                maxv[fam] = parsed[1]
        if fam in maxv:
            sources.append(f"{fam}_{vstr(maxv[fam])} from {path.resolve()}")
    glibc = maxv.get("GLIBC", (0,))
    return Profile(name="host", description=f"this machine ({platform.machine()})",
                   source="version definitions (.gnu.version_d) of this machine's libraries: " + "; ".join(sources),
                   machine={"x86_64": "x86_64", "aarch64": "aarch64"}.get(platform.machine(), platform.machine()),
                   max_versions=maxv, allowed=None, exec_stack_refused=glibc >= GLIBC_REFUSES_EXEC_STACK)
