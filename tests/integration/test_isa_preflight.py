"""The preflight from the code: a package torch wrote itself (torch._inductor.aoti_compile_and_package: no
target record of ours) has its plugin's instructions decoded by the runtime (Zydis, runtime/src/host/
isa_scan.cpp) and is refused, exit 4, naming the ISA and the first offending instruction, on an emulated CPU
that lacks what the code needs (qemu-user), instead of dying of SIGILL; it runs on one that has it. The
verdict equals toolchain/isa.py's (capstone) on the same plugin, is cached by the plugin's SHA-256 in the
private cache (a second load decodes nothing), and a tampered cache entry is not trusted."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.long  # torch exports and emulated runs: minutes (nox -s slow, CI)

QEMU = shutil.which("qemu-x86_64")
needs_qemu = pytest.mark.skipif(QEMU is None, reason="qemu-user not installed (apt-get install qemu-user)")
TARGET = "extra/aoti_toolchain_target.json"


def _torch_package(torch, path: Path, extra: dict | None = None):
    """A vectorised MLP packaged by torch itself (the plugin without libtorch, as a host without torch loads
    it); `extra` inductor configs on top (cpp.march)."""
    from toolchain.export import inductor_configs

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).eval()
    x = torch.randn(16, 64)
    ep = torch.export.export(module, (x,))
    # Vectorised whatever ran before in this process: inductor caches its list of working vector ISAs per
    # process (cpu_vec_isa.valid_vec_isa_list), so a scalar export earlier in the same pytest worker would leave
    # torch's default build scalar. 256-bit kernels are what torch picks on this AVX2 machine by itself.
    from torch._inductor import cpu_vec_isa

    cfg = {**inductor_configs("embedded"), "cpp.vec_isa_ok": True, "cpp.simdlen": 256, **(extra or {})}
    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    try:
        torch._inductor.aoti_compile_and_package(ep, package_path=str(path), inductor_configs=cfg)
    finally:
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
    with zipfile.ZipFile(path) as zf:
        assert not any(n.endswith(TARGET) for n in zf.namelist()), "torch's own package carries no record of ours"
        meta = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith("_metadata.json"))))
    assert meta.get("AOTI_CPU_ISA") not in (None, "", "INVALID_VEC_ISA"), meta  # a vectorised plugin
    with torch.no_grad():
        return path, x.numpy(), module(x).numpy()


@pytest.fixture(scope="module")
def theirs(torch, tmp_path_factory):
    """torch's default build on this AVX2 machine (-march=native): x86-64-v3 code."""
    return _torch_package(torch, tmp_path_factory.mktemp("isa-theirs") / "mlp-torch.pt2")


@pytest.fixture(scope="module")
def theirs_v4(torch, tmp_path_factory):
    """The same compiled by torch for x86-64-v4 (cpp.march; 256-bit kernels, as this machine builds): gcc uses
    EVEX encodings, so the code needs AVX-512, while torch's metadata still says AVX2."""
    if not hasattr(torch._inductor.config.cpp, "march"):
        pytest.skip(f"torch {torch.__version__} has no inductor cpp.march")
    return _torch_package(torch, tmp_path_factory.mktemp("isa-theirs-v4") / "mlp-torch-v4.pt2",
                          {"cpp.march": "x86-64-v4", "cpp.vec_isa_ok": True, "cpp.simdlen": 256})


def _plugin(pt2: Path) -> bytes:
    with zipfile.ZipFile(pt2) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith(".so")))


def _run(host_build, pt2: Path, x: np.ndarray, tmp: Path, cache: Path, cpu: str | None = None, **env):
    np.save(tmp / "x.npy", x)
    out = tmp / f"out-{len(list(tmp.glob('out-*')))}"
    cmd = [str(host_build.aoti_run), str(pt2), "-i", str(tmp / "x.npy"), "-o", str(out)]
    if cpu is not None:
        cmd = [QEMU, "-cpu", cpu, *cmd]
    e = {**os.environ, "XDG_CACHE_HOME": str(cache), "AOTI_HOST_LOG": "debug", **env}
    e.pop("AOTI_HOST_CACHE_DIR", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=e)
    return proc, out


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "aoti-toolchain").glob("isa-*.json"))


def _verdict(entry: Path) -> dict:
    mac, body = entry.read_text().split("\n", 1)
    assert mac.startswith("hmac-sha256 ")
    return json.loads(body)


def _assert_refused(proc, level: str, pt2: Path):
    assert proc.returncode == 4, (proc.returncode, proc.stderr)  # not 132/-4 (SIGILL)
    err = proc.stderr
    assert f"the plugin's code needs {level}" in err, err
    assert "decoded from its code: it has no target record" in err, err
    first = re.search(r"first ([a-z0-9_]+) instruction: ([a-z0-9]+) \(bytes ([0-9a-f]+)\) in (\S+) at (0x[0-9a-f]+)", err)
    assert first, err
    lacks = re.search(r"lacks ([a-z0-9_, ]+)", err)
    assert lacks and first[1] in lacks[1].split(", "), err
    assert "AOTI_HOST_SKIP_PREFLIGHT=1" in err and err.count(str(pt2)) >= 1
    return first


def test_cpp_verdict_is_isa_py_verdict(host_build, theirs, tmp_path):
    """The runtime's decode (Zydis) and verify's (capstone, toolchain/isa.py) agree on the plugin: level,
    extensions, and per extension the count and the first instruction (mnemonic, function, address)."""
    pt2, x, _ = theirs
    proc, _ = _run(host_build, pt2, x, tmp_path, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    _assert_same_verdict(tmp_path / "cache", pt2, "x86-64-v3")


def _assert_same_verdict(cache: Path, pt2: Path, level: str) -> None:
    from toolchain.isa import scan_elf

    (entry,) = _entries(cache)
    got = _verdict(entry)
    want = scan_elf(_plugin(pt2), pt2.name)
    assert got["level"] == want.level == level
    assert sorted(got["extensions"]) == sorted(want.extensions)
    for ext, use in want.extensions.items():
        mine = got["extensions"][ext]
        assert (mine["count"], mine["function"], mine["address"]) == (use.count, use.function, use.address), ext
        assert mine["mnemonic"] == use.example.split(" ")[0], (mine, use.example)
    assert got["decoded_bytes"] == want.decoded_bytes and got["text_bytes"] == want.text_bytes


@needs_qemu
def test_torch_package_refused_on_a_cpu_without_avx2_and_runs_on_one_with_it(host_build, theirs, tmp_path):
    pt2, x, expected = theirs
    cache = tmp_path / "cache"
    refused, _ = _run(host_build, pt2, x, tmp_path, cache, cpu="Nehalem")  # SSE4.2, POPCNT, no AVX
    first = _assert_refused(refused, "x86-64-v3", pt2)
    assert "this CPU (x86-64-v2)" in refused.stderr and "--cpu-isa x86-64-v2" in refused.stderr
    from toolchain.isa import scan_elf

    use = scan_elf(_plugin(pt2), pt2.name).extensions[first[1]]
    assert (first[4], int(first[5], 16), first[2]) == (use.function, use.address, use.example.split(" ")[0])
    ran, out = _run(host_build, pt2, x, tmp_path, cache, cpu="Haswell")
    assert ran.returncode == 0, ran.stderr
    np.testing.assert_allclose(np.load(out / "output_0.npy"), expected, rtol=1e-4, atol=1e-5)
    assert "ISA verdict from the cache entry" in ran.stderr and "ISA decoded from the code" not in ran.stderr


@needs_qemu
def test_without_the_preflight_it_really_dies_of_sigill(host_build, theirs, tmp_path):
    """The refusal above is not vacuous: Nehalem lacks an instruction the plugin runs."""
    pt2, x, _ = theirs
    proc, _ = _run(host_build, pt2, x, tmp_path, tmp_path / "cache", cpu="Nehalem", AOTI_HOST_ISA_SCAN="off")
    assert proc.returncode in (-4, 132), (proc.returncode, proc.stderr)


@needs_qemu
def test_torch_package_built_for_avx512_refused_under_qemu_max(host_build, theirs_v4, tmp_path):
    """torch's metadata says AVX2; the code needs x86-64-v4: refused on QEMU's `max` CPU (AVX2, no AVX-512)
    and on this machine alike, naming an AVX-512 instruction."""
    from toolchain.isa import scan_elf

    pt2, x, _ = theirs_v4
    assert scan_elf(_plugin(pt2), pt2.name).level == "x86-64-v4"
    for cpu in ("max", None):
        proc, _ = _run(host_build, pt2, x, tmp_path, tmp_path / "cache", cpu=cpu)
        first = _assert_refused(proc, "x86-64-v4", pt2)
        assert first[1].startswith("avx512"), proc.stderr
        assert "this CPU (x86-64-v3)" in proc.stderr
    _assert_same_verdict(tmp_path / "cache", pt2, "x86-64-v4")


@needs_qemu
def test_bare_plugin_so_refused_alike(host_build, theirs, tmp_path):
    """The plugin taken out of torch's package and given as a bare .so: decoded from the file, refused alike."""
    pt2, x, _ = theirs
    so = tmp_path / "plugin.so"
    so.write_bytes(_plugin(pt2))
    proc, _ = _run(host_build, so, x, tmp_path, tmp_path / "cache", cpu="Nehalem")
    _assert_refused(proc, "x86-64-v3", so)


def test_verdict_cached_once_per_content_and_tampering_not_trusted(host_build, theirs, tmp_path):
    pt2, x, _ = theirs
    cache = tmp_path / "cache"
    first, _ = _run(host_build, pt2, x, tmp_path, cache)
    assert first.returncode == 0 and "ISA decoded from the code: x86-64-v3" in first.stderr, first.stderr
    (entry,) = _entries(cache)
    assert entry.name == f"isa-{__import__('hashlib').sha256(_plugin(pt2)).hexdigest()}.json"
    assert entry.stat().st_mode & 0o077 == 0 and (cache / "aoti-toolchain" / "isa-key").stat().st_mode & 0o077 == 0
    again, _ = _run(host_build, pt2, x, tmp_path, cache)
    assert again.returncode == 0 and "ISA verdict from the cache entry" in again.stderr, again.stderr
    assert "ISA decoded from the code" not in again.stderr
    # A forged verdict (needs nothing) with the old MAC line: not trusted, decoded again and rewritten.
    mac, body = entry.read_text().split("\n", 1)
    forged = {**json.loads(body), "level": "x86-64", "extensions": {}}
    entry.write_text(mac + "\n" + json.dumps(forged) + "\n")
    tampered, _ = _run(host_build, pt2, x, tmp_path, cache)
    assert tampered.returncode == 0, tampered.stderr
    assert "fails its MAC" in tampered.stderr and "not trusted" in tampered.stderr
    assert "ISA decoded from the code: x86-64-v3" in tampered.stderr
    assert _verdict(entry)["level"] == "x86-64-v3"
    for junk in (b"", b"\x00garbage", b"hmac-sha256 00\n{}"):
        entry.write_bytes(junk)
        proc, _ = _run(host_build, pt2, x, tmp_path, cache)
        assert proc.returncode == 0 and "ISA decoded from the code" in proc.stderr, proc.stderr
    entry.unlink()
    entry.symlink_to(tmp_path / "elsewhere.json")
    proc, _ = _run(host_build, pt2, x, tmp_path, cache)
    assert proc.returncode == 0 and "ISA decoded from the code" in proc.stderr, proc.stderr
    assert not entry.is_symlink() and _verdict(entry)["level"] == "x86-64-v3"


@needs_qemu
def test_a_forged_cache_entry_does_not_let_it_through(host_build, theirs, tmp_path):
    """The entry an attacker (or a bug) rewrites to say "needs nothing", even with a well-formed body, is
    not trusted: under Nehalem the package is still refused, not run into SIGILL."""
    pt2, x, _ = theirs
    cache = tmp_path / "cache"
    assert _run(host_build, pt2, x, tmp_path, cache)[0].returncode == 0
    (entry,) = _entries(cache)
    mac, body = entry.read_text().split("\n", 1)
    entry.write_text(mac + "\n" + json.dumps({**json.loads(body), "level": "x86-64", "extensions": {}}) + "\n")
    proc, _ = _run(host_build, pt2, x, tmp_path, cache, cpu="Nehalem")
    _assert_refused(proc, "x86-64-v3", pt2)


def test_a_package_with_our_record_keeps_the_record_path(host_build, export_example, tmp_path):
    """Our export's record decides for our packages: nothing is decoded or cached at load."""
    pt2, _, inputs = export_example("mlp")
    proc, _ = _run(host_build, pt2, inputs[0].numpy(), tmp_path, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert "ISA decoded" not in proc.stderr and not _entries(tmp_path / "cache")


def test_without_zydis(host_build, theirs, tmp_path):
    """auto: said once, loaded unchecked (as before this check existed); on: refused, exit 4, with the fix;
    off: nothing decoded, nothing said; a bad value is refused by name."""
    pt2, x, _ = theirs
    missing = {"AOTI_HOST_ZYDIS_LIBRARY": str(tmp_path / "no-libZydis.so")}
    auto, _ = _run(host_build, pt2, x, tmp_path, tmp_path / "c1", **missing)
    assert auto.returncode == 0, auto.stderr
    assert auto.stderr.count("load without checking the CPU instructions their code needs") == 1, auto.stderr
    assert "apt-get install libzydis4.0" in auto.stderr and not _entries(tmp_path / "c1")
    on, _ = _run(host_build, pt2, x, tmp_path, tmp_path / "c2", AOTI_HOST_ISA_SCAN="on", **missing)
    assert on.returncode == 4 and "cannot be checked" in on.stderr and "AOTI_HOST_ZYDIS_LIBRARY" in on.stderr
    off, _ = _run(host_build, pt2, x, tmp_path, tmp_path / "c3", AOTI_HOST_ISA_SCAN="off", **missing)
    assert off.returncode == 0 and "without checking" not in off.stderr and "ISA" not in off.stderr
    bad, _ = _run(host_build, pt2, x, tmp_path, tmp_path / "c4", AOTI_HOST_ISA_SCAN="yes")
    assert bad.returncode != 0 and "AOTI_HOST_ISA_SCAN=yes: use auto, on or off" in bad.stderr


def test_python_module_raises_the_same_refusal(host_build, theirs_v4):
    """The C API's typed error through the Python module: this machine lacks AVX-512."""
    from toolchain import runtime
    from toolchain.errors import LoadError

    pt2, _, _ = theirs_v4
    with pytest.raises(LoadError) as info:
        runtime.load(pt2, library_path=host_build.lib)
    assert info.value.exit_code == 4  # aoti-run's exit code for the same refusal
    assert "needs x86-64-v4" in str(info.value) and "decoded from its code" in str(info.value)
    assert re.search(r"first avx512[a-z_]* instruction: [a-z0-9]+ \(bytes [0-9a-f]+\) in \S+ at 0x", str(info.value))
