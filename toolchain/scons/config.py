"""Options of the SConstruct and the per-configuration environment they produce.

Every option that changes the compiled code is part of the variant name, so objects of different
configurations can't mix (Godot's approach), and every translation unit of a variant gets the same
feature defines.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
from dataclasses import dataclass

import SCons.Script
from SCons.Variables import EnumVariable, PathVariable

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Relative to the top directory (where SCons runs every command): command lines and CacheDir keys stay
# machine-neutral, and configure checks (which see no usage requirements) find it too.
CONFIG_HEADER = "runtime/include/aoti_host/config.h"


@dataclass(frozen=True)
class Variant:
    name: str
    dir: str
    obj_dir: str
    dist_dir: str


def add_variables(vars) -> None:
    vars.AddVariables(
        EnumVariable("cuda", "build the CUDA runtime: on (nvcc required), auto (on when nvcc is found), off",
                     "off", allowed_values=("auto", "on", "off")),
        ("cuda_arch", "CUDA compute capabilities, comma-separated (each gets machine code, the newest also "
         "PTX)", "90"),
        ("nvcc", "the nvcc to use (default: nvcc on PATH, then $CUDA_HOME/bin, then /usr/local/cuda/bin)", ""),
        ("cxx", "C++ compiler (g++, clang++, or a path)", os.environ.get("CXX", "g++")),
        EnumVariable("stdlib", "C++ standard library (libc++ needs cxx=clang++ and Debian's libc++-dev, "
                     "libc++abi-dev)", "libstdc++", allowed_values=("libstdc++", "libc++")),
        EnumVariable("mode", "optimisation level", "release", allowed_values=("debug", "release")),
        EnumVariable("export", "what host programs export: shims (the aoti_torch_* shims and the C API, "
                     "through the generated dynamic list) or all (--export-dynamic)", "shims",
                     allowed_values=("shims", "all")),
        EnumVariable("sanitize", "instrumentation: address (AddressSanitizer + UndefinedBehaviorSanitizer, every "
                     "UB report fatal; aoti-run and the native tests), fuzzer (libFuzzer + ASan + UBSan, cxx=clang++; "
                     "builds only the fuzz targets of runtime/fuzz) or none", "none",
                     allowed_values=("none", "address", "fuzzer")),
        PathVariable("build_dir", "where variant directories go", "build", PathVariable.PathAccept),
        PathVariable("cache_dir", "SCons CacheDir shared between builds and machines (empty: no cache)", "",
                     PathVariable.PathAccept),
        ("deps_prefix", "prefixes (colon-separated) of libraries installed outside the system paths, e.g. "
         "OpenBLAS/Sleef unpacked from .debs: PREFIX/include is searched for headers, PREFIX/lib and "
         "PREFIX/lib/<multiarch> for libraries; at run time the loader must find them too (ldconfig or "
         "LD_LIBRARY_PATH: no build-machine RUNPATH is written)", ""),
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


def _fail(message: str) -> None:
    print(f"scons: error: {message}")
    SCons.Script.Exit(2)


def _resolve_cuda(env) -> str | None:
    """The nvcc to build with, or None for the CPU variant."""
    from toolchain.scons.nvcc import find_nvcc

    choice = env["cuda"]
    if choice == "off":
        return None
    if env["nvcc"]:
        nvcc = shutil.which(env["nvcc"])
        if nvcc is None and choice == "on":
            _fail(f"cuda=on but nvcc={env['nvcc']} is not an executable; install the CUDA toolkit, pass "
                  "nvcc=/path/to/nvcc, or build with cuda=off")
    else:
        nvcc = find_nvcc()
    if nvcc is None and choice == "on":
        _fail("cuda=on but nvcc is not on PATH, in $CUDA_HOME/bin nor in /usr/local/cuda/bin; install the CUDA "
              "toolkit, pass nvcc=/path/to/nvcc, or build with cuda=off")
    if choice == "auto":
        print(f"scons: cuda=auto: {'nvcc found (' + nvcc + '): building the CUDA runtime' if nvcc else 'no nvcc: building the CPU runtime'}")
    return nvcc


def _cublas_dirs() -> tuple[str, str] | None:
    """(include, lib) of cuBLAS: the CUDA toolkit's own, else the pip wheel nvidia-cublas (nvidia/cu13)."""
    import importlib.util
    import sys

    candidates = []
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            for sub in ("cu13", "cublas"):
                candidates.append(os.path.join(base, sub))
    candidates += [os.path.join(p, "nvidia", "cu13") for p in sys.path if p]
    for root in candidates:
        if os.path.exists(os.path.join(root, "include", "cublas_v2.h")):
            return os.path.join(root, "include"), os.path.join(root, "lib")
    return None


def _configure_cuda(env, nvcc: str) -> None:
    from toolchain.scons import nvcc as nvcc_tool

    try:
        nvcc_tool.parse_arch(env["cuda_arch"])
    except ValueError as exc:
        _fail(f"{exc}")
    # The toolkit root: beside the real nvcc, else $CUDA_HOME, else /usr/local/cuda (nvcc may be a wrapper).
    homes = [os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), os.environ.get("CUDA_HOME"),
             os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    home = next((h for h in homes if h and os.path.exists(os.path.join(h, "include", "cuda_runtime.h"))), None)
    if home is None:
        _fail(f"cuda=on: no CUDA toolkit (include/cuda_runtime.h) beside {nvcc}, in $CUDA_HOME nor in "
              "/usr/local/cuda; set CUDA_HOME")
        return
    env["NVCC"] = nvcc
    env["CUDA_ARCH"] = env["cuda_arch"]
    env["CUDA_HOME"] = home
    env.Tool("nvcc", toolpath=[os.path.dirname(__file__)])
    # The host compiler of .cu files is the variant's: one compiler and C++ library for every object.
    env.Append(NVCCFLAGS=["-ccbin", env["CXX"]])
    include = [os.path.join(home, "include")]
    libdirs = [d for d in (os.path.join(home, "lib64"), os.path.join(home, "lib")) if os.path.isdir(d)]
    cublas = _cublas_dirs()
    if os.path.exists(os.path.join(home, "include", "cublas_v2.h")):
        cublas_libs = ["cublas", "cublasLt"]
    elif cublas is not None:
        include.append(cublas[0])
        libdirs.append(cublas[1])
        # The wheel ships only the versioned names (no libcublas.so link): name the files.
        cublas_libs = [":libcublas.so.13", ":libcublasLt.so.13"]
    else:
        _fail(f"cuda=on: cuBLAS headers (cublas_v2.h) are neither in {home}/include nor in an installed "
              "nvidia-cublas wheel; `pip install nvidia-cublas` (bash .ci/setup does) or install the toolkit's "
              "libcublas-dev")
        return
    # The CUDA runtime is linked shared (-lcudart, not nvcc's static default): plugins import cuda*
    # unversioned without listing libcudart, so the host must put the one shared runtime in global scope.
    env["AOTI_CUDA_USAGE"] = {"AOTI_SYSTEM_CPPPATH": include, "LIBPATH": libdirs, "RPATH": libdirs,
                              "LIBS": ["cudart", *cublas_libs]}
    # cuDNN's and cudnn-frontend's headers, for attention through cuDNN's SDPA (compile time only; optional)
    from toolchain.scons.cudnn import configure_cudnn

    configure_cudnn(env, home, env["AOTI_CUDA_USAGE"])


def _system_include_flags(target, source, env, for_signature) -> list[str]:
    """``-isystem DIR`` (two arguments: nvcc refuses the joined form) for each AOTI_SYSTEM_CPPPATH entry."""
    # Dir().path is relative to the top directory for paths inside the checkout: the command line (part of
    # each object's signature) stays the same in every checkout, so cache_dir= keeps hitting.
    dirs = env.Flatten(env.get("AOTI_SYSTEM_CPPPATH", []))
    return [arg for d in dirs for arg in ("-isystem", env.Dir(d).path)]


def _add_deps_prefixes(env, usage: dict) -> None:
    """deps_prefix=P1:P2: headers and libraries of dependencies unpacked outside the system paths."""
    prefixes = [p for p in env["deps_prefix"].split(":") if p]
    if not prefixes:
        return
    multiarch = subprocess.run([env["CC"], "-print-multiarch"], capture_output=True, text=True).stdout.strip()
    for prefix in prefixes:
        if not os.path.isdir(prefix):
            _fail(f"deps_prefix: {prefix} is not a directory; pass the directory that holds include/ and lib/")
            return
        prefix = os.path.abspath(prefix)
        include = os.path.join(prefix, "include")
        libdirs = [d for d in (os.path.join(prefix, "lib", multiarch) if multiarch else "", os.path.join(prefix, "lib"))
                   if d and os.path.isdir(d)]
        if not os.path.isdir(include) and not libdirs:
            _fail(f"deps_prefix: {prefix} has neither include/ nor lib/; pass the directory that holds them "
                  "(for a .deb: `dpkg -x PKG.deb DIR`, then deps_prefix=DIR/usr)")
            return
        if os.path.isdir(include):
            env.Append(CPPPATH=[include])
            usage["CPPPATH"] = [*usage.get("CPPPATH", []), include]
        env.Append(LIBPATH=libdirs)
        usage["LIBPATH"] = [*usage.get("LIBPATH", []), *libdirs]


def _variant_name(env, cuda: bool, family: str) -> str:
    from toolchain.scons.nvcc import DEFAULT_ARCH, parse_arch

    parts = ["cpu"]
    if cuda:
        arch = parse_arch(env["cuda_arch"])
        parts = ["cuda" if arch == [DEFAULT_ARCH] else "cuda" + "_".join(f"sm{a}" for a in arch)]
    parts.append(family)
    if env["stdlib"] == "libc++":
        parts.append("libcxx")
    parts.append(env["mode"])
    if env["export"] == "all":
        parts.append("exportall")
    if env["sanitize"] != "none":
        parts.append(SANITIZE_SUFFIX[env["sanitize"]])
    return "-".join(parts)


# The variant-name part of each sanitize= value.
SANITIZE_SUFFIX = {"address": "asan", "fuzzer": "fuzz"}
# Every UB report stops the program (exit code and report, like ASan's), so tests can't miss one.
_UBSAN = ["-fsanitize=undefined", "-fno-sanitize-recover=undefined"]


def _sanitize_flags(env, family: str) -> tuple[list[str], list[str]]:
    """(compile flags, link flags) of the sanitize= option."""
    choice = env["sanitize"]
    if choice == "none":
        return [], []
    common = ["-fno-omit-frame-pointer"]
    if choice == "fuzzer":
        # Objects get the coverage hooks only; the fuzz targets link libFuzzer's main (-fsanitize=fuzzer).
        return ["-fsanitize=fuzzer-no-link,address", *_UBSAN, *common], ["-fsanitize=address", *_UBSAN]
    link = ["-fsanitize=address", *_UBSAN]
    if family == "clang":
        # clang links its sanitizer runtimes statically into executables only, so libaoti_host.so (linked
        # with -z defs) would have undefined __asan_* symbols: link the shared runtime into everything.
        # gcc always uses the shared libasan/libubsan.
        link.append("-shared-libasan")
    return ["-fsanitize=address", *_UBSAN, *common], link


def configure(env) -> Variant:
    cxx = env["cxx"]
    if not shutil.which(cxx):
        _fail(f"cxx={cxx}: compiler not found on PATH; install it or pass cxx=/path/to/compiler")
    c_drivers = {"gcc": "g++", "clang": "clang++", "cc": "c++"}
    base = os.path.basename(cxx)
    stem = base.split("-")[0]
    if stem in c_drivers:
        # A C driver compiles C++ but links without the C++ runtime: undefined std:: symbols at link time.
        _fail(f"cxx={cxx} is a C compiler driver; pass cxx={c_drivers[stem]}{base[len(stem):]}")
    family = _compiler_family(cxx)
    if env["stdlib"] == "libc++" and family != "clang":
        _fail(f"stdlib=libc++ needs cxx=clang++ (got cxx={cxx}); install Debian's clang, libc++-dev and "
              "libc++abi-dev")
    if env["sanitize"] == "fuzzer" and family != "clang":
        _fail(f"sanitize=fuzzer needs libFuzzer, which only clang has (got cxx={cxx}); pass cxx=clang++ "
              "(Debian: clang and libclang-rt-dev)")
    nvcc = _resolve_cuda(env)
    cuda = nvcc is not None
    if cuda and env["sanitize"] != "none":
        _fail(f"sanitize={env['sanitize']} with cuda: the sanitized variants are CPU-only (ASan's shadow memory "
              "collides with the CUDA driver's mappings); build them with cuda=off")
    if cuda and env["stdlib"] == "libc++":
        # Measured with nvcc 13.0: crt/host_defines.h stops with "libc++ is not supported on x86 system".
        _fail("cuda=on with stdlib=libc++: nvcc does not support libc++ on x86-64 (its crt/host_defines.h "
              "refuses it); build the CUDA variant with stdlib=libstdc++, or the libc++ variant with cuda=off")
    if cuda:
        try:
            name = _variant_name(env, cuda, family)
        except ValueError as exc:
            _fail(str(exc))
    else:
        name = _variant_name(env, cuda, family)
    build_dir = env.Dir(env["build_dir"]).abspath
    vdir = os.path.join(build_dir, name)
    env["BUILD_DIR"] = build_dir
    cc = "clang" if family == "clang" else ("gcc" if family == "gcc" else env["CC"])
    env.Replace(CXX=cxx, CC=cc, SHCXX=cxx, SHCC=cc, LINK=cxx, SHLINK=cxx)
    env["AOTI_CUDA"] = cuda
    env["AOTI_SPEC_DIR"] = os.path.abspath(env["spec_dir"])
    env["AOTI_GEN_DIR"] = os.path.join(vdir, "gen")
    env["AOTI_DIST_DIR"] = os.path.join(vdir, "dist")
    env["AOTI_VARIANT"] = name
    env["AOTI_EXPORT"] = env["export"]
    env["AOTI_SANITIZE"] = env["sanitize"]
    san_cc, san_link = _sanitize_flags(env, family)
    opt = ["-O0", "-g"] if env["mode"] == "debug" else ["-O2", "-g1"]
    stdlib = ["-stdlib=libc++"] if env["stdlib"] == "libc++" else []
    # The feature defines: every translation unit of the variant gets them, and records them in its object
    # (the force-included config.h); the post-link check compares every object's record with these.
    env["AOTI_FEATURE_DEFINES"] = {"CUDA_AVAILABLE": str(int(cuda))}
    # Third-party headers (the CUDA toolkit, cuBLAS) are system includes: -Werror is for our code, and
    # clang flags unused static functions in cuda_fp16.hpp when it is reached through a plain -I.
    env["AOTI_SYSTEM_CPPPATH"] = []
    env["_AOTI_SYSINCFLAGS"] = _system_include_flags
    env["_CPPINCFLAGS"] = env["_CPPINCFLAGS"] + " $_AOTI_SYSINCFLAGS"
    env.Append(
        CPPDEFINES=[*env["AOTI_FEATURE_DEFINES"].items()] + ([] if env["mode"] == "debug" else ["NDEBUG"]),
        CCFLAGS=["-include", CONFIG_HEADER, '-DAOTI_CONFIG_SOURCE_NAME=\\"$SOURCE\\"', *opt, "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror",
                 "-pthread", *san_cc],
        CXXFLAGS=["-std=c++17", "-fvisibility-inlines-hidden", *stdlib],
        CFLAGS=["-std=c11"],
        LINKFLAGS=["-pthread", "-Wl,-z,noexecstack", "-Wl,--as-needed", *stdlib, *san_link],
        SHLINKFLAGS=["-pthread", "-Wl,-z,noexecstack", *stdlib, *san_link],
        LIBS=["dl"],
    )
    # Usage requirements of the runtime: what a program or library that depends on it receives (the
    # include paths of its public headers, the feature defines, CUDA's libraries) instead of repeating it.
    usage = {
        "CPPPATH": [os.path.join(REPO_ROOT, "runtime", "include"), os.path.join(vdir, "gen", "include")],
        "CPPDEFINES": [*env["AOTI_FEATURE_DEFINES"].items()],
    }
    if nvcc is not None:
        _configure_cuda(env, nvcc)
        for key, values in env["AOTI_CUDA_USAGE"].items():
            usage[key] = [*usage.get(key, []), *values]
    _add_deps_prefixes(env, usage)
    env["AOTI_RUNTIME_USAGE"] = usage
    if env["cache_dir"]:
        env.CacheDir(os.path.abspath(env["cache_dir"]))
        env["AOTI_TOOLCHAIN_ID"] = toolchain_id(env)
    return Variant(name=name, dir=vdir, obj_dir=os.path.join(vdir, "obj"), dist_dir=os.path.join(vdir, "dist"))


HELP_INTRO = """aoti-toolchain: `scons [option=value ...]` builds one variant into build_dir/<variant>/:
  dist/lib/libaoti_host.so, dist/bin/aoti-run, dist/include/, tests/, compile_commands.json.
  The variant name holds every option that changes the objects (cpu|cuda, compiler, stdlib, mode, export,
  sanitize). sanitize=fuzzer builds only the libFuzzer targets, into build_dir/<variant>/fuzz/.

"""


def add_compilation_db(env) -> None:
    from toolchain.scons import compile_db

    compile_db.install(env)


def toolchain_id(env) -> str:
    """The compilers' identity (version, target, C++ library): a CacheDir shared between machines must not
    hand an object built by another compiler to this one."""
    import subprocess

    parts = []
    for tool in [env["CXX"], env["CC"], *([env["NVCC"]] if env.get("AOTI_CUDA") else [])]:
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True)
        parts.append(f"{tool}: {proc.stdout.strip()}")
    parts.append(f"stdlib={env['stdlib']}")
    return "\n".join(parts)
