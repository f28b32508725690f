"""Where the runtime loads a package's plugin from, tried as an attacker would: another local user
(`aoti-attacker`, created here when the tests run as root) plants a .so where the victim's cache would be,
replaces the cache root by a symlink, pre-creates it, puts symlinks at entry and temp paths; a crafted
package with a forged CRC-32 is loaded before the trusted one. Each case runs with the default (a sealed
memfd: no cache on disk) and with AOTI_HOST_CACHE_DIR set (the private file cache), and checks that the
planted code never runs (its constructor would write a marker file), that no file of the victim's is
overwritten, and that the trusted package still loads and computes the right output."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import BUILD_DIR, REPO_ROOT

ATTACKER = "aoti-attacker"
MODES = ["memfd", "cache"]

VICTIM = r"""
import json, sys, numpy as np
sys.path.insert(0, sys.argv[1])
from toolchain import runtime
lib, x = sys.argv[2], np.load(sys.argv[3])
for pkg in sys.argv[4:]:
    try:
        p = runtime.load(pkg, library_path=lib)
        out = p.run([x])[0]
        p.close()
        print(json.dumps({"pkg": pkg, "ok": True, "out": np.asarray(out).tolist()}))
    except Exception as e:
        print(json.dumps({"pkg": pkg, "ok": False, "error": str(e)}))
"""


def _attacker_or_skip() -> pwd.struct_passwd:
    try:
        user = pwd.getpwnam(ATTACKER)
    except KeyError:
        user = None
    if os.geteuid() != 0:
        reason = f"not root: these attacks need a second user ({ATTACKER}) to act as; run the tests as root"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    if user is None:
        proc = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ATTACKER],
                              capture_output=True, text=True)
        if proc.returncode not in (0, 9):  # 9: it already exists (another run created it meanwhile)
            reason = f"cannot create the user {ATTACKER}: {proc.stderr.strip()}"
            print(f"SKIP: {reason}")
            pytest.skip(reason)
        user = pwd.getpwnam(ATTACKER)
    return user


@pytest.fixture(scope="module")
def attacker() -> pwd.struct_passwd:
    return _attacker_or_skip()


def as_attacker(user: pwd.struct_passwd, script: str) -> None:
    """Runs a shell script as the unprivileged attacker (no supplementary groups)."""
    proc = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                           "sh", "-ec", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def trusted(export_example, tmp_path_factory):
    """(package, input .npy, expected output, plugin member name, plugin bytes)."""
    pt2, module, inputs = export_example("mlp")
    d = tmp_path_factory.mktemp("trusted")
    x = d / "x.npy"
    np.save(x, inputs[0].numpy())
    expected = module(*inputs).detach().numpy()
    with zipfile.ZipFile(pt2) as zf:
        member = next(n for n in zf.namelist() if n.endswith(".so"))
        plugin = zf.read(member)
    return pt2, x, expected, member, plugin


@pytest.fixture
def arena(tmp_path):
    """A shared, sticky, world-writable directory (like /tmp) both users can reach; the marker the planted
    code would write; a file of the victim's that nothing may overwrite; the planted .so."""
    root = BUILD_DIR / "attack"
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    shared = Path(tempfile.mkdtemp(prefix="shared-", dir=root))
    shared.chmod(0o1777)
    marker = shared / "PWNED"
    src = tmp_path / "evil.c"
    src.write_text(f"""#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) {{
  int fd = open("{marker}", O_WRONLY | O_CREAT | O_APPEND, 0666);
  if (fd >= 0) {{ write(fd, "ran\\n", 4); close(fd); }}
}}
int AOTInductorModelContainerCreateWithDevice(void) {{ return 0; }}
""")
    evil = shared / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(evil), str(src)], check=True)
    evil.chmod(0o755)
    precious = tmp_path / "precious.txt"
    precious.write_text("the victim's data\n")
    yield shared, marker, evil, precious
    shutil.rmtree(shared, ignore_errors=True)


def entry_name(member: str, plugin: bytes) -> str:
    """The cache entry name the victim uses for this plugin: SHA-256 of the bytes + the member's leaf."""
    return hashlib.sha256(plugin).hexdigest() + "-" + member.rsplit("/", 1)[-1]


def victim_env(mode: str, home: Path, cache_dir: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AOTI_HOST_CACHE_DIR", "AOTI_HOST_LOG")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), AOTI_HOST_LOG="warning")
    if mode == "cache":
        assert cache_dir is not None
        env["AOTI_HOST_CACHE_DIR"] = str(cache_dir)
    return env


def victim(pkgs: list[Path], x: Path, env: dict[str, str], host_lib: Path) -> tuple[list[dict], str]:
    proc = subprocess.run([sys.executable, "-c", VICTIM, str(REPO_ROOT), str(host_lib), str(x), *map(str, pkgs)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def assert_trusted_ran(result: dict, expected) -> None:
    assert result["ok"], result["error"]
    np.testing.assert_allclose(np.array(result["out"], np.float32), expected, rtol=1e-4, atol=1e-5)


def assert_safe(marker: Path, precious: Path) -> None:
    assert not marker.exists(), "the planted plugin's constructor ran in the victim's process"
    assert precious.read_text() == "the victim's data\n", "a file of the victim's was overwritten"


def default_cache(home: Path) -> Path:
    return home / ".cache" / "aoti-toolchain"


def victim_cache(shared: Path, mode: str) -> tuple[Path, Path]:
    """The victim's home in the arena and the cache directory of `mode`: its own AOTI_HOST_CACHE_DIR (cache),
    or the default under its home (memfd: never looked at)."""
    home = shared / "home"
    return home, (shared / "victim-cache" if mode == "cache" else default_cache(home))


def cache_the_attacker_can_create(shared: Path, mode: str) -> tuple[Path, Path]:
    """victim_cache, with the home made and the cache's parent world-writable (sticky, like /tmp): the
    attacker can create the cache directory itself before the victim does."""
    home, cache = victim_cache(shared, mode)
    home.mkdir(mode=0o755)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.parent.chmod(0o1777)
    return home, cache


def assert_own_cache_refused(host_lib, trusted, arena, mode: str, home: Path, cache: Path, *named: str) -> None:
    """The victim loads the trusted package with the cache of `mode`. With its own cache directory (cache) the
    load is refused with a message naming each of `named`, and the default (memfd) then still runs it; with
    the default it just runs. Nothing planted ever runs and no file of the victim's changes."""
    pt2, x, expected, _member, _plugin = trusted
    _shared, marker, _evil, precious = arena
    [result], _ = victim([pt2], x, victim_env(mode, home, cache), host_lib)
    assert_safe(marker, precious)
    if mode == "cache":
        assert not result["ok"]
        for text in named:
            assert text in result["error"], result["error"]
        [result], _ = victim([pt2], x, victim_env("memfd", home, None), host_lib)  # the default still works
    assert_trusted_ran(result, expected)
    assert_safe(marker, precious)


@pytest.mark.parametrize("mode", MODES)
def test_planted_plugin_in_an_attacker_made_cache(host_lib, trusted, attacker, arena, mode):
    """The attacker creates the victim's cache directory first (world-writable) and plants a .so under the
    exact name the victim would load: the victim refuses the directory (cache) or never looks (memfd)."""
    pt2, x, expected, member, plugin = trusted
    shared, marker, evil, precious = arena
    home, cache = cache_the_attacker_can_create(shared, mode)
    as_attacker(attacker, f"mkdir -m 777 {cache}; cp {evil} {cache}/{entry_name(member, plugin)}; "
                          f"cp {evil} {cache}/{member.rsplit('/', 1)[-1]}")
    assert_own_cache_refused(host_lib, trusted, arena, mode, home, cache,
                             f"{cache} is owned by uid {attacker.pw_uid}, not by you", "AOTI_HOST_CACHE_DIR")  # the fix


@pytest.mark.parametrize("mode", MODES)
def test_planted_plugin_in_own_cache_is_replaced(host_lib, trusted, arena, mode):
    """A wrong file under the right name in the victim's own cache (same size, other bytes) is caught by the
    hash of what was opened and replaced, loudly."""
    pt2, x, expected, member, plugin = trusted
    shared, marker, evil, precious = arena
    home, cache = victim_cache(shared, mode)
    cache.mkdir(parents=True, mode=0o700)
    entry = cache / entry_name(member, plugin)
    entry.write_bytes(evil.read_bytes().ljust(len(plugin), b"\0"))
    entry.chmod(0o700)
    [result], err = victim([pt2], x, victim_env(mode, home, cache), host_lib)
    assert_safe(marker, precious)
    assert_trusted_ran(result, expected)
    if mode == "cache":
        assert "does not hash to its name" in err and "replacing it" in err, err
        assert entry.read_bytes() == plugin
    else:
        assert entry.read_bytes() != plugin  # never looked at


@pytest.mark.parametrize("mode", MODES)
def test_symlinked_cache_root(host_lib, trusted, attacker, arena, mode):
    pt2, x, expected, member, plugin = trusted
    shared, marker, evil, precious = arena
    home, cache = cache_the_attacker_can_create(shared, mode)
    theirs = shared / "attacker-dir"
    as_attacker(attacker, f"mkdir -m 777 {theirs}; cp {evil} {theirs}/{entry_name(member, plugin)}; "
                          f"ln -s {theirs} {cache}")
    assert_own_cache_refused(host_lib, trusted, arena, mode, home, cache, f"{cache} is a symbolic link")
    assert sorted(p.name for p in theirs.iterdir()) == [entry_name(member, plugin)]  # nothing written there


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", ["evil", "precious"])
def test_symlink_at_the_entry_path(host_lib, trusted, arena, mode, target):
    """A symlink where the entry belongs, to foreign code or to a file of the victim's: never followed, not
    written through; replaced by the real entry."""
    pt2, x, expected, member, plugin = trusted
    shared, marker, evil, precious = arena
    home, cache = victim_cache(shared, mode)
    cache.mkdir(parents=True, mode=0o700)
    entry = cache / entry_name(member, plugin)
    entry.symlink_to(evil if target == "evil" else precious)
    [result], err = victim([pt2], x, victim_env(mode, home, cache), host_lib)
    assert_safe(marker, precious)
    assert_trusted_ran(result, expected)
    if mode == "cache":
        assert "is a symbolic link" in err and "replacing it" in err, err
        assert not entry.is_symlink() and entry.read_bytes() == plugin
    else:
        assert entry.is_symlink()
    assert evil.read_bytes()[:4] == b"\x7fELF" and len(evil.read_bytes()) < len(plugin)  # not written through


def test_symlinks_at_temp_paths(host_lib, trusted, arena):
    """Temp files have random names (a name seen once is not used again) and are created with
    O_EXCL|O_NOFOLLOW, so a symlink planted at a temp path is never written through."""
    pt2, x, expected, member, plugin = trusted
    shared, marker, evil, precious = arena
    cache = shared / "victim-cache"
    env = victim_env("cache", shared / "home", cache)
    env["AOTI_HOST_LOG"] = "debug"
    seen = []
    for _ in range(2):
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(mode=0o700)
        for name in seen:  # every temp name used before, and the old predictable scheme's, point at victim files
            (cache / name).symlink_to(precious)
        for pid in range(os.getpid() - 50, os.getpid() + 200):
            (cache / f"{member.rsplit('/', 1)[-1]}.tmp.{pid}").symlink_to(precious)
        [result], err = victim([pt2], x, env, host_lib)
        assert_trusted_ran(result, expected)
        names = re.findall(r"plugin cache: wrote \S+/(\.tmp-[0-9a-f]+) ", err)
        assert len(names) == 1 and re.fullmatch(r"\.tmp-[0-9a-f]{32}", names[0]), err
        assert names[0] not in seen
        seen += names
    assert_safe(marker, precious)
    if shutil.which("strace") is None:
        print("SKIP part: strace not installed, the open flags of the temp file were not traced")
        return
    shutil.rmtree(cache)
    trace = shared / "trace"
    proc = subprocess.run(["strace", "-f", "-e", "trace=openat", "-o", str(trace), sys.executable, "-c", VICTIM,
                           str(REPO_ROOT), str(host_lib), str(x), str(pt2)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    opens = [line for line in trace.read_text().splitlines() if ".tmp-" in line]
    assert opens and all("O_EXCL" in line and "O_NOFOLLOW" in line and "O_CREAT" in line for line in opens), opens


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("owner", ["attacker", "world-writable"])
def test_precreated_cache_dir(host_lib, trusted, attacker, arena, mode, owner):
    pt2, x, expected, member, plugin = trusted
    shared, marker, evil, precious = arena
    home, cache = cache_the_attacker_can_create(shared, mode)
    if owner == "attacker":
        as_attacker(attacker, f"mkdir -m 755 {cache}")
    else:
        cache.mkdir(mode=0o700)
        cache.chmod(0o777)
    [result], _ = victim([pt2], x, victim_env(mode, home, cache), host_lib)
    assert_safe(marker, precious)
    if mode == "cache":
        assert not result["ok"]
        why = f"is owned by uid {attacker.pw_uid}" if owner == "attacker" else "is writable by every user (mode 0777)"
        assert f"{cache} {why}" in result["error"], result["error"]
        assert not any(cache.iterdir()), "nothing may be written into a refused directory"
    else:
        assert_trusted_ran(result, expected)
        assert not any(cache.iterdir())


def forge(trusted_pt2: Path, member: str, payload: bytes, out: Path) -> None:
    """A copy of the package whose plugin member holds `payload` (same size) while its local and central
    headers keep the trusted plugin's CRC-32 and size."""
    data = bytearray(trusted_pt2.read_bytes())
    with zipfile.ZipFile(trusted_pt2) as zf:
        info = zf.getinfo(member)
    off = info.header_offset
    assert data[off:off + 4] == b"PK\x03\x04"
    name_len, extra_len = int.from_bytes(data[off + 26:off + 28], "little"), int.from_bytes(data[off + 28:off + 30], "little")
    start = off + 30 + name_len + extra_len
    assert len(payload) == info.file_size
    data[start:start + len(payload)] = payload
    out.write_bytes(bytes(data))


@pytest.mark.parametrize("mode", MODES)
def test_forged_crc_then_trusted(host_lib, trusted, arena, tmp_path, mode):
    """The crafted package is refused; the trusted one loaded after it (in the same process and in a new
    one sharing the cache) runs its own plugin."""
    pt2, x, expected, member, plugin = trusted
    shared, marker, evil, precious = arena
    payload = evil.read_bytes().ljust(len(plugin), b"\0")
    forged = tmp_path / "forged.pt2"
    forge(pt2, member, payload, forged)
    with zipfile.ZipFile(forged) as zf:
        assert zf.getinfo(member).CRC == zipfile.ZipFile(pt2).getinfo(member).CRC  # the forgery
    env = victim_env(mode, shared / "home", shared / "victim-cache")
    results, _ = victim([forged, pt2], x, env, host_lib)
    assert_safe(marker, precious)
    assert not results[0]["ok"]
    assert "crc" in results[0]["error"].lower(), results[0]["error"]
    assert_trusted_ran(results[1], expected)
    [again], _ = victim([pt2], x, env, host_lib)
    assert_trusted_ran(again, expected)
    assert_safe(marker, precious)


def test_default_writes_nothing_to_disk(host_lib, trusted, tmp_path):
    """The default loads the plugin from a sealed memfd: HOME, XDG_CACHE_HOME and TMPDIR stay empty, and the
    process maps the plugin from /memfd:, sealed against any change."""
    pt2, x, expected, member, plugin = trusted
    dirs = {k: tmp_path / k.lower() for k in ("HOME", "XDG_CACHE_HOME", "TMPDIR")}
    for d in dirs.values():
        d.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("AOTI_HOST_CACHE_DIR",)}
    env.update({k: str(v) for k, v in dirs.items()})
    code = VICTIM + r"""
import fcntl, os
def link(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # the descriptor listdir itself used
        return ""
fds = [fd for fd in os.listdir("/proc/self/fd") if link(fd).startswith("/memfd:")]
print(json.dumps({"memfds": [os.readlink(f"/proc/self/fd/{fd}") for fd in fds],
                  "seals": [fcntl.fcntl(int(fd), fcntl.F_GET_SEALS) for fd in fds],
                  "maps": sum(1 for line in open("/proc/self/maps") if "/memfd:" in line)}))
"""
    proc = subprocess.run([sys.executable, "-c", code, str(REPO_ROOT), str(host_lib), str(x), str(pt2), str(pt2)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *results, info = [json.loads(line) for line in proc.stdout.splitlines()]
    for r in results:
        assert_trusted_ran(r, expected)
    leaf = member.rsplit("/", 1)[-1]
    assert info["memfds"] == [f"/memfd:{leaf} (deleted)"], info  # two loads, one memfd
    want = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    assert info["seals"][0] & want == want
    assert info["maps"] > 0
    for name, d in dirs.items():
        assert not any(d.iterdir()), f"{name} got {list(d.iterdir())}"


def test_sha256_matches_hashlib(host_build, tmp_path):
    """The runtime's SHA-256 (SHA-NI and portable paths) against Python's hashlib."""
    tool = host_build.tests_dir / "test_sha256"
    rng = np.random.default_rng(12)
    files = []
    for n in (0, 1, 3, 55, 56, 63, 64, 65, 119, 120, 127, 128, 1000, 4096, (1 << 20) + 13):
        f = tmp_path / f"b{n}"
        f.write_bytes(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        files.append(f)
    proc = subprocess.run([str(tool), *map(str, files)], capture_output=True, text=True, check=True)
    for f, line in zip(files, proc.stdout.splitlines(), strict=True):
        want = hashlib.sha256(f.read_bytes()).hexdigest()
        assert line.split() == [want, want], f.name


def test_without_proc_falls_back_to_the_private_cache(host_lib, trusted, tmp_path):
    """With /proc unmounted (a private mount namespace) the memfd can't be loaded by path: the runtime says
    why once and loads from the private cache under $XDG_CACHE_HOME instead."""
    pt2, x, expected, member, plugin = trusted
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        reason = "needs root and unshare(1) to unmount /proc in a private mount namespace"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    env = victim_env("memfd", tmp_path / "home", None)
    cmd = ["unshare", "-m", "sh", "-c", 'umount -l /proc && exec "$@"', "sh", sys.executable, "-c", VICTIM,
           str(REPO_ROOT), str(host_lib), str(x), str(pt2), str(pt2)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "umount" in proc.stderr:
        pytest.skip(f"cannot unmount /proc here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in proc.stdout.splitlines():
        assert_trusted_ran(json.loads(line), expected)
    assert proc.stderr.count("/proc/self/fd is not available (is /proc mounted?)") == 1, proc.stderr
    cache = default_cache(tmp_path / "home")
    assert [p.name for p in cache.iterdir()] == [entry_name(member, plugin)]
    assert oct(cache.stat().st_mode & 0o777) == oct(0o700)
