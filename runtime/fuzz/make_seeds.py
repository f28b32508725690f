"""Write the seed corpus of each libFuzzer target of runtime/fuzz: real inputs, generated here, not committed.

    python runtime/fuzz/make_seeds.py OUT_DIR [--pt2 PKG.pt2 ...] [--so LIB.so ...]

OUT_DIR/<target>/ gets, per target:
  json, contract  contracts as `aoti-toolchain export` writes them (static, dynamic, every dtype) and JSON
                  that exercises escapes, numbers and nesting
  npy             arrays saved by numpy (every supported dtype, bfloat16 via ml_dtypes, C and Fortran order, 0-d,
                  empty, format 1/2/3)
  elf_scan        small shared objects compiled here by the C compiler (imports, weak imports, DT_NEEDED,
                  a C++ one), plus each --so
  zip             stored zip archives laid out like a .pt2 (plugin, contract, weights; zip64; a comment),
                  plus each --pt2 (a real export; one over MAX_SEED_BYTES is also added with its large
                  members cut short, keeping its real layout), and the crafted archives of
                  tests/integration/crafted_zips.py (every refusal class of the readers)
Inputs larger than MAX_SEED_BYTES are left out: libFuzzer's mutations are as long as its largest seed, and
one multi-megabyte seed makes every execution slow.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MAX_SEED_BYTES = 1 << 20
TARGETS = ("json", "contract", "npy", "elf_scan", "zip")
DTYPES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")


def contracts() -> dict[str, dict]:
    def tensor(name: str, dtype: str, shape: list, strides: list[int] | None = None) -> dict:
        entry: dict = {"name": name, "dtype": dtype, "shape": shape}
        if strides is not None:
            entry["strides"] = strides
        return entry

    base = {"schema": 1, "producer": "aoti-toolchain", "torch": "2.13.0"}
    out = {
        "mlp": {**base, "inputs": [tensor("x", "float32", [4, 16], [16, 1])],
                "outputs": [tensor("output_0", "float32", [4, 8], [8, 1])]},
        "dynamic": {**base, "inputs": [tensor("x", "float32", [{"min": 1, "max": 64}, 16], [16, 1]),
                                       tensor("y", "int64", [{"min": 2, "max": 1024}])],
                    "outputs": [tensor("output_0", "float32", [{"min": 1, "max": 64}, 16])]},
        "scalar": {**base, "inputs": [tensor("s", "float64", [], [])], "outputs": [tensor("output_0", "float64", [])]},
        "no_outputs": {**base, "inputs": [], "outputs": []},
    }
    out["dtypes"] = {**base, "inputs": [tensor(f"in_{d}", d, [2, 3], [3, 1]) for d in DTYPES],
                     "outputs": [tensor(f"output_{k}", d, [3, 2], [1, 3]) for k, d in enumerate(DTYPES)]}
    return out


def json_docs() -> dict[str, str]:
    return {
        "escapes": json.dumps({"s": "tab\t nl\n quote\" back\\ \u00e9 \u4e2d \U0001f600", "e": ""}, ensure_ascii=True),
        "numbers": '{"n": [0, -0, 1, -1, 1.5, -2.5e-3, 1E+10, 9007199254740993, 1e308, 5e-324, 123456789012345678901]}',
        "literals": '[true, false, null, [], {}, [[[[[[]]]]]], {"a": {"b": {"c": null}}}]',
        "whitespace": ' \r\n\t{ "k" :\t[ 1 , 2 ]\n}\n ',
        "deep": "[" * 60 + "]" * 60,
    }


def npy_files() -> dict[str, bytes]:
    import numpy as np

    out: dict[str, bytes] = {}

    def save(name: str, arr, version: tuple[int, int] | None = None) -> None:
        buf = io.BytesIO()
        if version is None:
            np.save(buf, arr)
        else:
            np.lib.format.write_array(buf, arr, version=version)
        out[name] = buf.getvalue()

    for dtype in DTYPES:
        save(f"{dtype}_2x3", (np.arange(6) % 2 if dtype == "bool" else np.arange(6)).astype(dtype).reshape(2, 3))
    save("float32_fortran", np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)))
    save("float64_0d", np.array(3.5))
    save("int64_empty", np.zeros((0, 5), np.int64))
    save("uint8_4d", np.arange(24, dtype=np.uint8).reshape(1, 2, 3, 4))
    save("float32_v2", np.ones((2, 2), np.float32), (2, 0))
    save("float32_v3", np.ones((3,), np.float32), (3, 0))
    save("void2_raw", np.zeros((2, 3), "V2"))  # '|V2': refused, next to bfloat16's '<V2'
    try:
        import ml_dtypes
    except ImportError:  # a dependency (pyproject.toml); without it the bfloat16 seed is left out
        return out
    save("bfloat16_2x3", np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16))  # descr '<V2'
    return out


_C_PLUGIN = r"""
#include <math.h>
extern int aoti_torch_get_data_ptr(void*, void**);
extern int optional_hook(int) __attribute__((weak));
int AOTInductorModelContainerCreateWithDevice(void** c, unsigned n, const char* d, const char* b) {
  (void)n; (void)d; (void)b; *c = 0; return aoti_torch_get_data_ptr(0, c) + (optional_hook ? optional_hook(1) : 0);
}
double scaled(double x) { return sqrt(x) * 2.0; }
"""

_CXX_LIB = r"""
#include <stdexcept>
#include <string>
extern "C" int entry(const char* s) {
  try { return static_cast<int>(std::stoi(std::string(s))); } catch (const std::exception&) { return -1; }
}
"""


def shared_objects(work: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    cc, cxx = shutil.which("cc") or shutil.which("gcc"), shutil.which("c++") or shutil.which("g++")
    builds = []
    if cc:
        builds += [("plugin.so", cc, "plugin.c", _C_PLUGIN, ["-lm"]),
                   ("plugin_nosym.so", cc, "plugin.c", _C_PLUGIN, ["-lm", "-s"])]
    if cxx:
        builds.append(("cxx_lib.so", cxx, "lib.cpp", _CXX_LIB, []))
    for name, compiler, src_name, text, extra in builds:
        src = work / src_name
        src.write_text(text)
        so = work / name
        subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(so), str(src), *extra], check=True,
                       capture_output=True)
        out[name] = so.read_bytes()
    return out


def zips(contract: dict, plugin: bytes) -> dict[str, bytes]:
    prefix = "model"
    members = {
        f"{prefix}/data/aotinductor/model/model.so": plugin,
        f"{prefix}/data/aotinductor/model/model.wrapper.cpp": b"// wrapper\n",
        f"{prefix}/data/weights/weight_0": bytes(range(256)) * 4,
        f"{prefix}/extra/aoti_toolchain_contract.json": json.dumps(contract, indent=1, sort_keys=True).encode(),
        f"{prefix}/archive_format": b"pt2",
    }
    out: dict[str, bytes] = {}

    def write(name: str, force_zip64: bool = False, comment: bytes = b"", keep: tuple[str, ...] = ()) -> None:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
            zf.comment = comment
            for member, data in members.items():
                if keep and not any(member.endswith(k) for k in keep):
                    continue
                info = zipfile.ZipInfo(member, date_time=(2024, 1, 1, 0, 0, 0))
                with zf.open(info, "w", force_zip64=force_zip64) as f:
                    f.write(data)
        out[name] = buf.getvalue()

    write("package.pt2")
    write("package_zip64.pt2", force_zip64=True)
    write("package_comment.pt2", comment=b"written by make_seeds.py")
    write("contract_only.pt2", keep=("contract.json",))
    write("empty.pt2", keep=("no such member",))
    return out


def _npy_with_header(header: str) -> bytes:
    text = header.encode()
    text += b" " * (63 - (10 + len(text)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text


def _eocd(count: int, cd_size: int, cd_offset: int) -> bytes:
    return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, cd_size, cd_offset, 0)


def regressions() -> dict[str, dict[str, bytes]]:
    """Inputs that crashed (or were undefined behaviour in) a reader once, by target: each run replays them."""
    near_2_64 = (1 << 64) - 16
    # A zip64 end locator whose record offset is near 2^64 (offset + 56 wrapped past the bounds check).
    locator = struct.pack("<IIQI", 0x07064B50, 0, near_2_64, 1)
    zip64_locator = b"PK\x03\x04" + bytes(26) + locator + _eocd(0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
    # A central entry whose zip64 extra puts the local header near 2^64 (local + 30 wrapped).
    name = b"model/data/aotinductor/model/model.so"
    extra = struct.pack("<HHQ", 0x0001, 8, near_2_64)
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, 0, 0, 0, len(name), len(extra),
                          0, 0, 0, 0, 0xFFFFFFFF) + name + extra
    local_offset = b"PK\x03\x04" + bytes(26) + central + _eocd(1, len(central), 30)
    # An ELF header without section headers (e_shnum 0): the scan copied 0 bytes into a null vector.
    ehdr = bytearray(64)
    ehdr[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<HHIQQQIHHHHHH", ehdr, 16, 3, 62, 1, 0, 64, 0, 0, 64, 56, 0, 64, 0, 0)
    return {
        # Dims whose product is 0 but whose non-zero dims overflow int64: the strides overflowed (UB).
        "npy": {"regress_strides_overflow.npy": _npy_with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296), }"),
                "regress_fortran_strides_overflow.npy": _npy_with_header(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (4294967296, 4294967296, 0), }")},
        "elf_scan": {"regress_no_section_headers.so": bytes(ehdr)},
        "zip": {"regress_zip64_locator_near_2_64.pt2": zip64_locator,
                "regress_local_offset_near_2_64.pt2": local_offset},
    }


def shrunk_package(path: Path, keep: int = 4096) -> bytes:
    """A real package's layout (its member names, order, small members) with each large member cut to its
    first `keep` bytes: a seed of the real shape that stays small enough to mutate quickly."""
    buf = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            dst.writestr(out, data if len(data) <= 4 * keep else data[:keep])
    return buf.getvalue()


def crafted_archives() -> dict[str, bytes]:
    """The differential test's crafted archives (tests/integration/crafted_zips.py: every refusal class of the
    package readers, and valid layouts torch and zipfile write), where this checkout has them."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "tests" / "integration" / "crafted_zips.py").exists():
        return {}
    sys.path.insert(0, str(root))
    from tests.integration import crafted_zips

    return {name: case.data for name, case in crafted_zips.corpus().items()}


def generate(out_dir: Path, pt2: list[Path], so: list[Path]) -> dict[str, int]:
    seeds: dict[str, dict[str, bytes]] = {t: {} for t in TARGETS}
    for name, c in contracts().items():
        text = json.dumps(c, indent=1, sort_keys=True).encode()
        seeds["contract"][f"{name}.json"] = text
        seeds["json"][f"contract_{name}.json"] = text
    for name, text in json_docs().items():
        seeds["json"][f"{name}.json"] = text.encode()
    seeds["npy"] = {f"{k}.npy": v for k, v in npy_files().items()}
    with tempfile.TemporaryDirectory(prefix="aoti-fuzz-seeds-") as tmp:
        seeds["elf_scan"] = shared_objects(Path(tmp))
    for path in so:
        seeds["elf_scan"][path.name] = path.read_bytes()
    plugin = seeds["elf_scan"].get("plugin_nosym.so", b"\x7fELF")
    seeds["zip"] = zips(contracts()["mlp"], plugin)
    for path in pt2:
        seeds["zip"][path.name] = path.read_bytes()
        if path.stat().st_size > MAX_SEED_BYTES:
            seeds["zip"][f"{path.stem}_small.pt2"] = shrunk_package(path)
    for target, files in regressions().items():
        seeds[target].update(files)
    for name, data in crafted_archives().items():
        seeds["zip"][f"crafted_{name}.zip"] = data
    counts = {}
    for target, files in seeds.items():
        d = out_dir / target
        d.mkdir(parents=True, exist_ok=True)
        kept = 0
        for name, data in files.items():
            if len(data) > MAX_SEED_BYTES:
                print(f"make_seeds: leaving out {name} ({len(data)} bytes > {MAX_SEED_BYTES})", file=sys.stderr)
                continue
            (d / name).write_bytes(data)
            kept += 1
        counts[target] = kept
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--pt2", type=Path, action="append", default=[], help="a real package to seed the zip target")
    ap.add_argument("--so", type=Path, action="append", default=[], help="a real shared object for elf_scan")
    args = ap.parse_args(argv)
    counts = generate(args.out_dir, args.pt2, args.so)
    print("make_seeds: " + ", ".join(f"{t}: {n}" for t, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
