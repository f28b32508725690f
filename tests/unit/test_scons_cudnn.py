"""Which cuDNN and cudnn-frontend headers the CUDA variant compiles its cuDNN attention with
(toolchain/scons/cudnn.py): the environment's folders first, then the installed wheels', then the copies
.ci/cudnn_headers.py fetches into the build folder; where either is missing the variant builds without the path
and says so once, naming the fix; where both are found every translation unit gets the same defines."""

from __future__ import annotations

from pathlib import Path

from SCons.Environment import Environment

from toolchain.scons import cudnn


def _cudnn(root: Path, minor: int = 19, major: int = 9) -> Path:
    root.mkdir(parents=True)
    (root / "cudnn_graph.h").write_text("#pragma once\n")
    (root / "cudnn_version.h").write_text(f"#ifndef CUDNN_VERSION_H_\n#define CUDNN_VERSION_H_\n\n#define CUDNN_MAJOR "
                                          f"{major}\n#define CUDNN_MINOR {minor}\n#define CUDNN_PATCHLEVEL 0\n#endif\n")
    return root


def _frontend(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "cudnn_frontend.h").write_text("#pragma once\n")
    (root / "cudnn_frontend_version.h").write_text("#pragma once\n#define CUDNN_FRONTEND_MAJOR_VERSION 1\n"
                                                   "#define CUDNN_FRONTEND_MINOR_VERSION 32\n"
                                                   "#define CUDNN_FRONTEND_PATCH_VERSION 0\n")
    return root


_FIND = cudnn.find


def _find(tmp_path: Path, environ: dict, site: list[str] | None = None, wheels: list[str] | None = None):
    return _FIND(environ, str(tmp_path / "no-cuda"), [str(tmp_path / "build")], site_dirs=site or [],
                      wheel_roots=wheels or [])


def test_fetched_copies_are_found_with_their_versions(tmp_path):
    c = _cudnn(tmp_path / "build" / cudnn.FETCHED / "cudnn" / "include")
    f = _frontend(tmp_path / "build" / cudnn.FETCHED / "frontend" / "include")
    h = _find(tmp_path, {})
    assert (h.found, h.cudnn_include, h.cudnn_version, h.frontend_include, h.frontend_version) == (
        True, str(c), "9.19.0", str(f), "1.32.0")
    assert "cuDNN 9.19.0 headers" in h.describe() and "cudnn-frontend 1.32.0" in h.describe()


def test_environment_and_wheels_come_before_the_fetched_copies(tmp_path):
    _cudnn(tmp_path / "build" / cudnn.FETCHED / "cudnn" / "include")
    _frontend(tmp_path / "build" / cudnn.FETCHED / "frontend" / "include")
    wheel = _cudnn(tmp_path / "site" / "nvidia" / "cudnn" / "include", minor=24)
    env_frontend = _frontend(tmp_path / "mine")
    h = _find(tmp_path, {"CUDNN_FRONTEND_INCLUDE_DIR": str(env_frontend)}, site=[str(tmp_path / "site")],
              wheels=[str(tmp_path / "site" / "nvidia")])
    assert (h.cudnn_include, h.cudnn_version, h.frontend_include) == (str(wheel), "9.24.0", str(env_frontend))
    # the nvidia-cudnn-frontend wheel installs its headers at the root of site-packages
    site_frontend = _frontend(tmp_path / "site" / "include")
    h = _find(tmp_path, {}, site=[str(tmp_path / "site")])
    assert h.frontend_include == str(site_frontend)


def test_not_cudnn_9_does_not_count(tmp_path):
    _cudnn(tmp_path / "old", major=8)
    _frontend(tmp_path / "build" / cudnn.FETCHED / "frontend" / "include")
    h = _find(tmp_path, {"CUDNN_INCLUDE_DIR": str(tmp_path / "old")})
    assert h.cudnn_include is None or h.cudnn_include.startswith("/usr")  # a system cuDNN 9 may still be found


def test_missing_builds_without_the_path_and_says_so_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cudnn, "find", lambda *a, **k: _find(tmp_path, {}))
    env = Environment(tools=[], build_dir=str(tmp_path / "build"), CPPDEFINES=[])
    usage = {"AOTI_SYSTEM_CPPPATH": ["/cuda/include"]}
    headers = cudnn.configure_cudnn(env, "/cuda", usage)
    out = capsys.readouterr().out
    if headers.found:  # this machine has both in its system folders: nothing to test here
        return
    assert out.count("\n") == 1 and out.startswith("scons: note: ")
    assert "not found" in out and "runtime's own kernels" in out and ".ci/setup" in out and "CUDNN_INCLUDE_DIR" in out
    assert usage == {"AOTI_SYSTEM_CPPPATH": ["/cuda/include"]}
    assert "AOTI_HAVE_CUDNN_FRONTEND" not in str(env["CPPDEFINES"])


def test_found_defines_for_every_unit_and_system_includes(tmp_path, monkeypatch, capsys):
    c = _cudnn(tmp_path / "build" / cudnn.FETCHED / "cudnn" / "include")
    f = _frontend(tmp_path / "build" / cudnn.FETCHED / "frontend" / "include")
    monkeypatch.setattr(cudnn, "find", lambda *a, **k: _find(tmp_path, {}))
    env = Environment(tools=[], build_dir=str(tmp_path / "build"), CPPDEFINES=[])
    usage = {"AOTI_SYSTEM_CPPPATH": ["/cuda/include"]}
    cudnn.configure_cudnn(env, "/cuda", usage)
    assert capsys.readouterr().out.startswith("scons: cuDNN 9.19.0 headers")
    assert usage["AOTI_SYSTEM_CPPPATH"] == ["/cuda/include", str(c), str(f)]
    assert ("AOTI_HAVE_CUDNN_FRONTEND", "1") in env["CPPDEFINES"]
    assert "NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING" in env["CPPDEFINES"]
