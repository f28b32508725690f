"""CUDA plugins on the GPU, through aoti-run and the Python module, against eager torch.

Needs the GPU machine: tests/gpu/run.sh builds the CUDA runtime, exports the models with that
machine's torch (tests/gpu/prepare.py) and runs this file with AOTI_GPU_ARTIFACTS, AOTI_HOST_LIBRARY
and AOTI_RUN set. Anywhere else every test skips, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.gpu import gpu_skip_reason
from tests.gpu.models import CHECKED, MUTATED_CALLS, NONDETERMINISTIC, REPLAY_CALLS

pytestmark = pytest.mark.gpu
RTOL, ATOL = 1e-4, 1e-5


_REASON = gpu_skip_reason("AOTI_GPU_ARTIFACTS", "AOTI_HOST_LIBRARY", "AOTI_RUN")
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

ART = Path(os.environ["AOTI_GPU_ARTIFACTS"])
AOTI_RUN = os.environ["AOTI_RUN"]
MANIFEST = json.loads((ART / "manifest.json").read_text())


def inputs(name: str) -> list[np.ndarray]:
    return [np.load(ART / f"{name}.in{k}.npy") for k in range(MANIFEST[name]["inputs"])]


def variant_inputs(name: str, c: int) -> list[np.ndarray]:
    return [np.load(ART / f"{name}.var{c}.in{k}.npy") for k in range(MANIFEST[name]["inputs"])]


def refs(name: str, call: int | None = None, variant: int | None = None) -> list[np.ndarray]:
    prefix = f"{name}.call{call}" if call is not None else f"{name}.var{variant}" if variant is not None else name
    out, k = [], 0
    while (ART / f"{prefix}.ref{k}.npy").exists():
        out.append(np.load(ART / f"{prefix}.ref{k}.npy"))
        k += 1
    assert out, f"no reference outputs for {prefix} in {ART}"
    return out


def assert_close(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} outputs, eager has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} output {k}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"{what} output {k}")


def available(name: str) -> None:
    if name not in MANIFEST:
        pytest.fail(f"{name} was not exported (see prepare.py's output in the run log)")


@pytest.mark.parametrize("name", [n for n in CHECKED if n != "mutated_buffer"])
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_aoti_run_matches_eager(name: str, graphs: bool, tmp_path: Path) -> None:
    available(name)
    args = [AOTI_RUN, str(ART / f"{name}.pt2"), "--device", "cuda", "-o", str(tmp_path), "--quiet"]
    for k in range(MANIFEST[name]["inputs"]):
        args += ["-i", str(ART / f"{name}.in{k}.npy")]
    if graphs:
        args += ["--cuda-graphs", "--device-inputs", "--repeat", "5"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"aoti-run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    got = [np.load(tmp_path / f"output_{k}.npy") for k in range(len(refs(name)))]
    assert_close(got, refs(name), f"aoti-run {name}")
    if graphs:  # the written outputs came from the first (eager) call; the counters prove the replays ran
        # (what the replays compute is checked call by call in test_graph_replays_match_eager_call_by_call)
        # the same device inputs every call: read in place (unless the runtime converts their layout into a
        # new buffer each call: the channels-last model gets contiguous .npy inputs); outputs borrowed
        copies = 4 * MANIFEST[name]["inputs"] if name == "convnet_channels_last" else 0
        want = f"cuda_graphs: captures=1 replays=4 eager_runs=2 input_copies={copies} output_copies=0"
        assert want in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", [n for n in CHECKED if n != "mutated_buffer"])
def test_python_module_host_and_device_buffers(name: str) -> None:
    from toolchain import runtime
    from toolchain.runtime import cuda

    available(name)
    prog = runtime.load(ART / f"{name}.pt2", device="cuda")
    xs = inputs(name)
    assert_close(prog.run(xs), refs(name), f"python {name} (numpy in/out)")
    dev_in = [cuda.DeviceArray.from_numpy(x) for x in xs]
    outs = prog.run(dev_in, device_outputs=True)
    assert all(isinstance(o, cuda.DeviceArray) for o in outs)
    assert_close([o.numpy() for o in outs], refs(name), f"python {name} (device in/out)")
    stats = prog.cuda_stats()
    assert stats.eager_runs == 2 and stats.graph_replays == 0
    prog.close()


@pytest.mark.parametrize("name", [n for n in CHECKED if n != "mutated_buffer"])
def test_graph_replay_equals_eager(name: str) -> None:
    """Same inputs through a graph-mode program and an eager one: equal outputs on every call, and
    the counters show that capture and replay really happened (equal outputs alone would also pass
    with graphs silently off)."""
    from toolchain import runtime
    from toolchain.runtime import cuda

    available(name)
    eager = runtime.load(ART / f"{name}.pt2", device="cuda")
    graphed = runtime.load(ART / f"{name}.pt2", device="cuda", cuda_graphs=True)
    rng = np.random.default_rng(0)
    base = inputs(name)
    for call in range(6):
        xs = [x if call == 0 or x.dtype.kind != "f" else (x + rng.standard_normal(x.shape).astype(x.dtype) * 0.1)
              for x in base]  # integer inputs (indices) stay valid
        dev = [cuda.DeviceArray.from_numpy(x) for x in xs]  # new addresses each call: copied into the graph's inputs
        a = [o.numpy() for o in eager.run(dev, device_outputs=True)]
        b = [o.numpy() for o in graphed.run(dev, device_outputs=True)]
        for k, (u, v) in enumerate(zip(a, b, strict=True)):
            if name in NONDETERMINISTIC:  # float atomics: the summation order varies from run to run
                np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-7, err_msg=f"{name} call {call} output {k}")
            else:
                np.testing.assert_array_equal(u, v, err_msg=f"{name} call {call} output {k}: replay differs from eager")
    st = graphed.cuda_stats()
    assert st.graphs_disabled_reason == "", st.graphs_disabled_reason
    # inputs at new addresses each call: the first move recaptures with graph-owned input buffers, once
    assert (st.graph_replays, st.eager_runs) == (4, 2) and st.graph_captures in (1, 2), st
    assert st.graph_input_copies >= 3 * len([x for x in base if x.size]), st


@pytest.mark.parametrize("name", [n for n in CHECKED if n != "mutated_buffer"])
def test_graph_replays_match_eager_call_by_call(name: str) -> None:
    """Every call of a graph-mode program (warm-up, capture, replays), each with new data at a new device
    address, against eager torch's output for that call's inputs: a replay that read stale inputs, wrote
    stale outputs or ran the wrong graph fails at the call it happens."""
    from toolchain import runtime
    from toolchain.runtime import cuda

    available(name)
    assert MANIFEST[name].get("variants") == REPLAY_CALLS, "prepare.py did not record input variants"
    prog = runtime.load(ART / f"{name}.pt2", device="cuda", cuda_graphs=True)
    history = []
    for c in range(REPLAY_CALLS):
        dev = [cuda.DeviceArray.from_numpy(x) for x in variant_inputs(name, c)]
        got = [o.numpy() for o in prog.run(dev, device_outputs=True)]
        st = prog.cuda_stats()
        history.append((st.eager_runs, st.graph_captures, st.graph_replays))
        assert_close(got, refs(name, variant=c), f"{name} call {c} (eager_runs, captures, replays: {history[-1]})")
    assert prog.cuda_stats().graphs_disabled_reason == ""
    assert history[-1][0] == 2 and history[-1][2] == REPLAY_CALLS - 2 and history[-1][1] in (1, 2), history
    prog.close()


def test_mutated_buffer_state_across_calls_with_and_without_graphs() -> None:
    from toolchain import runtime

    available("mutated_buffer")
    xs = inputs("mutated_buffer")
    for graphs in (False, True):
        prog = runtime.load(ART / "mutated_buffer.pt2", device="cuda", cuda_graphs=graphs)
        for call in range(MUTATED_CALLS):
            assert_close(prog.run(xs), refs("mutated_buffer", call), f"mutated_buffer call {call} graphs={graphs}")
        st = prog.cuda_stats()
        if graphs:
            assert (st.graph_captures, st.graph_replays) == (1, MUTATED_CALLS - 2), st


def test_graph_inputs_at_new_addresses_are_copied_in() -> None:
    """Each call passes a freshly allocated device buffer: the graph reads its own fixed input buffers,
    so replay must copy the caller's data in (a stale input would give the first call's result)."""
    from toolchain import runtime
    from toolchain.runtime import cuda

    prog = runtime.load(ART / "mlp.pt2", device="cuda", cuda_graphs=True)
    ref = runtime.load(ART / "mlp.pt2", device="cuda")
    x = inputs("mlp")[0]
    for i in range(5):
        xi = (x * (i + 1)).astype(x.dtype)
        got = prog.run([cuda.DeviceArray.from_numpy(xi)])
        want = ref.run([xi])
        np.testing.assert_array_equal(got[0], want[0], err_msg=f"call {i}")
    assert prog.cuda_stats().graph_replays == 3


def _write(dev, host: np.ndarray) -> None:
    """New contents for an existing device buffer (same address)."""
    from toolchain.runtime import cuda

    cudart = cuda._cudart()
    a = np.ascontiguousarray(host)
    cuda._check(cudart.cudaMemcpy(dev.ptr, a.ctypes.data, a.nbytes, cudart.cudaMemcpyKind.cudaMemcpyHostToDevice),
                "cudaMemcpy")


def test_graph_reads_device_inputs_in_place_and_recaptures_when_they_move() -> None:
    """The caller keeps its input in one device buffer and writes new data into it before each call: the graph
    reads it where it is (no copy) and every replay sees the new data. Then the input moves to another buffer:
    the graph is captured again over a graph-owned copy, and results stay right (a graph still reading the old
    buffer would return the old data's result)."""
    from toolchain import runtime
    from toolchain.runtime import cuda

    prog = runtime.load(ART / "mlp.pt2", device="cuda", cuda_graphs=True)
    ref = runtime.load(ART / "mlp.pt2", device="cuda")
    x = inputs("mlp")[0]
    a = cuda.DeviceArray.from_numpy(x)
    for i in range(6):
        xi = (x * (i + 1)).astype(x.dtype)
        _write(a, xi)
        got = prog.run([a], device_outputs=True)[0].numpy()
        np.testing.assert_array_equal(got, ref.run([xi])[0], err_msg=f"call {i} (buffer a)")
    st = prog.cuda_stats()
    assert (st.graph_captures, st.graph_replays, st.graph_input_copies) == (1, 4, 0), st
    b = cuda.DeviceArray.from_numpy(x)
    for i in range(4):
        xi = (x * (10 + i)).astype(x.dtype)
        _write(a, x * 0)  # the old buffer holds other data: reading it would show
        _write(b, xi)
        got = prog.run([b], device_outputs=True)[0].numpy()
        np.testing.assert_array_equal(got, ref.run([xi])[0], err_msg=f"call {i} (buffer b)")
    st = prog.cuda_stats()
    assert (st.graph_captures, st.graph_replays, st.graph_input_copies) == (2, 8, 4), st
    # back to a: the input stays graph-owned (copied), never read in place again
    _write(a, x)
    np.testing.assert_array_equal(prog.run([a], device_outputs=True)[0].numpy(), ref.run([x])[0])
    assert prog.cuda_stats().graph_captures == 2


def test_borrowed_graph_outputs_are_graph_memory_until_the_next_run() -> None:
    """borrow_graph_outputs: replays hand out views of the graph's output memory: no copy (the counters), the
    same address every replay, the right values when read before the next run, overwritten by it (the
    documented contract). Eager runs (warm-up) still return owned outputs."""
    from toolchain import runtime
    from toolchain.runtime import cuda

    prog = runtime.load(ART / "mlp.pt2", device="cuda", cuda_graphs=True, borrow_graph_outputs=True)
    ref = runtime.load(ART / "mlp.pt2", device="cuda")
    x = inputs("mlp")[0]
    a = cuda.DeviceArray.from_numpy(x)
    ptrs, prev, prev_x = [], None, None
    for i in range(6):
        xi = (x * (i + 1)).astype(x.dtype)
        _write(a, xi)
        out = prog.run([a], device_outputs=True)[0]
        np.testing.assert_array_equal(out.numpy(), ref.run([xi])[0], err_msg=f"call {i}")
        if i >= 2 and prev is not None and prev_x is not None:  # a replay overwrote the previous replay's output
            np.testing.assert_array_equal(prev.numpy(), ref.run([xi])[0])
        ptrs.append(out.ptr)
        prev, prev_x = (out, xi) if i >= 2 else (None, None)
    assert len(set(ptrs[2:])) == 1 and ptrs[2] not in ptrs[:2], ptrs
    st = prog.cuda_stats()
    assert (st.graph_replays, st.graph_output_copies, st.graph_input_copies) == (4, 0, 0), st
    with pytest.raises(Exception, match="needs cuda_graphs"):
        runtime.load(ART / "mlp.pt2", device="cuda", borrow_graph_outputs=True)


def test_device_outputs_reach_torch_without_a_copy_and_torch_inputs_go_in() -> None:
    """Device outputs become torch tensors through DLPack (the tensor views the runtime's memory: with borrowed
    graph outputs, the same address on every replay), and torch CUDA tensors go in through DLPack too."""
    import torch

    from toolchain import runtime

    prog = runtime.load(ART / "mlp.pt2", device="cuda", cuda_graphs=True, borrow_graph_outputs=True)
    ref = runtime.load(ART / "mlp.pt2", device="cuda")
    x = inputs("mlp")[0]
    xt = torch.from_numpy(x).cuda()
    addrs = []
    for i in range(5):
        xt.copy_(torch.from_numpy(x * (i + 1)))
        out = prog.run([xt], device_outputs=True, output_type="torch")[0]
        assert out.is_cuda
        np.testing.assert_array_equal(out.cpu().numpy(), ref.run([x * (i + 1)])[0], err_msg=f"call {i}")
        addrs.append(out.data_ptr())
    assert addrs[2] == addrs[3] == addrs[4], "torch's tensor is a view of the graph's output memory"
    st = prog.cuda_stats()
    assert (st.graph_replays, st.graph_input_copies, st.graph_output_copies) == (3, 0, 0), st
    assert prog._fast is not None, "the compiled per-call path served the CUDA program"


@pytest.mark.parametrize("mode", ["host", "stage", "pageable"])
def test_blob_weights_upload_modes(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Host-placed weights (the default: one device allocation, the pinned ring) and the plugin's own
    loader (from a pinned copy, or from where the blob is) give the same outputs, with graphs too (the
    host's constants are device-resident); the stats say which path ran, so an ignored
    AOTI_HOST_WEIGHT_UPLOAD fails."""
    from toolchain import runtime

    available("mlp_blob")
    monkeypatch.setenv("AOTI_HOST_WEIGHT_UPLOAD", mode)
    prog = runtime.load(ART / "mlp_blob.pt2", device="cuda", cuda_graphs=True)
    st = prog.cuda_stats()
    assert st.weight_upload_mode == mode, st
    assert st.weight_upload_bytes > 0 and st.weight_upload_seconds > 0
    assert st.weight_load_seconds >= st.weight_upload_seconds
    if mode == "host":  # through the ring: at least one chunk, the default chunk size and one fill thread
        assert st.weight_upload_chunks >= 1 and st.weight_upload_threads >= 1, st
    else:
        assert (st.weight_upload_chunks, st.weight_upload_chunk_bytes, st.weight_upload_threads) == (0, 0, 0), st
    for _ in range(4):
        assert_close(prog.run(inputs("mlp_blob")), refs("mlp_blob"), "mlp_blob")
    st = prog.cuda_stats()
    assert st.graph_replays >= 1, st.graphs_disabled_reason


@pytest.mark.parametrize("mode", ["host", "stage", "pageable"])
def test_corrupt_weights_blob_is_refused_before_the_plugin_sees_it(mode: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """One flipped byte in the package's weights blob: the host upload checks the blob's CRC-32 in the pass that
    copies it to the device, the plugin's loaders only get checked bytes: every mode refuses the package,
    naming the member, and the process goes on (a second load of the intact package works)."""
    import zipfile

    from toolchain import runtime
    from toolchain.errors import LoadError

    available("mlp_blob")
    src = ART / "mlp_blob.pt2"
    with zipfile.ZipFile(src) as zf:
        blobs = [i for i in zf.infolist() if i.filename.endswith("_weights.blob")]
        assert len(blobs) == 1, [i.filename for i in zf.infolist()]
        info = blobs[0]
        assert info.compress_type == zipfile.ZIP_STORED
    data = bytearray(src.read_bytes())
    name_len, extra_len = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little"), \
        int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    data[start + info.file_size // 2] ^= 0x40
    bad = tmp_path / "mlp_blob.pt2"
    bad.write_bytes(bytes(data))
    monkeypatch.setenv("AOTI_HOST_WEIGHT_UPLOAD", mode)
    with pytest.raises(LoadError, match="corrupt"):
        runtime.load(bad, device="cuda")
    assert_close(runtime.load(src, device="cuda").run(inputs("mlp_blob")), refs("mlp_blob"), "intact package")


def test_embedded_weights_report_no_upload_mode() -> None:
    from toolchain import runtime

    available("mlp")
    st = runtime.load(ART / "mlp.pt2", device="cuda").cuda_stats()
    assert (st.weight_upload_mode, st.weight_upload_bytes, st.weight_upload_chunks) == ("", 0, 0), st


_UPLOAD_PROBE = """
import json, sys
import numpy as np
from toolchain import runtime
prog = runtime.load(sys.argv[1], device="cuda")
st = prog.cuda_stats()
np.save(sys.argv[3], prog.run([np.load(sys.argv[2])])[0])
print(json.dumps({k: getattr(st, k) for k in ("weight_upload_mode", "weight_upload_bytes", "weight_upload_chunks",
                                                 "weight_upload_chunk_bytes", "weight_upload_threads")}))
"""


def _upload_probe(name: str, out: Path, chunk_mb: int | None, threads: int | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_HOST_UPLOAD_") and k != "AOTI_HOST_WEIGHT_UPLOAD"}
    if chunk_mb is not None:
        env["AOTI_HOST_UPLOAD_CHUNK_MB"] = str(chunk_mb)
    if threads is not None:
        env["AOTI_HOST_UPLOAD_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, "-c", _UPLOAD_PROBE, str(ART / f"{name}.pt2"), str(ART / f"{name}.in0.npy"),
                           str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("chunk_mb", "threads"), [(8, 3), (1, 8)])
def test_upload_chunk_size_and_threads(chunk_mb: int, threads: int, tmp_path: Path) -> None:
    """AOTI_HOST_UPLOAD_CHUNK_MB / AOTI_HOST_UPLOAD_THREADS reach the pinned ring (a fresh process each:
    the ring's chunk size is fixed by the process's first upload), and the weights arrive intact: the
    134 MB model's output is bitwise the one of a default upload (2 MiB chunks, two threads)."""
    name = "wide_mlp_blob"
    available(name)
    results = {}
    for cm, th in ((None, None), (chunk_mb, threads)):
        st = _upload_probe(name, tmp_path / f"out-{cm}.npy", cm, th)
        chunk = (cm or 2) << 20
        want_chunks = -(-st["weight_upload_bytes"] // chunk)
        assert st["weight_upload_mode"] == "host" and st["weight_upload_bytes"] > 100 << 20, st
        assert (st["weight_upload_chunk_bytes"], st["weight_upload_chunks"]) == (chunk, want_chunks), st
        assert st["weight_upload_threads"] == min(th or 2, want_chunks), st
        results[cm] = np.load(tmp_path / f"out-{cm}.npy")
    np.testing.assert_array_equal(results[chunk_mb], results[None], err_msg="the output depends on the chunking")
    # corrupted weights are far off; eager's 8 layers of 2048 differ from the plugin's kernels only by rounding
    np.testing.assert_allclose(results[None], refs(name)[0], rtol=1e-3, atol=1e-3)


def test_cpu_program_rejects_device_buffers_and_cuda_options() -> None:
    from toolchain import runtime
    from toolchain.errors import InputError

    with pytest.raises(InputError, match="needs device='cuda'"):
        runtime.load(ART / "mlp.pt2", cuda_graphs=True)


def test_graphs_must_be_chosen_before_the_first_run() -> None:
    from toolchain import runtime
    from toolchain.errors import ToolchainError

    prog = runtime.load(ART / "mlp.pt2", device="cuda")
    prog.run(inputs("mlp"))
    with pytest.raises(ToolchainError, match="before the first run"):
        prog._lib.check(prog._lib.lib.aoti_host_program_set_cuda_graphs(prog._handle, True), "set_cuda_graphs")
