"""Constants through the flat C ABI (issue 5, points 1, 2 and 5): fake plugins compiled from
templates/fixtures/constants_plugin.c.j2 misbehave in one controlled way each; the runtime must reject
every malformed result with InvalidProgram naming the plugin and the entry, never call the deprecated
map call (the fakes abort if it is called), and run a plugin without the entries call with a warning at
every load and sessions answering NotSupported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO_ROOT
from tests.helpers import build_fixture

MODES = ("ok", "no_entries", "extract_error", "null_array", "null_name", "null_handle", "duplicate")
INVALID_PROGRAM, NOT_SUPPORTED = 4, 6


@pytest.fixture(scope="module")
def constants_plugin(tmp_path_factory):
    root = tmp_path_factory.mktemp("constants-plugins")
    built = {}

    def build(mode: str):
        if mode not in built:
            built[mode] = build_fixture("constants_plugin.c.j2", root / f"{mode}.so", ("-Wall", "-Werror"), mode=mode)
        return built[mode]

    return build


def _python(host_lib, code: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with the runtime library: a host that calls the deprecated map
    call would abort it, which the tests see as a failure rather than losing the pytest process."""
    prelude = textwrap.dedent(f"""
        import ctypes, os, sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from toolchain import runtime
        lib = runtime.library({str(host_lib)!r})
        def load(path):
            h = ctypes.c_void_p()
            rc = lib.lib.aoti_host_program_load(os.fsencode(path), None, ctypes.byref(h))
            return rc, lib.lib.aoti_host_last_error().decode(), h
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize(("mode", "message"), [
    ("extract_error", "AOTInductorModelContainerExtractConstantsMapEntries failed: fake extraction failure: "
                      "constants buffer is being swapped"),
    ("null_array", "a null array with count 3"),
    ("null_name", "entry 1 of 3 has a null name"),
    ("null_handle", "entry 2 (state) has a null tensor handle"),
    ("duplicate", "entry 2 repeats the name fc.weight"),
])
def test_malformed_result_is_invalid_program(host_build, constants_plugin, mode, message):
    so = constants_plugin(mode)
    proc = _python(host_build.lib, f"""
        rc, msg, h = load({str(so)!r})
        print(rc); print(msg)
    """)
    assert proc.returncode == 0, proc.stderr
    rc, msg = proc.stdout.split("\n", 1)
    assert int(rc) == INVALID_PROGRAM
    assert str(so) in msg and message in msg
    assert "deprecated" not in proc.stderr  # the fake prints this before aborting if the map call is made


def test_malformed_result_through_aoti_run(host_build, constants_plugin, tmp_path):
    so = constants_plugin("null_name")
    proc = subprocess.run([str(host_build.aoti_run), str(so), "-o", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 4, proc.stderr
    assert "entry 1 of 3 has a null name" in proc.stderr and "re-export" in proc.stderr


def test_valid_plugin_runs_with_sessions(host_build, constants_plugin):
    so = constants_plugin("ok")
    proc = _python(host_build.lib, f"""
        p = runtime.load({str(so)!r}, library_path={str(host_build.lib)!r})
        assert p.run([]) == []
        print("state", p.num_state_tensors)
        with p.session() as s:
            s.run([]); c = s.clone(); c.reset(); c.close()
        print("sessions ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "state 1" in proc.stdout and "sessions ok" in proc.stdout  # "state" is the one Buffer constant
    assert "does not export" not in proc.stderr


def test_no_entries_call_runs_and_warns_at_every_load(host_build, constants_plugin):
    so = constants_plugin("no_entries")
    proc = _python(host_build.lib, f"""
        for _ in range(2):
            p = runtime.load({str(so)!r}, library_path={str(host_build.lib)!r})
            assert p.run([]) == []
            rc = lib.lib.aoti_host_session_create(p._handle, ctypes.byref(ctypes.c_void_p()))
            print("session", rc, lib.lib.aoti_host_last_error().decode())
            p.close()
    """)
    assert proc.returncode == 0, proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if "does not export" in ln]
    assert len(warnings) == 2, proc.stderr  # every load, not once per process
    w = warnings[0]
    for part in (str(so), "AOTInductorModelContainerExtractConstantsMapEntries", "torch 2.13",
                 "weights are not shared across methods", "sessions answer NotSupported"):
        assert part in w, (part, w)
    # CUDA graphs do capture such plugins (their constants are device-resident): no claim that they stay off
    assert "stay off" not in w, w
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("session")]
    assert len(lines) == 2 and all(ln.startswith(f"session {NOT_SUPPORTED} ") for ln in lines), proc.stdout
    assert "sessions are not supported" in lines[0] and "torch >= 2.13" in lines[0]


def test_no_entries_call_warns_in_aoti_run(host_build, constants_plugin, tmp_path):
    so = constants_plugin("no_entries")
    proc = subprocess.run([str(host_build.aoti_run), str(so), "-o", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "aoti-host: warning:" in proc.stderr and "AOTInductorModelContainerExtractConstantsMapEntries" in proc.stderr


def test_every_load_path_validates(host_build, constants_plugin, tmp_path):
    """A multi-method program validates each method's result too (no caller skips the helper)."""
    good, bad = constants_plugin("ok"), constants_plugin("duplicate")
    (tmp_path / "methods.json").write_text(json.dumps({"schema": 1, "methods": [
        {"name": "forward", "package": str(good)}, {"name": "other", "package": str(bad)}]}))
    proc = _python(host_build.lib, f"""
        rc, msg, h = load({str(tmp_path / "methods.json")!r})
        print(rc); print(msg)
    """)
    assert proc.returncode == 0, proc.stderr
    rc, msg = proc.stdout.split("\n", 1)
    assert int(rc) == INVALID_PROGRAM and "method other" in msg and "repeats the name fc.weight" in msg


def test_no_entries_methods_each_load_their_own(host_build, constants_plugin, tmp_path):
    """Two methods from a plugin without the entries call: both load their own weights, each warns."""
    so = constants_plugin("no_entries")
    (tmp_path / "methods.json").write_text(json.dumps({"schema": 1, "methods": [
        {"name": "forward", "package": str(so)}, {"name": "other", "package": str(so)}]}))
    proc = _python(host_build.lib, f"""
        p = runtime.load({str(tmp_path / "methods.json")!r}, library_path={str(host_build.lib)!r})
        print(p.methods, p.weight_stats())
        assert p.run([], method="other") == []
    """)
    assert proc.returncode == 0, proc.stderr
    assert "('forward', 'other')" in proc.stdout and "'shared': 0" in proc.stdout
    assert sum("does not export" in ln for ln in proc.stderr.splitlines()) == 2
