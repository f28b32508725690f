"""The target rules on real binaries: gcc-built plugins whose code uses AVX2 / AVX-512 / AVX512-BF16, and
nvcc-built cubins and fatbins for several architectures, carried as a plugin carries them (embedded in a
data section, in .nv_fatbin, or as .cubin members of a .pt2). The decoder and the container parser are fed
damaged input too: they report it, never crash."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.integration import elf_builders as eb
from tests.integration.synthetic_profiles import synthetic_profile
from toolchain.cuda_bin import CudaBinaryError, member_images, parse_fatbin, plugin_images
from toolchain.isa import IsaDecodeError, load_isa_spec, scan_elf, scan_file
from toolchain.verify import verify_paths

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) not installed")

KERNELS = r"""
#include <immintrin.h>
__attribute__((target("avx2"))) void add_avx2(int* a, const int* b) {
  _mm256_storeu_si256((__m256i*)a, _mm256_add_epi32(_mm256_loadu_si256((const __m256i*)a),
                                                    _mm256_loadu_si256((const __m256i*)b)));
}
#ifdef WITH_AVX512
__attribute__((target("avx512f"))) void add_avx512(float* a, const float* b) {
  _mm512_storeu_ps(a, _mm512_add_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b)));
}
#endif
#ifdef WITH_BF16
__attribute__((target("avx512bf16,avx512vl"))) void to_bf16(const float* a, void* out) {
  _mm_storeu_si128((__m128i*)out, (__m128i)_mm256_cvtneps_pbh(_mm256_loadu_ps(a)));
}
#endif
"""
# SSE4.2 alone (x86-64-v2): no AVX2 function beside it, unlike KERNELS
SSE42 = r"""
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) unsigned crc_sse42(unsigned c, unsigned v) { return _mm_crc32_u32(c, v); }
"""


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    d = tmp_path_factory.mktemp("isa")
    return {
        "sse42": eb.build(d, "p_sse42", extra=SSE42, flags=["-O2"]),
        "avx2": eb.build(d, "p_avx2", extra=KERNELS, flags=["-O2"]),
        "avx512": eb.build(d, "p_avx512", extra=KERNELS, flags=["-O2", "-DWITH_AVX512"]),
        "bf16": eb.build(d, "p_bf16", extra=KERNELS, flags=["-O2", "-DWITH_AVX512", "-DWITH_BF16"]),
        "base": eb.build(d, "p_base", flags=["-O2"]),
    }


def test_decode_names_the_extension_its_instruction_and_function(plugins):
    base = scan_file(plugins["base"])
    assert base.level in ("x86-64", "x86-64-v2") and not {"avx", "avx2", "avx512f"} & set(base.extensions)
    s2 = scan_file(plugins["avx2"])
    assert s2.level == "x86-64-v3" and s2.extensions["avx2"].function == "add_avx2"
    assert s2.extensions["avx2"].example.startswith("vpaddd ymm")
    s5 = scan_file(plugins["avx512"])
    assert s5.level == "x86-64-v4" and s5.extensions["avx512f"].function == "add_avx512"
    assert "zmm" in s5.extensions["avx512f"].example
    assert s5.highest(load_isa_spec())[0] == "avx512f"
    sb = scan_file(plugins["bf16"])
    # capstone 5 predates AVX512-BF16: the EVEX instruction is measured and named by its opcode
    bf16 = sb.extensions["avx512_bf16"]
    assert bf16.function == "to_bf16" and "evex map 2 opcode 0x72, bytes 62 f2 7e 28 72 c0" in bf16.example
    assert sb.undecodable == 0  # decoding resumed after it, in step
    assert sb.highest(load_isa_spec())[0] == "avx512_bf16"  # no psABI level includes it: it ranks above v4
    assert s5.decoded_bytes <= s5.text_bytes


def test_ctypes_decoder_matches_capstones_package(plugins, monkeypatch):
    """The scan's libcapstone-through-ctypes path, which skips instructions of ids known to use no
    extension, finds what the path through capstone's Python package finds (every instruction's text): the
    same extensions, counts, examples, functions and addresses, on good files and on damaged ones."""
    import random

    from toolchain import isa

    if isa._libcapstone() is None:
        pytest.skip("capstone's library is not capstone 5: the scan uses the package path only")
    files = [p.read_bytes() for p in plugins.values()]
    rng = random.Random(11)
    for _ in range(30):  # code bytes flipped: undecodable bytes, unknown VEX/EVEX opcodes, resumed decoding
        buf = bytearray(files[rng.randrange(len(files))])
        for _ in range(64):
            buf[rng.randrange(len(buf))] = rng.choice((0x62, 0xC4, 0xC5, 0x0F, 0x38, rng.randrange(256)))
        files.append(bytes(buf))

    def scan(data):
        try:
            s = isa.scan_elf(data, "x.so")
        except isa.IsaDecodeError as exc:
            return str(exc)
        return s.to_json(), s.decoded_bytes, s.text_bytes, s.undecodable

    fast = [scan(d) for d in files]
    assert isinstance(isa._decoder(), isa._Libcapstone)
    monkeypatch.setattr(isa._Libcapstone, "load", classmethod(lambda cls: None))
    assert isinstance(isa._decoder(), isa._CapstoneModule)
    assert [scan(d) for d in files] == fast


# One function per instruction form, each with no other extension in it (-O2, no -m flags: the baseline
# code around them has no VEX/EVEX or 0F 38/3A bytes): the forms without an escape byte, SSE3's, x87
# FISTTP's, and POPCNT/LZCNT/TZCNT with a REX prefix between their F3 prefix and 0F.
ONE_FORM_EACH = r"""
#define F(name, insn) __attribute__((visibility("default"))) void name(void* p) { __asm__ volatile(insn :: "r"(p) : "memory", "xmm0", "rax"); }
F(f_haddps, "haddps %%xmm0, %%xmm0")
F(f_hsubpd, "hsubpd %%xmm0, %%xmm0")
F(f_addsubps, "addsubps %%xmm0, %%xmm0")
F(f_lddqu, "lddqu (%0), %%xmm0")
F(f_movddup, "movddup (%0), %%xmm0")
F(f_movsldup, "movsldup %%xmm0, %%xmm0")
F(f_movshdup, "movshdup %%xmm0, %%xmm0")
F(f_fisttp, "fldz; fisttpl (%0)")
F(f_fisttpq, "fldz; fisttpll 8(%0)")
F(f_popcnt64, "popcnt %0, %%rax")
F(f_lzcnt64, "lzcnt %0, %%rax")
F(f_tzcnt64, "tzcnt %0, %%rax")
"""


def test_every_form_of_an_extension_is_decoded(tmp_path):
    """Functions holding a single instruction of an extension that no VEX/EVEX or 0F 38/3A byte announces are
    decoded and named, not skipped by the scan's pre-filter."""
    so = eb.build(tmp_path, "p_forms", extra=ONE_FORM_EACH, flags=["-O2"])
    scan = scan_file(so)
    named = {u.function for u in scan.extensions.values()}
    assert scan.extensions["sse3"].count >= 9, scan.extensions  # 7 SSE3 forms and 2 FISTTP
    assert {"f_popcnt64", "f_lzcnt64", "f_tzcnt64"} <= named, scan.extensions
    assert {"popcnt", "lzcnt", "bmi1"} <= set(scan.extensions), scan.extensions
    assert scan.level == "x86-64-v3"  # lzcnt, tzcnt


def _system_code() -> list[Path]:
    from toolchain.elf.resolve import Resolver

    r = Resolver()
    out = []
    for soname in ("libm.so.6", "libgomp.so.1", "libstdc++.so.6"):
        for d in r.search_dirs:
            if (Path(d) / soname).is_file():
                out.append(Path(d) / soname)
                break
    return out


def test_the_pre_filter_changes_no_result(plugins, tmp_path, monkeypatch):
    """The scan decodes only functions holding one of `_MAY_NEED`'s byte sequences. Decoding every function
    instead gives the same extensions, counts, examples, functions and addresses, on the test plugins, one
    holding each escape-less form, and real libraries built with many extensions (libm's ifunc variants,
    libgomp, libstdc++)."""
    import re

    from toolchain import isa

    files = [*plugins.values(), eb.build(tmp_path, "p_forms", extra=ONE_FORM_EACH, flags=["-O2"]),
             *_system_code()]
    assert len(files) >= 6

    def scans():
        out = []
        for f in files:
            s = scan_file(f)
            out.append((s.to_json(), s.undecodable))
        return out

    filtered = scans()
    monkeypatch.setattr(isa, "_MAY_NEED", re.compile(b""))  # matches every function: all decoded
    assert scans() == filtered


def test_cpu_isa_too_new_against_profiles(plugins):
    def rules(path, profile):
        rep = verify_paths([path], host=None, profile=profile, kind="plugin")
        return {f.rule: f for f in rep.findings}

    f = rules(plugins["avx512"], "debian12")["cpu-isa-too-new"]
    assert f.severity == "error" and "avx512f" in f.message and "add_avx512" in f.message and "zmm" in f.message
    assert "--cpu-isa x86-64" in f.fix and "Debian" in f.message  # the profile's source is cited
    assert "cpu-isa-too-new" not in rules(plugins["avx512"], "dgx-h200")
    assert "cpu-isa-too-new" not in rules(plugins["bf16"], "dgx-h200")  # the profile lists avx512_bf16
    assert "cpu-isa-too-new" in rules(plugins["avx2"], "ubuntu22.04")
    assert scan_file(plugins["base"]).level == "x86-64"  # -O2 without -m flags: the baseline
    assert "cpu-isa-too-new" not in rules(plugins["base"], "debian12")


@pytest.mark.parametrize(("plugin", "needs", "below"), [("sse42", "x86-64-v2", "x86-64"),
                                                        ("avx2", "x86-64-v3", "x86-64-v2")])
def test_cpu_isa_too_new_at_adjacent_levels(plugins, tmp_path, monkeypatch, plugin, needs, below):
    """A plugin whose code needs level L is flagged on a profile of the level just below L and passes on a
    profile of exactly L (synthetic profiles: no shipped one is at x86-64-v2 or v3)."""
    assert scan_file(plugins[plugin]).level == needs

    def findings(level: str) -> list:
        name = synthetic_profile(monkeypatch, tmp_path / "profiles", f"cpu-{level}", cpu_isa=level)
        rep = verify_paths([plugins[plugin]], host=None, profile=name, kind="plugin")
        return [f for f in rep.findings if f.rule == "cpu-isa-too-new"]

    (f,) = findings(below)
    top = {"sse42": "sse4_2", "avx2": "avx2"}[plugin]
    assert f.severity == "error" and f"uses {top}" in f.message, f.message
    assert f"its code needs {needs}, profile cpu-{below} guarantees {below}" in f.message, f.message
    assert f"--cpu-isa {below}" in f.fix, f.fix  # the export choice that fits the profile
    assert findings(needs) == []


def test_decoder_refuses_damaged_files_by_name(plugins, tmp_path):
    data = plugins["avx2"].read_bytes()
    with pytest.raises(IsaDecodeError, match="not a little-endian ELF64"):
        scan_elf(b"\x7fELF\x01" + data[5:], "x.so")
    cut = data[: len(data) // 2]
    with pytest.raises(IsaDecodeError, match="beyond the end of the file|past the end"):
        scan_elf(cut, "cut.so")
    import random

    rng = random.Random(7)
    for _ in range(200):  # flipped bytes anywhere: a finding or a clean scan, never another exception
        buf = bytearray(data)
        for _ in range(8):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            scan_elf(bytes(buf), "fuzz.so")
        except IsaDecodeError:
            pass


def test_spec_and_generated_header_agree():
    from toolchain import codegen
    from toolchain.spec import load_spec

    spec = load_isa_spec()
    header = codegen.render(load_spec(), ("core", "cpu"))["include/aoti_host/cpu_isa.h"]
    for e in spec.extensions.values():
        assert f'{{"{e.name}", "{e.level}", {e.leaf:#x}u, {e.subleaf}u,' in header
    assert spec.exports["avx2"] == "x86-64-v3" and spec.exports["avx512"] == "x86-64-v4"


# ---- CUDA: real nvcc output ----------------------------------------------------------------------------

CU = 'extern "C" __global__ void add(float* a, const float* b, int n) { int i = threadIdx.x; if (i < n) a[i] += b[i]; }\n'


def _nvcc(d: Path, out: str, *args: str) -> Path:
    src = d / "k.cu"
    src.write_text(CU)
    subprocess.run([NVCC, *args, str(src), "-o", str(d / out)], check=True, capture_output=True)
    return d / out


@pytest.fixture(scope="module")
def gpu_code(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not installed")
    d = tmp_path_factory.mktemp("cuda")
    return {
        "sm80": _nvcc(d, "k80.cubin", "-cubin", "-arch=sm_80"),
        "sm86": _nvcc(d, "k86.cubin", "-cubin", "-arch=sm_86"),
        "sm90": _nvcc(d, "k90.cubin", "-cubin", "-arch=sm_90"),
        "fat": _nvcc(d, "k.fatbin", "-fatbin", "-gencode", "arch=compute_80,code=sm_80", "-gencode",
                     "arch=compute_90,code=[sm_90,compute_90]"),
        "fat86": _nvcc(d, "k86.fatbin", "-fatbin", "-gencode", "arch=compute_86,code=sm_86"),
        "so": _nvcc(d, "libk.so", "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                    "-gencode", "arch=compute_86,code=[sm_86,compute_86]"),
    }


def _embedding_plugin(d: Path, name: str, blobs: list[Path], flags=()) -> Path:
    """A fake plugin holding GPU code in .rodata, as inductor's embed_kernel_binary embeds it."""
    incbins = "\n".join(f'__asm__(".section .rodata\\n.balign 8\\n_k{i}: .incbin \\"{b}\\"\\n.previous");'
                        for i, b in enumerate(blobs))
    return eb.build(d, name, extra=incbins, flags=list(flags))


@needs_nvcc
def test_cubins_and_fatbins_read_from_headers(gpu_code):
    (c,), _ = member_images(gpu_code["sm80"].read_bytes(), "k80.cubin")
    assert (c.kind, c.sm) == ("sass", 80) and c.runs_on(86) and not c.runs_on(90) and not c.runs_on(75)
    images, _ = member_images(gpu_code["fat"].read_bytes(), "k.fatbin")
    assert sorted((i.kind, i.sm) for i in images) == [("ptx", 90), ("sass", 80), ("sass", 90)]
    ptx = next(i for i in images if i.kind == "ptx")
    assert ptx.ptx_version is not None and ptx.ptx_version >= (8, 0) and ptx.runs_on(100) and not ptx.runs_on(89)
    found, problems = plugin_images(gpu_code["so"].read_bytes(), "libk.so")
    assert not problems and {(i.kind, i.sm) for i in found} == {("sass", 80), ("sass", 86), ("ptx", 86)}
    assert all(":.nv_fatbin@" in i.where for i in found)


@needs_nvcc
def test_fatbin_headers_that_lie_are_refused(gpu_code):
    data = bytearray(gpu_code["fat"].read_bytes())
    for at, value in ((8, 0xFF), (16 + 8, 0xFF), (16 + 9, 0x7F)):  # container size, first entry's payload size
        bad = bytearray(data)
        bad[at] = value
        with pytest.raises(CudaBinaryError, match="overruns"):
            parse_fatbin(bytes(bad), "bad.fatbin")
    with pytest.raises(CudaBinaryError, match="cut short|overruns|past the end"):
        parse_fatbin(bytes(data[:40]), "cut.fatbin")
    bad = bytearray(data)
    bad[16] = 9  # kind
    with pytest.raises(CudaBinaryError, match="unknown kind 9"):
        parse_fatbin(bytes(bad), "kind.fatbin")


@needs_nvcc
def test_cuda_arch_missing_and_driver_rules(gpu_code, tmp_path):
    def rules(path):
        rep = verify_paths([path], host=None, profile="dgx-h200", kind="plugin")
        return {f.rule: f for f in rep.findings}

    only80 = _embedding_plugin(tmp_path, "p80", [gpu_code["sm80"], gpu_code["sm86"]])
    f = rules(only80)["cuda-arch-missing"]
    assert "sm_80" in f.message and "sm_86" in f.message and "nothing runs on sm_90" in f.message
    assert "H200" in f.message and "--cuda-arch" in f.fix
    with90 = _embedding_plugin(tmp_path, "p90", [gpu_code["sm80"], gpu_code["sm90"]])
    assert "cuda-arch-missing" not in rules(with90)
    ptx = _embedding_plugin(tmp_path, "pptx", [gpu_code["fat"]])
    assert "cuda-arch-missing" not in rules(ptx)


@needs_nvcc
def test_ptx_jits_on_newer_gpus_but_not_older(gpu_code, tmp_path):
    rep = verify_paths([gpu_code["so"]], host=None, profile="dgx-h200", kind="plugin")
    assert "cuda-arch-missing" not in {f.rule for f in rep.findings}  # compute_86 PTX JIT-compiles on sm_90
    old = _embedding_plugin(tmp_path, "p86", [gpu_code["fat86"]])
    assert "cuda-arch-missing" in {f.rule for f in verify_paths([old], host=None, profile="dgx-h200",
                                                                 kind="plugin").findings}


@needs_nvcc
def test_cubins_as_package_members(gpu_code, tmp_path, plugins):
    pkg = tmp_path / "m.pt2"
    with zipfile.ZipFile(pkg, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.write(plugins["base"], "m/data/aotinductor/model/m.wrapper.so")
        zf.write(gpu_code["sm80"], "m/data/aotinductor/model/k80.cubin")
        zf.writestr("m/data/aotinductor/model/bad.cubin", b"\x7fELF\x02\x01" + b"\0" * 10)
    rep = verify_paths([pkg], host=None, profile="dgx-h200")
    found = {f.rule: f for f in rep.findings}
    assert "sm_80" in found["cuda-arch-missing"].message
    assert "bad.cubin" in found["unreadable-gpu-code"].message


@needs_nvcc
def test_cuda_driver_too_old(gpu_code, tmp_path, monkeypatch):
    """A PTX ISA newer than the profile's driver supports: the dgx-h200 profile with an older driver."""
    from dataclasses import replace

    from toolchain.verify import profiles

    real = profiles.load_profile("dgx-h200")
    old = replace(real, name="old-driver", target=replace(real.target, cuda_driver=(535, 54), cuda_arch=(80, 90)))
    monkeypatch.setattr(profiles, "load_profile", lambda name: old)
    from toolchain.verify import core

    monkeypatch.setattr(core, "load_profile", lambda name, read=None: old)
    plugin = _embedding_plugin(tmp_path, "pfat", [gpu_code["fat"]])
    found = {f.rule: f for f in verify_paths([plugin], host=None, profile="x", kind="plugin").findings}
    f = found["cuda-driver-too-old"]
    assert "PTX ISA" in f.message and "535.54" in f.message and "driver" in f.fix
    assert json.dumps(old.to_json())  # the report can carry the profile


@needs_nvcc
def test_image_search_skips_the_embedded_weights_only(gpu_code, tmp_path):
    """Bytes between inductor's _binary_constants_bin_start/_end are weights: a cubin-looking run there is
    not GPU code (and a 1 GB plugin's search stays cheap); one beside them still is."""
    weights = (f'__asm__(".section .lrodata,\\"a\\"\\n.globl _binary_constants_bin_start\\n'
               f'_binary_constants_bin_start: .incbin \\"{gpu_code["sm80"]}\\"\\n.globl _binary_constants_bin_end\\n'
               f'_binary_constants_bin_end:\\n.balign 8\\n_k: .incbin \\"{gpu_code["sm90"]}\\"\\n.previous");')
    so = eb.build(tmp_path, "pw", extra=weights, flags=["-O2"])
    found, problems = plugin_images(so.read_bytes(), "pw.so")
    assert not problems and [(i.kind, i.sm) for i in found] == [("sass", 90)]


@needs_nvcc
def test_image_search_reads_what_the_loader_maps(gpu_code, tmp_path):
    """A GPU image counts where the plugin can load it from: an allocated section (mapped at load). The same
    cubin in a section the loader never maps (like debug info) is not the plugin's GPU code."""
    blob = (f'__asm__(".section .notmapped,\\"\\",@progbits\\n.incbin \\"{gpu_code["sm80"]}\\"\\n.previous\\n'
            f'.section .rodata\\n.balign 8\\n_k: .incbin \\"{gpu_code["sm90"]}\\"\\n.previous");')
    so = eb.build(tmp_path, "pmapped", extra=blob, flags=["-O2", "-g"])
    found, problems = plugin_images(so.read_bytes(), "pmapped.so")
    assert not problems and [(i.kind, i.sm) for i in found] == [("sass", 90)]
    from toolchain.isa import _sections

    names = {sec.name: sec.flags for sec in _sections(so.read_bytes(), "pmapped.so")}
    assert ".notmapped" in names and not names[".notmapped"] & 0x2 and ".debug_info" in names


def test_weights_range_found_by_name_alone(tmp_path):
    """The embedded weights are found by their symbols' exact names, wherever the linker put the names in
    the string table (a name can start inside a longer one it is the tail of): look-alike names around them
    do not move the range."""
    from toolchain.cuda_bin import _weights_range
    from toolchain.isa import _sections

    blob = ('__asm__(".section .lrodata,\\"a\\"\\n'
            '.globl my_binary_constants_bin_start\\nmy_binary_constants_bin_start: .fill 32, 1, 0x44\\n'
            '.globl _binary_constants_bin_start\\n_binary_constants_bin_start: .fill 64, 1, 0x57\\n'
            '.globl _binary_constants_bin_end\\n_binary_constants_bin_end: .fill 16, 1, 0x44\\n'
            '.globl _binary_constants_bin_end_not\\n_binary_constants_bin_end_not: .fill 8, 1, 0x44\\n'
            '.previous");')
    so = eb.build(tmp_path, "pweights", extra=blob, flags=["-O2"])
    data = so.read_bytes()
    got = _weights_range(data, _sections(data, "pweights.so"))
    assert got is not None and data[got[0]:got[1]] == b"W" * 64, got
    bare = eb.build(tmp_path, "pnoweights", flags=["-O2"])
    assert _weights_range(bare.read_bytes(), _sections(bare.read_bytes(), "x")) is None
