"""Options of the SConstruct and the per-configuration environment they produce.

Every option that changes the compiled code is part of the variant name, so objects of different
configurations can't mix (Godot's approach), and every translation unit of a variant gets the same
feature defines.
"""

from __future__ import annotations

import difflib
import os
import shutil
from dataclasses import dataclass

import SCons.Script
from SCons.Variables import EnumVariable, PathVariable

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Found through -Iruntime/include: a relative name keeps command lines (and CacheDir keys) machine-neutral.
CONFIG_HEADER = "aoti_host/config.h"


@dataclass(frozen=True)
class Variant:
    name: str
    dir: str
    obj_dir: str
    dist_dir: str


def add_variables(vars) -> None:
    vars.AddVariables(
        EnumVariable("cuda", "build the CUDA runtime (not yet in this release: auto builds the CPU runtime, "
                     "on stops with a message)", "off",
                     allowed_values=("auto", "on", "off")),
        ("cxx", "C++ compiler (g++, clang++, or a path)", os.environ.get("CXX", "g++")),
        EnumVariable("mode", "optimisation level", "release", allowed_values=("debug", "release")),
        PathVariable("build_dir", "where variant directories go", "build", PathVariable.PathAccept),
        PathVariable("spec_dir", "the spec (TOML) the shim lists are generated from",
                     os.path.join(REPO_ROOT, "toolchain", "spec"), PathVariable.PathIsDir),
    )


def fail_unknown(unknown: dict, vars) -> None:
    known = [opt.key for opt in vars.options]
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {close[0]}=?)" if close else ""
        print(f"scons: error: unknown option {key}={unknown[key]}{hint}; `scons -h` lists the options")
    SCons.Script.Exit(2)


def _compiler_family(cxx: str) -> str:
    base = os.path.basename(cxx)
    if "clang" in base:
        return "clang"
    if "g++" in base or "gcc" in base or base in ("c++",):
        return "gcc"
    return base.replace("+", "x")


def _resolve_cuda(env) -> bool:
    choice = env["cuda"]
    nvcc = shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
    if choice == "off":
        return False
    if choice == "auto":
        if nvcc:
            print(f"scons: cuda=auto: nvcc found ({nvcc}), but the CUDA runtime variant is not part of this "
                  "build yet; building the CPU runtime")
        return False
    if not nvcc:
        print("scons: error: cuda=on but nvcc is not on PATH nor at /usr/local/cuda/bin/nvcc; "
              "install the CUDA toolkit or build with cuda=off")
    else:
        print("scons: error: cuda=on: the CUDA runtime variant is not part of this build yet; use cuda=off")
    SCons.Script.Exit(2)
    return False


def configure(env) -> Variant:
    cxx = env["cxx"]
    if not shutil.which(cxx):
        print(f"scons: error: cxx={cxx}: compiler not found on PATH; install it or pass cxx=/path/to/compiler")
        SCons.Script.Exit(2)
    family = _compiler_family(cxx)
    cuda = _resolve_cuda(env)
    name = f"{'cuda' if cuda else 'cpu'}-{family}-{env['mode']}"
    vdir = os.path.join(env.Dir(env["build_dir"]).abspath, name)
    env["BUILD_DIR"] = env.Dir(env["build_dir"]).abspath
    cc = "clang" if family == "clang" else ("gcc" if family == "gcc" else env["CC"])
    env.Replace(CXX=cxx, CC=cc, SHCXX=cxx, SHCC=cc, LINK=cxx, SHLINK=cxx)
    env["AOTI_CUDA"] = cuda
    env["AOTI_SPEC_DIR"] = os.path.abspath(env["spec_dir"])
    env["AOTI_GEN_DIR"] = os.path.join(vdir, "gen")
    env["AOTI_DIST_DIR"] = os.path.join(vdir, "dist")
    env["AOTI_VARIANT"] = name
    opt = ["-O0", "-g"] if env["mode"] == "debug" else ["-O2", "-g1"]
    # The feature defines: every translation unit of the variant gets them, and records them in its object
    # (the force-included config.h); the post-link check compares every object's record with these.
    env["AOTI_FEATURE_DEFINES"] = {"CUDA_AVAILABLE": str(int(cuda))}
    env.Append(
        CPPPATH=[os.path.join(REPO_ROOT, "runtime", "include"), os.path.join(vdir, "gen", "include")],
        CPPDEFINES=[*env["AOTI_FEATURE_DEFINES"].items()] + ([] if env["mode"] == "debug" else ["NDEBUG"]),
        CCFLAGS=["-include", CONFIG_HEADER, *opt, "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror", "-pthread"],
        CXXFLAGS=["-std=c++17", "-fvisibility-inlines-hidden"],
        CFLAGS=["-std=c11"],
        LINKFLAGS=["-pthread", "-Wl,-z,noexecstack", "-Wl,--as-needed"],
        SHLINKFLAGS=["-pthread", "-Wl,-z,noexecstack"],
        LIBS=["dl"],
    )
    return Variant(name=name, dir=vdir, obj_dir=os.path.join(vdir, "obj"), dist_dir=os.path.join(vdir, "dist"))
