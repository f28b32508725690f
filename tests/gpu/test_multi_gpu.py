"""Every GPU of a host: programs on cuda:N, in one process and in several, against eager torch.

- a device beyond the visible ones is refused, naming the count and the fix (Python, aoti-run, and with
  CUDA_VISIBLE_DEVICES): runs with one GPU;
- with two GPUs: one package on cuda:1 and cuda:0 in one process (Python, and the C API through
  build/<variant>/tests/cuda_multi_device) with CUDA graphs on both, outputs and weights in their own device's
  memory (cudaPointerGetAttributes), the caller's current device and stream left as they were; a plugin
  exported on cuda:1 runs on cuda:0 and the other way round; two processes and two Ray Serve replicas, each
  on its own GPU.
The 1 -> 2 GPU throughput ratio is bench/bench_multi_gpu.py's. Run by tests/gpu/run.sh's environment
(AOTI_GPU_ARTIFACTS, AOTI_HOST_LIBRARY, AOTI_RUN); tests needing two GPUs skip, saying so, on one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.gpu import gpu_skip_reason

# Nothing here uses collectives; should anything reach NCCL (Ray, torch), no NVLink multicast (SHARP) on
# the lent machines.
os.environ["NCCL_NVLS_ENABLE"] = "0"

pytestmark = pytest.mark.gpu
_REASON = gpu_skip_reason("AOTI_GPU_ARTIFACTS", "AOTI_HOST_LIBRARY", "AOTI_RUN")
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

from toolchain import runtime  # noqa: E402
from toolchain.errors import InputError  # noqa: E402
from toolchain.runtime import cuda  # noqa: E402

ART = Path(os.environ["AOTI_GPU_ARTIFACTS"])
AOTI_RUN = os.environ["AOTI_RUN"]
LIB = Path(os.environ["AOTI_HOST_LIBRARY"])
MULTI_DEVICE = LIB.parents[2] / "tests" / "cuda_multi_device"
NGPU = cuda.device_count()
RTOL, ATOL = 1e-4, 1e-5
needs_two = pytest.mark.skipif(NGPU < 2, reason=f"needs two visible GPUs, {NGPU} visible (multi-GPU runs: a host "
                                                "with two, e.g. the nvidia-h200-x2 machine)")


def load_art(name: str) -> tuple[Path, list[np.ndarray], np.ndarray]:
    pt2 = ART / f"{name}.pt2"
    if not pt2.exists():
        pytest.fail(f"{pt2} was not exported (see prepare.py's output in the run log)")
    k, ins = 0, []
    while (ART / f"{name}.in{k}.npy").exists():
        ins.append(np.load(ART / f"{name}.in{k}.npy"))
        k += 1
    return pt2, ins, np.load(ART / f"{name}.ref0.npy")


def close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=what)


# ------------------------------------------------------------------------------ one GPU is enough for these

def test_a_device_beyond_the_visible_ones_is_refused_with_the_count(tmp_path):
    pt2, ins, _ = load_art("mlp")
    beyond = f"cuda:{NGPU}"
    want = f"{beyond} does not exist: this process sees {NGPU} CUDA device"
    with pytest.raises(InputError) as info:
        runtime.load(pt2, library_path=LIB, device=beyond)
    assert want in str(info.value) and "CUDA_VISIBLE_DEVICES" in str(info.value), str(info.value)
    np.save(tmp_path / "x.npy", ins[0])
    p = subprocess.run([AOTI_RUN, str(pt2), "--device", beyond, "-i", str(tmp_path / "x.npy"), "-o",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 3 and want in p.stderr, p.stderr
    # a GPU hidden by CUDA_VISIBLE_DEVICES is not there either, and the message says why
    code = ("from toolchain import runtime\nfrom toolchain.errors import InputError\n"
            f"try:\n    runtime.load({str(pt2)!r}, library_path={str(LIB)!r}, device='cuda:1')\n"
            "except InputError as e:\n    print(str(e).splitlines()[0])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
    assert "cuda:1 does not exist: this process sees 1 CUDA device (CUDA_VISIBLE_DEVICES=0), cuda:0 only" \
        in proc.stdout, proc.stdout + proc.stderr


def test_the_callers_device_is_kept_on_one_gpu():
    pt2, ins, ref = load_art("mlp")
    prog = runtime.load(pt2, library_path=LIB, device="cuda:0", cuda_graphs=True)
    for _ in range(5):
        close(prog.run(ins)[0], ref, "mlp on cuda:0")
        assert cuda.current_device() == 0
    assert prog.cuda_stats().graph_replays >= 2


# ------------------------------------------------------------------------------ two GPUs

@needs_two
def test_two_devices_in_one_process_python_with_graphs():
    """One package on cuda:1 and cuda:0, graphs on both, run in turn from a caller on cuda:0 with a torch
    stream of its own: host and device inputs, device outputs where they belong, torch's current device and
    stream untouched; another device's tensor refused by name."""
    torch = pytest.importorskip("torch")
    pt2, ins, ref = load_art("mlp")
    torch.cuda.set_device(0)
    mine = torch.cuda.Stream(device=0)
    progs = {d: runtime.load(pt2, library_path=LIB, device=f"cuda:{d}", cuda_graphs=True) for d in (1, 0)}
    dev_in = {d: [torch.from_numpy(a).to(f"cuda:{d}") for a in ins] for d in (1, 0)}
    torch.cuda.synchronize(0), torch.cuda.synchronize(1)
    with torch.cuda.stream(mine):
        for r in range(6):
            for d, prog in progs.items():
                close(prog.run(ins)[0], ref, f"run {r} on cuda:{d}, host inputs")
                (y,) = prog.run(dev_in[d], device_outputs=True)  # a torch tensor of cuda:d while cuda:0 is current
                assert y.device == d and cuda.pointer_device(y.ptr) == d, (y, cuda.pointer_device(y.ptr))
                close(y.numpy(), ref, f"run {r} on cuda:{d}, device inputs")
                assert torch.cuda.current_device() == 0 and cuda.current_device() == 0
                assert torch.cuda.current_stream(0) == mine
    for d, prog in progs.items():
        st = prog.cuda_stats()
        assert st.graph_captures >= 1 and st.graph_replays >= 3, (d, st)
        with pytest.raises(InputError, match=f"in the memory of cuda:{1 - d}, the program runs on cuda:{d}"):
            prog.run(dev_in[1 - d], device_outputs=True)
        close(prog.run(ins)[0], ref, f"cuda:{d} after a refused input")


@needs_two
@pytest.mark.parametrize("name", ["mlp", "mlp_blob", "convnet", "transformer"])
def test_two_devices_in_one_process_c_api(name):
    """The C API from a caller on cuda:0 with its own current stream: cuda_multi_device checks weights
    (cudaPointerGetAttributes on every constant), outputs, graphs and the caller's device and streams."""
    assert MULTI_DEVICE.exists(), f"{MULTI_DEVICE} is not built (scons cuda=on)"
    pt2, _, _ = load_art(name)
    args = [str(MULTI_DEVICE), str(pt2), str(ART / f"{name}.ref0.npy")]
    args += [str(p) for p in sorted(ART.glob(f"{name}.in*.npy"))]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "cuda_multi_device: all checks passed" in proc.stdout


@needs_two
def test_a_plugin_exported_on_one_device_runs_on_the_other(tmp_path):
    """torch bakes no device index into an AOTInductor plugin: exported with the module on cuda:1, it runs on
    cuda:0 (and the cuda:0 exports of prepare.py run on cuda:1 in the tests above)."""
    torch = pytest.importorskip("torch")
    from toolchain import examples
    from toolchain.export import export, prepare_build_dirs

    module, inputs = examples.get("convnet")
    with torch.no_grad():
        ref = module(*inputs).numpy()
    build = tmp_path / "build"
    prepare_build_dirs(build)
    pt2 = export(module, inputs, tmp_path / "convnet_cuda1.pt2", build_dir=build, device="cuda:1")
    x = [t.numpy() for t in inputs]
    for d in (0, 1):
        prog = runtime.load(pt2, library_path=LIB, device=f"cuda:{d}", cuda_graphs=True)
        for r in range(4):
            np.testing.assert_allclose(prog.run(x)[0], ref, rtol=1e-4, atol=1e-4, err_msg=f"run {r} on cuda:{d}")


@needs_two
def test_two_processes_each_on_its_own_gpu(tmp_path):
    """aoti-run on cuda:0 and cuda:1 at once, and one process that sees only GPU 1 (CUDA_VISIBLE_DEVICES=1) as
    its cuda:0: each on its GPU, outputs equal eager."""
    pt2, ins, ref = load_art("convnet")
    args = []
    for k, a in enumerate(ins):
        np.save(tmp_path / f"x{k}.npy", a)
        args += ["-i", str(tmp_path / f"x{k}.npy")]
    runs = {"cuda:0": ("cuda:0", {}), "cuda:1": ("cuda:1", {}), "only-1": ("cuda", {"CUDA_VISIBLE_DEVICES": "1"})}
    procs = {}
    for label, (device, env) in runs.items():
        procs[label] = subprocess.Popen([AOTI_RUN, str(pt2), "--device", device, *args, "-o", str(tmp_path / label),
                                         "--quiet", "--cuda-graphs", "--device-inputs", "--repeat", "200"],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, **env})
    for label, p in procs.items():
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"{label}: {out}{err}"
        assert "replays=" in out and "captures=1" in out, out
        close(np.load(tmp_path / label / "output_0.npy"), ref, label)


@needs_two
def test_two_ray_replicas_each_on_its_own_gpu(tmp_path):
    """Ray Serve with device cuda and 2 replicas: Ray gives each its own GPU (distinct GPU ids, each replica's
    CUDA_VISIBLE_DEVICES), every replica runs on its cuda:0 with graphs, answers equal eager."""
    ray = pytest.importorskip("ray", reason="Ray Serve is not installed (pip install -e '.[serve]')")
    from ray import serve

    from tests.helpers import free_ports
    from toolchain.serve import application, private_ray_temp_dir

    pt2, ins, ref = load_art("mlp")
    port = free_ports(1)[0]
    temp = private_ray_temp_dir()
    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, _temp_dir=temp)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(application(pt2, replicas=2, device="cuda", cuda_graphs=True, library_path=LIB), name="aoti",
                  route_prefix="/")
        handle = serve.get_deployment_handle("aoti", app_name="aoti")
        seen: dict[int, dict] = {}
        meta = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/mlp", timeout=60).read())
        body = {"inputs": [{"name": meta["inputs"][0]["name"], "shape": list(ins[0].shape), "datatype": "FP32",
                            "data": ins[0].ravel().tolist()}]}
        for _ in range(40):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/mlp/infer",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            out = json.loads(urllib.request.urlopen(req, timeout=60).read())["outputs"][0]
            close(np.array(out["data"], np.float32).reshape(out["shape"]), ref, "served")
            info = handle.replica_info.remote().result()
            seen[info["pid"]] = info
            if len(seen) == 2 and all(i["requests"] > 0 for i in seen.values()):
                break
        assert len(seen) == 2, seen
        gpus = [tuple(i["gpu_ids"]) for i in seen.values()]
        assert all(len(g) == 1 for g in gpus) and gpus[0] != gpus[1], gpus
        assert all(i["device"] == "cuda:0" and i["cuda_visible_devices"] == i["gpu_ids"][0] for i in seen.values())
        assert not any(i["torch_imported"] for i in seen.values())
    finally:
        serve.shutdown()
        ray.shutdown()
