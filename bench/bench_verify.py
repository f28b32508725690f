"""verify's speed against `readelf --dyn-syms --version-info -d -l` on the same files (target: <= 2x).

Files: a real 1 GB torch plugin (Linear(16384, 16384), weights embedded, exported once into build/bench/) and a
host program with >= 2,000 dynamic symbols (generated C, every spec shim plus filler exports, linked here).
Both sides are interleaved, `--rounds` times; the ratio of the medians is printed. verify is timed in-process
(fresh Resolver each call: libc/libstdc++ are re-read every time) and, separately, as the CLI
(`python -m toolchain verify`, interpreter start and imports included).

    .venv/bin/python bench/bench_verify.py [--rounds 7] [--features 16384] [--startup-only]

Start-up (issue 17, target: the CLI on a small plugin within 2x of readelf + Python's own start): the CLI
`python -m toolchain verify SMALL.so` (default host: this project's library) against `readelf` on the same
file plus `python -c pass`, interleaved. The CLI is timed with the bytecode cache in use (what an installed
package has; PYTHONDONTWRITEBYTECODE removed after one warm-up run writes it) and, for scale, without
(every module compiled from source on each start, as in a checkout run with PYTHONDONTWRITEBYTECODE=1 and
no __pycache__ yet).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
BENCH = REPO / "build" / "bench"


def big_plugin(features: int) -> Path:
    so = BENCH / f"linear{features}.so"
    if so.is_file():
        return so
    os.environ["TMPDIR"] = str(REPO / "build" / "torch" / "tmp")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(REPO / "build" / "torch" / "inductor-cache"))
    Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)
    import torch

    from toolchain.export import export

    model = torch.nn.Linear(features, features, bias=False).eval()
    pt2 = export(model, (torch.randn(2, features),), BENCH / f"linear{features}.pt2", weights="embedded",
                 build_dir=REPO / "build")
    with zipfile.ZipFile(pt2) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith(".so")]
        so.write_bytes(zf.read(member))
    return so


def big_host(n_filler: int = 2500) -> Path:
    from toolchain.spec import load_spec

    exe = BENCH / "host2500"
    if exe.is_file():
        return exe
    BENCH.mkdir(parents=True, exist_ok=True)
    lines = ["#include <stdint.h>"]
    for s in load_spec().shims:
        lines.append(f"int32_t {s.name}(void) {{ return 0; }}")
    for i in range(n_filler):
        lines.append(f"int host_export_{i}(int x) {{ return x + {i}; }}")
    lines.append("int main(void) { return 0; }")
    src = BENCH / "host2500.c"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(["gcc", "-O0", "-rdynamic", "-Wl,-z,noexecstack", "-o", str(exe), str(src)], check=True)
    return exe


def t_readelf(files: list[Path]) -> float:
    t0 = time.perf_counter()
    subprocess.run(["readelf", "--dyn-syms", "--version-info", "-d", "-l", *map(str, files)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def small_plugin() -> Path:
    """The plugin .so of the attention example (about 1.7 MB), exported once."""
    so = BENCH / "attention.so"
    if so.is_file():
        return so
    os.environ["TMPDIR"] = str(REPO / "build" / "torch" / "tmp")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(REPO / "build" / "torch" / "inductor-cache"))
    Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)
    from toolchain import examples
    from toolchain.export import export

    module, inputs = examples.get("attention")
    pt2 = export(module, inputs, BENCH / "attention.pt2", build_dir=REPO / "build")
    with zipfile.ZipFile(pt2) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith(".so")]
        so.write_bytes(zf.read(member))
    return so


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=REPO, env=env)
    return time.perf_counter() - t0


def startup(rounds: int) -> None:
    so = small_plugin()
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # an empty cache prefix that is never written: every module compiled from source on every start
    empty = BENCH / "empty-pycache"
    empty.mkdir(parents=True, exist_ok=True)
    source = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(empty)}
    cli = [sys.executable, "-m", "toolchain", "verify", str(so)]
    timed(cli, cached)  # writes the bytecode cache
    sides: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "readelf": (["readelf", "--dyn-syms", "--version-info", "-d", "-l", str(so)], None),
        "python": ([sys.executable, "-c", "pass"], cached),
        "cli": (cli, cached),
        "cli_source": (cli, source),
    }
    got: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(rounds):
        for k, (cmd, env) in sides.items():
            got[k].append(timed(cmd, env))
    m = {k: statistics.median(v) for k, v in got.items()}
    floor = m["readelf"] + m["python"]
    print(f"start-up on {so.name} ({so.stat().st_size / 1e6:.1f} MB), median of {rounds} interleaved, load average "
          f"{os.getloadavg()[0]:.1f}: readelf {m['readelf'] * 1e3:.1f} ms, python -c pass {m['python'] * 1e3:.1f} ms, "
          f"`python -m toolchain verify` {m['cli'] * 1e3:.1f} ms (bytecode cached) {m['cli_source'] * 1e3:.1f} ms "
          f"(compiled from source); ratio to readelf + Python {m['cli'] / floor:.2f} (target <= 2) and "
          f"{m['cli_source'] / floor:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--features", type=int, default=16384)
    ap.add_argument("--startup-only", action="store_true")
    args = ap.parse_args()
    startup(args.rounds)
    if args.startup_only:
        return 0
    plugin, host = big_plugin(args.features), big_host()
    from toolchain.elf.reader import read_elf
    from toolchain.verify import verify_paths

    n_host = len(read_elf(host).symbols)
    print(f"plugin: {plugin} ({plugin.stat().st_size / 1e9:.2f} GB)  host: {host} ({n_host} dynamic symbols)")
    files = [plugin, host]
    verify_paths(files)  # warm the page cache and the imports
    t_readelf(files)
    rv, rr, rc = [], [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        rep = verify_paths([plugin], host=host)
        rv.append(time.perf_counter() - t0)
        rr.append(t_readelf(files))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "toolchain", "verify", str(plugin), "--host", str(host)],
                       stdout=subprocess.DEVNULL, cwd=REPO)
        rc.append(time.perf_counter() - t0)
    mv, mr, mc = statistics.median(rv), statistics.median(rr), statistics.median(rc)
    print(f"verify verdict: {rep.verdict} ({rep.count('error')} errors, {rep.count('warning')} warnings)")
    print(f"readelf --dyn-syms --version-info -d -l (both files), median of {args.rounds}: {mr * 1e3:.1f} ms "
          f"{[round(x * 1e3, 1) for x in rr]}")
    print(f"verify_paths(plugin, host=host) in-process, median: {mv * 1e3:.1f} ms {[round(x * 1e3, 1) for x in rv]}"
          f"  ratio {mv / mr:.2f}  (target <= 2)")
    print(f"`python -m toolchain verify` CLI incl. interpreter start, median: {mc * 1e3:.1f} ms  ratio {mc / mr:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
