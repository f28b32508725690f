"""Serving over the KServe/Triton v2 protocol: NVIDIA's tritonclient against our ASGI app (uvicorn, no Ray),
then against a local Ray Serve deployment of 2 torch-free replicas: outputs equal eager, requests batched
along the contract's dynamic dimension, bad requests get v2 errors and leave the replicas up, and a replica
killed during a bounded request loop loses no request beyond those in flight (the client retries).

One Ray instance for the session (started by this module only), bounded (2 CPUs, a small object store) and
shut down when the module ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest

from tests.conftest import BUILD_DIR
from tests.helpers import free_ports

th = pytest.importorskip("tritonclient.http", reason="tritonclient is not installed (pip install -e '.[serve]')")
uvicorn = pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e '.[serve]')")

from toolchain import runtime  # noqa: E402
from toolchain.serve.backend import ProgramBackend  # noqa: E402
from toolchain.serve.protocol import V2App  # noqa: E402

pytestmark = pytest.mark.long  # minutes of work: skipped unless --long (nox -s slow, CI)

MAX_ROWS = 16


@pytest.fixture(scope="session")
def dyn_mlp(torch, host_lib, tmp_path_factory):
    """The example MLP exported with a dynamic batch dimension 1..16: (pt2, eager function)."""
    from toolchain import examples
    from toolchain.export import export

    module, (x,) = examples.get("mlp")
    batch = torch.export.Dim("batch", min=1, max=MAX_ROWS)
    pt2 = export(module, (x,), tmp_path_factory.mktemp("serve") / "mlp.pt2", build_dir=BUILD_DIR,
                 dynamic_shapes={"input": {0: batch}})

    def eager(a: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(a)).numpy()

    return pt2, eager


@contextlib.contextmanager
def asgi_server(app: V2App):
    """`app` under uvicorn on 127.0.0.1 in a thread; yields 'host:port'."""
    port = free_ports(1)[0]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _infer(client, model: str, x: np.ndarray, *, binary: bool = True, datatype: str = "FP32", version: str = ""):
    inp = th.InferInput("input", list(x.shape), datatype)
    inp.set_data_from_numpy(x, binary_data=binary)
    out = th.InferRequestedOutput("output_0", binary_data=binary)
    return client.infer(model, [inp], outputs=[out], model_version=version).as_numpy("output_0")


def _v2_error(fn) -> tuple[int, str]:
    with pytest.raises(th.InferenceServerException) as info:
        fn()
    return int(info.value.status()), info.value.message()


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 16)).astype(np.float32)


# ------------------------------------------------------------------------------------ protocol, no Ray

def test_protocol_metadata_and_infer_match_eager(dyn_mlp):
    pt2, eager = dyn_mlp
    backend = ProgramBackend(runtime.load(pt2), pt2)
    with asgi_server(V2App(backend)) as url:
        client = th.InferenceServerClient(url)
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("mlp")
        meta = client.get_server_metadata()
        assert meta["name"] == "aoti-toolchain" and "binary_tensor_data" in meta["extensions"]
        model = client.get_model_metadata("mlp")
        assert model["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 16]}]
        assert model["outputs"] == [{"name": "output_0", "datatype": "FP32", "shape": [-1, 8]}]
        for n in (1, 5, MAX_ROWS):
            x = _rows(n, n)
            for binary in (True, False):
                np.testing.assert_allclose(_infer(client, "mlp", x, binary=binary), eager(x), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(_infer(client, "mlp", _rows(2, 0), version="1"), eager(_rows(2, 0)),
                                   rtol=1e-5, atol=1e-5)


def test_bad_requests_get_v2_errors_and_the_server_keeps_serving(dyn_mlp):
    pt2, eager = dyn_mlp
    backend = ProgramBackend(runtime.load(pt2), pt2)
    with asgi_server(V2App(backend, max_body_bytes=32 << 10)) as url:
        client = th.InferenceServerClient(url)
        x = _rows(4, 1)
        status, msg = _v2_error(lambda: _infer(client, "mlp", x.astype(np.float64), datatype="FP64"))
        assert status == 400 and "datatype FP64, the model takes FP32" in msg
        status, msg = _v2_error(lambda: _infer(client, "mlp", _rows(MAX_ROWS + 1, 2)))
        assert status == 400 and "dimension 0 is 17, the model takes 1..16" in msg
        status, msg = _v2_error(lambda: _infer(client, "mlp", np.zeros((4, 17), np.float32)))
        assert status == 400 and "dimension 1 is 17" in msg
        status, msg = _v2_error(lambda: _infer(client, "mlp", np.zeros((4, 16, 1), np.float32)))
        assert status == 400 and "rank 3" in msg
        status, msg = _v2_error(lambda: _infer(client, "nope", x))
        assert status == 404 and "unknown model 'nope'" in msg and "mlp" in msg
        status, msg = _v2_error(lambda: _infer(client, "mlp", x, version="7"))
        assert status == 404 and "no version '7'" in msg
        status, msg = _v2_error(lambda: _infer(client, "mlp", np.zeros((MAX_ROWS, 1024), np.float32)))
        assert status == 413 and "at most 32768" in msg
        # raw bodies tritonclient would never send
        for body, headers, want in [
            (b"{not json", {}, "not valid JSON"),
            (json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 16],
                                     "parameters": {"binary_data_size": 64}}]}).encode() + b"\0" * 10,
             {"Inference-Header-Content-Length": None}, "binary data ends at byte 64"),
            (json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 16],
                                     "data": [1.0] * 15}]}).encode(), {}, "has 15 elements"),
            (json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 16],
                                     "data": ["a"] * 16}]}).encode(), {}, "not a FP32 value"),
            (json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}).encode(),
             {}, "has no such input"),
            (json.dumps({"inputs": []}).encode(), {}, "missing input(s) input"),
            (b'{"inputs": []}', {"Inference-Header-Content-Length": "999"}, "outside the body"),
            (json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}],
                         "outputs": [{"name": "nope"}]}).encode(), {}, "requested output"),
        ]:
            if headers.get("Inference-Header-Content-Length") is None and headers:
                headers = {"Inference-Header-Content-Length": str(body.index(b"\0"))}
            reply = client._post("v2/models/mlp/infer", body, headers, None)
            assert reply.status_code == 400, (body[:80], reply.status_code)
            assert want in json.loads(reply.read())["error"]
        assert client._get("v2/models/mlp/nowhere", None, None).status_code == 404
        assert client._get("v2/models/mlp/infer", None, None).status_code == 405
        # the same server still answers, correctly
        np.testing.assert_allclose(_infer(client, "mlp", x), eager(x), rtol=1e-5, atol=1e-5)


def test_body_over_the_limit_without_content_length_is_refused_while_streaming(dyn_mlp):
    pt2, _ = dyn_mlp
    app = V2App(ProgramBackend(runtime.load(pt2), pt2), max_body_bytes=1000)
    sent: list[dict] = []
    chunks = iter([{"type": "http.request", "body": b"x" * 600, "more_body": True}] * 5)

    async def receive():
        return next(chunks)

    async def send(msg):
        sent.append(msg)

    scope = {"type": "http", "method": "POST", "path": "/v2/models/mlp/infer", "headers": []}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413 and b"1000" in sent[1]["body"]
    assert next(chunks)["body"] == b"x" * 600  # stopped reading after the second chunk crossed the limit


def test_multi_method_program_serves_each_method(torch, host_lib, tmp_path_factory):
    from toolchain import examples
    from toolchain.export import export_methods

    module, (x,) = examples.two_methods(32)
    manifest = export_methods(module, {"forward": (x,), "embed": (x,)}, tmp_path_factory.mktemp("two") / "prog",
                              build_dir=BUILD_DIR)
    with torch.no_grad():
        expected = {"forward": module(x).numpy(), "embed": module.embed(x).numpy()}
    prog = runtime.load(manifest.parent)
    backend = ProgramBackend(prog, manifest.parent)
    assert sorted(backend.models) == ["prog", "prog.embed", "prog.forward"]
    with asgi_server(V2App(backend)) as url:
        client = th.InferenceServerClient(url)
        for model, method in (("prog", "forward"), ("prog.forward", "forward"), ("prog.embed", "embed")):
            meta = client.get_model_metadata(model)
            inp = th.InferInput(meta["inputs"][0]["name"], list(x.shape), "FP32")
            inp.set_data_from_numpy(x.numpy())
            out = client.infer(model, [inp]).as_numpy(meta["outputs"][0]["name"])
            np.testing.assert_allclose(out, expected[method], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------ Ray Serve

@pytest.fixture(scope="module")
def ray_serve(dyn_mlp):
    """The one local Ray instance of the test session (only this module starts Ray; module scope shuts it
    down when the module ends, not after the rest of the suite): 2 CPUs, 80 MB object store, serving the
    dynamic MLP with 2 replicas, batching <= 8 rows, bodies <= 1 MiB."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[serve]'); Ray tests skipped")
    serve = pytest.importorskip("ray.serve", reason="ray[serve] is not installed (pip install -e '.[serve]')")
    from toolchain.serve import application, private_ray_temp_dir

    pt2, _ = dyn_mlp
    port = free_ports(1)[0]
    temp_dir = private_ray_temp_dir()
    ray.init(num_cpus=2, object_store_memory=80 << 20, include_dashboard=False, log_to_driver=False,
             configure_logging=False, _temp_dir=temp_dir)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(application(pt2, name="mlp", replicas=2, max_batch=8, batch_wait_ms=20, num_cpus=0.5,
                              max_body_bytes=1 << 20),
                  name="aoti", route_prefix="/")
        yield f"127.0.0.1:{port}", serve.get_deployment_handle("aoti", app_name="aoti")
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _replicas(handle, want: int = 2, timeout: float = 60.0) -> dict[int, dict]:
    """replica_info of `want` distinct live replicas (Serve routes each call to one of them)."""
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < want:
        assert time.monotonic() < deadline, f"saw {len(seen)} of {want} replicas"
        try:
            info = handle.replica_info.remote().result(timeout_s=10)
            seen[info["pid"]] = info
        except Exception:
            time.sleep(0.2)
    return seen


def test_two_replicas_never_import_torch_and_batch_to_eager_results(ray_serve, dyn_mlp):
    url, handle = ray_serve
    _, eager = dyn_mlp
    infos = _replicas(handle)
    assert all(not i["torch_imported"] for i in infos.values()), infos
    client = th.InferenceServerClient(url, concurrency=8)
    xs = [_rows(1 + k % 8, k) for k in range(64)]
    pending = []
    for x in xs:
        inp = th.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        pending.append(client.async_infer("mlp", [inp]))
    for x, req in zip(xs, pending, strict=True):
        np.testing.assert_allclose(req.get_result().as_numpy("output_0"), eager(x), rtol=1e-5, atol=1e-5)
    after = _replicas(handle)
    assert set(after) == set(infos)
    requests = sum(i["requests"] for i in after.values())
    runs = sum(i["runs"] for i in after.values())
    assert requests >= 64 and runs < requests, (requests, runs)  # batched: fewer runs than requests


def test_bad_requests_through_ray_get_v2_errors_and_replicas_stay_up(ray_serve):
    url, handle = ray_serve
    before = set(_replicas(handle))
    client = th.InferenceServerClient(url)
    for _ in range(3):
        assert _v2_error(lambda: _infer(client, "mlp", _rows(4, 0).astype(np.float64), datatype="FP64"))[0] == 400
        assert _v2_error(lambda: _infer(client, "mlp", _rows(MAX_ROWS + 1, 0)))[0] == 400
        assert _v2_error(lambda: _infer(client, "other", _rows(4, 0)))[0] == 404
        assert _v2_error(lambda: _infer(client, "mlp", np.zeros((MAX_ROWS, 1 << 15), np.float32)))[0] == 413
    assert client.get_model_metadata("mlp")["inputs"][0]["shape"] == [-1, 16]
    assert set(_replicas(handle)) == before


def test_killing_a_replica_mid_loop_loses_no_request(ray_serve, dyn_mlp):
    import ray
    import tritonclient.http.aio as tha

    url, handle = ray_serve
    _, eager = dyn_mlp
    victim = next(iter(_replicas(handle).values()))
    total, workers, attempts_allowed = 120, 4, 20
    failures: list[tuple[int, int, str]] = []
    results: dict[int, np.ndarray] = {}
    done_at_kill: list[int] = []  # how many requests had completed when ray.kill returned

    async def loop() -> None:
        client = tha.InferenceServerClient(url, conn_timeout=30.0)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for k in range(total):
            queue.put_nowait(k)

        async def worker() -> None:
            while not queue.empty():
                k = queue.get_nowait()
                x = _rows(1 + k % 4, 1000 + k)
                inp = tha.InferInput("input", list(x.shape), "FP32")
                inp.set_data_from_numpy(x)
                for attempt in range(attempts_allowed):  # the client retries, as a client of any server does
                    try:
                        results[k] = (await client.infer("mlp", [inp])).as_numpy("output_0")
                        break
                    except Exception as exc:
                        failures.append((k, attempt, str(exc)[:200]))
                        await asyncio.sleep(0.2)

        async def killer() -> None:
            while len(results) < 20:
                await asyncio.sleep(0.01)
            ray.kill(ray.get_actor(victim["actor_name"], namespace="serve"), no_restart=True)
            done_at_kill.append(len(results))

        try:
            await asyncio.wait_for(asyncio.gather(killer(), *(worker() for _ in range(workers))), timeout=120)
        finally:
            await client.close()

    asyncio.run(loop())
    assert sorted(results) == list(range(total)), failures
    # the kill came mid-loop: most of the requests completed after it, served without the victim
    assert len(done_at_kill) == 1 and total - done_at_kill[0] >= total // 2, (done_at_kill, total)
    for k, out in results.items():
        np.testing.assert_allclose(out, eager(_rows(1 + k % 4, 1000 + k)), rtol=1e-5, atol=1e-5)
    # requests whose first attempt failed: at most those in flight when the replica died (one per worker)
    assert len({k for k, _, _ in failures}) <= workers, failures
    # Serve replaces the dead replica with a new, torch-free one
    deadline = time.monotonic() + 90
    while True:
        replaced = _replicas(handle, timeout=90)
        if victim["pid"] not in replaced:
            break
        assert time.monotonic() < deadline, "the killed replica was not replaced"
    assert all(not i["torch_imported"] for i in replaced.values())


# ------------------------------------------------------------------------------------ command line

def test_serve_command_refuses_bad_arguments_before_starting_ray(tmp_path):
    import sys

    from tests.conftest import REPO_ROOT
    from toolchain.errors import InputError, UsageError

    model = tmp_path / "m.pt2"
    model.write_bytes(b"not a package")
    for args, code, text in [
        ([str(tmp_path / "missing.pt2")], UsageError.exit_code, "no such file"),
        ([str(model), "--replicas", "2", "--autoscale", "1..3"], UsageError.exit_code, "exclude each other"),
        ([str(model), "--autoscale", "3..1"], InputError.exit_code, "MIN..MAX"),
        ([str(model), "--port", "0"], UsageError.exit_code, "not a TCP port"),
    ]:
        proc = subprocess.run([sys.executable, "-m", "toolchain", "serve", *args], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == code and text in proc.stderr, (args, proc.returncode, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_parse_autoscale():
    pytest.importorskip("ray.serve", reason="ray[serve] is not installed (pip install -e '.[serve]')")
    from toolchain.errors import InputError
    from toolchain.serve.deploy import parse_autoscale

    assert parse_autoscale("1..4") == (1, 4) and parse_autoscale("0..1") == (0, 1)
    for bad in ("4..1", "1-4", "a..b", "0..0", "-1..2", ""):
        with pytest.raises(InputError, match="MIN..MAX"):
            parse_autoscale(bad)


def test_ray_temp_dir_is_private_and_short_enough_for_its_sockets(tmp_path, monkeypatch):
    import stat
    import tempfile

    from toolchain.serve import private_ray_temp_dir

    # A checkout deep enough that Ray's socket path under $TMPDIR passes the 107-byte AF_UNIX limit.
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    socket_tail = "/session_2026-12-01_20-13-05_950791_4194304/sockets/plasma_store"
    short = tempfile.mkdtemp(dir="/tmp")
    cases = ((short, None), (str(deep), "/tmp"))
    for tmpdir, expect_under in cases:
        monkeypatch.setenv("TMPDIR", tmpdir)
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        made = private_ray_temp_dir()
        try:
            mode = os.lstat(made).st_mode
            assert stat.S_ISDIR(mode) and stat.S_IMODE(mode) == 0o700 and os.listdir(made) == []
            assert len(made + socket_tail) <= 107, made
            parent = os.path.dirname(made)
            assert parent == (expect_under or tmpdir), (made, tmpdir)
        finally:
            os.rmdir(made)
    os.rmdir(short)
