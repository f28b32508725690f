"""Each verify rule: a real artifact (compiled here) that triggers it, and one that does not."""

from __future__ import annotations

import shutil
import subprocess
import zipfile

import pytest

from tests.integration import elf_builders as eb
from tests.integration.synthetic_profiles import synthetic_profile
from toolchain.verify import verify_paths


def rules(path, **kw) -> dict[str, list]:
    report = verify_paths([path], **kw)
    out: dict[str, list] = {}
    for f in report.findings:
        out.setdefault(f.rule, []).append(f)
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("verify-rules")


@pytest.fixture(scope="module")
def good(work):
    """A clean plugin: every entry point, the entries API, imports from libc only, no exec stack."""
    return eb.build(work, "good", imports=["puts"], flags=["-Wl,-z,noexecstack"])


def test_good_plugin_passes(good):
    report = verify_paths([good])
    assert report.findings == [], report.findings
    assert report.exit_code == 0 and report.files[0].kind == "plugin"


def test_not_elf(work, good):
    txt = work / "notes.txt"
    txt.write_text("hello\n")
    found = rules(txt)
    assert list(found) == ["not-elf"] and "no \\x7fELF magic" in found["not-elf"][0].message
    empty_zip = work / "empty.pt2"
    with zipfile.ZipFile(empty_zip, "w") as zf:
        zf.writestr("model/archive_format", "pt2")
    assert list(rules(empty_zip)) == ["not-elf"]
    assert "not-elf" not in rules(good)


def test_truncated(work, good):
    cut = work / "cut.so"
    data = good.read_bytes()
    for size in (3, 40, len(data) // 2, len(data) - 1):
        cut.write_bytes(data[:size])
        found = rules(cut)
        assert list(found) == ["truncated"], (size, found)
        assert "beyond the end of the file" in found["truncated"][0].message or size < 16
    assert "truncated" not in rules(good)


def test_wrong_arch_crafted_aarch64_header(work, good):
    arm = eb.set_machine(good, work / "arm.so", 183)
    found = rules(arm)
    assert list(found) == ["wrong-arch"]
    assert "aarch64 64-bit ELF" in found["wrong-arch"][0].message and "x86_64" in found["wrong-arch"][0].message
    assert "wrong-arch" not in rules(good)


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang (cross target) not installed")
def test_wrong_arch_compiled_i386_and_aarch64_objects(work):
    src = work / "x.c"
    src.write_text("int f(void) { return 1; }\n")
    for target, machine in (("i386-linux-gnu", "i386 32-bit"), ("aarch64-linux-gnu", "aarch64 64-bit")):
        obj = work / f"x-{target}.o"
        subprocess.run(["clang", f"--target={target}", "-c", "-o", str(obj), str(src)], check=True)
        found = rules(obj)
        assert "wrong-arch" in found and machine in found["wrong-arch"][0].message


def test_missing_entry_point(work, good):
    eps = [e for e in eb.required_entry_points() if e != "AOTInductorModelContainerRun"]
    so = eb.build(work, "no_run", entry_points=[*eps, eb.ENTRIES_API], flags=["-Wl,-z,noexecstack"])
    found = rules(so)
    assert [f.entry_point for f in found["missing-entry-point"]] == ["AOTInductorModelContainerRun"]
    assert "missing-entry-point" not in rules(good)


def test_no_entries_api_says_what_is_lost(work, good):
    so = eb.build(work, "old_torch", entry_points=eb.required_entry_points(), flags=["-Wl,-z,noexecstack"])
    found = rules(so)
    (f,) = found["no-entries-api"]
    assert f.severity == "warning"
    for lost in ("cross-method weight sharing", "mutable-state sessions", "CUDA graphs"):
        assert lost in f.message
    assert verify_paths([so]).exit_code == 0 and verify_paths([so], strict=True).exit_code == 1
    assert "no-entries-api" not in rules(good)


def test_unresolved_symbol_and_weak_is_optional(work, good):
    so = eb.build(work, "unresolved", imports=["no_such_function_anywhere"], weak_imports=["optional_hook"],
                  flags=["-Wl,-z,noexecstack"])
    found = rules(so)
    assert [f.symbol for f in found["unresolved-symbol"]] == ["no_such_function_anywhere"]
    assert "undefined symbol: no_such_function_anywhere" in found["unresolved-symbol"][0].message
    assert "unresolved-symbol" not in rules(good)


def test_unresolved_shim_not_in_our_runtime(work):
    so = eb.build(work, "odd_shim", imports=["aoti_torch_dtype_float32", "aoti_torch_no_such_shim"],
                  flags=["-Wl,-z,noexecstack"])
    found = rules(so)
    assert [f.symbol for f in found["unresolved-symbol"]] == ["aoti_torch_no_such_shim"]
    assert "shims.toml" in found["unresolved-symbol"][0].fix


def test_unresolved_shim_against_a_real_host(work, host_build):
    so = eb.build(work, "shim_user", imports=["aoti_torch_dtype_float32", "aoti_torch_get_data_ptr"],
                  flags=["-Wl,-z,noexecstack"])
    assert "unresolved-symbol" not in rules(so, host=host_build.lib)
    c_host = eb.build(work, "c_host", entry_points=[], extra="int main(void) { return 0; }\n", shared=False)
    found = rules(so, host=c_host)
    assert sorted(f.symbol for f in found["unresolved-symbol"]) == ["aoti_torch_dtype_float32",
                                                                   "aoti_torch_get_data_ptr"]
    assert "does not export" in found["unresolved-symbol"][0].message


def test_missing_shim_names_the_aten_op(work, host_build):
    """A fallback op's shim the host lacks is missing-shim, naming the ATen op and the shim, and is not
    reported again as unresolved-symbol; one the runtime implements passes (standalone and in our host)."""
    so = eb.build(work, "fallback_user", imports=["aoti_torch_cpu_topk", "aoti_torch_cpu_grid_sampler_3d",
                                                  "aoti_torch_cuda_mm_out", "aoti_torch_no_such_shim"],
                  flags=["-Wl,-z,noexecstack"])
    for host in (None, host_build.lib):
        found = rules(so, host=host)
        assert [f.symbol for f in found["unresolved-symbol"]] == ["aoti_torch_no_such_shim"], host
        by_symbol = {f.symbol: f for f in found["missing-shim"]}
        assert "aoti_torch_cpu_topk" not in by_symbol
        f = by_symbol["aoti_torch_cpu_grid_sampler_3d"]
        assert f.severity == "error" and "aten.grid_sampler_3d.default" in f.message
        assert "aten.grid_sampler_3d.default" in f.fix and "aoti_torch_cpu_grid_sampler_3d" in f.fix
        assert "shims.toml" in f.message
    # the CPU build does not export the CUDA matmul: implemented, but in the CUDA build only
    cpu_host = rules(so, host=host_build.lib)["missing-shim"]
    (mm,) = [f for f in cpu_host if f.symbol == "aoti_torch_cuda_mm_out"]
    assert "aten.mm.out" in mm.message and "CUDA build" in mm.message and "cuda=on" in mm.fix
    assert "aoti_torch_cuda_mm_out" not in {f.symbol for f in rules(so)["missing-shim"]}  # standalone: shims.toml
    # a host that is not ours lacks even an implemented op
    c_host = eb.build(work, "c_host_ops", entry_points=[], extra="int main(void) { return 0; }\n", shared=False)
    (topk,) = [f for f in rules(so, host=c_host)["missing-shim"] if f.symbol == "aoti_torch_cpu_topk"]
    assert "aten.topk.default" in topk.message and "current build" in topk.fix


@pytest.mark.skipif(not any(p.name.startswith("libsleef.so.3") for p in __import__("pathlib").Path(
    "/usr/lib/x86_64-linux-gnu").glob("libsleef.so*")), reason="libsleef3 not installed")
def test_unresolved_sleef_names_its_provider(work):
    so = eb.build(work, "sleefy", imports=["Sleef_expf8_u10"], flags=["-Wl,-z,noexecstack"])
    (f,) = rules(so)["unresolved-symbol"]
    assert f.symbol == "Sleef_expf8_u10" and f.library == "libsleef.so.3" and f.fix_op == ("add-needed", "libsleef.so.3")
    linked = eb.build(work, "sleefy_ok", imports=["Sleef_expf8_u10"], flags=["-Wl,-z,noexecstack", "-l:libsleef.so.3"])
    assert "unresolved-symbol" not in rules(linked)


def test_missing_library(work, good):
    lib = eb.build_lib(work / "gone", "libgone.so.1", "int gone(void) { return 1; }\n")
    so = eb.build(work, "needs_gone", imports=["gone"], flags=["-Wl,-z,noexecstack", str(lib)])
    lib.unlink()
    found = rules(so)
    assert [f.library for f in found["missing-library"]] == ["libgone.so.1"]
    assert "missing-library" not in rules(good)


CXX_SRC = r"""
#include <iostream>
extern "C" __attribute__((visibility("default"))) int say(void) { std::cerr << "hi\n"; return 0; }
"""


def test_missing_cxx_runtime_upstream_case(work, good, host_build):
    # g++ compiles, gcc links: libstdc++ is not added to DT_NEEDED, exactly the upstream `_ZSt4cerr` plugin.
    so = eb.build(work, "cxx_no_needed", cxx=True, driver="gcc", extra=CXX_SRC, flags=["-Wl,-z,noexecstack"])
    found = rules(so)
    (f,) = found["missing-cxx-runtime"]
    assert f.severity == "error" and f.fix_op == ("add-needed", "libstdc++.so.6")
    assert "_ZSt4cerr" in f.message
    assert "unresolved-symbol" not in found  # one finding for the C++ runtime, not one per symbol
    # in a C++ host it loads, by luck of the host's global scope: a warning that says so
    (w,) = rules(so, host=host_build.aoti_run)["missing-cxx-runtime"]
    assert w.severity == "warning" and "only because this host" in w.message
    c_host = eb.build(work, "c_host2", entry_points=[], extra="int main(void) { return 0; }\n", shared=False)
    assert rules(so, host=c_host)["missing-cxx-runtime"][0].severity == "error"
    ok = eb.build(work, "cxx_needed", cxx=True, extra=CXX_SRC, flags=["-Wl,-z,noexecstack"])
    assert "missing-cxx-runtime" not in rules(ok) and "missing-cxx-runtime" not in rules(good)


def test_symbol_version_too_new_numeric(work, good):
    so = eb.build(work, "dl_user", imports=["dlopen"], flags=["-Wl,-z,noexecstack"])
    found = rules(so, profile="manylinux_2_28")
    f = next(f for f in found["symbol-version-too-new"] if f.symbol == "dlopen")
    assert f.version == "GLIBC_2.34" and "GLIBC_2.28" in f.message
    assert "symbol-version-too-new" not in rules(so, profile="debian12")
    assert "symbol-version-too-new" not in rules(good, profile="host")


def test_symbol_version_too_new_at_the_profiles_maximum(work, tmp_path, monkeypatch):
    """dlopen@GLIBC_2.34 (the plugin's newest version) on profiles whose GLIBC maximum is exactly 2.34 (passes)
    and one below it, 2.33 (fails, naming that one version only): synthetic profiles, since no shipped one
    stops at either."""
    so = eb.build(work, "dl_user_edge", imports=["dlopen"], flags=["-Wl,-z,noexecstack"])
    from toolchain.elf.reader import read_elf
    from toolchain.verify.profiles import parse_version

    needs = [parse_version(s.version) for s in read_elf(so).symbols if not s.defined and s.version]
    assert max(v for fam, v in filter(None, needs) if fam == "GLIBC") == (2, 34)  # dlopen's, the newest
    at = synthetic_profile(monkeypatch, tmp_path, "glibc-2.34", max_versions={"GLIBC": "2.34"})
    assert "symbol-version-too-new" not in rules(so, profile=at)
    below = synthetic_profile(monkeypatch, tmp_path, "glibc-2.33", max_versions={"GLIBC": "2.33"})
    found = rules(so, profile=below)["symbol-version-too-new"]
    assert [(f.symbol, f.version) for f in found] == [("dlopen", "GLIBC_2.34")], found
    assert "newer than GLIBC_2.33 of profile glibc-2.33" in found[0].message, found[0].message


def test_library_not_allowed(work, good):
    omp = eb.build(work, "omp", imports=["omp_get_max_threads"], flags=["-Wl,-z,noexecstack", "-fopenmp"])
    (w,) = rules(omp, profile="manylinux_2_28")["library-not-allowed"]
    assert w.severity == "warning" and w.library == "libgomp.so.1" and "libgomp" in w.message
    lib = eb.build_lib(work / "custom", "libcustom.so.1", "int custom(void) { return 1; }\n")
    so = eb.build(work, "needs_custom", imports=["custom"], flags=["-Wl,-z,noexecstack", str(lib)])
    found = rules(so, profile="ubuntu24.04")
    assert [(f.library, f.severity) for f in found["library-not-allowed"]] == [("libcustom.so.1", "error")]
    assert "library-not-allowed" not in rules(good, profile="ubuntu24.04")


def test_libtorch_dependency(work, good):
    lib = eb.build_lib(work / "torchlib", "libtorch_cpu.so", "int aten_thing(void) { return 1; }\n")
    so = eb.build(work / "torchlib", "linked_libtorch", imports=["aten_thing"],
                  flags=["-Wl,-z,noexecstack", str(lib), "-Wl,-rpath,$ORIGIN"])
    (f,) = rules(so)["libtorch-dependency"]
    assert f.library == "libtorch_cpu.so" and "link_libtorch=False" in f.fix
    assert "libtorch-dependency" not in rules(good)


def test_exec_stack(work, good):
    so = eb.build(work, "execstack", flags=["-Wl,-z,execstack"])
    (f,) = rules(so)["exec-stack"]
    assert "RWE" in f.message and f.fix_op == ("clear-execstack", "")
    assert "exec-stack" not in rules(good)


TEXTREL_SRC = r"""
int target_var = 1;
__asm__(".text\n.globl textrel_slot\ntextrel_slot: .quad target_var\n");
"""


def test_textrel(work, good):
    so = eb.build(work, "textrel", extra=TEXTREL_SRC, flags=["-Wl,-z,noexecstack", "-Wl,-z,notext"])
    assert "textrel" in rules(so)
    assert "textrel" not in rules(good)


@pytest.mark.parametrize("entry,bad", [("/opt/build-machine/lib", True), ("lib", True), ("$ORIGIN/lib", False),
                                       ("/usr/lib/x86_64-linux-gnu", False)])
def test_unsafe_runpath(work, entry, bad):
    so = eb.build(work, f"rp{abs(hash(entry))}", flags=["-Wl,-z,noexecstack", f"-Wl,-rpath,{entry}",
                                                         "-Wl,--enable-new-dtags"])
    found = rules(so)
    assert ("unsafe-runpath" in found) == bad
    if bad:
        assert found["unsafe-runpath"][0].library == entry and found["unsafe-runpath"][0].fix_op[0] == "set-runpath"


UNIQUE_SRC = r"""
template <typename T> struct Counter { static int value; };
template <typename T> int Counter<T>::value = 0;
extern "C" __attribute__((visibility("default"))) int bump(void) { return ++Counter<int>::value; }
"""


def test_cannot_unload(work, good):
    nodelete = eb.build(work, "nodelete", flags=["-Wl,-z,noexecstack", "-Wl,-z,nodelete"])
    assert "DF_1_NODELETE" in rules(nodelete)["cannot-unload"][0].message
    unique = eb.build(work, "unique", cxx=True, extra=UNIQUE_SRC, flags=["-Wl,-z,noexecstack"])
    (f,) = rules(unique)["cannot-unload"]
    assert "GNU_UNIQUE" in f.message and f.symbol == "_ZN7CounterIiE5valueE"
    assert "cannot-unload" not in rules(good)


def test_exports_shim(work, good):
    so = eb.build(work, "own_shim", extra='__attribute__((visibility("default"))) int aoti_torch_dtype_float32(void)'
                  " { return 6; }\n", flags=["-Wl,-z,noexecstack"])
    assert [f.symbol for f in rules(so)["exports-shim"]] == ["aoti_torch_dtype_float32"]
    assert "exports-shim" not in rules(good)


HOST_SRC = r"""
__attribute__((visibility("default"))) int aoti_torch_dtype_float32(void) { return 6; }
int main(void) { return aoti_torch_dtype_float32() == 6 ? 0 : 1; }
"""


def test_shim_not_exported(work, host_build):
    host = eb.build(work, "thin_host", entry_points=[], extra=HOST_SRC, shared=False, flags=["-rdynamic"])
    found = rules(host)
    missing = {f.symbol for f in found["shim-not-exported"]}
    assert "aoti_torch_dtype_float32" not in missing and "aoti_torch_get_data_ptr" in missing
    hidden = eb.build(work, "hidden_host", entry_points=[], extra=HOST_SRC, shared=False)
    assert "aoti_torch_dtype_float32" in {f.symbol for f in rules(hidden, kind="host")["shim-not-exported"]}
    assert "shim-not-exported" not in rules(host_build.lib)
    assert "shim-not-exported" not in rules(host_build.aoti_run)


def test_duplicate_shim_definition(work, host_build):
    lib = eb.build_lib(work / "dup", "libothershims.so", "int aoti_torch_dtype_float32(void) { return 6; }\n")
    host = eb.build(work / "dup", "dup_host", entry_points=[], extra=HOST_SRC, shared=False,
                    flags=["-rdynamic", "-Wl,--no-as-needed", str(lib), "-Wl,-rpath,$ORIGIN"])
    (f,) = rules(host)["duplicate-shim-definition"]
    assert f.symbol == "aoti_torch_dtype_float32" and "libothershims.so" in f.message
    assert "duplicate-shim-definition" not in rules(host_build.lib)


CONFIG_TU = r"""
#include "aoti_host/config.h"
__attribute__((visibility("default"))) int aoti_torch_dtype_float32(void) { return 6; }
"""
OTHER_TU = r"""
#include "aoti_host/config.h"
__attribute__((visibility("default"))) int other_unit(void) { return 1; }
"""


@pytest.mark.parametrize("mixed", [True, False])
def test_mixed_config(work, mixed):
    d = work / f"mixed{int(mixed)}"
    d.mkdir()
    inc = str(eb.REPO_ROOT / "runtime" / "include")
    (d / "a.c").write_text(CONFIG_TU)
    (d / "b.c").write_text(OTHER_TU)
    subprocess.run(["gcc", "-c", "-fPIC", "-I", inc, "-DCUDA_AVAILABLE=1", "-o", str(d / "a.o"), str(d / "a.c")],
                   check=True)
    subprocess.run(["gcc", "-c", "-fPIC", "-I", inc, *([] if mixed else ["-DCUDA_AVAILABLE=1"]),
                    "-o", str(d / "b.o"), str(d / "b.c")], check=True)
    lib = d / "libhost.so"
    subprocess.run(["gcc", "-shared", "-Wl,-z,noexecstack", "-o", str(lib), str(d / "a.o"), str(d / "b.o")], check=True)
    found = rules(lib)
    if mixed:
        (f,) = found["mixed-config"]
        assert f.symbol == "CUDA_AVAILABLE" and "a.c" in f.message and "b.c" in f.message
        assert "unset" in f.message and "1:" in f.message
    else:
        assert "mixed-config" not in found


CUDART = [p for d in ("/usr/local/cuda/lib64", "/usr/local/cuda-13.0/lib", "/usr/local/cuda-13.0/lib64")
          for p in __import__("pathlib").Path(d).glob("libcudart.so.1[23]")]


@pytest.mark.skipif(not CUDART, reason="no libcudart.so.12/13 on this machine")
def test_unresolved_cuda_runtime_explains_the_link_libtorch_false_case(work):
    # FACTS.md: CUDA plugins built with link_libtorch=False import cuda* unversioned without libcudart.
    so = eb.build(work, "cuda_user", imports=["cudaFree", "cudaMalloc"], flags=["-Wl,-z,noexecstack"])
    found = rules(so)["unresolved-symbol"]
    assert sorted(f.symbol for f in found) == ["cudaFree", "cudaMalloc"]
    f = found[0]
    assert f.library.startswith("libcudart.so.1") and f.fix_op == ("add-needed", f.library)
    assert "-cudart shared" in f.message and "link_libtorch=False" in f.message


def test_unresolved_provider_not_installed(work):
    from toolchain.elf.resolve import Resolver

    elf_self = eb.build(work, "probe_self", flags=["-Wl,-z,noexecstack"])
    if Resolver().find("libcuda.so.1", __import__("toolchain.elf.reader", fromlist=["read_elf"]).read_elf(elf_self),
                       str(elf_self)):
        pytest.skip("the CUDA driver library is installed here")
    so = eb.build(work, "driver_user", imports=["cuInit"], flags=["-Wl,-z,noexecstack"])
    (f,) = rules(so)["unresolved-symbol"]
    assert f.symbol == "cuInit" and f.library == "libcuda.so.1" and "nor installed here" in f.message
    assert f.fix_op is None


def test_malformed(work, good):
    import struct

    data = bytearray(good.read_bytes())
    shoff = struct.unpack_from("<Q", data, 40)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    for i in range(shnum):
        at = shoff + i * shentsize
        if struct.unpack_from("<I", data, at + 4)[0] == 11:  # SHT_DYNSYM: point its link at no section
            struct.pack_into("<I", data, at + 40, 999)
    bad = work / "malformed.so"
    bad.write_bytes(bytes(data))
    found = rules(bad)
    assert list(found) == ["malformed"] and "section 999" in found["malformed"][0].message
    assert verify_paths([bad]).exit_code == 3
    assert "malformed" not in rules(good)


def test_two_cxx_runtimes(work, host_build):
    # A plugin that links libstdc++ statically and exports it (as torch 2.11's CUDA plugins built on the GPU
    # machine do): a warning without a host or in a C host (no shared libstdc++ global); none in a host whose
    # global scope has the shared libstdc++ (every std:: reference binds to it: the fix tested in
    # test_split_cxx_runtime.py).
    static = eb.build(work, "static_cxx", cxx=True, extra=CXX_SRC, flags=["-Wl,-z,noexecstack",
                                                                          "-static-libstdc++"])
    (f,) = rules(static)["two-cxx-runtimes"]
    assert f.severity == "warning" and f.library == "libstdc++.so.6" and "GNU_UNIQUE" in f.message
    assert "RTLD_GLOBAL" in f.fix
    c_host = eb.build(work, "c_host_cxx", entry_points=[], extra="int main(void) { return 0; }\n", shared=False)
    assert "two-cxx-runtimes" in rules(static, host=c_host)
    assert "two-cxx-runtimes" not in rules(static, host=host_build.aoti_run)
    hidden = eb.build(work, "static_cxx_hidden", cxx=True, extra=CXX_SRC,
                      flags=["-Wl,-z,noexecstack", "-static-libstdc++", "-Wl,--exclude-libs,ALL"])
    assert "two-cxx-runtimes" not in rules(hidden)
    shared = eb.build(work, "shared_cxx", cxx=True, extra=CXX_SRC, flags=["-Wl,-z,noexecstack"])
    assert "two-cxx-runtimes" not in rules(shared)


def test_ld_library_path_is_searched_like_the_loader(work):
    """A DT_NEEDED library found only through LD_LIBRARY_PATH (deps unpacked outside the system dirs, as on the
    GPU machine): found after DT_RPATH and before DT_RUNPATH, as ld.so(8) says; not found without it."""
    from toolchain.elf.reader import open_library
    from toolchain.elf.resolve import Resolver

    libdir = work / "envlibs"
    lib = eb.build_lib(libdir, "libenvonly_x.so", "int envonly_x(void) { return 1; }\n")
    plugin = eb.build(work, "needs_envonly", flags=["-Wl,-z,noexecstack", f"-L{libdir}", "-l:libenvonly_x.so"])
    elf = open_library(str(plugin))[0]
    assert Resolver(env_path="").find("libenvonly_x.so", elf, str(plugin)) is None
    assert Resolver(env_path=f"/nonexistent:{libdir}").find("libenvonly_x.so", elf, str(plugin)) == str(lib)


def _extension(work, name: str, calls: list[str]):
    """A CPython extension module (exports PyInit_<name>) calling the given C-API functions, built here."""
    src = work / f"{name}.c"
    decls = "".join(f"extern void *{c}(void);\n" for c in calls)
    body = " ".join(f"(void){c}();" for c in calls)
    src.write_text(f"{decls}void *PyInit_{name}(void) {{ {body} return 0; }}\n")
    out = work / f"{name}.abi3.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-z,noexecstack", "-o", str(out), str(src)], check=True)
    return out


def test_python_extension_binds_against_the_interpreter(work):
    """A module exporting PyInit_* is checked as the interpreter loads it: its C-API imports bind in the
    interpreter (not the host runtime, and not as unresolved standalone); a name no interpreter defines
    still fails."""
    mod = _extension(work, "goodmod", ["PyTuple_Size", "PyErr_Format"])
    from toolchain import hostlib

    for host in (None, "default"):
        kw = {} if host is None else {"host": hostlib.find_library()}
        report = verify_paths([mod], **kw)
        res = next(f for f in report.files if f.path == str(mod))
        assert res.kind == "python-extension"
        assert not [f for f in res.findings if f.rule == "unresolved-symbol"], res.findings
    bad = _extension(work, "badmod", ["PyTuple_Size", "PyNoSuch_Function"])
    found = rules(bad)
    assert [f.symbol for f in found["unresolved-symbol"]] == ["PyNoSuch_Function"]
    assert "the interpreter" in found["unresolved-symbol"][0].message
