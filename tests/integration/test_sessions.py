"""Mutable-state sessions (issue 5, point 4) on a real torch plugin whose Buffer is mutated in place
(`self.state.add_(...)`): each session owns its copy of the state."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def counter(export_example):
    pt2, _, (x,) = export_example("mutated_buffer")
    x = x.numpy()
    return pt2, [x, 2 * x, x - 1, 0.5 * x]


def eager(inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The outputs of running `inputs` in order through eager torch, on a freshly built copy of the model
    (its own state from the start; never this runtime)."""
    import torch

    from toolchain import examples

    module, _ = examples.mutated_buffer()
    with torch.no_grad():
        return [module(torch.from_numpy(a)).numpy() for a in inputs]


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)


def test_interleaved_sessions_match_eager(host_lib, counter, torch):
    from toolchain import runtime

    pt2, xs = counter
    seq_a, seq_b = [xs[0], xs[0], xs[2]], [xs[3], xs[0], xs[3]]
    ref_a, ref_b = eager(seq_a), eager(seq_b)
    # the state really changes between runs: the same input twice gives different outputs
    assert not np.allclose(ref_a[0], ref_a[1], rtol=1e-3)
    with runtime.load(pt2, library_path=host_lib) as prog:
        assert prog.num_state_tensors == 1
        a, b = prog.session(), prog.session()
        got_a, got_b = [], []
        for i in range(3):  # a, b, a, b, ...: every run switches state
            got_a.append(a.run([seq_a[i]])[0])
            got_b.append(b.run([seq_b[i]])[0])
        # the program's own state is untouched by the sessions
        own = prog.run([seq_a[0]])[0]
        a.close(), b.close()
    for i, (got, ref) in enumerate(zip(got_a + got_b, ref_a + ref_b, strict=True)):
        assert_close(got, ref, f"run {i}")
    assert_close(own, ref_a[0], "the program's own first run")


def test_reset_and_clone(host_lib, counter, torch):
    from toolchain import runtime

    pt2, xs = counter
    ref = eager([xs[0], xs[1], xs[2]])
    with runtime.load(pt2, library_path=host_lib) as prog:
        s = prog.session()
        s.run([xs[0]])
        s.run([xs[1]])
        twin = s.clone()  # current state of s (s is the session whose state the container holds)
        other = prog.session()
        other.run([xs[3]])  # s's state is saved away before this runs
        late = s.clone()  # clone of a session that is not current
        assert_close(twin.run([xs[2]])[0], ref[2], "clone of the current session")
        assert_close(late.run([xs[2]])[0], ref[2], "clone of a session that is not current")
        assert_close(s.run([xs[2]])[0], ref[2], "the cloned session")
        s.reset()
        assert_close(s.run([xs[0]])[0], ref[0], "after reset")
        other.reset()  # reset of a session that is not current
        assert_close(other.run([xs[0]])[0], ref[0], "after reset of a session that is not current")
        for x in (s, twin, other, late):
            x.close()


def test_session_outlives_program_handle(host_lib, counter, torch):
    """A session keeps the program's resources: freeing the program first is safe; the session can still
    be cloned, reset and freed (a run needs the program, so the Python module refuses it, naming why)."""
    from toolchain import runtime
    from toolchain.errors import RunError

    pt2, xs = counter
    ref = eager([xs[0], xs[1]])
    prog = runtime.load(pt2, library_path=host_lib)
    s = prog.session()
    assert_close(s.run([xs[0]])[0], ref[0], "before the program is freed")
    assert_close(s.run([xs[1]])[0], ref[1], "before the program is freed")
    prog.close()  # the C program is gone; the session holds the method set
    twin = s.clone()
    s.reset()
    with pytest.raises(RunError, match="program is closed"):
        s.run([xs[0]])
    s.close()
    twin.close()


def test_session_keeps_the_plugin_loaded_until_freed(host_lib, tmp_path):
    """What the session keeps alive is observable with a plugin that really unloads (no GNU-unique
    symbols, unlike torch's): it stays mapped after the program is freed while a session (or its clone)
    lives, and is unmapped when the last one is freed."""
    from tests.helpers import build_fixture
    from toolchain import runtime

    so = build_fixture("constants_plugin.c.j2", tmp_path / "session_keeps_me.so", mode="ok")

    def mapped() -> bool:
        with open("/proc/self/maps") as f:
            return any(line.rstrip().endswith(so.name) for line in f)

    prog = runtime.load(so, library_path=host_lib)
    assert prog.num_state_tensors == 1
    s = prog.session()
    prog.close()
    assert mapped(), "the session must keep the program's plugin loaded"
    twin = s.clone()
    s.reset()
    s.close()
    assert mapped(), "the clone must keep the program's plugin loaded"
    twin.close()
    assert not mapped(), "the last session freed: the plugin is unloaded"


def test_stateless_model_sessions_are_trivial(host_lib, export_example):
    from toolchain import runtime

    pt2, module, (x,) = export_example("mlp")
    with runtime.load(pt2, library_path=host_lib) as prog, prog.session() as s:
        assert prog.num_state_tensors == 0
        np.testing.assert_allclose(s.run([x.numpy()])[0], module(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_state_shared_by_methods_within_a_session(host_lib, torch, tmp_path_factory):
    """`forward` mutates the buffer `total`, `peek` reads it: as in eager, both methods of one session see
    one state (shared by FQN), and another session sees its own."""
    import copy

    from tests.conftest import BUILD_DIR
    from toolchain import examples, runtime
    from toolchain.export import export_methods

    module, (x,) = examples.stateful_methods()
    manifest = export_methods(copy.deepcopy(module), {"forward": (x,), "peek": (x,)},
                              tmp_path_factory.mktemp("stateful-methods"), build_dir=BUILD_DIR)
    fresh = copy.deepcopy(module)
    with torch.no_grad():
        eager = [module(x).numpy(), module(x).numpy(), module.peek(x).numpy()]
        eager_other = fresh.peek(x).numpy()
    xn = x.numpy()
    with runtime.load(manifest, library_path=host_lib) as prog:
        assert prog.num_state_tensors == 1
        s, t = prog.session(), prog.session()
        got = [s.run([xn])[0], s.run([xn])[0], s.run([xn], method="peek")[0]]
        other = t.run([xn], method="peek")[0]
        s.close(), t.close()
    for g, e in zip(got, eager, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(other, eager_other, rtol=1e-5, atol=1e-6)


def test_sessions_from_two_threads(host_lib, counter):
    """Runs from two threads (ctypes drops the GIL in the call) interleave arbitrarily; each session's
    sequence of outputs is still the one a lone session gives."""
    import threading

    from toolchain import runtime

    pt2, xs = counter
    n = 200
    with runtime.load(pt2, library_path=host_lib) as prog:
        refs = []
        for x in (xs[0], xs[1]):
            with prog.session() as s:
                refs.append([s.run([x])[0] for _ in range(n)])
        results: list[list[np.ndarray]] = [[], []]
        sessions = [prog.session(), prog.session()]

        def work(i: int) -> None:
            for _ in range(n):
                results[i].append(sessions[i].run([xs[i]])[0])

        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in sessions:
            s.close()
    for i in range(2):
        assert len(results[i]) == n
        for got, ref in zip(results[i], refs[i], strict=True):
            np.testing.assert_array_equal(got, ref)


def test_session_steps_and_state_copy_counts(host_lib, counter, torch):
    """The session steps the GPU check replays (tests/gpu/models.SESSION_STEPS), here on the CPU: every run
    equals eager torch with one module copy per session (a clone copies the source's, a reset the module
    as loaded), and weight_stats counts each state copy: one at load, one per new/clone/reset, two per run
    in another session than the last one's; all in host memory on the CPU (state_device_copy_bytes 0)."""
    from tests.gpu.models import SESSION_STEPS, replay_session_steps, state_copies
    from toolchain import examples, runtime

    pt2, xs = counter
    loaded, _ = examples.mutated_buffer()
    runs = 0

    def run_step(i, label, session, module):
        nonlocal runs
        x = xs[runs % len(xs)]
        runs += 1
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        assert_close(prog.run([x], session=session)[0], want, label)

    with runtime.load(pt2, library_path=host_lib) as prog:
        assert prog.weight_stats()["state_host_copy_bytes"] == 4 * 4  # the initial copy of float32[4]
        sessions = replay_session_steps(prog, run_step, loaded)
        stats = prog.weight_stats()
        for s in sessions.values():
            s.close()
    assert stats["state_host_copy_bytes"] == state_copies(SESSION_STEPS) * 4 * 4, stats
    assert stats["state_device_copy_bytes"] == 0 and stats["device_copy_bytes"] == 0, stats
