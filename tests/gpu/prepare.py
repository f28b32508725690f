"""Export the GPU check models as CUDA plugins with this machine's torch, and record eager references.

    python tests/gpu/prepare.py OUT_DIR [--only NAME ...]
For each model: OUT_DIR/<name>.pt2, <name>.in<k>.npy, <name>.ref<k>.npy (eager on cuda, TF32 off, as
torch's defaults for matmul; cuDNN's TF32 default is turned off too so float32 is compared at rtol 1e-4),
for the stateful model <name>.call<c>.ref<k>.npy for MUTATED_CALLS consecutive calls and the session steps
(<name>.session<i>.in0.npy / .ref0.npy, models.SESSION_STEPS), and for every
other model REPLAY_CALLS input variants <name>.var<c>.in<k>.npy with their eager <name>.var<c>.ref<k>.npy
(graph replays checked call by call against eager, each call with new data). Also a
link_libtorch=True ("default") MLP plugin for the torch-runner investigation, and the two-method
programs of models.METHOD_PROGRAMS (OUT_DIR/<name>/, listed in OUT_DIR/method_programs.json) and the
stateful two-method program of models.STATEFUL_METHOD_STEPS (OUT_DIR/stateful_methods/).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.gpu.models import (  # noqa: E402
    METHOD_PROGRAMS,
    MODELS,
    MUTATED_CALLS,
    REPLAY_CALLS,
    SESSION_STEPS,
    STATEFUL_METHOD_STEPS,
)
from toolchain import export  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    build = out / "build"
    export.prepare_build_dirs(build)
    import numpy as np
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    manifest: dict[str, dict] = {}
    for name, (factory, weights, extra) in MODELS.items():
        if a.only and name not in a.only:
            continue
        t0 = time.perf_counter()
        model, inputs = factory()
        inputs = tuple(inputs)
        for k, x in enumerate(inputs):
            np.save(out / f"{name}.in{k}.npy", x.numpy())
        dev_model = model.to("cuda")
        dev_inputs = [x.to("cuda") for x in inputs]
        with torch.no_grad():
            calls = MUTATED_CALLS if name == "mutated_buffer" else 1
            import copy

            ref_model = copy.deepcopy(dev_model)  # the stateful model's buffer must start fresh for export
            for c in range(calls):
                outs = ref_model(*dev_inputs)
                outs = outs if isinstance(outs, tuple | list) else (outs,)
                for k, o in enumerate(outs):
                    suffix = f".call{c}" if calls > 1 else ""
                    np.save(out / f"{name}{suffix}.ref{k}.npy", o.detach().cpu().numpy())
            if name == "mutated_buffer":
                write_session_steps(out, name, dev_model, inputs)
            if calls == 1:
                gen = torch.Generator().manual_seed(1)
                for c in range(REPLAY_CALLS):
                    var = [x + 0.1 * torch.randn(x.shape, generator=gen, dtype=x.dtype) if x.is_floating_point() else x
                           for x in inputs]
                    for k, x in enumerate(var):
                        np.save(out / f"{name}.var{c}.in{k}.npy", x.numpy())
                    outs = ref_model(*[x.to("cuda") for x in var])
                    outs = outs if isinstance(outs, tuple | list) else (outs,)
                    for k, o in enumerate(outs):
                        np.save(out / f"{name}.var{c}.ref{k}.npy", o.detach().cpu().numpy())
        export.export(dev_model, dev_inputs, out / f"{name}.pt2", weights=weights, build_dir=build,
                      extra_configs=dict(extra), device="cuda")
        manifest[name] = {"inputs": len(inputs), "weights": weights, "calls": calls,
                          "variants": REPLAY_CALLS if calls == 1 else 0,
                          "export_s": round(time.perf_counter() - t0, 1)}
        print(f"prepare: {name}: exported in {manifest[name]['export_s']} s", flush=True)
    if not a.only or "mlp_default" in a.only:
        # torch's own default (libtorch-linked) CUDA plugin, for the runner investigation in bench_gpu.py
        model, inputs = MODELS["small_mlp"][0]()
        ep = torch.export.export(model.to("cuda"), tuple(x.to("cuda") for x in inputs))
        torch._inductor.aoti_compile_and_package(ep, package_path=str(out / "small_mlp_default.pt2"))
        print("prepare: small_mlp_default (link_libtorch=True) exported", flush=True)
    # the single-method models' manifest first: a failure exporting the method programs below leaves them usable
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if not a.only or any(n in a.only for n in METHOD_PROGRAMS):
        programs = {n: v for n, v in METHOD_PROGRAMS.items() if not a.only or n in a.only}
        export_method_programs(out, build, programs)
    if not a.only or "stateful_methods" in a.only:
        export_stateful_methods(out, build)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return 0


def write_session_steps(out: Path, name: str, model: Any, inputs: tuple[Any, ...]) -> None:
    """Eager torch replaying models.SESSION_STEPS: each session is a copy of the module as loaded (new, reset)
    or of another session's (clone); the program's own state is one more copy. `model` is left untouched."""
    import copy

    import numpy as np
    import torch

    assert len(inputs) == 1, f"{name}: the session steps feed one input"
    loaded = copy.deepcopy(model)
    own = copy.deepcopy(model)
    sessions: dict[str, Any] = {}
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for i, (op, session, *source) in enumerate(SESSION_STEPS):
            if op in ("new", "reset"):
                sessions[str(session)] = copy.deepcopy(loaded)
            elif op == "clone":
                sessions[str(session)] = copy.deepcopy(sessions[str(source[0])])
            else:
                x = torch.randn(inputs[0].shape, generator=gen, dtype=inputs[0].dtype)
                np.save(out / f"{name}.session{i}.in0.npy", x.numpy())
                m = own if session is None else sessions[str(session)]
                np.save(out / f"{name}.session{i}.ref0.npy", m(x.to("cuda")).cpu().numpy())


def export_method_programs(out: Path, build: Path, programs: dict[str, tuple[str, bool]]) -> None:
    """models.METHOD_PROGRAMS: `forward` and `embed` of examples.two_methods exported for CUDA as one program
    (methods.json), embed from a second module with other fc2.weight values where asked, and each method's
    eager output on the GPU."""
    import numpy as np
    import torch

    from toolchain import examples
    from toolchain.export import method_as_forward

    listed = {}
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
            export.export(method_as_forward(dev, method), [xd], d / f"{method}.pt2", weights=weights, build_dir=build,
                          device="cuda")
            entries.append({"name": method, "package": f"{method}.pt2"})
        (d / "methods.json").write_text(json.dumps({"schema": 1, "methods": entries}, indent=1))
        listed[name] = {"weights": weights, "other_values": other_values, "methods": [e["name"] for e in entries],
                        "export_s": round(time.perf_counter() - t0, 1)}
        print(f"prepare: {name}: exported in {listed[name]['export_s']} s", flush=True)
    (out / "method_programs.json").write_text(json.dumps(listed, indent=1))



def export_stateful_methods(out: Path, build: Path) -> None:
    """examples.stateful_methods as a two-method CUDA program, and eager torch replaying
    models.STATEFUL_METHOD_STEPS (each session a copy of the module as loaded)."""
    import copy

    import numpy as np
    import torch

    from toolchain import examples
    from toolchain.export import method_as_forward

    t0 = time.perf_counter()
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
    entries = []
    for method in ("forward", "peek"):  # from the module as loaded (its buffer never ran)
        export.export(method_as_forward(dev, method), [x.to("cuda")], d / f"{method}.pt2", build_dir=build,
                      device="cuda")
        entries.append({"name": method, "package": f"{method}.pt2"})
    (d / "methods.json").write_text(json.dumps({"schema": 1, "methods": entries}, indent=1))
    print(f"prepare: stateful_methods: exported in {round(time.perf_counter() - t0, 1)} s", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
