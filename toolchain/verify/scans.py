"""The CPU-extension scans of a verify run, started in forked children before the ELF checks.

Decoding a plugin's code (toolchain.isa) is the largest single part of verifying a small plugin, and it needs
nothing the ELF checks compute: a child process forked at the start of the run decodes the file on another
core while this process reads the host, its libraries and the plugin's symbols. The CLI forks it as soon as
argparse has read its command line (toolchain.cli.main_verify.main). The child sends the scan back through a pipe, marshalled (the same
interpreter reads it: a fork); anything short of a complete answer (the child failed, was killed, or
wrote garbage) makes the caller scan in this process, so a report never depends on whether a child ran.

Used only where it cannot hurt: Linux fork, at least two CPUs this process may run on, and no other Python
thread in the process (a fork copies one thread; a lock another thread held would stay held in the child).
At most one child per spare CPU runs at a time; the rest start as earlier ones are collected, and children
whose results are never asked for (the file turned out not to be a plugin) are killed."""

from __future__ import annotations

import marshal
import os
import stat
import sys
from pathlib import Path

# imported here, before the children fork: a child does not import it again
from toolchain.isa import IsaDecodeError, IsaScan, IsaUse, load_isa_spec, scan_elf, scan_file

__all__ = ["BackgroundScans", "start"]

_MAX_CHILDREN = 4


def _spare_cpus() -> int:
    """CPUs beside this process's own it may run on (0 where children would only compete with it): the CPUs
    of its affinity mask, fewer where its cgroup's CPU quota allows less (a container's --cpus)."""
    if not hasattr(os, "fork") or not hasattr(os, "sched_getaffinity"):
        return 0
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return 0
    cpus = len(os.sched_getaffinity(0))
    quota = cpu_quota()
    if quota is not None:
        cpus = min(cpus, int(quota))
    return max(0, min(cpus - 1, _MAX_CHILDREN))


def cpu_quota(root: str = "/sys/fs/cgroup", cgroup_file: str = "/proc/self/cgroup") -> float | None:
    """CPUs' worth of time this process's cgroup may use (the CFS quota over its period: cgroup v2's cpu.max,
    v1's cpu.cfs_quota_us / cpu.cfs_period_us), None where there is no quota or it cannot be read."""
    try:
        with open(cgroup_file, encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    v2, v1 = "/", "/"
    for line in lines:
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if controllers == "":
            v2 = path or "/"
        elif "cpu" in controllers.split(","):
            v1 = path or "/"
    candidates: list[tuple[str, str | None]] = [(os.path.join(root, v2.lstrip("/"), "cpu.max"), None),
                                              (os.path.join(root, "cpu.max"), None)]
    for v1_dir in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        for sub in (v1.lstrip("/"), ""):
            d = os.path.join(root, v1_dir, sub)
            candidates.append((os.path.join(d, "cpu.cfs_quota_us"), os.path.join(d, "cpu.cfs_period_us")))
    for first, period_file in candidates:
        try:
            with open(first, encoding="ascii") as f:
                text = f.read().split()
            if period_file is None:  # v2: "QUOTA PERIOD" or "max PERIOD"
                quota, period = text[0], text[1]
            else:
                with open(period_file, encoding="ascii") as f:
                    quota, period = text[0], f.read().split()[0]
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if quota in ("max", "-1"):
            return None
        try:
            q, p = int(quota), int(period)
        except ValueError:
            return None
        return q / p if q > 0 and p > 0 else None
    return None


def _encode(scan: IsaScan) -> dict:
    return {"extensions": [[k, u.count, u.example, u.function, u.address] for k, u in scan.extensions.items()],
            "level": scan.level, "decoded_bytes": scan.decoded_bytes, "text_bytes": scan.text_bytes,
            "undecodable": scan.undecodable}


def _decode(doc: dict) -> IsaScan:
    exts = {str(k): IsaUse(count=int(n), example=str(ex), function=str(fn), address=int(addr))
            for k, n, ex, fn, addr in doc["extensions"]}
    return IsaScan(extensions=exts, level=str(doc["level"]), decoded_bytes=int(doc["decoded_bytes"]),
                   text_bytes=int(doc["text_bytes"]), undecodable=int(doc["undecodable"]))


def _child_results(path: str, package: bool) -> dict[str, dict]:
    """What the child computes: the scan of the file, or of each .so member of the package (by label). A file
    the scan refuses (IsaDecodeError: not x86-64 ELF64 code) gets no entry: the parent's own scan refuses it
    again from its headers, before any decoding."""
    out: dict[str, dict] = {}
    try:
        if not package:
            out[path] = _encode(scan_file(path))
            return out
    except IsaDecodeError:
        return out
    from pathlib import Path

    from toolchain.pt2 import open_package

    with open_package(Path(path)) as pkg:
        for name in pkg.members:
            if name.endswith(".so"):
                label = f"{path}!{name}"
                try:
                    out[label] = _encode(scan_elf(pkg.read(name), label))
                except IsaDecodeError:
                    pass
    return out


def start(paths, kind: str = "auto") -> BackgroundScans | None:
    """Scans of the files among `paths` whose code the CPU rule may decode (a regular file holding ELF or a
    zip: a package), started now; None where there is none to start (a `kind` the rule does not check, no
    such file). Called before anything else is read, so that the children decode while the caller imports
    and runs the checks; the caller closes it when the CPU rule is off (its profile has no [cpu])."""
    if kind not in ("auto", "plugin"):
        return None
    jobs = []
    for p in paths:
        path = str(Path(p))
        try:  # non-blocking, and a regular file only: a FIFO or a device is never waited on here
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            magic = os.read(fd, 4) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        except OSError:
            magic = b""
        finally:
            os.close(fd)
        if magic in (b"\x7fELF", b"PK\x03\x04"):
            jobs.append((path, magic == b"PK\x03\x04"))
    return BackgroundScans(jobs) if jobs else None


def _reap(pid: int) -> int | None:
    """The child's exit code; None where it was reaped already (a process that ignores SIGCHLD has its
    children reaped by the kernel)."""
    try:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    except ChildProcessError:
        return None


class _Child:
    """A running child: its pid, the read end of its pipe, and the file it scans (the labels it answers for
    are that path and, for a package, `path!member`)."""

    def __init__(self, pid: int, fd: int, path: str) -> None:
        self.pid, self.fd, self.path = pid, fd, path


class BackgroundScans:
    """Scans of `jobs` ((path, is_package) in the order they will be asked for) running ahead in children.
    `take(label)` gives the scan (an IsaScan) or None: not scanned in the background (or refused there), the
    caller scans itself. `close()` kills and reaps what is left."""

    def __init__(self, jobs: list[tuple[str, bool]]) -> None:
        self._pending = list(jobs)
        self._running: list[_Child] = []
        self._exiting: list[int] = []  # children that answered, reaped by close()
        self._results: dict[str, dict] = {}
        self._slots = _spare_cpus() if jobs else 0
        self._fill()

    def _fill(self) -> None:
        while self._pending and len(self._running) < self._slots:
            path, package = self._pending.pop(0)
            child = self._fork(path, package)
            if child is None:
                self._slots = 0  # fork failed (out of processes or memory): scan in this process from now on
                self._pending.clear()
                return
            self._running.append(child)

    @staticmethod
    def _fork(path: str, package: bool) -> _Child | None:
        load_isa_spec()  # the CPU table both sides read (the scan, and the profile and rule here): read once, now
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return None
        if pid == 0:  # the child: compute, write, and leave without running the parent's exit handlers
            code = 1
            try:
                os.close(r)
                data = marshal.dumps(_child_results(path, package))
                view = memoryview(len(data).to_bytes(8, "little") + data)  # the length: a whole answer is known
                while view:
                    view = view[os.write(w, view):]
                os.close(w)  # the answer ends here, not when the exit has torn this process down (~1 ms later)
                code = 0
            except BaseException:  # noqa: BLE001, S110 -- no answer: the parent scans itself
                pass
            finally:
                os._exit(code)
        os.close(w)
        return _Child(pid, r, path)

    def _collect(self, child: _Child) -> None:
        """The child's answer, read to the end of its pipe: its length first, then the marshalled results. The
        child is reaped at close() (it is exiting, and its exit need not be waited for here)."""
        chunks = []
        try:
            while chunk := os.read(child.fd, 1 << 16):
                chunks.append(chunk)
        finally:
            os.close(child.fd)
            self._running.remove(child)
            self._exiting.append(child.pid)
        blob = b"".join(chunks)
        if len(blob) < 8 or int.from_bytes(blob[:8], "little") != len(blob) - 8:
            return  # no answer, or a partial one (the child failed or was killed while writing)
        try:
            doc = marshal.loads(blob[8:])
        except (EOFError, ValueError, TypeError):
            return
        if isinstance(doc, dict):
            self._results.update(doc)

    def take(self, label: str) -> IsaScan | None:
        for child in list(self._running):
            if label == child.path or label.startswith(f"{child.path}!"):
                self._collect(child)
                self._fill()
        got = self._results.pop(label, None)
        try:
            return _decode(got) if isinstance(got, dict) else None
        except (KeyError, TypeError, ValueError):
            return None

    def drop(self, path) -> None:
        """The file's results will not be asked for: stop its child, forget its job."""
        path = str(Path(path))
        self._pending = [(p, k) for p, k in self._pending if p != path]
        for child in [c for c in self._running if c.path == path]:
            self._kill(child)
        self._fill()

    def _kill(self, child: _Child) -> None:
        try:
            os.kill(child.pid, 9)
        except ProcessLookupError:
            pass
        os.close(child.fd)
        _reap(child.pid)
        self._running.remove(child)

    def close(self) -> None:
        self._pending.clear()
        for child in list(self._running):
            self._kill(child)
        while self._exiting:
            _reap(self._exiting.pop())
        self._results.clear()
