"""verify's speed against `readelf --dyn-syms --version-info -d -l` on the same files (target: <= 2x).

Files: a real 1 GB torch plugin (Linear(16384, 16384), weights embedded, exported once into build/bench/) and a
host program with >= 2,000 dynamic symbols (generated C, every spec shim plus filler exports, linked here).
Both sides are interleaved, `--rounds` times; the ratio of the medians is printed. verify is timed in-process
(fresh Resolver each call: libc/libstdc++ are re-read every time) and, separately, as the CLI
(`python -m toolchain verify`, interpreter start and imports included).

    .venv/bin/python bench/bench_verify.py [--rounds 7] [--features 16384] [--startup-only] [--before DIR]

Start-up (budget, issue 33: `aoti-toolchain verify` of the 1.7 MB plugin in <= 150 ms wall on this project's
machine; readelf + Python's own start are printed beside it for scale, the machine's speed moves): the installed
`aoti-toolchain verify SMALL.so` console script (what users run; default host: this project's library) and
`python -m toolchain verify SMALL.so`, against `readelf -a` on the same file plus `python -c pass`, all
interleaved, median of --rounds; this checkout's toolchain is put first on PYTHONPATH for every Python side.
`readelf -a` is the reference because it reads what verify reads of the plugin (program headers, dynamic
section, dynamic symbols and their versions, notes, and the section headers and .symtab the CPU-extension
scan names functions from); the narrower `readelf --dyn-syms --version-info -d -l` is printed for scale.
Neither decodes code, which verify does (cpu-isa-too-new), nor reads the host library and its dependencies.
The CLI is timed with the bytecode cache in use (what an installed package has; PYTHONDONTWRITEBYTECODE
removed, a warm-up run writes it) and, for scale, without (every module compiled from source on each
start, as in a checkout run with PYTHONDONTWRITEBYTECODE=1 and no __pycache__ yet).

Every Python side runs in a plain venv (build/bench/startup-venv: this interpreter's base, its dependencies
reached through a .pth, the console script as pip writes it): an editable install's import hook, loaded by
every interpreter start in the development venv, costs ~16 ms there, which inflates `python -c pass` (the
reference) far more than verify (which imports most of what the hook imports anyway). A user's
`pip install aoti-toolchain` has no such hook. `python -c pass` in the development venv is printed for scale.
Verify's code scans run in a forked child (toolchain.verify.scans): wall time is the figure, CPU time is
printed beside it. The spec's tables come from the user's parsed cache (toolchain/parsed_cache.py), which the
warm-up run fills as a user's first run does; a side with that cache unusable (XDG_CACHE_HOME a file: every
TOML file parsed at every start) is printed for scale.
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
BUDGET_MS = 150  # verify's start-up on the small plugin, wall (issue 33)


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
    return run_child(cmd, env)[0]


def run_child(cmd: list[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run of `cmd`, which must exit 0."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, cwd=cwd, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return wall, usage.ru_utime + usage.ru_stime


def plain_venv() -> tuple[Path, Path]:
    """(python, aoti-toolchain console script) of a venv without the editable install's import hook: this
    interpreter's base, the development venv's site-packages on its path through a .pth (a .pth there is
    not processed, so its hook is not installed), the console script with pip's text."""
    venv = BENCH / "startup-venv"
    python = venv / "bin" / "python"
    script = venv / "bin" / "aoti-toolchain"
    if not python.exists():
        subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                       check=True)
    import sysconfig

    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "aoti-bench-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # pip's console-script template (pip/_internal/operations/install/wheel.py via distlib)
    script.write_text(f"#!{python}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom toolchain.cli import main\n"
                      "if __name__ == '__main__':\n    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                      "    sys.exit(main())\n")
    script.chmod(0o755)
    return python, script


def startup(rounds: int, before: Path | None) -> None:
    from toolchain.hostlib import find_library

    so = small_plugin()
    host = find_library()
    if host is None or not host.is_file():
        raise SystemExit("no runtime library built (scons): verify's default host")
    # This checkout's toolchain first on the path: the console script of an editable install (or another
    # checkout's) would otherwise import its own copy. `python -c pass` runs with the same environment; every
    # side verifies against the same default host.
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base["AOTI_HOST_LIBRARY"] = str(host)
    cached = {**base, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    # an empty cache prefix that is never written: every module compiled from source on every start
    empty = BENCH / "empty-pycache"
    empty.mkdir(parents=True, exist_ok=True)
    source = {**cached, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(empty)}
    # XDG_CACHE_HOME naming a file: no parsed cache can be read or written
    no_cache_home = BENCH / "no-parsed-cache"
    no_cache_home.write_text("a file, so that no cache directory can be made under it\n")
    no_cache = {**cached, "XDG_CACHE_HOME": str(no_cache_home)}
    python, script = plain_venv()
    check = "import sys, toolchain; print(toolchain.__file__, '__editable__' in str(sys.meta_path))"
    where, hooked = subprocess.run([str(python), "-c", check], env=cached, capture_output=True, text=True,
                                   check=True, cwd="/").stdout.split()
    if not where.startswith(str(REPO)) or hooked != "False":
        raise SystemExit(f"toolchain imports from {where}, not from {REPO}, or an editable hook is installed")
    cli = [str(python), "-m", "toolchain", "verify", str(so)]
    sides: dict[str, tuple[list[str], dict[str, str] | None, Path]] = {
        "readelf -a": (["readelf", "-a", str(so)], None, REPO),
        "readelf --dyn-syms --version-info -d -l": (["readelf", "--dyn-syms", "--version-info", "-d", "-l", str(so)],
                                                    None, REPO),
        "python -c pass": ([str(python), "-c", "pass"], cached, REPO),
        "python -c pass, development venv (editable hook)": ([sys.executable, "-c", "pass"], cached, REPO),
        "aoti-toolchain verify": ([str(script), "verify", str(so)], cached, REPO),
        "aoti-toolchain verify, no parsed cache": ([str(script), "verify", str(so)], no_cache, REPO),
        "python -m toolchain verify": (cli, cached, REPO),
        "python -m toolchain verify, compiled from source": (cli, source, REPO),
    }
    if before is not None:  # another toolchain tree (an earlier commit's), run the same way
        sides[f"aoti-toolchain verify, {before.name}"] = ([str(script), "verify", str(so)],
                                                           {**base, "PYTHONPATH": str(before)}, before)
    outputs = {k: subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
               for k, (cmd, env, cwd) in sides.items() if "verify" in k}
    if len({p.stdout for p in outputs.values()}) != 1:
        for k, p in outputs.items():
            print(f"--- {k} (exit {p.returncode}):\n{p.stdout[-1500:]}{p.stderr[-1500:]}")
        raise SystemExit("the verify sides printed different reports")
    for cmd, env, cwd in sides.values():
        run_child(cmd, env, cwd)  # warm-up: page cache, and the bytecode caches written
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    load_before = os.getloadavg()[0]
    for _ in range(rounds):
        for k, (cmd, env, cwd) in sides.items():
            got[k].append(run_child(cmd, env, cwd))
    wall = {k: statistics.median(w for w, _ in v) for k, v in got.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in got.items()}
    print(f"start-up on {so.name} ({so.stat().st_size / 1e6:.1f} MB; host {host}), median of {rounds} interleaved "
          f"runs, load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"  {'':50s} {'wall':>9s} {'CPU':>9s}  wall's spread: quartiles, min-max")
    for k in sides:
        q1, _, q3 = statistics.quantiles([w * 1e3 for w, _ in got[k]], n=4)
        lo, hi = min(w for w, _ in got[k]) * 1e3, max(w for w, _ in got[k]) * 1e3
        print(f"  {k:50s} {wall[k] * 1e3:6.1f} ms {cpu[k] * 1e3:6.1f} ms  {q1:.1f}-{q3:.1f}, {lo:.1f}-{hi:.1f}")
    floor = {"wall": wall["readelf -a"] + wall["python -c pass"], "cpu": cpu["readelf -a"] + cpu["python -c pass"]}
    narrow = {"wall": wall["readelf --dyn-syms --version-info -d -l"] + wall["python -c pass"],
              "cpu": cpu["readelf --dyn-syms --version-info -d -l"] + cpu["python -c pass"]}
    for k in sides:
        if "verify" in k:
            print(f"  ratio {k} / (readelf -a + python -c pass): wall {wall[k] / floor['wall']:.2f}, CPU "
                  f"{cpu[k] / floor['cpu']:.2f}; against the narrower readelf: wall {wall[k] / narrow['wall']:.2f}")
    main_cli = "aoti-toolchain verify"
    print(f"RATIO {main_cli} / (readelf -a + python -c pass) = {wall[main_cli] / floor['wall']:.2f} wall, "
          f"{cpu[main_cli] / floor['cpu']:.2f} CPU (for scale)")
    print(f"BUDGET {main_cli}: {wall[main_cli] * 1e3:.1f} ms wall, median of {rounds} (budget <= {BUDGET_MS} ms); "
          f"{wall[main_cli] / wall['python -c pass']:.1f}x python -c pass in the same run")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--features", type=int, default=16384)
    ap.add_argument("--startup-only", action="store_true")
    ap.add_argument("--before", type=Path, help="start-up: also time this toolchain tree (e.g. an earlier commit's, "
                    "`git archive COMMIT toolchain | tar -x -C DIR`) as the console script")
    args = ap.parse_args()
    startup(args.rounds, args.before.resolve() if args.before else None)
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
