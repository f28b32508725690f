"""Built here, runs there: a real torch export for AVX-512 and one for AVX2 (the default) of the same model,
run by aoti-run on an emulated CPU without AVX-512 (qemu-user, `-cpu Haswell`): the first is refused by the
preflight with its message (not SIGILL), the second runs and matches eager. The package's target record is
what the code holds (decoded), and the runtime refuses a damaged record by name."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import BUILD_DIR

pytestmark = pytest.mark.long  # minutes of work: skipped unless --long (nox -s slow, CI)

QEMU = shutil.which("qemu-x86_64")
QEMU_CPU = "Haswell"  # AVX2, FMA, BMI1/2, no AVX-512 (QEMU 7.2's TCG has no AVX-512 at all)
TARGET = "extra/aoti_toolchain_target.json"


def _has_avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.fixture(scope="module")
def mlp_avx2(export_example):
    return export_example("mlp")  # the default --cpu-isa (avx2)


@pytest.fixture(scope="module")
def mlp_avx512(torch, tmp_path_factory, mlp_avx2):
    if not _has_avx512():
        pytest.skip("this machine has no AVX-512: inductor builds vector kernels only for ISAs it has")
    from toolchain.export import export

    _, module, inputs = mlp_avx2
    return export(module, inputs, tmp_path_factory.mktemp("isa") / "mlp-avx512.pt2", build_dir=BUILD_DIR,
                  cpu_isa="avx512")


@pytest.fixture(scope="module")
def mlp_v2(torch, tmp_path_factory, mlp_avx2):
    from toolchain.export import export

    _, module, inputs = mlp_avx2
    return export(module, inputs, tmp_path_factory.mktemp("isa") / "mlp-v2.pt2", build_dir=BUILD_DIR,
                  cpu_isa="x86-64-v2")


def _record(pt2: Path) -> dict:
    with zipfile.ZipFile(pt2) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(TARGET)]
        return json.loads(zf.read(name))


def _inputs(tmp: Path, inputs) -> list[str]:
    args = []
    for i, x in enumerate(inputs):
        np.save(tmp / f"in{i}.npy", x.numpy())
        args += ["-i", str(tmp / f"in{i}.npy")]
    return args


def test_record_is_what_the_code_holds(mlp_avx2, mlp_avx512):
    from toolchain.isa import scan_elf
    from toolchain.pt2 import open_package

    r2, r5 = _record(mlp_avx2[0]), _record(mlp_avx512)
    assert r2["cpu"]["requested"] == "avx2" and r2["cpu"]["march"] == "x86-64-v3" and r2["cpu"]["vector_bits"] == 256
    assert r2["cpu"]["isa"] in ("x86-64-v2", "x86-64-v3") and not any(e.startswith("avx512") for e in r2["cpu"]["extensions"])
    assert r5["cpu"]["requested"] == "avx512" and r5["cpu"]["isa"] == "x86-64-v4" and "avx512f" in r5["cpu"]["extensions"]
    assert r2["cuda"] is None
    with open_package(mlp_avx512) as pkg:
        (so,) = [n for n in pkg.members if n.endswith(".so")]
        assert sorted(scan_elf(pkg.read(so), so).extensions) == r5["cpu"]["extensions"]


@pytest.mark.skipif(QEMU is None, reason="qemu-user not installed (apt-get install qemu-user)")
def test_emulated_avx2_cpu_refuses_avx512_export_and_runs_avx2_export(host_build, mlp_avx2, mlp_avx512, tmp_path):
    pt2, module, inputs = mlp_avx2
    args = _inputs(tmp_path, inputs)
    base = [QEMU, "-cpu", QEMU_CPU, str(host_build.aoti_run)]
    refused = subprocess.run([*base, str(mlp_avx512), *args, "-o", str(tmp_path / "o512")], capture_output=True,
                             text=True, timeout=300)
    assert refused.returncode == 4, refused.stderr  # load_failed (AOTI_HOST_NOT_SUPPORTED), not 132 (SIGILL)
    lacks = re.search(r"lacks ([a-z0-9_, ]+)", refused.stderr)
    assert "needs x86-64-v4" in refused.stderr and lacks and "avx512f" in lacks[1].split(", ")
    assert "this CPU (x86-64-v3)" in refused.stderr and "--cpu-isa avx2" in refused.stderr
    assert "AOTI_HOST_SKIP_PREFLIGHT=1" in refused.stderr
    assert refused.stderr.count(str(mlp_avx512)) == 1, refused.stderr  # the file named once
    ran = subprocess.run([*base, str(pt2), *args, "-o", str(tmp_path / "o2")], capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr
    expected = module(*inputs).detach().numpy()
    np.testing.assert_allclose(np.load(tmp_path / "o2" / "output_0.npy"), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(QEMU is None, reason="qemu-user not installed (apt-get install qemu-user)")
def test_skipping_the_preflight_really_dies_there(host_build, mlp_avx2, mlp_avx512, tmp_path):
    """The refusal above is not vacuous: the emulated CPU has no AVX-512, and the plugin really uses it."""
    import os

    args = _inputs(tmp_path, mlp_avx2[2])
    env = {**os.environ, "AOTI_HOST_SKIP_PREFLIGHT": "1"}
    proc = subprocess.run([QEMU, "-cpu", QEMU_CPU, str(host_build.aoti_run), str(mlp_avx512), *args, "-o",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode in (-4, 132), (proc.returncode, proc.stderr)  # SIGILL
    assert "AOTI_HOST_SKIP_PREFLIGHT=1" in proc.stderr


def _with_record(src: Path, dst: Path, edit) -> Path:
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_STORED) as zo:
        for info in zi.infolist():
            data = zi.read(info.filename)
            if info.filename.endswith(TARGET):
                data = edit(data)
            zo.writestr(info.filename, data)
    return dst


@pytest.mark.parametrize(("edit", "message", "malformed"), [
    (lambda d: d[:-3], "invalid JSON", True),
    (lambda d: json.dumps({**json.loads(d), "schema": 2}).encode(), "schema is not 1", True),
    (lambda d: json.dumps({**json.loads(d), "cpu": {"extensions": [7]}}).encode(), "cpu.extensions", True),
    (lambda d: json.dumps({**json.loads(d), "cuda": {"cuda": "013.0"}}).encode(), "not a CUDA version", True),
    (lambda d: json.dumps({**json.loads(d), "cpu": {"extensions": ["avx10_9"]}}).encode(), "does not know avx10_9",
     False),
])
def test_runtime_and_verify_refuse_a_damaged_record_alike(host_build, mlp_avx2, tmp_path, edit, message, malformed):
    """One set of rules, two readers (preflight.cpp parse_target, toolchain/verify/package.py check_target):
    a malformed record is refused by the runtime (exit 4) and is bad-package-json in verify; a well-formed one
    naming an extension this runtime does not know is refused by the preflight only."""
    from toolchain.verify import verify_paths

    pt2 = _with_record(mlp_avx2[0], tmp_path / "m.pt2", edit)
    proc = subprocess.run([str(host_build.aoti_run), str(pt2), *_inputs(tmp_path, mlp_avx2[2]), "-o",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4 and message in proc.stderr, proc.stderr
    if malformed:
        assert TARGET in proc.stderr and "re-export" in proc.stderr
    found = [f for f in verify_paths([pt2], host=None, profile="host").findings if f.rule == "bad-package-json"]
    assert bool(found) == malformed, found
    if malformed:
        assert TARGET in found[0].message


def test_inspect_and_verify_show_the_target(mlp_avx2, mlp_avx512):
    from toolchain.inspect import inspect_path, to_text
    from toolchain.verify import verify_paths

    text = "".join(to_text(i) for i in inspect_path(mlp_avx512))
    assert "exported with --cpu-isa avx512 (-march=x86-64-v4, 512-bit kernels)" in text
    assert "cpu isa:      x86-64-v4 (decoded:" in text and "highest avx512" in text
    rep = verify_paths([mlp_avx2[0]], host=None, profile="host")
    assert "cpu-isa-too-new" not in {f.rule for f in rep.findings}
    f = next(f for f in verify_paths([mlp_avx512], host=None, profile="ubuntu24.04").findings
             if f.rule == "cpu-isa-too-new")
    assert "avx512" in f.message and "needs x86-64-v4" in f.message


@pytest.mark.skipif(QEMU is None, reason="qemu-user not installed (apt-get install qemu-user)")
def test_x86_64_v2_export_is_scalar_everywhere_and_runs_on_a_pre_avx_cpu(host_build, mlp_avx2, mlp_v2, tmp_path):
    """--cpu-isa x86-64-v2: no AVX anywhere in the plugin (its wrapper included), and it runs on an emulated
    Nehalem (SSE4.2, POPCNT, no AVX), as does the runtime."""
    cpu = _record(mlp_v2)["cpu"]
    assert cpu["requested"] == "x86-64-v2" and cpu["vector_bits"] == 0
    assert cpu["isa"] in ("x86-64", "x86-64-v2") and not any(e.startswith("avx") for e in cpu["extensions"]), cpu
    _, module, inputs = mlp_avx2
    proc = subprocess.run([QEMU, "-cpu", "Nehalem", str(host_build.aoti_run), str(mlp_v2), *_inputs(tmp_path, inputs),
                           "-o", str(tmp_path / "o")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o" / "output_0.npy"), module(*inputs).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    refused = subprocess.run([QEMU, "-cpu", "Nehalem", str(host_build.aoti_run), str(mlp_avx2[0]),
                              *_inputs(tmp_path, inputs), "-o", str(tmp_path / "o2")], capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 4 and "this CPU (x86-64-v2)" in refused.stderr
    assert "--cpu-isa x86-64-v2" in refused.stderr

