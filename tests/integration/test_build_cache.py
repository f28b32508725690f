"""Build speed and scale: cache_dir= (SCons CacheDir) shared between checkouts, null builds of CPU + CUDA."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, build_lock, repo_scons, scons_command
from toolchain.scons.nvcc import find_nvcc


def _checkout(dest: Path) -> Path:
    """The files a build reads, copied to another absolute path (another machine's checkout)."""
    dest.mkdir(parents=True)
    for rel in ("SConstruct", "toolchain", "runtime", "templates"):
        src = REPO_ROOT / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dest / rel)
    return dest


def _scons(cwd: Path, *args: str, env=None) -> subprocess.CompletedProcess:
    with build_lock() if cwd == REPO_ROOT else contextlib.nullcontext():  # the checkout's build/: one at a time
        return subprocess.run([*scons_command(), "-Q", f"-j{os.cpu_count() or 2}", *args], cwd=cwd,
                              capture_output=True, text=True, env=env)


def _compiles(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if " -c " in ln and " -o " in ln]


@pytest.mark.slow
@pytest.mark.long  # two scratch builds of the runtime: minutes
def test_cache_dir_is_shared_between_checkouts_and_keyed_by_the_compiler(tmp_path):
    cache = tmp_path / "cache"
    a = _checkout(tmp_path / "machine-a")
    first = _scons(a, f"cache_dir={cache}")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert len(_compiles(first.stdout)) > 10
    assert any(cache.rglob("*")), "nothing was pushed to the cache"

    # Another checkout at another absolute path: every object comes from the cache, nothing compiles.
    b = _checkout(tmp_path / "machine-b")
    second = _scons(b, f"cache_dir={cache}")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert _compiles(second.stdout) == [], _compiles(second.stdout)[:3]
    assert "Retrieved" in second.stdout
    run = subprocess.run([str(b / "build" / "cpu-gcc-release" / "tests" / "link_test"),
                          str(b / "build" / "cpu-gcc-release" / "tests" / "link_test_plugin.so")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr

    # Another compiler behind the same name (same command lines): nothing may come from the cache.
    wrapper = tmp_path / "other-gcc" / "bin"
    wrapper.mkdir(parents=True)
    for name, real in (("g++", shutil.which("g++")), ("gcc", shutil.which("gcc"))):
        script = wrapper / name
        script.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "other {name} 99.1"; exit 0; fi\n'
                          f'exec {real} "$@"\n')
        script.chmod(0o755)
    c = _checkout(tmp_path / "machine-c")
    env = {**os.environ, "PATH": f"{wrapper}:{os.environ['PATH']}"}
    third = _scons(c, f"cache_dir={cache}", env=env)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    # (Generated headers do not depend on the compiler and may come from the cache; objects may not.)
    assert not [ln for ln in third.stdout.splitlines() if ln.startswith("Retrieved") and (".o'" in ln or ".os'" in ln)]
    assert len(_compiles(third.stdout)) == len(_compiles(first.stdout))


def _assert_null_build(*args: str) -> None:
    """After a full build of the variant `args` select: `scons -q` says up to date and `scons -n` runs nothing.
    (How fast that is gets measured in bench/bench_build.py, not here.)"""
    q = repo_scons("-q", *args)
    assert q.returncode == 0, f"scons -q {' '.join(args)}: out of date after a full build\n{q.stdout[-2000:]}"
    dry = repo_scons("-n", "-Q", *args)
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    # Lines of SCons's own ("scons: `x' is up to date.") and the configuration's reports ("scons: cuda=auto: ...",
    # "scons: cuDNN 9.19.0 headers ...") start with "scons: "; a command the build would run never does.
    commands = [ln for ln in dry.stdout.splitlines() if ln and not ln.startswith("scons: ")]
    assert commands == [], commands


def test_null_build_of_the_cpu_variant_does_nothing(host_build):
    _assert_null_build()


@pytest.mark.long  # a full build of the CUDA variant: minutes
def test_null_build_of_the_cuda_variant_does_nothing(host_build):
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the CUDA variant needs the CUDA toolkit (not a GPU)")
    proc = _scons(REPO_ROOT, "cuda=on")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _assert_null_build("cuda=on")
