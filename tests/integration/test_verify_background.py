"""verify decodes plugins' code in forked children while it checks the rest (toolchain.verify.scans; the CLI
turns it on). The report must not depend on it: every case below is verified with and without, in a fresh
interpreter (a test runner's worker may hold threads, where the scans stay in-process by design), on real
gcc-built plugins: AVX2, AVX-512, AVX512-BF16, baseline, a package, a plugin relabelled for another
machine, a truncated one, and a library that is no plugin (its child is killed). A child that fails, dies or
answers garbage leaves the scan to the parent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.integration import elf_builders as eb
from tests.integration.test_target_rules import KERNELS

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="background scans need a second CPU (this machine has one)")

SCRIPT = r"""
import json, os, sys
from toolchain.report import render
from toolchain.verify import scans, verify_paths

files, profile, fault = json.loads(sys.argv[1])
taken = []
orig_take = scans.BackgroundScans.take
def take(self, label):
    got = orig_take(self, label)
    taken.append([label, type(got).__name__])
    return got
scans.BackgroundScans.take = take
if fault == "raise":
    def boom(path, package):
        raise RuntimeError("child fails")
    scans._child_results = boom
elif fault == "silent":
    scans._child_results = lambda path, package: os._exit(0)
elif fault == "garbage":
    scans._child_results = lambda path, package: {str(path): {"extensions": [["avx", "x"]]}}
elif fault == "killed":
    scans._child_results = lambda path, package: os.kill(os.getpid(), 9)
out = {}
for bg in (False, True):
    rep = verify_paths(files, host=None, profile=profile, background=bg)
    out[str(bg)] = json.loads(render(rep, "json"))
try:
    os.waitpid(-1, os.WNOHANG)
    left = True
except ChildProcessError:
    left = False
print(json.dumps({"reports": out, "taken": taken, "children_left": left}))
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bg")
    out = {
        "avx2": eb.build(d, "p_avx2", extra=KERNELS, flags=["-O2"]),
        "avx512": eb.build(d, "p_avx512", extra=KERNELS, flags=["-O2", "-DWITH_AVX512"]),
        "bf16": eb.build(d, "p_bf16", extra=KERNELS, flags=["-O2", "-DWITH_AVX512", "-DWITH_BF16"]),
        "base": eb.build(d, "p_base", flags=["-O2"]),
        "lib": eb.build_lib(d, "libplain.so.1", "int plain(int x) { return x + 1; }\n"),
    }
    out["arm"] = eb.set_machine(out["avx2"], d / "p_arm.so", 183)
    data = out["avx512"].read_bytes()
    (d / "p_cut.so").write_bytes(data[: len(data) // 2])
    out["cut"] = d / "p_cut.so"
    pkg = d / "m.pt2"
    with zipfile.ZipFile(pkg, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.write(out["avx512"], "m/data/aotinductor/model/m.wrapper.so")
    out["pt2"] = pkg
    return out


def _run(paths: list[Path], profile: str = "debian12", fault: str = "") -> dict:
    arg = json.dumps([[str(p) for p in paths], profile, fault])
    proc = subprocess.run([sys.executable, "-c", SCRIPT, arg], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _report(rep) -> str:
    return json.dumps(rep, sort_keys=True)


def test_background_scans_give_the_same_report(files):
    names = ["avx2", "avx512", "bf16", "base", "lib", "arm", "cut", "pt2"]
    got = _run([files[n] for n in names])
    assert _report(got["reports"]["True"]) == _report(got["reports"]["False"])
    rules = {f["rule"] for f in got["reports"]["True"]["findings"]}
    assert {"cpu-isa-too-new", "wrong-arch"} <= rules  # the cases did what they are for
    taken = dict((label, kind) for label, kind in got["taken"])
    # the scans of the x86-64 plugins came from the children; the package's member by its label
    assert taken[str(files["avx512"])] == "IsaScan" and taken[str(files["base"])] == "IsaScan"
    assert taken[f"{files['pt2']}!m/data/aotinductor/model/m.wrapper.so"] == "IsaScan"
    assert str(files["lib"]) not in taken  # no plugin: its child was killed, not asked
    assert not got["children_left"]


@pytest.mark.parametrize("fault", ["raise", "silent", "garbage", "killed"])
def test_a_failed_child_leaves_the_scan_to_the_parent(files, fault):
    got = _run([files["avx512"], files["avx2"]], fault=fault)
    assert _report(got["reports"]["True"]) == _report(got["reports"]["False"])
    assert "cpu-isa-too-new" in _report(got["reports"]["True"])
    assert {kind for _, kind in got["taken"]} == {"NoneType"}  # every scan made in the parent
    assert not got["children_left"]


def test_no_fork_beside_other_threads(files):
    code = ("import threading, time\n"
            "from toolchain.verify.scans import BackgroundScans\n"
            "threading.Thread(target=time.sleep, args=(2,), daemon=True).start()\n"
            f"s = BackgroundScans([({str(files['avx2'])!r}, False)])\n"
            "print(s._slots, len(s._running))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout.split() == ["0", "0"], proc.stderr


def test_children_of_a_process_that_ignores_sigchld(files):
    """A daemon that sets SIGCHLD to SIG_IGN has its children reaped by the kernel: waitpid fails there, and
    the answers (complete JSON) are still used."""
    code = ("import json, signal, sys\n"
            "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
            "from toolchain.verify.scans import BackgroundScans\n"
            f"s = BackgroundScans([({str(files['avx512'])!r}, False)])\n"
            f"got = s.take({str(files['avx512'])!r})\n"
            "s.close()\n"
            "print(type(got).__name__, sorted(got.extensions) if got is not None else None)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    kind, _, exts = proc.stdout.partition(" ")
    assert kind == "IsaScan" and "avx512f" in exts, proc.stdout


@pytest.mark.parametrize(("layout", "want"), [
    ({"cgroup": "0::/job\n", "job/cpu.max": "150000 100000\n"}, 1.5),
    ({"cgroup": "0::/job\n", "job/cpu.max": "max 100000\n"}, None),
    ({"cgroup": "0::/\n", "cpu.max": "50000 100000\n"}, 0.5),
    ({"cgroup": "4:cpu,cpuacct:/docker/abc\n", "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "200000\n",
      "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"}, 2.0),
    # inside a container the cgroup's own files are at the mount's root
    ({"cgroup": "1:cpu:/docker/abc\n", "cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1.0),
    ({"cgroup": "1:cpu:/\n", "cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cgroup": "0::/\n", "cpu.max": "garbage\n"}, None),
    ({"cgroup": "\x00\xff:::\n"}, None),
])
def test_cpu_quota_from_cgroup_files(tmp_path, layout, want):
    """The quota that caps the children (a container run with --cpus 1 gets none beside the parent)."""
    from toolchain.verify.scans import cpu_quota

    root = tmp_path / "sys"
    for rel, text in layout.items():
        if rel == "cgroup":
            continue
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (tmp_path / "cgroup").write_bytes(layout["cgroup"].encode("latin-1"))
    assert cpu_quota(str(root), str(tmp_path / "cgroup")) == want


def test_start_picks_elf_and_zip_files_only(files, tmp_path):
    """scans.start (the CLI calls it before anything else) starts a child per ELF file or zip; a FIFO is not
    opened for reading (nothing would ever write to it: the CLI would hang), nor are a directory, a text file,
    a missing path or an unreadable file; kinds the CPU rule does not check start nothing."""
    fifo = tmp_path / "fifo.so"
    os.mkfifo(fifo)
    text = tmp_path / "notes.so"
    text.write_text("not a plugin\n")
    locked = tmp_path / "locked.so"
    locked.write_bytes(files["avx2"].read_bytes())
    locked.chmod(0)
    code = ("import json, sys\n"
            "from toolchain.verify.scans import start\n"
            "paths, kind = json.loads(sys.argv[1])\n"
            "s = start(paths, kind)\n"
            "jobs = [] if s is None else [[str(p), z] for p, z in s._pending] + [[c.path, None] for c in s._running]\n"
            "print(json.dumps(jobs))\n"
            "if s is not None: s.close()\n")
    paths = [str(p) for p in (fifo, text, tmp_path, tmp_path / "missing.so", locked, files["avx2"], files["pt2"])]
    for kind in ("auto", "plugin", "host", "library"):
        proc = subprocess.run([sys.executable, "-c", code, json.dumps([paths, kind])], capture_output=True,
                              text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
        assert proc.returncode == 0, proc.stderr
        jobs = {p for p, _ in json.loads(proc.stdout)}
        want = {str(files["avx2"]), str(files["pt2"])}
        if os.access(locked, os.R_OK):  # root reads a mode-0 file: it is scanned like any other
            want.add(str(locked))
        assert jobs == (want if kind in ("auto", "plugin") else set()), (kind, jobs)


def test_the_cli_leaves_no_child_behind(files, tmp_path):
    """The CLI starts the scans before it reads anything else: a usage error found later (an unknown
    profile, a host that is not built), or a profile without a CPU rule, ends with no child left running or
    unreaped (a child left behind would keep decoding after the program exited)."""
    code = ("import os, sys\n"
            "from toolchain.cli import main\n"
            "rc = main(sys.argv[1:])\n"
            "try:\n"
            "    os.waitpid(-1, os.WNOHANG)\n"
            "    print(rc, 'child left')\n"
            "except ChildProcessError:\n"
            "    print(rc, 'none left')\n")
    plugin = str(files["avx512"])
    no_runtime = {**os.environ, "AOTI_HOST_LIBRARY": str(tmp_path / "not-built" / "libaoti_host.so")}
    for args, rc, env in ((["--profile", "no-such-profile"], 2, None), (["--host", str(tmp_path / "nohost.so")], 3, None),
                          (["--profile", "manylinux_2_34", "--host", "none"], 0, None), ([], 2, no_runtime)):
        proc = subprocess.run([sys.executable, "-c", code, "verify", plugin, *args], capture_output=True, text=True,
                              timeout=120, cwd=Path(__file__).resolve().parents[2], env=env)
        assert proc.stdout.splitlines()[-1].split() == [str(rc), "none", "left"], (args, proc.stdout, proc.stderr)
