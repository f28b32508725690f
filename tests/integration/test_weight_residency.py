"""Weights resident once at load, and packages torch wrote with a weights blob placed by the host.

A load reads the weights from the package's mapping (a blob member, or the plugin member copied into its
store) and copies them once into memory the program or the plugin's container owns; the mapping's pages are
dropped behind that copy (runtime/src/host/weights.h release_file_pages, ReleaseBehindCopy), so the peak
resident memory of a load is about one copy of the weights, not two or three. Measured in a fresh process
per load: the peak (VmHWM, reset through /proc/self/clear_refs just before the load) and the resident memory
after it, each against the weights' bytes.

A package torch wrote (torch._inductor.aoti_compile_and_package: no layouts of ours) with its weights in a
blob takes the host's placement too, with the layouts derived from its generated wrapper source; without
that source the plugin loads its blob itself. Real torch 2.13 plugins, outputs against eager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import BUILD_DIR, REPO_ROOT, file_lock, shared_dir

pytestmark = pytest.mark.slow

WIDTH, LAYERS = 2048, 4  # 4 x Linear(2048, 2048): 64 MiB of float32 weights
# Peak growth of a load at most PEAK x the weights (+ SLACK for the plugin's code, the runtime's own
# allocations and page-granularity): one copy of the weights and the chunk being copied, not two. Resident
# growth after the load at most STEADY x the weights (+ SLACK).
PEAK, STEADY, SLACK = 1.4, 1.15, 24 << 20

CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from toolchain import runtime
runtime.library(sys.argv[3])
def status():
    return {k: int(v.split()[0]) * 1024 for k, v in (l.split(":", 1) for l in open("/proc/self/status"))
            if k in ("VmRSS", "VmHWM")}
with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM to the current resident size
    f.write("5")
before = status()
prog = runtime.load(sys.argv[2], library_path=sys.argv[3])
after = status()
(y,) = prog.run([np.load(sys.argv[4])])
np.save(sys.argv[5], y)
print(json.dumps({"before": before["VmRSS"], "hwm_reset": before["VmHWM"], "after": after["VmRSS"],
                  "peak": after["VmHWM"]}))
"""


def _module(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)]).eval()


@pytest.fixture(scope="module")
def packages(torch, tmp_path_factory):
    """name -> pt2: ours with embedded weights and with a blob (aoti-toolchain export), and torch's own
    aoti_compile_and_package of the same module with a blob (the plugin without libtorch)."""
    from toolchain.export import export, inductor_configs

    root = shared_dir(tmp_path_factory, "residency")
    module = _module(torch)
    x = torch.randn(4, WIDTH)
    made = {}
    with file_lock(root / "lock"):
        for name, weights in (("ours_embedded", "embedded"), ("ours_blob", "blob")):
            pt2 = root / f"{name}.pt2"
            if not pt2.is_file():
                export(module, (x,), pt2, weights=weights, build_dir=BUILD_DIR)
            made[name] = pt2
        pt2 = root / "torch_blob.pt2"
        if not pt2.is_file():
            ep = torch.export.export(module, (x,))
            torch._inductor.aoti_compile_and_package(ep, package_path=str(pt2), inductor_configs=inductor_configs("blob"))
        made["torch_blob"] = pt2
        np.save(root / "x.npy", x.numpy())
        with torch.no_grad():
            np.save(root / "eager.npy", module(x).numpy())
    weight_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
    return made, root, weight_bytes


def _without(pt2: Path, out: Path, suffixes: tuple[str, ...]) -> Path:
    """A copy of the package without the members whose names end in one of `suffixes`."""
    with zipfile.ZipFile(pt2) as src, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if not info.filename.endswith(suffixes):
                dst.writestr(info, src.read(info.filename))
    return out


def _load(host_lib, pt2: Path, root: Path, tmp_path: Path, log: str = "") -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "AOTI_HOST_LOG": log or "warning"}
    out = tmp_path / f"{pt2.stem}-y.npy"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(REPO_ROOT), str(pt2), str(host_lib), str(root / "x.npy"),
                           str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(np.load(out), np.load(root / "eager.npy"), rtol=1e-4, atol=1e-4)
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _check_resident_once(m: dict, weight_bytes: int, what: str) -> None:
    assert m["hwm_reset"] <= m["before"] + (4 << 20), f"VmHWM was not reset: {m}"
    peak, steady = m["peak"] - m["before"], m["after"] - m["before"]
    mib = 1 << 20
    assert peak <= PEAK * weight_bytes + SLACK, (
        f"{what}: the load's peak grew by {peak / mib:.0f} MiB for {weight_bytes / mib:.0f} MiB of weights "
        f"(bound {PEAK}x + {SLACK // mib} MiB): the weights are held more than once at the peak")
    assert steady <= STEADY * weight_bytes + SLACK, (
        f"{what}: {steady / mib:.0f} MiB more resident after the load for {weight_bytes / mib:.0f} MiB of weights "
        f"(bound {STEADY}x + {SLACK // mib} MiB)")
    # and the weights are really in: at least one copy is resident
    assert steady >= 0.9 * weight_bytes, f"{what}: only {steady / mib:.0f} MiB resident after the load"


@pytest.mark.parametrize("name", ["ours_embedded", "ours_blob", "torch_blob"])
def test_weights_resident_once_at_load(host_lib, packages, tmp_path, name):
    made, root, weight_bytes = packages
    m, _ = _load(host_lib, made[name], root, tmp_path)
    _check_resident_once(m, weight_bytes, name)


def test_torch_blob_package_placed_by_the_host(host_lib, packages, tmp_path):
    made, root, weight_bytes = packages
    with zipfile.ZipFile(made["torch_blob"]) as zf:
        names = zf.namelist()
    assert not any(n.endswith("aoti_toolchain_constants.json") for n in names), "torch wrote no layouts of ours"
    assert sum(n.endswith(".wrapper.cpp") for n in names) == 1
    _, log = _load(host_lib, made["torch_blob"], root, tmp_path, "debug")
    assert f"{2 * LAYERS} constant layouts derived from" in log, log[-3000:]
    assert "placed by the host" in log, log[-3000:]


def test_torch_blob_package_without_its_source_loads_through_the_plugin(host_lib, packages, tmp_path):
    """No wrapper source to derive layouts from: the plugin's own loader, its copy made from the package's
    mapping whose pages go behind it (the tensor shims count what it wraps)."""
    made, root, weight_bytes = packages
    bare = _without(made["torch_blob"], tmp_path / "bare.pt2", (".wrapper.cpp",))
    m, log = _load(host_lib, bare, root, tmp_path, "debug")
    assert "placed by the host" not in log and "no generated wrapper to derive them from" in log, log[-3000:]
    _check_resident_once(m, weight_bytes, "torch_blob without its wrapper source")


def test_wrapper_contradicting_the_blob_keeps_the_plugins_loader(host_lib, packages, tmp_path):
    """A wrapper source whose layouts do not fit the blob is not used: the plugin loads its blob itself."""
    made, root, _ = packages
    out = tmp_path / "odd.pt2"
    with zipfile.ZipFile(made["torch_blob"]) as src, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith(".wrapper.cpp"):
                text = data.decode()
                # the first constant's extent no longer fits its data size
                text = text.replace(f"constants_info_[0].shape = {{{WIDTH}, {WIDTH}}};",
                                    f"constants_info_[0].shape = {{{WIDTH}, {2 * WIDTH}}};", 1)
                assert text != data.decode()
                data = text.encode()
            dst.writestr(info, data)
    _, log = _load(host_lib, out, root, tmp_path, "debug")
    assert "constant layouts not derived from" in log and "span more than its data_size" in log, log[-3000:]
    assert "placed by the host" not in log


@pytest.mark.parametrize("name", ["ours_blob", "torch_blob"])
def test_damaged_blob_refused_before_the_plugin_sees_it(host_lib, packages, tmp_path, name):
    """A byte of the weights blob changed, its declared CRC-32 kept: the one-pass placement (CRC over the
    bytes as copied) refuses the package, naming the member."""
    import struct

    from toolchain import runtime
    from toolchain.errors import ToolchainError

    made, _, _ = packages
    data = bytearray(made[name].read_bytes())
    with zipfile.ZipFile(made[name]) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith("_weights.blob"))
    n, e = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + n + e
    data[start + info.file_size // 2] ^= 0xFF
    bad = tmp_path / f"{name}-damaged.pt2"
    bad.write_bytes(bytes(data))
    with pytest.raises(ToolchainError) as err:
        runtime.load(bad, library_path=host_lib)
    assert "is corrupt" in str(err.value) and "_weights.blob" in str(err.value), str(err.value)
