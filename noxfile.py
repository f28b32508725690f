"""nox sessions: lint, tests, build. Sessions only run commands; the project's logic lives in toolchain/."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session(tags=["lint"])
def lint(session: nox.Session) -> None:
    session.install("ruff", "mypy", "-e", ".")
    session.run("ruff", "check", "toolchain", "tests", "bench", "noxfile.py", "SConstruct")
    session.run("mypy", "toolchain")


@nox.session(tags=["tests"])
def tests(session: nox.Session) -> None:
    session.install("-e", ".[torch,dev]")
    session.run("python", "-m", "pytest", "tests", *session.posargs)


@nox.session(tags=["build"])
@nox.parametrize("mode", ["release", "debug"], ids=["release", "debug"])
def build(session: nox.Session, mode: str) -> None:
    session.install("-e", ".")
    session.run("scons", "-Q", f"mode={mode}", "-j2")
