"""The Triton backend (runtime/triton/) in NVIDIA Triton Inference Server 2.51 itself: the server of the
nvidia-pytriton 0.7.0 wheel, which .ci/setup fetches with pip and unpacks into build/tritonserver/ (a program
these tests start; never installed or imported). Every server listens on 127.0.0.1 on free ports, is waited
for with a deadline and is always killed.

What is checked: the backend builds in the default build against triton_api.h (our declaration of Triton's C
API), and that declaration matches the real server (every symbol the backend imports is exported by
libtritonserver.so, every enum value names the same thing there, the backend API version is the server's);
the harness (our own stand-in for the server) runs the lifecycle; the real server loads models through the
backend and answers tritonclient over HTTP and gRPC with the outputs of eager torch."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import BUILD_DIR, REPO_ROOT, shared_dir, shared_export

TRITON_DIR = BUILD_DIR / "tritonserver"  # .ci/setup (.ci/tritonserver.py) unpacks the wheel here
SERVER = TRITON_DIR / "pytriton" / "tritonserver" / "bin" / "tritonserver"
SERVER_LIBS = TRITON_DIR / "nvidia_pytriton.libs"
API_HEADER = REPO_ROOT / "runtime" / "triton" / "triton_api.h"
MAX_ROWS = 16
ENTRY_POINTS = {"TRITONBACKEND_Initialize", "TRITONBACKEND_ModelInitialize", "TRITONBACKEND_ModelFinalize",
                "TRITONBACKEND_ModelInstanceInitialize", "TRITONBACKEND_ModelInstanceFinalize",
                "TRITONBACKEND_ModelInstanceExecute"}


# ------------------------------------------------------------------------------------------- the server

@pytest.fixture(scope="session")
def tritonserver() -> Path:
    """The tritonserver program of the unpacked wheel; the test skips when it is not there."""
    if not os.access(SERVER, os.X_OK):
        pytest.skip(f"Triton Inference Server is not unpacked in {TRITON_DIR}: run .ci/setup (it fetches "
                    "nvidia-pytriton==0.7.0 with pip download; or .venv/bin/python .ci/tritonserver.py)")
    return SERVER


@pytest.fixture(scope="session")
def backend_dir(host_build) -> Path:
    """What `aoti-toolchain triton-backend-dir` prints in a checkout: the default build's dist/triton."""
    path = host_build.variant_dir / "dist" / "triton"
    assert (path / "aoti_toolchain" / "libtriton_aoti_toolchain.so").is_file(), "the default build has no backend"
    return path


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Server:
    """One tritonserver process: its ports, its log, its pid."""

    def __init__(self, proc: subprocess.Popen, http: int, grpc: int, log: Path) -> None:
        self.proc, self.http_port, self.grpc_port, self.log = proc, http, grpc, log

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def get(self, path: str, timeout: float = 5) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://{self.http}{path}", timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post(self, path: str, body: dict | None = None, timeout: float = 60) -> tuple[int, bytes]:
        req = urllib.request.Request(f"http://{self.http}{path}", data=json.dumps(body or {}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def _wait_ready(server: Server, deadline: float) -> None:
    while True:
        if not server.alive():
            return
        with contextlib.suppress(OSError):
            if server.get("/v2/health/ready", timeout=2)[0] == 200:
                return
        if time.monotonic() > deadline:
            return
        time.sleep(0.2)


@contextlib.contextmanager
def triton(repo: Path, backend: Path, log: Path, *, explicit: bool = False, load: tuple[str, ...] = (),
           ready_timeout: float = 120, env: dict[str, str] | None = None):
    """tritonserver on `repo` with `backend` as its --backend-directory, HTTP and gRPC on free ports of
    127.0.0.1 (no metrics); yields a Server once /v2/health/ready answers 200 (after at most `ready_timeout`
    seconds), kills it (its whole process group) when the block ends. A start that lost a race for its ports
    is retried (twice)."""
    for attempt in range(3):
        http, grpc = _free_ports(2)
        cmd = [str(SERVER), f"--model-repository={repo}", f"--backend-directory={backend}",
               "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", f"--http-port={http}", f"--grpc-port={grpc}",
               "--allow-metrics=false", "--allow-gpu-metrics=false", "--pinned-memory-pool-byte-size=0",
               "--exit-timeout-secs=5", "--strict-readiness=true"]
        if explicit:
            cmd += ["--model-control-mode=explicit", *(f"--load-model={m}" for m in load)]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
        server = Server(proc, http, grpc, log)
        try:
            _wait_ready(server, time.monotonic() + ready_timeout)
            if server.alive() and server.get("/v2/health/ready")[0] == 200:
                break
            text = server.log_text()
            server.kill()
            if "ddress already in use" in text and attempt < 2:
                continue
            pytest.fail(f"tritonserver did not become ready (exit {proc.returncode}):\n{text[-6000:]}")
        except BaseException:
            server.kill()
            raise
    try:
        yield server
    finally:
        server.kill()


def _config_json(server: Server, model: str) -> dict:
    status, body = server.get(f"/v2/models/{model}/config")
    assert status == 200, body
    return json.loads(body)


# ---------------------------------------------------------------------------------------------- models

@pytest.fixture(scope="session")
def dyn_mlp(torch, tmp_path_factory):
    """The example MLP exported with a dynamic batch 1..16: (pt2, eager function)."""
    from toolchain import examples

    module, (x,) = examples.get("mlp")
    batch = torch.export.Dim("batch", min=1, max=MAX_ROWS)
    pt2 = shared_export(shared_dir(tmp_path_factory, "triton") / "mlp.pt2", module, (x,),
                        dynamic_shapes={"input": {0: batch}})

    def eager(a: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(a)).numpy()

    return pt2, eager


def _rows(n: int, seed: int, width: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, width)).astype(np.float32)


def _write_model(repo: Path, name: str, pt2: Path, config: str) -> None:
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "1" / "model.pt2").write_bytes(pt2.read_bytes())
    (repo / name / "config.pbtxt").write_text(config)


MLP_CONFIG = """name: "mlp"
backend: "aoti_toolchain"
max_batch_size: 16
input [ { name: "input" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "output_0" data_type: TYPE_FP32 dims: [ 8 ] } ]
dynamic_batching { }
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters { key: "method" value: { string_value: "forward" } }
"""


# ----------------------------------------------------------------------------------- the build and the API

def test_backend_is_built_by_default_and_exports_only_its_entry_points(backend_dir):
    from toolchain.elf.reader import read_elf

    backend = read_elf(backend_dir / "aoti_toolchain" / "libtriton_aoti_toolchain.so")
    exported = {s.name for s in backend.symbols if s.defined and s.binding != "LOCAL"}
    assert exported == ENTRY_POINTS, exported
    assert not [s.name for s in backend.symbols if s.binding == "UNIQUE"]  # Triton can unload it
    # the runtime is opened at TRITONBACKEND_Initialize, not linked; nothing of torch
    assert not [n for n in backend.needed if "aoti_host" in n or "torch" in n], backend.needed
    assert not backend.runpath and not backend.rpath and not backend.exec_stack
    # the runtime it opens is beside it, as Triton's --backend-directory layout wants
    assert (backend_dir / "aoti_toolchain" / "libaoti_host.so").is_file()


def _header_enums() -> dict[str, dict[int, str]]:
    """triton_api.h's enum values by prefix: {"TRITONSERVER_TYPE_": {11: "FP32", ...}, ...}."""
    text = API_HEADER.read_text()
    out: dict[str, dict[int, str]] = {}
    for prefix in ("TRITONSERVER_TYPE_", "TRITONSERVER_INSTANCEGROUPKIND_", "TRITONSERVER_MEMORY_",
                   "TRITONSERVER_ERROR_"):
        out[prefix] = {int(v): k for k, v in re.findall(rf"\b{prefix}(\w+) = (\d+)", text)}
        assert out[prefix], prefix
    return out


# Run with the server's libraries on LD_LIBRARY_PATH (libtritonserver's own dependencies find each other through
# the server program's RPATH only): prints what libtritonserver.so says each enum value is.
_PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
for f in ("TRITONSERVER_DataTypeString", "TRITONSERVER_InstanceGroupKindString", "TRITONSERVER_MemoryTypeString",
          "TRITONSERVER_ErrorCodeString"):
    getattr(lib, f).restype = ctypes.c_char_p
lib.TRITONSERVER_ErrorNew.restype = ctypes.c_void_p
lib.TRITONSERVER_ErrorNew.argtypes = [ctypes.c_int, ctypes.c_char_p]
lib.TRITONSERVER_ErrorCodeString.argtypes = [ctypes.c_void_p]
lib.TRITONSERVER_ErrorDelete.argtypes = [ctypes.c_void_p]
lib.TRITONBACKEND_ApiVersion.restype = ctypes.c_void_p
values = json.loads(sys.argv[2])
out = {"TRITONSERVER_TYPE_": {}, "TRITONSERVER_INSTANCEGROUPKIND_": {}, "TRITONSERVER_MEMORY_": {},
       "TRITONSERVER_ERROR_": {}}
for v in values["TRITONSERVER_TYPE_"]:
    out["TRITONSERVER_TYPE_"][v] = lib.TRITONSERVER_DataTypeString(int(v)).decode()
for v in values["TRITONSERVER_INSTANCEGROUPKIND_"]:
    out["TRITONSERVER_INSTANCEGROUPKIND_"][v] = lib.TRITONSERVER_InstanceGroupKindString(int(v)).decode()
for v in values["TRITONSERVER_MEMORY_"]:
    out["TRITONSERVER_MEMORY_"][v] = lib.TRITONSERVER_MemoryTypeString(int(v)).decode()
for v in values["TRITONSERVER_ERROR_"]:
    e = lib.TRITONSERVER_ErrorNew(int(v), b"probe")
    out["TRITONSERVER_ERROR_"][v] = lib.TRITONSERVER_ErrorCodeString(e).decode()
    lib.TRITONSERVER_ErrorDelete(e)
major, minor = ctypes.c_uint32(), ctypes.c_uint32()
assert lib.TRITONBACKEND_ApiVersion(ctypes.byref(major), ctypes.byref(minor)) is None
out["api"] = [major.value, minor.value]
print(json.dumps(out))
"""

# How libtritonserver spells each of our enumerators (TRITONSERVER_ErrorCodeString has words, not names).
_ERROR_WORDS = {"UNKNOWN": "Unknown", "INTERNAL": "Internal", "NOT_FOUND": "Not found", "INVALID_ARG": "Invalid argument",
                "UNAVAILABLE": "Unavailable", "UNSUPPORTED": "Unsupported", "ALREADY_EXISTS": "Already exists"}


def test_declarations_match_the_real_server(tritonserver, backend_dir):
    """triton_api.h against libtritonserver.so of server 2.51: every TRITONSERVER_*/TRITONBACKEND_* symbol the
    built backend imports is exported there, every enum value we declare is the one the server gives that
    name, and the server's backend API version is the one we declare (the backend accepts it: see the tests
    below, where the server loads models through it)."""
    from toolchain.elf.reader import read_elf

    libs = sorted(SERVER_LIBS.glob("libtritonserver*.so"))
    assert len(libs) == 1, libs
    server_lib = read_elf(libs[0])
    exports = {s.name for s in server_lib.symbols if s.defined and s.binding != "LOCAL"}
    backend = read_elf(backend_dir / "aoti_toolchain" / "libtriton_aoti_toolchain.so")
    imports = {s.name for s in backend.symbols if not s.defined and s.name.startswith(("TRITONSERVER_", "TRITONBACKEND_"))}
    assert len(imports) >= 29, sorted(imports)
    assert imports <= exports, sorted(imports - exports)
    # every TRITON* function triton_api.h declares, imported or implemented, is a real one
    declared = set(re.findall(r"\b(TRITON(?:SERVER|BACKEND)_[A-Za-z]+)\(", API_HEADER.read_text()))
    assert declared - ENTRY_POINTS <= exports, sorted(declared - ENTRY_POINTS - exports)
    assert ENTRY_POINTS <= declared

    ours = _header_enums()
    probe = subprocess.run([sys.executable, "-c", _PROBE, str(libs[0]), json.dumps({k: list(v) for k, v in ours.items()})],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "LD_LIBRARY_PATH": str(SERVER_LIBS)})
    assert probe.returncode == 0, probe.stderr[-3000:]
    theirs = json.loads(probe.stdout)
    for prefix, values in ours.items():
        for value, name in values.items():
            said = theirs[prefix][str(value)]
            want = _ERROR_WORDS[name] if prefix == "TRITONSERVER_ERROR_" else "<invalid>" if name == "INVALID" else name
            assert said == want, (prefix + name, value, said)
    text = API_HEADER.read_text()
    major = int(re.search(r"#define TRITONBACKEND_API_VERSION_MAJOR (\d+)", text).group(1))
    minor = int(re.search(r"#define TRITONBACKEND_API_VERSION_MINOR (\d+)", text).group(1))
    assert theirs["api"] == [major, minor] == [1, 19]


def test_harness_runs_the_lifecycle_and_answers_bad_requests_with_errors(host_build, backend_dir, dyn_mlp, tmp_path):
    """Our stand-in for the server (runtime/triton/tests/triton_harness.cpp): a fast check without Triton."""
    pt2, eager = dyn_mlp
    model_dir = tmp_path / "repo" / "mlp"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.pt2").write_bytes(pt2.read_bytes())
    rows = 5
    run = subprocess.run([host_build.tests_dir / "triton_harness", backend_dir / "aoti_toolchain" /
                          "libtriton_aoti_toolchain.so", model_dir, "1", str(rows), tmp_path / "out.bin"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert "response 0: ok [5,8]" in lines
    assert any(ln.startswith("response 1: error 3:") and "float64" in ln for ln in lines), lines  # INVALID_ARG
    assert any(ln.startswith("response 2: error 3:") and "dimension 1 must be 16" in ln for ln in lines), lines
    assert [ln for ln in lines if ln.startswith("released")] == ["released 0", "released 1", "released 2"]
    x = ((np.arange(rows * 16) % 97) * 0.01 - 0.5).astype(np.float32).reshape(rows, 16)
    out = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(rows, 8)
    np.testing.assert_allclose(out, eager(x), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------- the real server

def test_the_real_server_loads_a_model_through_the_backend(tritonserver, backend_dir, dyn_mlp, tmp_path):
    """Triton 2.51 opens the backend, which accepts its backend API version (TRITONBACKEND_Initialize refuses
    any other), loads the package and answers over HTTP with eager's outputs."""
    th = pytest.importorskip("tritonclient.http", reason="tritonclient is not installed (pip install -e '.[serve]')")
    pt2, eager = dyn_mlp
    repo = tmp_path / "repo"
    _write_model(repo, "mlp", pt2, MLP_CONFIG)
    with triton(repo, backend_dir, tmp_path / "server.log") as server:
        client = th.InferenceServerClient(server.http)
        assert client.is_model_ready("mlp")
        assert "aoti_toolchain" in server.log_text() and "libtriton_aoti_toolchain.so" in server.log_text()
        for n in (1, 7, MAX_ROWS):
            x = _rows(n, n)
            inp = th.InferInput("input", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            out = client.infer("mlp", [inp]).as_numpy("output_0")
            np.testing.assert_allclose(out, eager(x), rtol=1e-5, atol=1e-5)
