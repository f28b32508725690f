"""Packed weights are built only for constants (docs/performance.md "Packed weights cost memory"): a Buffer the model
mutates in place and a constant-folded tensor are GEMM operands here, so a runtime that packed them would
reuse a stale copy and these outputs would leave eager's. Those claims bite only where the runtime packs at
all: runtime/src/shims/packed_gemm.cpp packs constant weights for its AVX-512 kernel alone, so
`test_packing_is_live_for_these_programs` shows (from the runtime's debug log) that the programs' other
constants were registered for packing there, and skips, saying so, on a CPU without avx512f. The stateful
model is exported through the CLI (`aoti-toolchain export package.module:factory --save-inputs`) and run by
aoti-run and `aoti-toolchain run` too: the documented command-line path end to end. References are eager
torch on deep copies of a freshly built module, never this runtime."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from tests.conftest import BUILD_DIR, REPO_ROOT, cpu_has
from tests.integration import stateful_models

RTOL, ATOL = 1e-5, 1e-5
FACTORY = "tests.integration.stateful_models:buffer_matmul"


def cli(*args, cwd=REPO_ROOT):
    return subprocess.run([sys.executable, "-m", "toolchain", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=900)


@pytest.fixture(scope="module")
def buffer_matmul(torch, host_build, tmp_path_factory):
    """(pt2, the --save-inputs directory), exported by the CLI from `module:factory`."""
    out = tmp_path_factory.mktemp("buffer-matmul")
    pt2, saved = out / "bm.pt2", out / "saved"
    r = cli("export", FACTORY, "-o", pt2, "--save-inputs", saved, "--build-dir", BUILD_DIR)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert f"exported {FACTORY} -> {pt2}" in r.stdout
    return pt2, saved


def eager_calls(module, xs) -> list[np.ndarray]:
    """Outputs of `module` (a deep copy: the caller's stays fresh) called on xs in order."""
    import torch

    m = copy.deepcopy(module)
    with torch.no_grad():
        return [m(torch.from_numpy(x)).numpy() for x in xs]


def sequence(x: np.ndarray, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [x] + [(x + rng.standard_normal(x.shape) * 0.5).astype(np.float32) for _ in range(n - 1)]


def test_save_inputs_writes_the_inputs_and_eager_outputs(buffer_matmul):
    _, saved = buffer_matmul
    module, (x,) = stateful_models.buffer_matmul()
    assert sorted(p.name for p in saved.iterdir()) == ["expected_0.npy", "input_0.npy"]
    np.testing.assert_array_equal(np.load(saved / "input_0.npy"), x.numpy())
    # the first call from the initial state (the export did not run the module on its state)
    np.testing.assert_allclose(np.load(saved / "expected_0.npy"), eager_calls(module, [x.numpy()])[0], rtol=1e-6,
                               atol=1e-7)


def test_aoti_run_and_toolchain_run_on_the_cli_export(host_build, buffer_matmul, tmp_path):
    pt2, saved = buffer_matmul
    p = subprocess.run([str(host_build.aoti_run), str(pt2), "-i", str(saved / "input_0.npy"), "-o", str(tmp_path / "a")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    np.testing.assert_allclose(np.load(tmp_path / "a" / "output_0.npy"), np.load(saved / "expected_0.npy"), rtol=RTOL,
                               atol=ATOL)
    r = cli("run", pt2, "-i", saved / "input_0.npy", "-o", tmp_path / "b", "--compare", saved / "expected_0.npy",
            "--library", host_build.lib)
    assert r.returncode == 0, r.stdout + r.stderr
    # a reference that is off: exit 6 (compare_failed), which only `aoti-toolchain run --compare` uses
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.load(saved / "expected_0.npy") + 1e-2)
    r = cli("run", pt2, "-i", saved / "input_0.npy", "-o", tmp_path / "c", "--compare", wrong, "--library", host_build.lib)
    assert r.returncode == 6, r.stdout + r.stderr


def test_mutated_buffer_feeding_a_gemm_matches_eager(host_lib, buffer_matmul):
    from toolchain import runtime

    pt2, saved = buffer_matmul
    module, (x,) = stateful_models.buffer_matmul()
    xs = [x.numpy()] * 2 + sequence(x.numpy(), 4, seed=1)
    want = eager_calls(module, xs)
    assert not np.allclose(want[0], want[1], rtol=1e-3), "the same input twice must give new outputs (state)"
    with runtime.load(pt2, library_path=host_lib) as prog:
        assert prog.num_state_tensors == 1
        got = [prog.run([a])[0] for a in xs]
    for call, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"call {call}")


def test_mutated_buffer_feeding_a_gemm_in_sessions(host_lib, buffer_matmul):
    """Two sessions and the program's own state, interleaved: each follows its own deep copy of eager."""
    from toolchain import runtime

    pt2, _ = buffer_matmul
    module, (x,) = stateful_models.buffer_matmul()
    seqs = [sequence(x.numpy(), 5, seed=s) for s in (2, 3, 4)]
    want = [eager_calls(module, s) for s in seqs]
    with runtime.load(pt2, library_path=host_lib) as prog:
        a, b = prog.session(), prog.session()
        got: list[list[np.ndarray]] = [[], [], []]
        for i in range(5):
            got[0].append(a.run([seqs[0][i]])[0])
            got[1].append(b.run([seqs[1][i]])[0])
            got[2].append(prog.run([seqs[2][i]])[0])
        a.close(), b.close()
    for k in range(3):
        for call, (g, w) in enumerate(zip(got[k], want[k], strict=True)):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"sequence {k} call {call}")


@pytest.fixture(scope="module")
def folded(torch, tmp_path_factory):
    from toolchain.export import export

    module, inputs = stateful_models.folded_weight()
    pt2 = export(copy.deepcopy(module), inputs, tmp_path_factory.mktemp("folded") / "folded.pt2", build_dir=BUILD_DIR,
                 extra_configs={"aot_inductor.use_runtime_constant_folding": True})
    return pt2, module, inputs


def test_constant_folded_gemm_operand_matches_eager(host_lib, folded):
    from toolchain import runtime

    pt2, module, (x,) = folded
    with zipfile.ZipFile(pt2) as zf:
        wrapper = zf.read(next(n for n in zf.namelist() if n.endswith(".wrapper.cpp"))).decode()
    # the export really folded a constant, and the GEMM reads it
    assert "from_folded = true" in wrapper and "ConstantType::FoldedConstant" in wrapper
    assert "aoti_torch_cpu_mm_out(" in wrapper and "_FOLDED_CONST_" in wrapper
    xs = sequence(x.numpy(), 4, seed=5)
    want = eager_calls(module, xs)
    with runtime.load(pt2, library_path=host_lib) as prog:
        got = [prog.run([a])[0] for a in xs]
        with prog.session() as s:
            got_s = [s.run([a])[0] for a in xs]
    for call, w in enumerate(want):
        np.testing.assert_allclose(got[call], w, rtol=RTOL, atol=ATOL, err_msg=f"call {call}")
        np.testing.assert_allclose(got_s[call], w, rtol=RTOL, atol=ATOL, err_msg=f"session call {call}")


@pytest.mark.skipif(not cpu_has("avx512f"), reason="runtime/src/shims/packed_gemm.cpp packs constant weights only for its "
                    "AVX-512 kernel and this CPU has no avx512f: nothing is packed here, so the tests above check "
                    "state and folding without packing")
@pytest.mark.parametrize("which", ["buffer_matmul", "folded"])
def test_packing_is_live_for_these_programs(host_build, buffer_matmul, folded, tmp_path, which):
    """Where the runtime packs, it registered these programs' weights for packed GEMMs (the debug line of
    runtime/src/host/method.cpp): exactly the two parameters of each (proj.weight and proj.bias; w and gain),
    never the mutated Buffer nor the folded constant. So the tests above ran with the packed-weight cache on
    and would have failed with a runtime that packed those. (The C API exposes no counter of packed copies;
    the registration line is the runtime's only witness short of resident memory. Seen on an AVX-512 Xeon:
    2 and 2, and none with AOTI_HOST_PACK_WEIGHTS=0.)"""
    if which == "buffer_matmul":
        pt2, saved = buffer_matmul
        x = saved / "input_0.npy"
    else:
        pt2, _, (t,) = folded
        x = tmp_path / "x.npy"
        np.save(x, t.numpy())
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_HOST_PACK")}
    env["AOTI_HOST_LOG"] = "debug"
    p = subprocess.run([str(host_build.aoti_run), str(pt2), "-i", str(x), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    counts = [int(n) for n in re.findall(r"(\d+) constant\(s\) registered for packed GEMM weights", p.stderr)]
    assert counts, f"no constant registered for packed GEMM weights:\n{p.stderr[-3000:]}"
    assert counts[-1] == 2, f"expected the model's 2 parameters registered, not {counts[-1]}:\n{p.stderr[-3000:]}"
