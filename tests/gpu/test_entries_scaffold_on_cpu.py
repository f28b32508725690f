"""The GPU tests' entries-call scaffolding (tests/gpu/entries_scaffold.py), proven here on the CPU: this torch's
interface.cpp less its own definition of the entries call stands in for torch 2.11's, a CPU plugin exported
through the scaffold defines the call (the scaffold's, by its marker), and the runtime's sessions, which read
the program's state through that call, match eager torch step by step (models.SESSION_STEPS), with no
"does not export" warning. The GPU machine compiles the same definition against torch 2.11's headers."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

from tests.gpu import entries_scaffold

_OWN_DEFINITION = re.compile(
    r"^AOTIRuntimeError AOTInductorModelContainerExtractConstantsMapEntries\(.*?^\}\n", re.S | re.M)


def without_entries_call(source: str) -> str:
    """torch's interface.cpp with its own definition of the entries call cut out (as torch < 2.13 has it)."""
    stripped, n = _OWN_DEFINITION.subn("", source)
    assert n == 1, "this torch's interface.cpp does not define the entries call as expected"
    return stripped


def test_patched_source_appends_the_definition_once_and_checks_what_it_needs(torch) -> None:
    own = entries_scaffold.interface_path().read_text()
    assert entries_scaffold.defines_entries_call(own)
    with pytest.raises(entries_scaffold.ScaffoldError, match="already defines"):
        entries_scaffold.patched_source(own)
    old = without_entries_call(own)
    assert not entries_scaffold.defines_entries_call(old)
    patched = entries_scaffold.patched_source(old)
    assert patched.startswith(old.rstrip()) and entries_scaffold.defines_entries_call(patched)
    assert entries_scaffold.MARKER in patched
    broken = old.replace("#define CONVERT_EXCEPTION_TO_ERROR_CODE", "#define OTHER_MACRO")
    with pytest.raises(entries_scaffold.ScaffoldError, match="CONVERT_EXCEPTION_TO_ERROR_CODE"):
        entries_scaffold.patched_source(broken)


@pytest.fixture(scope="module")
def scaffolded(torch, tmp_path_factory):
    """examples.mutated_buffer exported for the CPU while inductor sees interface.cpp without the entries
    call: the call the plugin defines can only come from the scaffold."""
    from tests.conftest import BUILD_DIR
    from toolchain import examples
    from toolchain.export import export

    module, (x,) = examples.mutated_buffer()
    old = without_entries_call(entries_scaffold.interface_path().read_text())
    pt2 = tmp_path_factory.mktemp("scaffold") / "mutated_buffer.pt2"
    with entries_scaffold.entries_call(interface_source=old) as patched:
        export(copy.deepcopy(module), [x], pt2, build_dir=BUILD_DIR)
    from torch._inductor.codegen import cpp_wrapper_cpu

    assert patched and "open" not in vars(cpp_wrapper_cpu), "the scaffold outlived its block"
    return pt2, module, x


def test_scaffolded_plugin_defines_the_scaffolds_entries_call(scaffolded) -> None:
    pt2, _, _ = scaffolded
    assert entries_scaffold.require_entries_call(pt2) is True  # defined, and by the scaffold (its marker)


def test_sessions_through_the_scaffolded_call_match_eager(host_lib, scaffolded, torch, capfd) -> None:
    from tests.gpu.models import SESSION_STEPS, replay_session_steps, state_copies
    from toolchain import runtime

    pt2, loaded, x = scaffolded
    gen = torch.Generator().manual_seed(2)

    def run_step(i, label, session, module):
        xi = torch.randn(x.shape, generator=gen, dtype=x.dtype)
        with torch.no_grad():
            want = module(xi).numpy()
        (got,) = prog.run([xi.numpy()], session=session)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=label)

    with runtime.load(pt2, library_path=host_lib) as prog:
        assert prog.num_state_tensors == 1
        sessions = replay_session_steps(prog, run_step, loaded)
        stats = prog.weight_stats()
        for s in sessions.values():
            s.close()
    assert stats["state_host_copy_bytes"] == state_copies(SESSION_STEPS) * 4 * 4, stats
    err = capfd.readouterr().err
    assert entries_scaffold.ENTRIES_CALL not in err, err  # the runtime's "does not export" warning names it
