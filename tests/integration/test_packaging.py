"""The pieces of `pip install aoti-toolchain` that run in the checkout: the in-tree PEP 517 backend's wheel,
editable wheel and sdist; `scons dist` and its manifest, which verify checks; `--version`; the SCons tool
linking a user's host against a packed runtime (the fresh-venv run of all of it is test_wheel.py)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import toolchain
from tests.conftest import build_lock, repo_scons, scons_command
from toolchain.distpack import archive_stem

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSION = toolchain.__version__
STEM = archive_stem(VERSION, "cpu-gcc-release")


def _backend(hook: str, out: Path, settings: dict | None = None) -> Path:
    code = ("import json, sys; sys.path.insert(0, 'build_backend'); import aoti_build as b; "
            f"print(b.{hook}(sys.argv[1], json.loads(sys.argv[2])))")
    with build_lock():  # the wheel hooks run SCons in build/
        proc = subprocess.run([sys.executable, "-c", code, str(out), json.dumps(settings or {})], capture_output=True,
                              text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def dist_archive(host_build) -> Path:
    proc = repo_scons("-Q", "dist")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    archive = host_build.variant_dir / f"{STEM}.tar.gz"
    assert archive.is_file()
    return archive


def test_wheel_carries_the_runtime_templates_and_both_scripts(host_build, tmp_path):
    wheel = _backend("build_wheel", tmp_path)
    assert wheel.name == f"aoti_toolchain-{VERSION}-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for need in ("toolchain/_host/lib/libaoti_host.so", "toolchain/_host/bin/aoti-run",
                     "toolchain/_host/include/aoti_host/c_api.h", "toolchain/_host/include/aoti_host/shims.h",
                     "toolchain/_host/manifest.json", "toolchain/spec/shims.toml",
                     "toolchain/scons/aoti_host.py",
                     "toolchain/verify/profiles/manylinux_2_34.toml", "toolchain/report/schema/verify-report-v1.schema.json"):
            assert need in names, need
        assert {f"toolchain/_data/templates/{p.name}" for p in (REPO_ROOT / "templates").glob("*.j2")} <= names
        # Zydis 4, which the runtime opens at run time (not DT_NEEDED, so auditwheel won't vendor it), beside it
        # with its licence, wherever the build machine has it (.ci/setup installs Debian's libzydis4.0)
        if (host_build.variant_dir / "dist" / "lib" / "libZydis.so.4.0").is_file():
            assert {"toolchain/_host/lib/libZydis.so.4.0", "toolchain/_host/lib/libZydis.so.4.0.copyright"} <= names
            assert zf.read("toolchain/_host/lib/libZydis.so.4.0")[:4] == b"\x7fELF"
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
        mode = zf.getinfo("toolchain/_host/bin/aoti-run").external_attr >> 16
        assert stat.S_IMODE(mode) == 0o755
        dist_info = f"aoti_toolchain-{VERSION}.dist-info"
        eps = zf.read(f"{dist_info}/entry_points.txt").decode()
        assert "aoti-toolchain = toolchain.cli:main" in eps and "aoti-run = toolchain.cli.aoti_run:main" in eps
        meta = zf.read(f"{dist_info}/METADATA").decode()
        assert f"\nVersion: {VERSION}\n" in meta and "Requires-Dist: scons>=4.5" in meta
        assert 'Requires-Dist: torch==2.13.0; extra == "torch"' in meta
        assert "Root-Is-Purelib: false" in zf.read(f"{dist_info}/WHEEL").decode()
        rows = list(csv.reader(io.StringIO(zf.read(f"{dist_info}/RECORD").decode())))
        assert {r[0] for r in rows} == names - {n for n in names if n.endswith("/")}
        for name, digest, size in rows:
            if digest:
                data = zf.read(name)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert digest == f"sha256={want}" and int(size) == len(data), name


def test_editable_wheel_and_sdist(tmp_path):
    editable = _backend("build_editable", tmp_path / "e")
    with zipfile.ZipFile(editable) as zf:
        assert zf.read("__editable__.aoti_toolchain.pth").decode().strip() == str(REPO_ROOT)
        assert not [n for n in zf.namelist() if n.startswith("toolchain/")]
    sdist = _backend("build_sdist", tmp_path / "s")
    assert sdist.name == f"aoti_toolchain-{VERSION}.tar.gz"
    with tarfile.open(sdist) as tf:
        names = {m.name.split("/", 1)[1] for m in tf.getmembers()}
    for need in ("PKG-INFO", "pyproject.toml", "SConstruct", "build_backend/aoti_build.py", "runtime/src/library.cpp",
                 "runtime/SConscript", "templates/shims.h.j2", "examples/host-program/SConstruct", "toolchain/__init__.py"):
        assert need in names, need
    assert not [n for n in names if n.startswith(("build/", "dist/", ".venv/")) or "__pycache__" in n]


def test_scons_dist_archive_and_manifest(dist_archive, tmp_path):
    with tarfile.open(dist_archive) as tf:
        members = {m.name: m for m in tf.getmembers()}
        manifest = json.loads(tf.extractfile(f"{STEM}/manifest.json").read())
        for rel, meta in manifest["files"].items():
            data = tf.extractfile(f"{STEM}/{rel}").read()
            assert hashlib.sha256(data).hexdigest() == meta["sha256"] and len(data) == meta["bytes"], rel
    assert {n.split("/", 1)[0] for n in members} == {STEM}
    for rel in ("lib/libaoti_host.so", "bin/aoti-run", "include/aoti_host/c_api.h", "manifest.json"):
        assert f"{STEM}/{rel}" in members, rel
    assert members[f"{STEM}/bin/aoti-run"].mode == 0o755 and members[f"{STEM}/include/aoti_host/c_api.h"].mode == 0o644
    assert manifest["schema"] == "aoti-host-dist/1" and manifest["version"] == VERSION
    assert manifest["variant"] == "cpu-gcc-release" and manifest["feature_defines"] == {"CUDA_AVAILABLE": "0"}
    from toolchain.spec import load_spec

    assert {s.name for s in load_spec().shims_in("core", "cpu")} <= set(manifest["exported_shims"])
    assert "libsleef.so.3" in manifest["needed"]["lib/libaoti_host.so"]
    assert set(manifest["files"]) == {n.split("/", 1)[1] for n, m in members.items() if m.isfile()} - {"manifest.json"}
    # reproducible: packing the same build again gives the same bytes
    first = dist_archive.read_bytes()
    dist_archive.unlink()
    assert repo_scons("-Q", "dist").returncode == 0
    assert dist_archive.read_bytes() == first


def _verify(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolchain", "verify", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO_ROOT)


def test_verify_checks_a_runtime_against_its_manifest(dist_archive, tmp_path):
    ok = _verify(dist_archive, "--format", "json", "--host", "none")
    assert ok.returncode == 0, ok.stdout[-2000:]
    files = json.loads(ok.stdout)["files"]
    assert files[0]["path"] == str(dist_archive) and files[0]["errors"] == 0 and files[0]["kind"] == "package"
    # and Zydis 4 beside the runtime when the build machine has it (toolchain/scons/zydis.py)
    with tarfile.open(dist_archive) as tf:
        zydis = ["libZydis.so.4.0"] if f"{STEM}/lib/libZydis.so.4.0" in tf.getnames() else []
    assert sorted(Path(f["path"]).name for f in files[1:]) == sorted(["aoti-run", "libaoti_host.so", *zydis])

    with tarfile.open(dist_archive) as tf:
        tf.extractall(tmp_path, filter="data")
    tree = tmp_path / STEM
    assert _verify(tree).returncode == 0
    (tree / "include" / "aoti_host" / "c_api.h").write_text("/* changed */\n")
    (tree / "lib" / "extra.so").write_bytes(b"x")
    (tree / "include" / "aoti_host" / "status.h").unlink()
    bad = _verify(tree)
    assert bad.returncode == 1
    out = bad.stdout
    assert out.count("[dist-manifest-mismatch]") == 3, out
    assert "c_api.h: SHA-256" in out and "extra.so: not listed" in out and "status.h: listed in the manifest but missing" in out

    (tree / "manifest.json").write_text("{not json")
    broken = _verify(tree)
    assert broken.returncode == 1 and "manifest.json is not valid JSON" in broken.stdout

    # an archive with an entry outside its folder: refused, nothing written outside the temporary folder
    evil = tmp_path / f"aoti-host-{VERSION}-evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tf:
        data = b"owned"
        ti = tarfile.TarInfo("../../escaped.txt")
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    refused = _verify(evil)
    assert refused.returncode == 1 and "[dist-manifest-mismatch]" in refused.stdout, refused.stdout
    assert not list(Path("/tmp").glob("escaped.txt")) and not (tmp_path.parent / "escaped.txt").exists()


def test_version_lines_agree(host_build):
    tool = subprocess.run([sys.executable, "-m", "toolchain", "--version"], capture_output=True, text=True,
                          cwd=REPO_ROOT, env={k: v for k, v in os.environ.items() if k != "AOTI_HOST_LIBRARY"})
    native = subprocess.run([str(host_build.aoti_run), "--version"], capture_output=True, text=True)
    assert tool.returncode == 0 and native.returncode == 0
    t, n = tool.stdout.splitlines(), native.stdout.splitlines()
    assert t[0] == f"aoti-toolchain {VERSION}" and n[0] == f"aoti-run {VERSION}"
    assert t[1] == n[1] and "CUDA_AVAILABLE=0" in n[1] and "variant=" in n[1]
    assert subprocess.run([str(host_build.aoti_run), "--version=x"], capture_output=True).returncode == 2


def test_user_host_program_against_a_packed_runtime(dist_archive, export_example, tmp_path):
    """examples/host-program built by the SCons tool against an unpacked `scons dist` runtime (root=): the
    post-link checks pass, RUNPATH is $ORIGIN-relative, and it runs a real plugin."""
    with tarfile.open(dist_archive) as tf:
        tf.extractall(tmp_path / "rt", filter="data")
    project = tmp_path / "proj"
    shutil.copytree(REPO_ROOT / "examples" / "host-program", project)
    sconstruct = project / "SConstruct"
    text = sconstruct.read_text()
    assert "env.AotiInstalledRuntime()" in text
    sconstruct.write_text(text.replace("env.AotiInstalledRuntime()",
                                       f"env.AotiInstalledRuntime(root={str(tmp_path / 'rt' / STEM)!r})"))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([*scons_command(), "-Q"], capture_output=True, text=True, cwd=project, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "host-program: pass (0 error(s)" in proc.stdout
    dyn = subprocess.run(["readelf", "-d", str(project / "host-program")], capture_output=True, text=True).stdout
    assert "[libaoti_host.so]" in dyn and "(RUNPATH)" in dyn and "[$ORIGIN/../rt/" in dyn, dyn
    pt2, _, _ = export_example("mlp")
    run = subprocess.run([str(project / "host-program"), str(pt2)], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"runtime {VERSION}\n") and "output 0: shape [" in run.stdout

    # no runtime at all: a clear error naming both ways to give one
    sconstruct.write_text(text.replace("libs=[env.AotiInstalledRuntime()]", "libs=[]"))
    proc = subprocess.run([*scons_command(), "-Q"], capture_output=True, text=True, cwd=project, env=env)
    assert proc.returncode != 0 and "no runtime to link" in proc.stdout + proc.stderr
