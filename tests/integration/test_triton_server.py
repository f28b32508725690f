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
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import BUILD_DIR, REPO_ROOT, shared_dir, shared_export
from tests.helpers import free_ports

TRITON_DIR = BUILD_DIR / "tritonserver"  # .ci/setup (.ci/tritonserver.py) unpacks the wheel here
SERVER = TRITON_DIR / "pytriton" / "tritonserver" / "bin" / "tritonserver"
SERVER_LIBS = TRITON_DIR / "nvidia_pytriton.libs"
API_HEADER = REPO_ROOT / "runtime" / "triton" / "triton_api.h"
MAX_ROWS = 16
ENTRY_POINTS = {"TRITONBACKEND_Initialize", "TRITONBACKEND_Finalize", "TRITONBACKEND_ModelInitialize", "TRITONBACKEND_ModelFinalize",
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
           verbose: bool = False, extra: tuple[str, ...] = (), ready_timeout: float = 120,
           env: dict[str, str] | None = None):
    """tritonserver on `repo` with `backend` as its --backend-directory, HTTP and gRPC on free ports of
    127.0.0.1 (no metrics); yields a Server once /v2/health/ready answers 200 (after at most `ready_timeout`
    seconds), kills it (its whole process group) when the block ends. A start that lost a race for its ports
    is retried (twice)."""
    for attempt in range(3):
        http, grpc = free_ports(2)
        cmd = [str(SERVER), f"--model-repository={repo}", f"--backend-directory={backend}",
               "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", f"--http-port={http}", f"--grpc-port={grpc}",
               "--allow-metrics=false", "--allow-gpu-metrics=false", "--pinned-memory-pool-byte-size=0",
               "--exit-timeout-secs=5", "--strict-readiness=true"]
        if explicit:
            cmd += ["--model-control-mode=explicit", *(f"--load-model={m}" for m in load)]
        if verbose:
            cmd.append("--log-verbose=1")
        cmd += extra
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

def _eager(torch, fn):
    def run(*arrays: np.ndarray):
        with torch.no_grad():
            out = fn(*(torch.from_numpy(a) for a in arrays))
        return out

    return run


@pytest.fixture(scope="session")
def dyn_mlp(torch, tmp_path_factory):
    """The example MLP exported with a dynamic batch 1..16 (one size symbol on input and output): (pt2, eager)."""
    from toolchain import examples

    module, (x,) = examples.get("mlp")
    batch = torch.export.Dim("batch", min=1, max=MAX_ROWS)
    pt2 = shared_export(shared_dir(tmp_path_factory, "triton") / "mlp.pt2", module, (x,),
                        dynamic_shapes={"input": {0: batch}})
    run = _eager(torch, module)
    return pt2, lambda a: run(a).numpy()


@pytest.fixture(scope="session")
def heads(torch, tmp_path_factory):
    """Two inputs and a dict of outputs (leaf names `logits`, `aux.0`), static shapes (not batched):
    (pt2, eager returning {name: array})."""
    nn = torch.nn

    class Heads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.trunk, self.a, self.b = nn.Linear(10, 16), nn.Linear(16, 3), nn.Linear(16, 5)

        def forward(self, x, y):
            h = torch.tanh(self.trunk(x)) + y
            return {"logits": self.a(h), "aux": (torch.sigmoid(self.b(h)),)}

    torch.manual_seed(3)
    module = Heads().eval()
    inputs = (torch.randn(6, 10), torch.randn(6, 16))
    pt2 = shared_export(shared_dir(tmp_path_factory, "triton") / "heads.pt2", module, inputs)
    run = _eager(torch, module)

    def eager(x, y):
        out = run(x, y)
        return {"logits": out["logits"].numpy(), "aux.0": out["aux"][0].numpy()}

    return pt2, eager


@pytest.fixture(scope="session")
def prog(torch, tmp_path_factory):
    """A program of two methods (examples.two_methods: forward and embed, [4, 32] inputs): (its directory,
    {method: eager})."""
    from tests.conftest import file_lock
    from toolchain import examples
    from toolchain.export import export_methods

    module, (x,) = examples.two_methods()
    out = shared_dir(tmp_path_factory, "triton") / "prog"
    with file_lock(out.with_name("prog.lock")):
        if not (out / "methods.json").is_file():
            export_methods(module, {"forward": (x,), "embed": (x,)}, out, build_dir=BUILD_DIR)
    return out, {"forward": lambda a: _eager(torch, module)(a).numpy(),
                 "embed": lambda a: _eager(torch, module.embed)(a).numpy()}


def _rows(n: int, seed: int, width: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, width)).astype(np.float32)


def triton_repo(*args) -> None:
    """`aoti-toolchain triton-repo ARGS` (the command, as a user runs it)."""
    proc = subprocess.run([sys.executable, "-m", "toolchain", "triton-repo", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _client(kind: str, server: Server):
    mod = pytest.importorskip(f"tritonclient.{kind}", reason=f"tritonclient[{kind}] is not installed "
                              "(pip install -e '.[serve]')")
    return mod, mod.InferenceServerClient(server.http if kind == "http" else server.grpc)


def _infer(mod, client, model: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None,
           datatypes: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    ins = []
    for name, a in inputs.items():
        t = mod.InferInput(name, list(a.shape), (datatypes or {}).get(name, "FP32"))
        t.set_data_from_numpy(a)
        ins.append(t)
    outs = [mod.InferRequestedOutput(n) for n in outputs] if outputs else None
    result = client.infer(model, ins, outputs=outs)
    names = outputs or [o["name"] for o in (result.get_response(as_json=True) if mod.__name__.endswith("grpc")
                                            else result.get_response())["outputs"]]
    return {n: result.as_numpy(n) for n in names}


def _close(a, b) -> None:
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


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
    assert [ln for ln in lines if ln.startswith("run:")] == ["run: 1 rows"] * 3  # unbatched: a run per request


def _harness_rows(rows: int, offset: int) -> np.ndarray:
    return (((np.arange(rows * 16) + offset) % 97) * 0.01 - 0.5).astype(np.float32).reshape(rows, 16)


def test_harness_stacks_the_requests_of_an_execute(host_build, backend_dir, dyn_mlp, tmp_path):
    """max_batch_size 4, one Execute of six requests: [1, 16], a float64 [1, 16], a [1, 17], then [2, 16],
    [1, 16], [3, 16]. The backend stacks requests 0, 3 and 4 (same datatype and trailing shape, 4 rows) into
    one run; the float64 and the [1, 17] requests run alone (and fail alone, with the runtime's reason); the
    [3, 16] request would take the first run over 4 rows, so it runs on its own. Every good response holds
    its own rows, equal to eager."""
    pt2, eager = dyn_mlp
    model_dir = tmp_path / "repo" / "mlp"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.pt2").write_bytes(pt2.read_bytes())
    run = subprocess.run([host_build.tests_dir / "triton_harness", backend_dir / "aoti_toolchain" /
                          "libtriton_aoti_toolchain.so", model_dir, "1", "1", tmp_path / "out.bin", "stack"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("run:")] == ["run: 4 rows", "run: 1 rows", "run: 1 rows",
                                                             "run: 3 rows"], lines
    responses = [ln for ln in lines if ln.startswith("response")]
    assert responses[0] == "response 0: ok [1,8]" and responses[3:] == ["response 3: ok [2,8]", "response 4: ok [1,8]",
                                                                        "response 5: ok [3,8]"], responses
    assert responses[1].startswith("response 1: error 3:") and "float64" in responses[1]
    assert responses[2].startswith("response 2: error 3:") and "dimension 1 must be 16" in responses[2]
    out = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(7, 8)
    want = np.concatenate([eager(_harness_rows(n, off)) for n, off in ((1, 0), (2, 3), (1, 4), (3, 5))])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------- the real server

def test_the_real_server_loads_a_model_through_the_backend(tritonserver, backend_dir, dyn_mlp, tmp_path):
    """Triton 2.51 opens the backend, which accepts its backend API version (TRITONBACKEND_Initialize refuses
    any other), loads the package of a repository that `triton-repo` wrote, reports the configuration derived
    from the contract, and answers over HTTP and gRPC with eager's outputs."""
    pt2, eager = dyn_mlp
    repo = tmp_path / "repo"
    triton_repo(pt2, "--repo", repo)
    with triton(repo, backend_dir, tmp_path / "server.log") as server:
        assert "libtriton_aoti_toolchain.so" in server.log_text()
        cfg = _config_json(server, "mlp")
        assert cfg["backend"] == "aoti_toolchain" and cfg["max_batch_size"] == MAX_ROWS and "dynamic_batching" in cfg
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [("input", "TYPE_FP32", [16])]
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["output"]] == [("output_0", "TYPE_FP32", [8])]
        assert cfg["parameters"] == {"method": {"string_value": "forward"}}
        for kind in ("http", "grpc"):
            mod, client = _client(kind, server)
            assert client.is_model_ready("mlp")
            for n in (1, 7, MAX_ROWS):
                x = _rows(n, n)
                _close(_infer(mod, client, "mlp", {"input": x})["output_0"], eager(x))


def test_dynamic_batching_stacks_requests_and_answers_each_with_its_own_rows(tritonserver, backend_dir, dyn_mlp,
                                                                             tmp_path):
    """Concurrent requests of mixed batch sizes (1-16 rows) through Triton's dynamic batcher (a 20 ms queue
    delay, so that it has requests to gather): the backend stacks the requests of an Execute along dimension 0
    into runs of at most max_batch_size rows and gives each response its own rows, equal to eager. The
    backend reports each run to Triton with its rows as the batch size: the model's statistics show fewer
    runs than requests, runs of more rows than any one request sent (only stacking makes those), every batch
    within max_batch_size, and the batches' rows adding up to the requests' rows."""
    from concurrent.futures import ThreadPoolExecutor

    pt2, eager = dyn_mlp
    repo = tmp_path / "repo"
    triton_repo(pt2, "--repo", repo, "--batch-delay-us", "20000")
    sizes = (1, 2, 3, 5, 1, 8, 2, 16, 3, 1, 4, 2)
    requests = [_rows(sizes[k % len(sizes)], 100 + k) for k in range(48)]
    with triton(repo, backend_dir, tmp_path / "server.log") as server:
        th, _ = _client("http", server)

        def one(x: np.ndarray) -> np.ndarray:
            return _infer(th, th.InferenceServerClient(server.http), "mlp", {"input": x})["output_0"]

        with ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(one, requests, timeout=300))
        for x, out in zip(requests, results, strict=True):
            assert out.shape == (x.shape[0], 8)
            _close(out, eager(x))
        status, body = server.get("/v2/models/mlp/stats")
        assert status == 200, body
        stats = json.loads(body)["model_stats"][0]
        rows = sum(x.shape[0] for x in requests)
        assert int(stats["inference_count"]) == rows
        assert int(stats["execution_count"]) < len(requests), stats
        batches = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}
        assert sum(size * n for size, n in batches.items()) == rows, batches
        assert max(batches) <= MAX_ROWS, batches
        assert set(batches) - set(sizes), batches  # a run of a size no single request has: stacked requests


def test_several_models_and_a_program_of_methods_in_one_repository(tritonserver, backend_dir, dyn_mlp, heads, prog,
                                                                    tmp_path):
    """One repository: the batched MLP, a static model of two inputs and a dict of outputs (leaf names as
    tensor names), and a program of two methods (prog.forward, prog.embed). Every model answers over HTTP
    and gRPC with eager's outputs."""
    (mlp, mlp_eager), (heads_pt2, heads_eager), (prog_dir, prog_eager) = dyn_mlp, heads, prog
    repo = tmp_path / "repo"
    triton_repo(mlp, heads_pt2, prog_dir, "--repo", repo)
    with triton(repo, backend_dir, tmp_path / "server.log") as server:
        status, body = server.post("/v2/repository/index")
        assert status == 200, body
        index = {m["name"]: m.get("state") for m in json.loads(body)}
        assert index == {"mlp": "READY", "heads": "READY", "prog.forward": "READY", "prog.embed": "READY"}, index
        heads_cfg = _config_json(server, "heads")
        assert heads_cfg["max_batch_size"] == 0 and "dynamic_batching" not in heads_cfg
        assert [(t["name"], t["dims"]) for t in heads_cfg["input"]] == [("x", [6, 10]), ("y", [6, 16])]
        assert [(t["name"], t["dims"]) for t in heads_cfg["output"]] == [("logits", [6, 3]), ("aux.0", [6, 5])]
        assert _config_json(server, "prog.embed")["parameters"]["method"] == {"string_value": "embed"}
        x, y, p = _rows(6, 1, 10), _rows(6, 2, 16), _rows(4, 3, 32)
        for kind in ("http", "grpc"):
            mod, client = _client(kind, server)
            _close(_infer(mod, client, "mlp", {"input": _rows(3, 4)})["output_0"], mlp_eager(_rows(3, 4)))
            got = _infer(mod, client, "heads", {"x": x, "y": y}, ["logits", "aux.0"])
            want = heads_eager(x, y)
            for name in ("logits", "aux.0"):
                _close(got[name], want[name])
            only = _infer(mod, client, "heads", {"x": x, "y": y}, ["aux.0"])  # one requested output
            assert list(only) == ["aux.0"] and only["aux.0"].shape == (6, 5)
            for method in ("forward", "embed"):
                _close(_infer(mod, client, f"prog.{method}", {"x": p})["output_0"], prog_eager[method](p))


def test_two_cpu_instances_of_a_model(tritonserver, backend_dir, dyn_mlp, tmp_path):
    """instance_group [{kind: KIND_CPU count: 2}]: Triton creates two instances (each loads its own program)
    and requests sent at once are all answered correctly."""
    from concurrent.futures import ThreadPoolExecutor

    pt2, eager = dyn_mlp
    repo = tmp_path / "repo"
    triton_repo(pt2, "--repo", repo, "--instances", "2", "--max-batch", "0")
    with triton(repo, backend_dir, tmp_path / "server.log", verbose=True) as server:
        group = _config_json(server, "mlp")["instance_group"]
        assert [(g["kind"], g["count"]) for g in group] == [("KIND_CPU", 2)]
        log = server.log_text()
        assert "mlp_0_0" in log and "mlp_0_1" in log, log[-3000:]
        th, _ = _client("http", server)
        requests = [_rows(1 + k % 16, 200 + k) for k in range(32)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda x: _infer(th, th.InferenceServerClient(server.http), "mlp",
                                                     {"input": x})["output_0"], requests, timeout=300))
        for x, out in zip(requests, results, strict=True):
            _close(out, eager(x))


@pytest.fixture(scope="session")
def wide(torch, tmp_path_factory):
    """An MLP with 16 MiB of float32 weights (1024 -> 2048 -> 1024), dynamic batch 1..16: (pt2, eager)."""
    nn = torch.nn
    torch.manual_seed(5)
    module = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024)).eval()
    batch = torch.export.Dim("batch", min=1, max=MAX_ROWS)
    pt2 = shared_export(shared_dir(tmp_path_factory, "triton") / "wide.pt2", module, (torch.randn(4, 1024),),
                        dynamic_shapes={"input": {0: batch}})
    run = _eager(torch, module)
    return pt2, lambda a: run(a).numpy()


def test_cpu_instances_of_a_model_share_its_weights(tritonserver, backend_dir, wide, tmp_path):
    """Four CPU instances of a model with 16 MiB of weights share one program (one run slot each): the server
    holds the weights once, its resident memory with four instances within 8 MiB of the server with one (four
    programs would hold three more copies, 48 MiB), and concurrent requests, which Triton spreads over the
    instances, are answered as eager."""
    from concurrent.futures import ThreadPoolExecutor

    pt2, eager = wide
    x = _rows(3, 11, 1024)
    resident = {}
    for n in (1, 4):
        repo = tmp_path / f"repo{n}"
        triton_repo(pt2, "--repo", repo, "--instances", str(n), "--max-batch", "0")
        with triton(repo, backend_dir, tmp_path / f"server{n}.log", verbose=True) as server:
            th, _ = _client("http", server)
            with ThreadPoolExecutor(max_workers=2 * n) as pool:
                results = list(pool.map(lambda _, t=th, url=server.http: _infer(
                    t, t.InferenceServerClient(url), "wide", {"input": x})["output_0"], range(8 * n), timeout=300))
            for out in results:
                _close(out, eager(x))
            if n == 4:
                assert all(f"wide_0_{k}" in server.log_text() for k in range(4))
            resident[n] = _process(server.proc.pid)["rss_kib"]
    print(f"server RSS with 1 instance {resident[1]} KiB, with 4 {resident[4]} KiB")
    assert resident[4] - resident[1] < 8 * 1024, resident


def _error(fn) -> str:
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException) as info:
        fn()
    return f"{info.value.status()} {info.value.message()}"


def test_bad_requests_get_triton_errors_and_the_server_keeps_serving(tritonserver, backend_dir, dyn_mlp, tmp_path):
    """Wrong datatype, wrong shape, a missing input, a batch over max_batch_size: Triton's own checks answer
    them from the configuration; a shape Triton lets through (the unbatched model's dims are [-1, 16]) but
    the contract refuses (17 rows; the contract says 1..16) is the backend's INVALID_ARG error response. After
    each, the same server process answers a good request."""
    pt2, eager = dyn_mlp
    repo = tmp_path / "repo"
    triton_repo(pt2, "--repo", repo)
    triton_repo(pt2, "--repo", repo, "--name", "mlp_free", "--max-batch", "0")
    good = _rows(4, 9)
    with triton(repo, backend_dir, tmp_path / "server.log") as server:
        pid = server.proc.pid
        too_many = _rows(MAX_ROWS + 1, 1)
        cases = [  # (model, inputs, datatype, what the error says)
            ("mlp", {"input": good.astype(np.float64)}, "FP64", "data-type is 'FP64', but model 'mlp' expects 'FP32'"),
            ("mlp", {"input": np.zeros((4, 15), np.float32)}, "FP32", "unexpected shape"),
            ("mlp", {"input": np.zeros((4, 16, 1), np.float32)}, "FP32", "unexpected shape"),
            ("mlp", {}, "FP32", "missing required input"),
            ("mlp", {"input": too_many}, "FP32", f"batch-size must be <= {MAX_ROWS}"),
            ("mlp", {"input": good, "extra": good}, "FP32", "expected 1 inputs but got 2"),
            # through Triton's checks (dims [-1, 16]) to the backend: the runtime's contract check, INVALID_ARG
            ("mlp_free", {"input": too_many}, "FP32", "aoti_toolchain: "),
        ]
        for kind in ("http", "grpc"):
            mod, client = _client(kind, server)
            for model, inputs, dtype, text in cases:
                message = _error(lambda m=model, i=inputs, d=dtype, c=client, t=mod: _infer(
                    t, c, m, i, datatypes=dict.fromkeys(i, d)))
                assert text in message, (kind, message)
                assert "400" in message or "INVALID_ARG" in message, (kind, message)
                assert server.alive() and server.proc.pid == pid
                _close(_infer(mod, client, "mlp", {"input": good})["output_0"], eager(good))
            # the backend's error response carries the runtime's reason: the contract's range
            assert "dimension 0 must be 1..16" in _error(lambda c=client, t=mod: _infer(t, c, "mlp_free",
                                                                                      {"input": too_many}))


def _process(pid: int) -> dict[str, int]:
    """A process's open descriptors, memory mappings and resident set (KiB)."""
    with open(f"/proc/{pid}/maps") as f:
        maps = sum(1 for _ in f)
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return {"fds": len(os.listdir(f"/proc/{pid}/fd")), "maps": maps, "rss_kib": rss}


def test_unload_and_reload_50_times_leaks_nothing(tritonserver, backend_dir, dyn_mlp, tmp_path):
    """The repository API (--model-control-mode=explicit): load, infer, unload, 50 times. Triton finalizes the
    instance and the model each time (the program and its plugin freed) and the server's descriptors,
    mappings and resident memory stay where they were after the first cycles (a bounded tolerance for the
    allocator's pools)."""
    pt2, eager = dyn_mlp
    repo = tmp_path / "repo"
    triton_repo(pt2, "--repo", repo)
    x = _rows(3, 5)
    with triton(repo, backend_dir, tmp_path / "server.log", explicit=True) as server:
        th, client = _client("http", server)

        def cycle() -> None:
            client.load_model("mlp")
            assert client.is_model_ready("mlp")
            _close(_infer(th, client, "mlp", {"input": x})["output_0"], eager(x))
            client.unload_model("mlp")
            deadline = time.monotonic() + 60
            while client.is_model_ready("mlp"):
                assert time.monotonic() < deadline, "the model was not unloaded"
                time.sleep(0.05)

        for _ in range(5):  # warm: the backend and the runtime opened, pools grown
            cycle()
        base = _process(server.proc.pid)
        for _ in range(45):
            cycle()
        end = _process(server.proc.pid)
        print(f"after 5 cycles {base}, after 50 {end}")
        assert end["fds"] <= base["fds"] + 2, (base, end)
        assert end["maps"] <= base["maps"] + 8, (base, end)
        assert end["rss_kib"] <= base["rss_kib"] + 8 * 1024, (base, end)
        assert "unloaded" in server.log_text() and server.alive()


def test_killing_the_server_mid_load_loses_nothing_acknowledged(tritonserver, backend_dir, dyn_mlp, tmp_path):
    """Four clients send requests in a loop; the server is killed (SIGKILL) while they do. Every response a
    client received is the right one for its request (nothing acknowledged was lost or mixed up); the requests
    in flight fail at the client; a server started again on the same repository serves."""
    import threading

    pt2, eager = dyn_mlp
    repo = tmp_path / "repo"
    triton_repo(pt2, "--repo", repo, "--instances", "2")
    acknowledged: list[tuple[np.ndarray, np.ndarray]] = []
    failures: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    with triton(repo, backend_dir, tmp_path / "server.log") as server:
        th, _ = _client("http", server)

        def worker(seed: int) -> None:
            client = th.InferenceServerClient(server.http, connection_timeout=10, network_timeout=10)
            k = 0
            while not stop.is_set() and k < 10_000:
                x = _rows(1 + k % MAX_ROWS, seed * 100_000 + k)
                k += 1
                try:
                    out = _infer(th, client, "mlp", {"input": x})["output_0"]
                except Exception as exc:  # the server went away: this request was not acknowledged
                    with lock:
                        failures.append(type(exc).__name__)
                    return
                with lock:
                    acknowledged.append((x, out))

        threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while len(acknowledged) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(server.proc.pid, signal.SIGKILL)
        killed_after = len(acknowledged)
        for t in threads:
            t.join(timeout=60)
        stop.set()
        assert not any(t.is_alive() for t in threads)
    assert killed_after >= 40, killed_after
    assert len(failures) == 4, failures  # each client's request in flight (or the next one) failed
    for x, out in acknowledged:
        _close(out, eager(x))
    with triton(repo, backend_dir, tmp_path / "again.log") as server:
        th, client = _client("http", server)
        x = _rows(5, 77)
        _close(_infer(th, client, "mlp", {"input": x})["output_0"], eager(x))


def test_the_kserve_manifests_arguments_start_the_real_server(tritonserver, backend_dir, dyn_mlp, tmp_path):
    """deploy/kserve/aoti-triton.yaml's tritonserver arguments, with this test's repository, backend directory
    and free ports in place of /mnt/models, /opt/aoti/backends, 8080 and 9000: the real server takes every
    one of them, loads the repository triton-repo wrote and answers."""
    from tests.unit.test_deploy_files import manifest_server_args

    pt2, eager = dyn_mlp
    repo = tmp_path / "repo"
    triton_repo(pt2, "--repo", repo)
    replaced = ("--model-repository=", "--backend-directory=", "--http-port=", "--grpc-port=")
    args = manifest_server_args()
    assert sorted(a.split("=")[0] + "=" for a in args if a.startswith(replaced)) == sorted(replaced)
    rest = tuple(a for a in args if not a.startswith(replaced))
    assert rest, args
    with triton(repo, backend_dir, tmp_path / "server.log", extra=rest) as server:
        for kind in ("http", "grpc"):
            mod, client = _client(kind, server)
            x = _rows(2, 8)
            _close(_infer(mod, client, "mlp", {"input": x})["output_0"], eager(x))
