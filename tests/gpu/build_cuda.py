"""Fallback build of the CUDA runtime variant with direct nvcc/g++ commands.

Used by tests/gpu/run.sh when `scons cuda=on` is not available (the SCons cuda variant belongs to the
build system; this script does not replace it, it only lets the GPU checks run without it). Same rules
as the SCons build: every translation unit with CUDA_AVAILABLE=1, shims whole-archived, the program
exports the shims through the generated dynamic list, the library through the generated version script,
cudart linked shared (plugins import cuda* unversioned without listing libcudart).

    python tests/gpu/build_cuda.py OUT_DIR [--cublas-root DIR] [-j N]
Writes OUT_DIR/dist/{lib/libaoti_host.so, bin/aoti-run}.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHIMS = ["tensor.cpp", "shims_core.cpp", "shims_cpu.cpp", "cpu_kernels.cpp", "log.cpp"]
RUNTIME = ["mapped_file.cpp", "zip.cpp", "json.cpp", "elf_scan.cpp", "plugin.cpp", "program.cpp", "c_api.cpp",
           "npy.cpp", "constants.cpp", "method_set.cpp", "session.cpp"]
FLAGS = ["-O2", "-g1", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror", "-pthread", "-DNDEBUG",
         "-DCUDA_AVAILABLE=1"]


def find_cuda_home() -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        sys.exit("build_cuda: nvcc not found on PATH nor at /usr/local/cuda/bin/nvcc")
    for cand in (os.environ.get("CUDA_HOME"), Path(nvcc).resolve().parent.parent, "/usr/local/cuda"):
        if cand and (Path(cand) / "include" / "cuda_runtime_api.h").exists():
            return Path(cand)
    sys.exit(f"build_cuda: no include/cuda_runtime_api.h beside {nvcc} nor in /usr/local/cuda; set CUDA_HOME")


def find_cublas(hint: str | None) -> tuple[Path, Path]:
    """(include dir with cublas_v2.h, the libcublas.so* to link)"""
    roots = [Path(hint)] if hint else []
    roots += [find_cuda_home()]
    for sp in sys.path:
        roots += [Path(p) for p in glob.glob(os.path.join(sp, "nvidia", "*"))]
        roots += [Path(p) for p in glob.glob(os.path.join(sp, "nvidia", "*", "*"))]
    for root in roots:
        incs = list(root.glob("include/cublas_v2.h")) + list(root.glob("targets/*/include/cublas_v2.h"))
        libs = sorted(list(root.glob("lib*/libcublas.so*")) + list(root.glob("targets/*/lib/libcublas.so*")),
                      key=lambda p: len(p.name))
        if incs and libs:
            return incs[0].parent, libs[0]
    sys.exit("build_cuda: cuBLAS not found (no cublas_v2.h + libcublas.so under the CUDA install or a pip "
             "nvidia-cublas package); pip install nvidia-cublas or pass --cublas-root")


def run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(" ".join(cmd) + "\n" + r.stdout + r.stderr)
        raise SystemExit(f"build_cuda: failed: {cmd[-1]}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--cublas-root")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--arch", default="sm_90", help="nvcc -arch for the runtime's own kernels")
    a = ap.parse_args()
    out = a.out.resolve()
    obj, dist = out / "obj", out / "dist"
    for d in (obj, dist / "lib", dist / "bin"):
        d.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO))
    from toolchain.codegen import generate

    generate(out / "gen", cuda=True)
    cuda = find_cuda_home()
    cublas_inc, cublas_so = find_cublas(a.cublas_root)
    cublas_lib = cublas_so.parent
    inc = ["-I", str(REPO / "runtime/include"), "-I", str(out / "gen/include"), "-I", str(cuda / "include"),
           "-I", str(cublas_inc)]
    src = REPO / "runtime/src"
    cuda_cpp = sorted(p.name for p in (src / "cuda").glob("*.cpp"))
    cuda_cu = sorted(p.name for p in (src / "cuda").glob("*.cu"))
    jobs: list[tuple[list[str], Path]] = []

    def cxx(path: Path, o: Path) -> None:
        jobs.append((["g++", "-std=c++17", "-fvisibility-inlines-hidden", *FLAGS, *inc, "-c", str(path), "-o", str(o)],
                     o))

    for name in SHIMS + RUNTIME + ["library.cpp"]:
        cxx(src / name, obj / name.replace(".cpp", ".o"))
    for name in cuda_cpp:
        cxx(src / "cuda" / name, obj / ("cuda_" + name.replace(".cpp", ".o")))
    for name in cuda_cu:
        o = obj / ("cuda_" + name.replace(".cu", ".o"))
        host = ",".join(f for f in FLAGS if f.startswith("-f") or f.startswith("-W") or f == "-pthread")
        jobs.append((["nvcc", "-std=c++17", "-O2", f"-arch={a.arch}", "-DCUDA_AVAILABLE=1", "-DNDEBUG",
                      "-Xcompiler", host, *inc, "-c", str(src / "cuda" / name), "-o", str(o)], o))
    with concurrent.futures.ThreadPoolExecutor(a.j) as ex:
        list(ex.map(lambda j: run(j[0]), jobs))
    shim_objs = [str(obj / n.replace(".cpp", ".o")) for n in SHIMS]
    shim_objs += [str(obj / ("cuda_" + n.replace(".cpp", ".o"))) for n in cuda_cpp]
    shim_objs += [str(obj / ("cuda_" + n.replace(".cu", ".o"))) for n in cuda_cu]
    rt_objs = [str(obj / n.replace(".cpp", ".o")) for n in RUNTIME]
    shims_a, rt_a = obj / "libaoti_host_shims.a", obj / "libaoti_host_runtime.a"
    for lib, objs in ((shims_a, shim_objs), (rt_a, rt_objs)):
        lib.unlink(missing_ok=True)
        run(["ar", "rcs", str(lib), *objs])
    libs = ["-L", str(cuda / "lib64"), "-L", str(cublas_lib), f"-l:{cublas_so.name}", "-lcudart", "-ldl",
            f"-Wl,-rpath,{cublas_lib}:{cuda / 'lib64'}"]
    run(["g++", "-shared", "-pthread", "-Wl,-z,noexecstack", f"-Wl,--version-script={out / 'gen/link/runtime.version'}",
         "-Wl,-z,defs", "-o", str(dist / "lib/libaoti_host.so"), str(obj / "library.o"),
         "-Wl,--whole-archive", str(rt_a), str(shims_a), "-Wl,--no-whole-archive", *libs])
    run(["g++", "-std=c++17", *FLAGS, *inc, "-o", str(dist / "bin/aoti-run"), str(REPO / "runtime/tools/aoti_run.cpp"),
         f"-Wl,--dynamic-list={out / 'gen/link/host.dynlist'}", "-Wl,-z,noexecstack", str(rt_a),
         "-Wl,--whole-archive", str(shims_a), "-Wl,--no-whole-archive", *libs])
    print(f"build_cuda: {dist / 'lib/libaoti_host.so'} and {dist / 'bin/aoti-run'} built")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
