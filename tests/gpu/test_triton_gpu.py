"""The Triton backend of the CUDA runtime in Triton Inference Server 2.51 on the GPU: KIND_GPU instances (those of
one GPU share one program, a copy of the package per instance) and CUDA graphs (parameters cuda_graphs), outputs equal to eager torch
on the GPU. Requests go as v2 JSON over HTTP (urllib: the GPU machine need not have tritonclient).

Needs the GPU machine, the server unpacked in build/tritonserver (.ci/tritonserver.py, --wheel there: no network)
and AOTI_TRITON_BACKEND_DIR, the CUDA variant's dist/triton (`scons cuda=on triton`). Anywhere else every test
skips, saying why."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.gpu import gpu_skip_reason

pytestmark = pytest.mark.gpu

_REASON = gpu_skip_reason("AOTI_TRITON_BACKEND_DIR")
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

from tests.conftest import BUILD_DIR  # noqa: E402
from tests.integration.test_triton_server import SERVER, Server, triton  # noqa: E402

BACKEND_DIR = Path(os.environ["AOTI_TRITON_BACKEND_DIR"])
ROWS = 16


@pytest.fixture(scope="module")
def cuda_mlp(tmp_path_factory):
    """The example MLP on the GPU, exported for CUDA with a dynamic batch 1..16: (pt2, eager on the GPU)."""
    torch = pytest.importorskip("torch")
    from toolchain import examples
    from toolchain.export import export

    if not SERVER.is_file():
        pytest.skip(f"no {SERVER}: python3 .ci/tritonserver.py build/tritonserver --wheel WHEEL")
    module, (x,) = examples.get("mlp")
    module = module.to("cuda")
    batch = torch.export.Dim("batch", min=1, max=ROWS)
    pt2 = export(module, (x.to("cuda"),), tmp_path_factory.mktemp("triton-gpu") / "mlp.pt2", build_dir=BUILD_DIR,
                 device="cuda", dynamic_shapes={"input": {0: batch}})

    def eager(a: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(a).to("cuda")).cpu().numpy()

    return pt2, eager


def _infer(server: Server, model: str, x: np.ndarray) -> np.ndarray:
    body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    status, raw = server.post(f"/v2/models/{model}/infer", body)
    assert status == 200, raw[:2000]
    (out,) = json.loads(raw)["outputs"]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def test_gpu_instances_and_cuda_graphs_answer_as_eager(cuda_mlp, tmp_path):
    from toolchain.serve import triton as triton_repo

    pt2, eager = cuda_mlp
    repo = tmp_path / "repo"
    triton_repo.repository([pt2], repo, options=triton_repo.Options(kind="gpu", instances=2))
    triton_repo.repository([pt2], repo, name="mlp_graphs",
                           options=triton_repo.Options(kind="gpu", gpus=(0,), cuda_graphs=True, max_batch=0))
    with triton(repo, BACKEND_DIR, tmp_path / "server.log", verbose=True) as server:
        status, raw = server.get("/v2/models/mlp/config")
        assert status == 200
        group = json.loads(raw)["instance_group"]
        assert [(g["kind"], g["count"]) for g in group] == [("KIND_GPU", 2)], group
        log = server.log_text()
        assert "mlp_0_0" in log and "mlp_0_1" in log and "mlp_graphs_0" in log, log[-4000:]
        rng = np.random.default_rng(0)
        for n in (1, 5, ROWS):
            x = rng.standard_normal((n, 16)).astype(np.float32)
            np.testing.assert_allclose(_infer(server, "mlp", x), eager(x), rtol=1e-4, atol=1e-5)
        # CUDA graphs: the first call of a shape captures, the next ones replay; every one is right
        x = rng.standard_normal((8, 16)).astype(np.float32)
        for _ in range(5):
            np.testing.assert_allclose(_infer(server, "mlp_graphs", x), eager(x), rtol=1e-4, atol=1e-5)
        y = rng.standard_normal((3, 16)).astype(np.float32)  # another shape: captured anew
        np.testing.assert_allclose(_infer(server, "mlp_graphs", y), eager(y), rtol=1e-4, atol=1e-5)
        assert server.alive()


def test_gpu_instance_stacks_a_dynamic_batch(cuda_mlp, tmp_path):
    """Concurrent requests of mixed batch sizes to a KIND_GPU instance through the dynamic batcher: the backend
    stacks each execution's requests into one run (one upload per input, one run, each response its own rows,
    equal to eager on the GPU); the model's statistics show runs of a size no single request has."""
    from concurrent.futures import ThreadPoolExecutor

    from toolchain.serve import triton as triton_repo

    pt2, eager = cuda_mlp
    repo = tmp_path / "repo"
    triton_repo.repository([pt2], repo, options=triton_repo.Options(kind="gpu", gpus=(0,), batch_delay_us=20000))
    sizes = (1, 2, 3, 5, 1, 8, 2, 3)
    rng = np.random.default_rng(1)
    requests = [rng.standard_normal((sizes[k % len(sizes)], 16)).astype(np.float32) for k in range(32)]
    with triton(repo, BACKEND_DIR, tmp_path / "server.log") as server:
        with ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(lambda x: _infer(server, "mlp", x), requests, timeout=300))
        for x, out in zip(requests, results, strict=True):
            np.testing.assert_allclose(out, eager(x), rtol=1e-4, atol=1e-5)
        status, raw = server.get("/v2/models/mlp/stats")
        assert status == 200, raw
        stats = json.loads(raw)["model_stats"][0]
        batches = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}
        assert sum(k * n for k, n in batches.items()) == sum(len(x) for x in requests), batches
        assert max(batches) <= ROWS and set(batches) - set(sizes), batches
        assert int(stats["execution_count"]) < len(requests), stats


def test_gpu_instances_share_one_program_and_run_concurrently(cuda_mlp, tmp_path):
    """Three KIND_GPU instances with CUDA graphs: the first loads one program holding a copy of the package per
    instance (the log says so, once), each instance runs its own copy (own stream and graph); concurrent
    requests of one shape (captured once per copy, replayed after) all answer as eager."""
    from concurrent.futures import ThreadPoolExecutor

    from toolchain.serve import triton as triton_repo

    pt2, eager = cuda_mlp
    repo = tmp_path / "repo"
    triton_repo.repository([pt2], repo, options=triton_repo.Options(kind="gpu", gpus=(0,), instances=3,
                                                                    cuda_graphs=True, max_batch=0))
    rng = np.random.default_rng(2)
    requests = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(60)]
    with triton(repo, BACKEND_DIR, tmp_path / "server.log", explicit=True, load=("mlp",), verbose=True) as server:
        log = server.log_text()
        assert log.count("3 GPU instance(s) on cuda:0 share one program (3 copies of") == 1, log[-4000:]
        assert "mlp_0_0" in log and "mlp_0_2" in log, log[-4000:]
        with ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(lambda x: _infer(server, "mlp", x), requests, timeout=300))
        for x, out in zip(requests, results, strict=True):
            np.testing.assert_allclose(out, eager(x), rtol=1e-4, atol=1e-5)
        # the last instance to go frees the shared program; a reload loads it afresh and answers again
        for action in ("unload", "load"):
            status, raw = server.post(f"/v2/repository/models/mlp/{action}", {})
            assert status == 200, raw[:2000]
        np.testing.assert_allclose(_infer(server, "mlp", requests[0]), eager(requests[0]), rtol=1e-4, atol=1e-5)
        assert server.log_text().count("3 GPU instance(s) on cuda:0 share one program") == 2
        assert server.alive()
