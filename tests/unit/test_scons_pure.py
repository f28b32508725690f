"""Pure functions of the SCons tool: cuda_arch parsing, the variant name, usage-requirement merging."""

from __future__ import annotations

import pytest
from SCons.Environment import Environment

from toolchain.scons.config import _variant_name
from toolchain.scons.link_rules import merge_usage
from toolchain.scons.nvcc import DEFAULT_ARCH, gencode_flags, parse_arch


@pytest.mark.parametrize(("value", "want"), [
    ("90", ["90"]), ("sm_80, 90", ["80", "90"]), ("compute_90a", ["90a"]), ("100f,100f", ["100f"]),
    (" 75 ,,86 ", ["75", "86"]),
])
def test_parse_arch(value, want):
    assert parse_arch(value) == want


@pytest.mark.parametrize("value", ["", ",", "9", "sm_x", "90b", "sm_", "compute_"])
def test_parse_arch_refuses(value):
    with pytest.raises(ValueError, match="cuda_arch"):
        parse_arch(value)


def test_gencode_keeps_ptx_of_the_newest():
    assert gencode_flags("80,90") == ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
                                      "-gencode=arch=compute_90,code=compute_90"]


def _opts(**kw):
    return {"cuda_arch": DEFAULT_ARCH, "stdlib": "libstdc++", "mode": "release", "export": "shims",
            "sanitize": "none", **kw}


@pytest.mark.parametrize(("cuda", "family", "opts", "name"), [
    (False, "gcc", {}, "cpu-gcc-release"),
    (False, "clang", {"stdlib": "libc++"}, "cpu-clang-libcxx-release"),
    (True, "gcc", {}, "cuda-gcc-release"),
    (True, "gcc", {"cuda_arch": "80,90"}, "cudasm80_sm90-gcc-release"),
    (False, "gcc", {"mode": "debug", "export": "all"}, "cpu-gcc-debug-exportall"),
    (False, "gcc", {"sanitize": "address"}, "cpu-gcc-release-asan"),
    (False, "clang", {"sanitize": "fuzzer"}, "cpu-clang-release-fuzz"),
])
def test_variant_name(cuda, family, opts, name):
    assert _variant_name(_opts(**opts), cuda, family) == name


def test_merge_usage_appends_deduplicated_and_keeps_own_defines():
    env = Environment(tools=[], CPPPATH=["inc"], CPPDEFINES=[("OWN", "1")])
    out = merge_usage(env, "prog", [
        {"CPPPATH": ["inc", "dep/inc"], "CPPDEFINES": [("CUDA_AVAILABLE", "0"), "NDEBUG"], "LIBS": ["m"]},
        {"CPPPATH": ["dep/inc", "dep2/inc"], "CPPDEFINES": {"CUDA_AVAILABLE": "0", "OWN": "1"}, "LIBS": ["m", "dl"]},
    ])
    assert out["CPPPATH"] == ["inc", "dep/inc", "dep2/inc"]
    assert out["LIBS"] == ["m", "dl"]
    assert out["CPPDEFINES"] == [("OWN", "1"), ("CUDA_AVAILABLE", "0"), ("NDEBUG", "1")]


def test_merge_usage_refuses_a_conflicting_define(capsys):
    env = Environment(tools=[], CPPDEFINES=["CUDA_AVAILABLE=1"])
    with pytest.raises(SystemExit) as info:
        merge_usage(env, "prog", [{"CPPDEFINES": [("CUDA_AVAILABLE", "0")]}])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "CUDA_AVAILABLE=1 here, CUDA_AVAILABLE=0 from a dependency [rule conflicting-define]" in err
    assert "fix: drop the define" in err
    waived = Environment(tools=[], CPPDEFINES=["CUDA_AVAILABLE=1"], AOTI_WAIVE_RULES=["conflicting-define"])
    assert merge_usage(waived, "prog", [{"CPPDEFINES": [("CUDA_AVAILABLE", "0")]}])["CPPDEFINES"] == [
        "CUDA_AVAILABLE=1"]
