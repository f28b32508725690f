"""Sessions and weight sharing of CUDA programs, through the Python module, against eager torch.

State and constants stay on the device: session copies (new, clone, reset, switching sessions) and the
copies a method keeps of its unshared constants run device-to-device on the program's streams, and two
methods' constants with the same FQN and layout are compared on the device, so a pair with other values
is not shared. The weight_stats counters show it: nothing is copied through host memory.

Needs the GPU machine: tests/gpu/run.sh builds the CUDA runtime and tests/gpu/prepare.py exports the
stateful model with its session steps (models.SESSION_STEPS), the two-method programs
(models.METHOD_PROGRAMS) and the stateful two-method program; run with AOTI_GPU_ARTIFACTS and
AOTI_HOST_LIBRARY set. Anywhere else every test skips, saying why. These plugins need the constants-map entries
call (torch >= 2.13): prepare.py adds it to the exports of an older torch (tests/gpu/entries_scaffold.py, test
scaffolding), and run.sh fails when a test of this file skips.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.gpu import gpu_skip_reason
from tests.gpu.models import METHOD_PROGRAMS, SESSION_STEPS, STATEFUL_METHOD_STEPS, replay_session_steps, state_copies

pytestmark = pytest.mark.gpu
RTOL, ATOL = 1e-4, 1e-5

_REASON = gpu_skip_reason("AOTI_GPU_ARTIFACTS", "AOTI_HOST_LIBRARY")
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

ART = Path(os.environ["AOTI_GPU_ARTIFACTS"])
SESSIONS = ART / "sessions"  # prepare.py's "sessions" job: mutated_buffer.pt2, step<i>.in0.npy / .ref0.npy
STATE_BYTES = 4 * 4  # examples.mutated_buffer's one Buffer: float32[4]
WIDTH = 32  # examples.two_methods(32)


ENTRIES_CALL = b"AOTInductorModelContainerExtractConstantsMapEntries"


def require_entries_call(pt2: Path) -> None:
    """Sessions and weight sharing read a plugin's constants through the entries call, which torch emits from
    2.13 on; prepare.py gives it to an older torch's exports (tests/gpu/entries_scaffold.py). Plugins without
    it get NotSupported / no sharing by design (the runtime says so at load), so the test skips, naming the
    reason (run.sh then fails: these tests must run there)."""
    import zipfile

    with zipfile.ZipFile(pt2) as zf:
        (so,) = [n for n in zf.namelist() if n.endswith(".so")]
        exports = ENTRIES_CALL in zf.read(so)
    if not exports:
        import torch

        pytest.skip(f"{pt2}: exported by torch {torch.__version__} without {ENTRIES_CALL.decode()} (torch >= 2.13 "
                    "writes it; prepare.py's scaffolding adds it): CUDA sessions and weight sharing need it (FACTS.md)")


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.mark.parametrize("device_io", [False, True], ids=["numpy", "device"])
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_sessions_match_eager_step_by_step(graphs: bool, device_io: bool) -> None:
    """Each session sees only its own state, clone starts from the source's current state, reset goes back
    to the state as loaded, the program's own state is untouched: every run equals eager torch replaying
    the same steps (prepare.py), with CUDA graphs replaying over the switched state too."""
    from toolchain import runtime
    from toolchain.runtime import cuda

    pt2 = SESSIONS / "mutated_buffer.pt2"
    if not pt2.exists() or not (SESSIONS / "step1.ref0.npy").exists():
        pytest.fail(f"{pt2} and its session steps were not exported (see prepare.py's output in the run log)")
    require_entries_call(pt2)
    prog = runtime.load(pt2, device="cuda", cuda_graphs=graphs)
    assert prog.num_state_tensors == 1
    runs = 0

    def run_step(i, label, session, _module):
        nonlocal runs
        x = np.load(SESSIONS / f"step{i}.in0.npy")
        want = np.load(SESSIONS / f"step{i}.ref0.npy")
        if device_io:
            (out,) = prog.run([cuda.DeviceArray.from_numpy(x)], session=session, device_outputs=True)
            got = out.numpy()
        else:
            (got,) = prog.run([x], session=session)
        assert_close(got, want, f"{label}, graphs={graphs}")
        runs += 1

    sessions = replay_session_steps(prog, run_step)
    st = prog.cuda_stats()
    if graphs:  # equal outputs alone would also pass with graphs silently off
        assert st.graph_captures == 1 and st.eager_runs + st.graph_replays == runs and st.graph_replays > 0, st
    ws = prog.weight_stats()
    assert ws["state_host_copy_bytes"] == 0, f"session state went through host memory: {ws}"
    assert ws["state_device_copy_bytes"] == state_copies(SESSION_STEPS) * STATE_BYTES, ws
    for s in sessions.values():
        s.close()
    prog.close()


def test_device_byte_comparison_any_size_and_alignment() -> None:
    """cuda::same_bytes, the value check of two methods' device constants: equal and unequal ranges of 0 to
    3 MB, odd sizes, aligned and unaligned addresses, a difference at the first, a middle and the last byte
    (runtime/tests/cuda/test_same_bytes.cpp, built beside the CUDA runtime by scons cuda=on)."""
    exe = Path(os.environ["AOTI_HOST_LIBRARY"]).resolve().parents[2] / "tests" / "cuda_same_bytes"
    assert exe.is_file(), f"{exe} was not built (scons cuda=on builds it from runtime/tests/cuda/test_same_bytes.cpp)"
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and " 0 failure(s)" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def _program_dir(name: str) -> Path:
    d = ART / name
    if not (d / "methods.json").is_file():
        pytest.fail(f"{name} was not exported to {d} (see prepare.py's output in the run log)")
    return d


@pytest.mark.parametrize("name", list(METHOD_PROGRAMS))
def test_two_methods_share_device_weights_only_when_equal(name: str, capfd: pytest.CaptureFixture[str]) -> None:
    """embed's fc1/fc2 are forward's (same FQN, layout and values): borrowed, not loaded twice. Where embed
    comes from a module whose fc2.weight has other values (same FQN and layout), that one constant is
    compared on the device, found different and kept as embed's own device copy; each method still equals
    its own eager module."""
    from toolchain import runtime
    from toolchain.runtime import cuda

    weights, other_values = METHOD_PROGRAMS[name]
    d = _program_dir(name)
    prog = runtime.load(d, device="cuda")
    assert prog.methods == ("forward", "embed")
    x = np.load(d / "x.npy")
    for method in prog.methods:
        want = np.load(d / f"{method}.ref0.npy")
        (got,) = prog.run([x], method=method)
        assert_close(got, want, f"{name} {method} (numpy in/out)")
        (dev,) = prog.run([cuda.DeviceArray.from_numpy(x)], method=method, device_outputs=True)
        assert_close(dev.numpy(), want, f"{name} {method} (device in/out)")
    st = prog.weight_stats()
    prog.close()
    require_entries_call(d / "embed.pt2")  # the outputs above hold either way; sharing needs the entries call
    assert st["host_copy_bytes"] == 0 and st["state_host_copy_bytes"] == 0, f"copied through host memory: {st}"
    if other_values:
        assert st["shared"] == 3 and st["mismatched"] == 1, f"{name} ({weights}): {st}"
        assert st["device_copy_bytes"] == WIDTH * WIDTH * 4, st  # fc2.weight, embed's own
        err = capfd.readouterr().err
        assert "constant fc2.weight differs from method forward's (same layout, different values)" in err, err
    else:
        assert st["shared"] == 4 and st["mismatched"] == 0 and st["device_copy_bytes"] == 0, f"{name} ({weights}): {st}"
        assert st["shared_bytes"] == (2 * WIDTH * WIDTH + 2 * WIDTH) * 4, st


def test_state_shared_by_two_methods_on_their_streams() -> None:
    """`forward` (adding to the Buffer `total`) and `peek` (reading it) run on two streams: each run waits
    for the state's last work on the other, so peek sees forward's update at once, in every session, as in
    eager torch; the state never goes through host memory."""
    from toolchain import runtime

    d = _program_dir("stateful_methods")
    require_entries_call(d / "forward.pt2")
    prog = runtime.load(d, device="cuda")
    assert prog.methods == ("forward", "peek") and prog.num_state_tensors == 1
    sessions: dict[str, runtime.Session] = {}
    for i, (name, method) in enumerate(STATEFUL_METHOD_STEPS):
        if name is not None and name not in sessions:
            sessions[name] = prog.session()
        x = np.load(d / f"step{i}.in0.npy")
        (got,) = prog.run([x], method=method, session=None if name is None else sessions[name])
        assert_close(got, np.load(d / f"step{i}.ref0.npy"), f"step {i} ({method} in {name or 'the program state'})")
    ws = prog.weight_stats()
    assert ws["state_host_copy_bytes"] == 0 and ws["host_copy_bytes"] == 0, f"copied through host memory: {ws}"
    assert ws["state_device_copy_bytes"] > 0, ws
    for s in sessions.values():
        s.close()
    prog.close()
