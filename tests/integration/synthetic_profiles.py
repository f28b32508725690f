"""Target profiles written for one test: a NAME.toml like toolchain/verify/profiles/*.toml in a temporary
profile directory that `verify --profile NAME` (load_profile) reads instead of the shipped one, so that a rule
can be checked at the exact edge of a profile's limit (a level or version the shipped profiles don't have)."""

from __future__ import annotations

from pathlib import Path


def synthetic_profile(monkeypatch, directory: Path, name: str, *, max_versions: dict[str, str] | None = None,
                      cpu_isa: str | None = None) -> str:
    """Write profile `name` into `directory` and point the profile loader at that directory (for the test's
    duration); returns the name. `max_versions`: {"GLIBC": "2.34", ...}; `cpu_isa`: a level of
    toolchain/spec/cpu_isa.toml."""
    from toolchain.verify import profiles

    directory.mkdir(parents=True, exist_ok=True)
    lines = [f'name = "{name}"', f'description = "synthetic profile {name} of a test"',
             'source = "written by the test"', 'machine = "x86_64"', "", "[max_versions]"]
    lines += [f'{fam} = "{v}"' for fam, v in (max_versions or {}).items()]
    if cpu_isa is not None:
        lines += ["", "[cpu]", f'isa = "{cpu_isa}"', f'source = "synthetic: every target CPU has {cpu_isa}"']
    (directory / f"{name}.toml").write_text("\n".join(lines) + "\n")
    for attr in ("_PROFILE_DIR", "PROFILE_DIR"):  # whichever the loader reads
        monkeypatch.setattr(profiles, attr, directory if attr == "PROFILE_DIR" else str(directory), raising=False)
    loaded = profiles.load_profile(name)  # the loader reads this file, not a shipped profile
    assert loaded.name == name and loaded.target.cpu_isa == cpu_isa, loaded
    return name
