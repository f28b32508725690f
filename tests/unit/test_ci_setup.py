""".ci/setup says what it does before each long step (the first pip run takes minutes with no output of its own),
stays idempotent, and stops at the first failing step (set -euo pipefail).

The script runs for real in a copy of the checkout's .ci/, with the programs it calls (python3, pip through the
venv's python, dpkg, apt-get, clang) replaced by stubs on PATH that log their command lines: what is checked is
the script's own order of messages and commands, not what pip or apt would install."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / ".ci" / "setup"

# The venv's python: `-m pip ...` logs and exits with $PIP_STATUS (default 0), `.ci/tritonserver.py` (the Triton
# server's fetch) with $TRITON_STATUS (default 0), `.ci/cudnn_headers.py` (cuDNN's and cudnn-frontend's headers) with
# $CUDNN_HEADERS_STATUS (default 0); `-c CODE` says "no nvidia package".
VENV_PYTHON = """#!/bin/sh
echo "RAN python $*" >> "$STUB_LOG"
echo "RAN python $*"
[ "$1" = "-m" ] && [ "$2" = "pip" ] && exit "${PIP_STATUS:-0}"
[ "$1" = ".ci/tritonserver.py" ] && exit "${TRITON_STATUS:-0}"
[ "$1" = ".ci/cudnn_headers.py" ] && exit "${CUDNN_HEADERS_STATUS:-0}"
exit 1
"""
STUBS = {
    # python3 -m venv .venv: makes the venv's python (the stub above), as the real one would make a venv
    "python3": """#!/bin/sh
echo "RAN python3 $*" >> "$STUB_LOG"
mkdir -p .venv/bin && cp "$STUB_DIR/venv-python" .venv/bin/python && chmod +x .venv/bin/python
""",
    # every Debian package is installed unless named in $MISSING_DEBS
    "dpkg": """#!/bin/sh
for p in "$@"; do case " $MISSING_DEBS " in *" $p "*) exit 1;; esac; done
exit 0
""",
    "apt-get": """#!/bin/sh
echo "RAN apt-get $*" >> "$STUB_LOG"
echo "RAN apt-get $*"
""",
    "sudo": """#!/bin/sh
exec "$@"
""",
    "clang": """#!/bin/sh
cat >/dev/null
[ "$1" = "-dumpversion" ] && echo 14.0.6
exit 0
""",
    "qemu-x86_64": "#!/bin/sh\nexit 0\n",
    "nvcc": "#!/bin/sh\nexit 0\n",
}


@pytest.fixture
def sandbox(tmp_path):
    """(checkout copy with .ci/setup, environment with the stubs first on PATH, the stubs' log)."""
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy2(SETUP, checkout / ".ci" / "setup")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, text in {**STUBS, "venv-python": VENV_PYTHON}.items():
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    log = tmp_path / "log"
    log.touch()
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(tmp_path), "STUB_LOG": str(log), "STUB_DIR": str(stubs),
           "MISSING_DEBS": ""}
    return checkout, env, log


def _setup(checkout: Path, env: dict, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(checkout / ".ci" / "setup")], capture_output=True, text=True,
                          env={**env, **extra}, cwd=checkout, timeout=60)


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("setup: ", "RAN "))]


def test_setup_says_what_it_does_before_the_long_pip_step(sandbox):
    checkout, env, _log = sandbox
    proc = _setup(checkout, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = _lines(proc.stdout)
    pip = next(i for i, line in enumerate(lines) if line.startswith("RAN python -m pip install") and "-e" in line)
    said = lines[pip - 1]
    # the line right before pip names the step, what it installs and that it takes a while the first time
    assert said.startswith("setup: installing the Python dependencies") and "torch 2.13" in said, lines
    assert "into .venv" in said and "a few minutes on the first run" in said, said
    assert lines[0] == "setup: creating the virtual environment .venv", lines
    assert lines[-1] == "setup: done: .venv is ready", lines
    # nvcc is on PATH and the stub venv has no nvidia package: cuBLAS is announced, then installed
    cublas = next(i for i, line in enumerate(lines) if line.endswith("pip install -q --disable-pip-version-check "
                                                                       "nvidia-cublas"))
    assert lines[cublas - 1] == "setup: installing nvidia-cublas (the CUDA variant's cuBLAS) into .venv", lines


def test_setup_is_idempotent_and_announces_only_what_it_does(sandbox):
    checkout, env, log = sandbox
    first = _setup(checkout, env)
    assert first.returncode == 0, first.stdout + first.stderr
    second = _setup(checkout, env)
    assert second.returncode == 0, second.stdout + second.stderr
    # the venv exists now: no "creating" line; the pip check still runs and is still announced
    assert not any("creating the virtual environment" in line for line in _lines(second.stdout))
    assert any(line.startswith("setup: installing the Python dependencies") for line in _lines(second.stdout))
    # nothing was missing: apt-get never ran, and no apt step was announced
    assert "apt-get" not in log.read_text() and "with apt-get" not in first.stdout + second.stdout


def test_setup_announces_each_apt_install(sandbox):
    checkout, env, _log = sandbox
    proc = _setup(checkout, env, MISSING_DEBS="libsleef-dev libc++-dev")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = _lines(proc.stdout)
    for packages in ("libopenblas-openmp-dev libsleef-dev", "clang libc++-dev libc++abi-dev"):
        ran = next(i for i, line in enumerate(lines) if line == f"RAN apt-get install -y -q {packages}")
        assert lines[ran - 1].startswith(f"setup: installing {packages} (") and "with apt-get" in lines[ran - 1], lines


def test_setup_stops_at_a_failing_pip(sandbox):
    checkout, env, log = sandbox
    # clang's packages are missing: a script that went on after the failed pip would install them next
    proc = _setup(checkout, env, PIP_STATUS="1", MISSING_DEBS="libc++-dev")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "setup: done" not in proc.stdout and "apt-get" not in log.read_text(), proc.stdout
    assert _lines(proc.stdout)[-1].startswith("RAN python -m pip install"), proc.stdout


def test_setup_announces_the_triton_server_fetch_and_stops_when_it_fails(sandbox):
    checkout, env, _log = sandbox
    proc = _setup(checkout, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = _lines(proc.stdout)
    ran = next(i for i, line in enumerate(lines) if line == "RAN python .ci/tritonserver.py build/tritonserver")
    said = lines[ran - 1]
    assert said.startswith("setup: fetching Triton Inference Server 2.51") and "nvidia-pytriton==0.7.0" in said, lines
    assert "build/tritonserver/" in said and "not installed" in said, said
    # unpacked already: nothing fetched, nothing announced
    (checkout / "build" / "tritonserver" / "nvidia_pytriton-0.7.0.dist-info").mkdir(parents=True)
    again = _setup(checkout, env)
    assert again.returncode == 0 and "tritonserver" not in again.stdout, again.stdout
    (checkout / "build" / "tritonserver" / "nvidia_pytriton-0.7.0.dist-info").rmdir()
    failed = _setup(checkout, env, TRITON_STATUS="1")
    assert failed.returncode == 1 and "setup: done" not in failed.stdout, failed.stdout


def test_setup_fetches_the_cudnn_headers_where_nvcc_is_and_stops_when_that_fails(sandbox):
    checkout, env, _log = sandbox
    proc = _setup(checkout, env)  # nvcc is a stub on PATH
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RAN python .ci/cudnn_headers.py build/cudnn-headers" in _lines(proc.stdout), proc.stdout
    failed = _setup(checkout, env, CUDNN_HEADERS_STATUS="1")
    assert failed.returncode == 1 and "setup: done" not in failed.stdout, failed.stdout
