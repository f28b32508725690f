"""Export the GPU check models as CUDA plugins with this machine's torch, and record eager references.

    python tests/gpu/prepare.py OUT_DIR [--only NAME ...] [--skip NAME ...] [--jobs N]
For each model of models.MODELS: OUT_DIR/<name>.pt2, <name>.in<k>.npy, <name>.ref<k>.npy (eager on cuda, TF32
off, as torch's defaults for matmul; cuDNN's TF32 default is turned off too so float32 is compared at rtol
1e-4), for the stateful model <name>.call<c>.ref<k>.npy for MUTATED_CALLS consecutive calls, and for every
other model REPLAY_CALLS input variants <name>.var<c>.in<k>.npy with their eager <name>.var<c>.ref<k>.npy
(graph replays checked call by call against eager, each call with new data). OUT_DIR/manifest.json lists them.
The other jobs (NAME for --only/--skip):
- the models of models.BENCH_MODELS (bench/bench_gpu.py), like MODELS but without replay variants;
- small_mlp_default: torch's own link_libtorch=True MLP plugin (the torch-runner investigation; bench_gpu.py's
  full mode and run.sh's TORCH_RUNNER_TRACE step);
- what tests/gpu/test_cuda_state.py runs: "sessions" (the stateful model in OUT_DIR/sessions/, with eager
  torch replaying models.SESSION_STEPS), "methods" (the two-method programs of models.METHOD_PROGRAMS in
  OUT_DIR/<name>/, listed in OUT_DIR/method_programs.json; a program's name selects it alone) and
  "stateful_methods" (models.STATEFUL_METHOD_STEPS in OUT_DIR/stateful_methods/). Their plugins need the
  constants-map entries call, which torch writes from 2.13 on: with an older torch these exports get it from
  the test scaffolding of tests/gpu/entries_scaffold.py, and each package is checked to define it.
Default: every job. --jobs N exports in N processes at once (one CUDA context and one inductor each, sharing
OUT_DIR/build's compile cache), the jobs spread by their usual export time; the exit status is non-zero if any
job failed (the others are still exported and listed).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.gpu import entries_scaffold  # noqa: E402
from tests.gpu.models import (  # noqa: E402
    BENCH_MODELS,
    METHOD_PROGRAMS,
    MODELS,
    MUTATED_CALLS,
    REPLAY_CALLS,
    SESSION_STEPS,
    STATEFUL_METHOD_STEPS,
)

SCAFFOLDED = ("sessions", "methods", "stateful_methods")  # test_cuda_state.py's plugins: need the entries call
# Rough export seconds of each job on the H200 machine (a process's first export pays ~35 s more: CUDA, triton
# and the precompiled header), for spreading the jobs over --jobs processes; 8 for a model not listed.
COST = {"mlp_blob": 9, "transformer": 9, "small_mlp": 5, "mutated_buffer": 5, "small_mlp_default": 17,
        "sessions": 6, "methods": 30, "stateful_methods": 12, "resnet18": 60}
ALIASES = {"mlp_default": "small_mlp_default"}


def all_jobs() -> list[str]:
    return [*MODELS, "small_mlp_default", *SCAFFOLDED, *BENCH_MODELS]


def select_jobs(only: list[str] | None, skip: list[str]) -> tuple[list[str], list[str]]:
    """(jobs, the method programs asked for): --only's names (a method program's name selects the methods job
    for it alone) less --skip's; unknown names are an error."""
    known = set(all_jobs()) | set(METHOD_PROGRAMS) | set(ALIASES)
    unknown = sorted({n for n in [*(only or []), *skip] if n not in known})
    if unknown:
        msg = f"unknown job(s) {', '.join(unknown)}: choose among {', '.join([*all_jobs(), *METHOD_PROGRAMS])}"
        raise SystemExit(f"prepare: {msg}")
    wanted = [ALIASES.get(n, n) for n in only] if only else all_jobs()
    programs = [n for n in wanted if n in METHOD_PROGRAMS]
    if programs:
        wanted = [n for n in wanted if n not in METHOD_PROGRAMS] + ["methods"]
    skipped = {ALIASES.get(n, n) for n in skip}
    programs = [p for p in (programs or list(METHOD_PROGRAMS)) if p not in skipped]
    jobs = [j for j in all_jobs() if j in wanted and j not in skipped and (j != "methods" or programs)]
    return jobs, programs


def spread(jobs: list[str], n: int) -> list[list[str]]:
    """The jobs in at most n groups of about equal export time (longest first, each to the least loaded)."""
    groups: list[tuple[float, list[str]]] = [(0.0, []) for _ in range(min(n, len(jobs)))]
    for job in sorted(jobs, key=lambda j: -COST.get(j, 8)):
        k = min(range(len(groups)), key=lambda i: groups[i][0])
        groups[k] = (groups[k][0] + COST.get(job, 8), [*groups[k][1], job])
    return [g for _, g in groups if g]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", nargs="*", help="these jobs only (model names, small_mlp_default, sessions, "
                    "methods or a method program's name, stateful_methods)")
    ap.add_argument("--skip", nargs="*", default=[], help="leave these jobs out")
    ap.add_argument("--jobs", type=int, default=1, help="export in this many processes at once")
    ap.add_argument("--part", help=argparse.SUPPRESS)  # a worker of --jobs: results to OUT_DIR/.parts/PART.json
    a = ap.parse_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    jobs, programs = select_jobs(a.only, a.skip)
    if a.jobs > 1 and len(jobs) > 1 and a.part is None:
        results, rc = run_workers(out, jobs, programs, a.jobs)
    else:
        results = run_jobs(out, jobs, programs)
        rc = 1 if results["failed"] else 0
        if a.part is not None:
            (out / ".parts").mkdir(exist_ok=True)
            (out / ".parts" / f"{a.part}.json").write_text(json.dumps(results))
            return rc
    write_lists(out, results, merge=a.only is not None)
    if results["failed"]:
        print(f"prepare: FAILED: {', '.join(results['failed'])} (tracebacks above)", flush=True)
    return rc


def run_workers(out: Path, jobs: list[str], programs: list[str], n: int) -> tuple[dict, int]:
    """The jobs in n processes of this script (--part), their results merged."""
    groups = spread(jobs, n)
    parts = out / ".parts"
    parts.mkdir(exist_ok=True)
    for old in parts.glob("*.json"):
        old.unlink()
    print(f"prepare: {len(jobs)} jobs in {len(groups)} processes: " + " | ".join(" ".join(g) for g in groups),
          flush=True)
    # inductor's kernel-compile pool (one process per core by default) shared out among the workers: not
    # n pools of one per core each, all importing torch at once
    env = dict(os.environ)
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(2, (os.cpu_count() or 4) // len(groups))))
    procs = []
    for k, group in enumerate(groups):
        names = [j for j in group if j != "methods"] + (programs if "methods" in group else [])
        procs.append(subprocess.Popen([sys.executable, __file__, str(out), "--only", *names, "--part", str(k)],
                                      env=env))

    def stop(signum: int, _frame: Any) -> None:  # run.sh stopping the export stops every worker
        for p in procs:
            p.terminate()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    rc = max(p.wait() for p in procs)
    merged: dict[str, Any] = {"manifest": {}, "method_programs": {}, "failed": []}
    for k, group in enumerate(groups):
        part = parts / f"{k}.json"
        if not part.is_file():
            merged["failed"] += group  # the worker died before writing its results
            continue
        res = json.loads(part.read_text())
        for key in ("manifest", "method_programs"):
            merged[key].update(res[key])
        merged["failed"] += res["failed"]
    return merged, rc or (1 if merged["failed"] else 0)


def write_lists(out: Path, results: dict, merge: bool) -> None:
    """OUT_DIR/manifest.json (the single-method models) and method_programs.json, in models' order; `merge`:
    into the existing lists (an --only run adds to a full one)."""
    for key, order in (("manifest", [*MODELS, *BENCH_MODELS]), ("method_programs", list(METHOD_PROGRAMS))):
        path = out / f"{key}.json"
        listed = json.loads(path.read_text()) if merge and path.is_file() else {}
        listed.update(results[key])
        if key == "method_programs" and not listed and not path.is_file():
            continue
        path.write_text(json.dumps({n: listed[n] for n in order if n in listed}, indent=1))


def run_jobs(out: Path, jobs: list[str], programs: list[str]) -> dict:
    """Export `jobs` in this process, one after the other; a failed job is reported and the others still run."""
    build = out / "build"
    from toolchain import export

    export.prepare_build_dirs(build)  # before torch is imported: inductor reads its cache dir at import
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    results: dict[str, Any] = {"manifest": {}, "method_programs": {}, "failed": []}
    for job in jobs:
        t0 = time.perf_counter()
        try:
            if job in MODELS or job in BENCH_MODELS:
                results["manifest"][job] = export_model(out, build, job)
            elif job == "small_mlp_default":
                export_torch_default(out)
            else:
                with entries_scaffold.entries_call() as patched:
                    if job == "sessions":
                        packages = [export_sessions(out, build)]
                    elif job == "methods":
                        listed = export_method_programs(out, build, {n: METHOD_PROGRAMS[n] for n in programs})
                        results["method_programs"].update(listed)
                        packages = [out / n / f"{m}.pt2" for n in listed for m in listed[n]["methods"]]
                    else:
                        packages = export_stateful_methods(out, build)
                for pt2 in packages:
                    if entries_scaffold.require_entries_call(pt2) != patched:
                        msg = f"{pt2}: the entries call is {'not ' if patched else ''}the scaffold's"
                        raise entries_scaffold.ScaffoldError(msg)
                if patched:
                    print(f"prepare: {job}: torch {torch.__version__} lacks {entries_scaffold.ENTRIES_CALL}: its "
                          f"plugins define it from the test scaffolding ({entries_scaffold.SCAFFOLD.name})",
                          flush=True)
            print(f"prepare: {job}: exported in {time.perf_counter() - t0:.1f} s", flush=True)
        except Exception:  # noqa: BLE001 - reported, the other jobs still run, the exit status says it
            results["failed"].append(job)
            print(f"prepare: {job}: FAILED after {time.perf_counter() - t0:.1f} s\n{traceback.format_exc()}",
                  flush=True)
    return results


def _outputs(outs: Any) -> tuple[Any, ...]:
    return tuple(outs) if isinstance(outs, tuple | list) else (outs,)


def export_model(out: Path, build: Path, name: str) -> dict:
    """One model of MODELS or BENCH_MODELS: its inputs, eager references (per call for the stateful model),
    the replay variants (MODELS only) and its package; returns its manifest entry."""
    import numpy as np
    import torch

    from toolchain import export

    t0 = time.perf_counter()
    factory, weights, extra = MODELS[name] if name in MODELS else BENCH_MODELS[name]
    model, inputs = factory()
    inputs = tuple(inputs)
    for k, x in enumerate(inputs):
        np.save(out / f"{name}.in{k}.npy", x.numpy())
    dev_model = model.to("cuda")
    dev_inputs = [x.to("cuda") for x in inputs]
    calls = MUTATED_CALLS if name == "mutated_buffer" else 1
    variants = REPLAY_CALLS if calls == 1 and name in MODELS else 0
    with torch.no_grad():
        ref_model = copy.deepcopy(dev_model)  # the stateful model's buffer must start fresh for export
        for c in range(calls):
            suffix = f".call{c}" if calls > 1 else ""
            for k, o in enumerate(_outputs(ref_model(*dev_inputs))):
                np.save(out / f"{name}{suffix}.ref{k}.npy", o.detach().cpu().numpy())
        gen = torch.Generator().manual_seed(1)
        for c in range(variants):
            var = [x + 0.1 * torch.randn(x.shape, generator=gen, dtype=x.dtype) if x.is_floating_point() else x
                   for x in inputs]
            for k, x in enumerate(var):
                np.save(out / f"{name}.var{c}.in{k}.npy", x.numpy())
            for k, o in enumerate(_outputs(ref_model(*[x.to("cuda") for x in var]))):
                np.save(out / f"{name}.var{c}.ref{k}.npy", o.detach().cpu().numpy())
    export.export(dev_model, dev_inputs, out / f"{name}.pt2", weights=weights, build_dir=build,
                  extra_configs=dict(extra), device="cuda")
    return {"inputs": len(inputs), "weights": weights, "calls": calls, "variants": variants,
            "export_s": round(time.perf_counter() - t0, 1)}


def export_torch_default(out: Path) -> None:
    """torch's own default (libtorch-linked) CUDA plugin of small_mlp, for the runner investigation."""
    import torch

    model, inputs = MODELS["small_mlp"][0]()
    ep = torch.export.export(model.to("cuda"), tuple(x.to("cuda") for x in inputs))
    torch._inductor.aoti_compile_and_package(ep, package_path=str(out / "small_mlp_default.pt2"))


def export_sessions(out: Path, build: Path) -> Path:
    """The stateful model (examples.mutated_buffer) for the session test: OUT_DIR/sessions/mutated_buffer.pt2,
    and eager torch replaying models.SESSION_STEPS, each session a copy of the module as loaded (new, reset)
    or of another session's (clone), the program's own state one more copy: step<i>.in0.npy / .ref0.npy for
    each run step i."""
    import numpy as np
    import torch

    from toolchain import examples, export

    d = out / "sessions"
    d.mkdir(parents=True, exist_ok=True)
    module, (x,) = examples.mutated_buffer()
    dev = module.to("cuda")
    own = copy.deepcopy(dev)
    sessions: dict[str, Any] = {}
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for i, (op, session, *source) in enumerate(SESSION_STEPS):
            if op in ("new", "reset"):
                sessions[str(session)] = copy.deepcopy(dev)
            elif op == "clone":
                sessions[str(session)] = copy.deepcopy(sessions[str(source[0])])
            else:
                xi = torch.randn(x.shape, generator=gen, dtype=x.dtype)
                np.save(d / f"step{i}.in0.npy", xi.numpy())
                m = own if session is None else sessions[str(session)]
                np.save(d / f"step{i}.ref0.npy", m(xi.to("cuda")).cpu().numpy())
    # from the module as loaded (its buffer never ran)
    return export.export(dev, [x.to("cuda")], d / "mutated_buffer.pt2", build_dir=build, device="cuda")


def export_method_programs(out: Path, build: Path, programs: dict[str, tuple[str, bool]]) -> dict[str, dict]:
    """models.METHOD_PROGRAMS: `forward` and `embed` of examples.two_methods exported for CUDA as one program
    (methods.json), embed from a second module with other fc2.weight values where asked, and each method's
    eager output on the GPU. A method exported from the same module with the same weights mode for an earlier
    program is copied, not exported again (the forward of the programs that differ in embed only)."""
    import shutil

    import numpy as np
    import torch

    from toolchain import examples, export
    from toolchain.export import method_as_forward

    listed = {}
    done: dict[tuple[str, str, bool], Path] = {}  # (method, weights, from the second module) -> package
    for name, (weights, other_values) in programs.items():
        t0 = time.perf_counter()
        base, (x,) = examples.two_methods(32)
        embed_module = base
        if other_values:
            embed_module, _ = examples.two_methods(32)  # the same seed: equal values but for fc2.weight
            with torch.no_grad():
                embed_module.fc2.weight.add_(1.0)
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        np.save(d / "x.npy", x.numpy())
        xd = x.to("cuda")
        entries = []
        for method, module in (("forward", base), ("embed", embed_module)):
            dev = module.to("cuda")
            with torch.no_grad():
                np.save(d / f"{method}.ref0.npy", getattr(dev, method)(xd).cpu().numpy())
            key = (method, weights, module is not base)
            if key in done:
                shutil.copyfile(done[key], d / f"{method}.pt2")
            else:
                done[key] = export.export(method_as_forward(dev, method), [xd], d / f"{method}.pt2",
                                          weights=weights, build_dir=build, device="cuda")
            entries.append({"name": method, "package": f"{method}.pt2"})
        (d / "methods.json").write_text(json.dumps({"schema": 1, "methods": entries}, indent=1))
        listed[name] = {"weights": weights, "other_values": other_values, "methods": [e["name"] for e in entries],
                        "export_s": round(time.perf_counter() - t0, 1)}
        print(f"prepare: {name}: exported in {listed[name]['export_s']} s", flush=True)
    return listed


def export_stateful_methods(out: Path, build: Path) -> list[Path]:
    """examples.stateful_methods as a two-method CUDA program, and eager torch replaying
    models.STATEFUL_METHOD_STEPS (each session a copy of the module as loaded)."""
    import numpy as np
    import torch

    from toolchain import examples, export
    from toolchain.export import method_as_forward

    module, (x,) = examples.stateful_methods()
    dev = module.to("cuda")
    d = out / "stateful_methods"
    d.mkdir(parents=True, exist_ok=True)
    own = copy.deepcopy(dev)
    sessions: dict[str, Any] = {}
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for i, (session, method) in enumerate(STATEFUL_METHOD_STEPS):
            if session is not None and session not in sessions:
                sessions[session] = copy.deepcopy(dev)
            m = own if session is None else sessions[session]
            xi = torch.randn(x.shape, generator=gen, dtype=x.dtype)
            np.save(d / f"step{i}.in0.npy", xi.numpy())
            np.save(d / f"step{i}.ref0.npy", getattr(m, method)(xi.to("cuda")).cpu().numpy())
    entries, packages = [], []
    for method in ("forward", "peek"):  # from the module as loaded (its buffer never ran)
        packages.append(export.export(method_as_forward(dev, method), [x.to("cuda")], d / f"{method}.pt2",
                                      build_dir=build, device="cuda"))
        entries.append({"name": method, "package": f"{method}.pt2"})
    (d / "methods.json").write_text(json.dumps({"schema": 1, "methods": entries}, indent=1))
    return packages


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
