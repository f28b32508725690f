"""Mutable-state sessions (issue 5, point 4) on a real torch plugin whose Buffer is mutated in place
(`self.state.add_(...)`): each session owns its copy of the state."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def counter(export_example):
    pt2, _, (x,) = export_example("mutated_buffer")
    x = x.numpy()
    return pt2, [x, 2 * x, x - 1, 0.5 * x]


def separate_process(host_lib, pt2, inputs, tmp_path, tag) -> list[np.ndarray]:
    """The outputs of running `inputs` in order in a fresh process (the program's own state)."""
    for i, a in enumerate(inputs):
        np.save(tmp_path / f"{tag}_in{i}.npy", a)
    code = textwrap.dedent(f"""
        import sys, numpy as np
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from toolchain import runtime
        p = runtime.load({str(pt2)!r}, library_path={str(host_lib)!r})
        for i in range({len(inputs)}):
            np.save({str(tmp_path)!r} + f"/{tag}_out{{i}}.npy", p.run([np.load({str(tmp_path)!r} + f"/{tag}_in{{i}}.npy")])[0])
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [np.load(tmp_path / f"{tag}_out{i}.npy") for i in range(len(inputs))]


def test_interleaved_sessions_match_separate_processes(host_lib, counter, tmp_path):
    from toolchain import runtime

    pt2, xs = counter
    seq_a, seq_b = [xs[0], xs[1], xs[2]], [xs[3], xs[0], xs[3]]
    ref_a = separate_process(host_lib, pt2, seq_a, tmp_path, "a")
    ref_b = separate_process(host_lib, pt2, seq_b, tmp_path, "b")
    assert not np.array_equal(ref_a[0], ref_a[1])  # the state really changes between runs
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
    for got, ref in zip(got_a + got_b, ref_a + ref_b, strict=True):
        np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(own, ref_a[0])


def test_reset_and_clone(host_lib, counter, tmp_path):
    from toolchain import runtime

    pt2, xs = counter
    ref = separate_process(host_lib, pt2, [xs[0], xs[1], xs[2]], tmp_path, "r")
    with runtime.load(pt2, library_path=host_lib) as prog:
        s = prog.session()
        s.run([xs[0]])
        s.run([xs[1]])
        twin = s.clone()  # current state of s (s is the session whose state the container holds)
        other = prog.session()
        other.run([xs[3]])  # s's state is saved away before this runs
        late = s.clone()  # clone of a session that is not current
        np.testing.assert_array_equal(twin.run([xs[2]])[0], ref[2])
        np.testing.assert_array_equal(late.run([xs[2]])[0], ref[2])
        np.testing.assert_array_equal(s.run([xs[2]])[0], ref[2])
        s.reset()
        np.testing.assert_array_equal(s.run([xs[0]])[0], ref[0])
        other.reset()  # reset of a session that is not current
        np.testing.assert_array_equal(other.run([xs[0]])[0], ref[0])
        for x in (s, twin, other, late):
            x.close()


def test_session_outlives_program_handle(host_lib, counter):
    """A session keeps the program's resources: freeing the program first is safe."""
    from toolchain import runtime

    pt2, xs = counter
    prog = runtime.load(pt2, library_path=host_lib)
    s = prog.session()
    first = s.run([xs[0]])[0]
    lib = prog._lib.lib
    lib.aoti_host_program_free(prog._handle)  # the C program is gone; the session holds the method set
    prog._handle = type(prog._handle)()
    s.reset()
    s.close()
    assert first.shape == (2, 4)


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
