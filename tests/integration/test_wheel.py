"""pip install aoti-toolchain: the repaired wheel the release made, installed in a fresh venv (with torch from
pip), used from a directory outside the checkout: --version, export, aoti-run, run --compare, the Python module,
verify, and a host program of the user's own built with the installed SCons tool. Nothing touches the checkout.
Also: auditwheel and the project's manylinux profile agree on the wheel's ELF files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import toolchain
from toolchain.release import outside_env

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.long]  # long: skipped unless --long (nox -s slow, CI)


def _checkout_state() -> tuple[str, dict[str, int]]:
    """git status and the mtime of every file git sees (tracked or untracked, not ignored) in the checkout."""
    status = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, cwd=REPO_ROOT,
                            check=True).stdout
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, cwd=REPO_ROOT, check=True).stdout.decode().split("\0")
    mtimes = {f: (REPO_ROOT / f).stat().st_mtime_ns for f in files if f and (REPO_ROOT / f).is_file()}
    return status, mtimes


@pytest.fixture(scope="module")
def installed(release_run):
    r = release_run.proc
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return release_run


def _run(cmd, cwd: Path, env: dict, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=env)
    if ok:
        assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_installed_wheel_works_outside_the_checkout(installed, tmp_path):
    before = _checkout_state()
    venv, work = installed.venv, tmp_path
    env = outside_env(venv, work)
    # the release exported the same example with this venv: its inductor cache makes this export quick
    env["TORCHINDUCTOR_CACHE_DIR"] = str(installed.work / "outside" / "inductor-cache")
    cwd = work / "elsewhere"
    cwd.mkdir()
    bin_dir = venv / "bin"
    assert not str(cwd).startswith(str(REPO_ROOT))

    # the installed package, not the checkout: nothing of the checkout on sys.path
    proc = _run([bin_dir / "python", "-c", "import sys, toolchain; print(toolchain.__file__); print(sys.path)"], cwd, env)
    where, path = proc.stdout.splitlines()
    assert where.startswith(str(venv)) and str(REPO_ROOT) not in path, proc.stdout

    # --version: the same version and runtime line from the CLI and from aoti-run
    tool = _run([bin_dir / "aoti-toolchain", "--version"], cwd, env).stdout.splitlines()
    native = _run([bin_dir / "aoti-run", "--version"], cwd, env).stdout.splitlines()
    assert tool[0] == f"aoti-toolchain {toolchain.__version__}" and native[0] == f"aoti-run {toolchain.__version__}"
    assert tool[1] == native[1] and tool[1].startswith("runtime: variant=cpu-gcc-release CUDA_AVAILABLE=0"), (tool, native)
    assert "site-packages/toolchain/_host/lib/libaoti_host.so" in tool[2]

    # export with the installed CLI (torch from pip in the venv), then run it three ways
    pt2, data = work / "mlp.pt2", work / "mlp-data"
    _run([bin_dir / "aoti-toolchain", "export", "example:mlp", "-o", pt2, "--build-dir", work / "export-build",
          "--save-inputs", data], cwd, env)
    ins = [a for p in sorted(data.glob("input_*.npy")) for a in ("-i", p)]
    refs = sorted(data.glob("expected_*.npy"))
    _run([bin_dir / "aoti-run", pt2, *ins, "-o", work / "out-native"], cwd, env)
    proc = _run([bin_dir / "aoti-toolchain", "run", pt2, *ins, "-o", work / "out", "--compare", *refs], cwd, env)
    assert "output_0" in proc.stdout
    import numpy as np

    np.testing.assert_allclose(np.load(work / "out-native" / "output_0.npy"), np.load(refs[0]), rtol=1e-4, atol=1e-5)
    code = ("import numpy as np, sys; from toolchain import runtime; from toolchain.hostlib import find_library; "
            "p = runtime.load(sys.argv[1]); x = [np.load(a) for a in sys.argv[2:]]; "
            "print(find_library(), p.run(x)[0].shape, 'compiled path:', p._fast is not None)")
    proc = _run([bin_dir / "python", "-c", code, pt2, *sorted(data.glob("input_*.npy"))], cwd, env)
    assert "site-packages/toolchain/_host/lib/libaoti_host.so" in proc.stdout
    # the wheel's stable-ABI per-call path loads in the installed interpreter (not the ctypes fallback)
    assert "compiled path: True" in proc.stdout, proc.stdout

    # verify the exported package against the installed runtime (the default host of the installed CLI)
    proc = _run([bin_dir / "aoti-toolchain", "verify", pt2], cwd, env)
    assert "verdict: PASS" in proc.stdout and "site-packages/toolchain/_host/lib/libaoti_host.so" in proc.stdout

    # examples/host-program: a user's own host, built with the installed SCons tool (scons from pip)
    project = work / "host-program"
    shutil.copytree(REPO_ROOT / "examples" / "host-program", project)
    proc = _run([bin_dir / "scons", "-Q"], project, env)
    assert "aoti-check" in proc.stdout and "pass (0 error(s)" in proc.stdout, proc.stdout
    proc = _run([project / "host-program", pt2], cwd, env)
    assert proc.stdout.startswith(f"runtime {toolchain.__version__}\n") and "output 0: shape [" in proc.stdout

    assert _checkout_state() == before, "a step changed the checkout"
    assert not (cwd / "build").exists() and not any(cwd.iterdir()), "export wrote into the current directory"


def test_auditwheel_and_the_manylinux_profile_agree(installed, tmp_path):
    """The tag auditwheel proves and the project's profile of that tag pass every ELF file of the wheel; the
    next older profile (manylinux_2_28) fails the same files, and auditwheel refuses that tag too."""
    (audit,) = installed.report["auditwheel"]
    tag, plat = audit["tag"], audit["profile"]
    assert re.fullmatch(r"manylinux_2_\d+_x86_64", tag) and audit["wheel"].endswith(f"-{tag}.whl")
    assert int(tag.split("_")[2]) <= 36, "glibc here is 2.36: a tag newer than the build cannot be proven"
    verified = {v["what"]: v for v in installed.report["verify"]}
    mine = verified[f"wheel {audit['wheel']}"]
    assert mine["profile"] == plat and mine["report"]["summary"]["errors"] == 0
    elves = {Path(f["path"]).name for f in mine["report"]["files"]}
    assert "libaoti_host.so" in elves and "aoti-run" in elves and any(e.startswith("libsleef-") for e in elves)
    assert any(e.startswith("libopenblas") for e in elves) and any(e.startswith("libgomp-") for e in elves)

    wheel = installed.out / audit["wheel"]
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "w")
    lib = tmp_path / "w" / "toolchain" / "_host" / "lib" / "libaoti_host.so"
    older = subprocess.run([sys.executable, "-m", "toolchain", "verify", "--profile", "manylinux_2_28", "--host", "none",
                            str(lib)], capture_output=True, text=True)
    assert older.returncode == 1 and "[symbol-version-too-new]" in older.stdout, older.stdout[-2000:]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    refused = subprocess.run([sys.executable, "-m", "auditwheel", "repair", "--plat", "manylinux_2_28_x86_64", "-w",
                              str(tmp_path / "r"), str(wheel)], capture_output=True, text=True, env=env)
    assert refused.returncode != 0 and "manylinux_2_28" in refused.stderr + refused.stdout


def test_the_installed_wheels_triton_backend_serves_in_triton(installed, tmp_path):
    """`aoti-toolchain triton-backend-dir` of the installed wheel prints its toolchain/_host/triton (the backend
    and, beside it, the runtime it opens); Triton Inference Server 2.51 (.ci/setup unpacks it) serves, through
    that directory, a repository the installed `triton-repo` wrote from an example the release exported, with
    the outputs the export recorded. The release verified that backend in the same server."""
    import json

    import numpy as np

    from tests.integration.test_triton_server import SERVER, triton

    if not SERVER.is_file():
        pytest.skip(f"no {SERVER}: run .ci/setup")
    venv = installed.venv
    env = outside_env(venv, tmp_path)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    bin_dir = venv / "bin"
    backend = Path(_run([bin_dir / "aoti-toolchain", "triton-backend-dir"], cwd, env).stdout.strip())
    assert backend.is_relative_to(venv) and backend.as_posix().endswith("site-packages/toolchain/_host/triton"), backend
    assert (backend / "aoti_toolchain" / "libtriton_aoti_toolchain.so").is_file()
    assert (backend / "aoti_toolchain" / "libaoti_host.so").is_file()
    verified = {v["what"]: v for v in installed.report["verify"]}
    (audit,) = installed.report["auditwheel"]
    checked = verified[f"Triton backend in {audit['wheel']}"]["report"]
    assert checked["summary"]["errors"] == 0
    assert [Path(f["path"]).name for f in checked["files"]] == ["libtriton_aoti_toolchain.so"]

    pt2 = Path(installed.report["plugins"][0])
    data = pt2.with_name(f"{pt2.stem}-data")
    repo = tmp_path / "repo"
    _run([bin_dir / "aoti-toolchain", "triton-repo", pt2, "--repo", repo, "--name", "example"], cwd, env)
    with triton(repo, backend, tmp_path / "server.log") as server:
        status, raw = server.get("/v2/models/example/config")
        assert status == 200, raw
        cfg = json.loads(raw)
        arrays = [np.load(p) for p in sorted(data.glob("input_*.npy"))]
        assert len(arrays) == len(cfg["input"])
        body = {"inputs": [{"name": t["name"], "shape": list(a.shape), "datatype": t["data_type"][len("TYPE_"):],
                            "data": a.ravel().tolist()} for t, a in zip(cfg["input"], arrays, strict=True)]}
        status, raw = server.post("/v2/models/example/infer", body)
        assert status == 200, raw[:2000]
        first = json.loads(raw)["outputs"][0]
        want = np.load(sorted(data.glob("expected_*.npy"))[0])
        got = np.asarray(first["data"], dtype=want.dtype).reshape(first["shape"])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
