"""Export the GPU check models as CUDA plugins with this machine's torch, and record eager references.

    python tests/gpu/prepare.py OUT_DIR [--only NAME ...]
For each model: OUT_DIR/<name>.pt2, <name>.in<k>.npy, <name>.ref<k>.npy (eager on cuda, TF32 off, as
torch's defaults for matmul; cuDNN's TF32 default is turned off too so float32 is compared at rtol 1e-4),
for the stateful model <name>.call<c>.ref<k>.npy for MUTATED_CALLS consecutive calls, and for every
other model REPLAY_CALLS input variants <name>.var<c>.in<k>.npy with their eager <name>.var<c>.ref<k>.npy
(graph replays checked call by call against eager, each call with new data). Also a
link_libtorch=True ("default") MLP plugin for the torch-runner investigation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.gpu.models import MODELS, MUTATED_CALLS, REPLAY_CALLS  # noqa: E402
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
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
