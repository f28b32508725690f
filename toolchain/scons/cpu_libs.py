"""The CPU libraries the host runtime links, found by SCons configure checks (a clear error when missing).

- BLAS: OpenBLAS's cblas, its OpenMP build (Debian: libopenblas-openmp-dev). The `aoti_torch_cpu_*`
  fallbacks (addmm, mm, bmm, convolution as im2col + GEMM, flash attention) call `cblas_sgemm`/`dgemm`.
  OpenBLAS because it is the fastest BLAS Debian ships for x86_64 and aarch64 with runtime CPU dispatch
  (one build runs well on any CPU), with cblas in the same library. Its OpenMP build because plugins
  run their kernels on libgomp's threads: one pool for both, where the pthread build keeps a second pool
  of spinning threads that fights the first (measured: 2 threads 50-80x slower per call on a 2-core
  machine). Which build libopenblas.so.0 is, Debian's alternatives decide at run time (no RUNPATH: the
  post-link verify refuses build-machine paths); the runtime asks (openblas_get_parallel) and runs the
  pthread build single-threaded.
  (MKL isn't in Debian main; BLIS and the reference BLAS are slower on small GEMMs.)
- OpenMP (-fopenmp, libgomp): the fallbacks parallelise over batch and heads on the same pool.
- Sleef (Debian: libsleef-dev): vectorised plugins (`cpp.vec_isa_ok=True`, what `aoti-toolchain export`
  builds) import unversioned `Sleef_*` functions (`Sleef_expf8_u10`, ...) from the global scope; the
  runtime carries libsleef in its DT_NEEDED so they resolve. Nothing in the runtime calls Sleef, so it
  is linked with --no-as-needed.
"""

from __future__ import annotations

import os

import SCons.Script

_APT = "apt-get install libopenblas-openmp-dev libsleef-dev"

_CHECKS = (
    # (library, header, call, what it is for, Debian package)
    ("openblas", "cblas.h",
     "cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, 0, 1, 0, 1, 0.0f, 0, 1);",
     "the BLAS behind the CPU fallbacks (addmm/mm/bmm, convolution, attention)", "libopenblas-openmp-dev"),
    ("sleef", "sleef.h", "Sleef_expf_u10(1.0f);",
     "the Sleef_* functions vectorised plugins import", "libsleef-dev"),
)


def configure_cpu_libs(env) -> None:
    """Check for OpenBLAS and Sleef and add them to `env`'s link lines; exit 2 naming the fix if missing."""
    if SCons.Script.GetOption("help") or SCons.Script.GetOption("clean"):
        return
    vdir = os.path.join(env["BUILD_DIR"], env["AOTI_VARIANT"])
    # OpenMP with gcc (libgomp, the plugins' runtime); clang builds go without (its libomp would be a
    # second OpenMP runtime next to the plugins' libgomp): the kernels then run their loops serially.
    openmp = "clang" not in os.path.basename(env.subst("$CXX"))
    if openmp:
        env.Append(CCFLAGS=["-fopenmp"], LINKFLAGS=["-fopenmp"])
    if not SCons.Script.GetOption("no_exec"):  # a dry run creates nothing, configure directories included
        # The checks compile plain C: a bare environment with our compiler and search paths (the variant's
        # own flags force-include a generated config header that doesn't exist yet).
        check_env = SCons.Script.Environment(ENV=env["ENV"], CC=env["CC"], CPPPATH=list(env.get("CPPPATH", [])),
                                             LIBPATH=list(env.get("LIBPATH", [])), tools=["default"])
        conf = check_env.Configure(conf_dir=os.path.join(vdir, "sconf_temp"),
                                   log_file=os.path.join(vdir, "config.log"))
        missing = []
        for lib, header, call, why, package in _CHECKS:
            if not conf.CheckLibWithHeader(lib, header, "c", call=call, autoadd=False):
                missing.append(f"  lib{lib} ({header}, -l{lib}): {why}; Debian/Ubuntu package {package}")
        conf.Finish()
        if missing:
            print("scons: error: libraries the host runtime needs were not found:\n" + "\n".join(missing) +
                  f"\n  fix: {_APT} (as root); for libraries unpacked elsewhere (e.g. `dpkg -x PKG.deb DIR`), "
                  f"pass deps_prefix=DIR/usr; details in {vdir}/config.log")
            SCons.Script.Exit(2)
    # Usage requirements of the runtime: whatever links it links these too.
    usage = env["AOTI_RUNTIME_USAGE"]
    usage["LIBS"] = [*usage.get("LIBS", []), "openblas", "sleef", *(["gomp"] if openmp else [])]
    # --as-needed would drop libsleef (the runtime itself calls none of it); plugins bind to it through
    # the global scope, so every binary that loads plugins lists it in DT_NEEDED.
    keep = ["-Wl,--no-as-needed", "-lsleef", "-Wl,--as-needed"]
    env.Append(LINKFLAGS=keep)  # SHLINKFLAGS includes $LINKFLAGS
