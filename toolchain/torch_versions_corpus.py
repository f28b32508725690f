"""The torch-version matrix's exporter: run as a script by the python of one torch release's venv (it imports
torch, numpy and the standard library only, never this package), it exports a small corpus with that torch's
own `torch._inductor.aoti_compile_and_package` and computes the eager outputs with the same torch.

    python -I toolchain/torch_versions_corpus.py OUT_DIR CONFIGS_JSON

(-I: this directory must not be on sys.path: toolchain/inspect.py would shadow the standard library's inspect.)

CONFIGS_JSON: the inductor configs every package gets (what a user passes to ship a plugin without libtorch:
toolchain.export.inductor_configs). OUT_DIR receives <name>.pt2, each case's inputs and eager outputs as
<name>.case<k>.in<i>.npy / .out<j>.npy, and manifest.json:

    {"torch": "2.14.1+cu130", "models": {"<name>": {"pt2": "<name>.pt2", "cases": [{"inputs": n, "outputs": m}],
     "seconds": s, "vec_isa": "avx2" | null}}, "errors": {"<name>": "why the export failed"}}

The corpus (toolchain.torch_versions documents what each member is for):
- stateless: no weights, two inputs, elementwise and a reduction;
- dynamic_batch: an MLP with a dynamic batch dimension (Dim min=2, max=64), run at two batch sizes;
- multi_output: three outputs of different shapes and dtypes (float32, int64, bool), weights in a blob;
- vectorised: SIMD kernels (cpp.vec_isa_ok with the ISA torch's own probe picks), which call Sleef.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def _corpus(torch: Any) -> dict[str, tuple[Any, list[tuple[Any, ...]], Any, dict[str, Any] | str]]:
    """name -> (module, input cases (the first is the export example), dynamic_shapes, extra configs or
    "vectorised")."""
    nn: Any = torch.nn

    class Stateless(nn.Module):
        def forward(self, x, y):
            return (torch.sin(x) * y + x.cos()).softmax(-1)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def forward(self, x):
            return self.net(x)

    class MultiOutput(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x):
            h = self.proj(x)
            return h, h.argmax(-1), (h > 0).all(-1)

    class Vectorised(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 256))

        def forward(self, x):
            return torch.tanh(x * self.scale) + torch.exp(-x * x) * torch.sigmoid(x)

    def seeded(make):
        torch.manual_seed(0)
        return make().eval()

    g = torch.Generator().manual_seed(1)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    batch = torch.export.Dim("batch", min=2, max=64)
    return {
        "stateless": (seeded(Stateless), [(randn(4, 32), randn(4, 32))], None, {}),
        "dynamic_batch": (seeded(MLP), [(randn(8, 16),), (randn(3, 16),), (randn(64, 16),)], {"x": {0: batch}}, {}),
        "multi_output": (seeded(MultiOutput), [(randn(6, 8),)], None, {
            "aot_inductor.package_constants_in_so": False,
            "aot_inductor.package_constants_on_disk_format": "binary_blob"}),
        "vectorised": (seeded(Vectorised), [(randn(64, 256),)], None, "vectorised"),
    }


def _vector_configs(torch: Any) -> tuple[dict[str, Any], str | None]:
    """cpp.vec_isa_ok and cpp.simdlen for the widest ISA torch's own probe accepts, asked before the plugin's
    configs are in force (its probe links libtorch, which a plugin built without libtorch cannot)."""
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()
    if not isa:
        return {"cpp.vec_isa_ok": False}, None
    return {"cpp.vec_isa_ok": True, "cpp.simdlen": isa.bit_width()}, str(isa)


def _save(path: Path, t: Any) -> None:
    import numpy as np

    np.save(path, t.detach().contiguous().numpy())


def main(argv: list[str]) -> int:
    out, base = Path(argv[1]), json.loads(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    import torch

    manifest: dict[str, Any] = {"torch": torch.__version__, "models": {}, "errors": {}}
    vec_cfg, vec_isa = _vector_configs(torch)
    for name, (module, cases, dynamic, extra) in _corpus(torch).items():
        cfg = {**base, **(vec_cfg if isinstance(extra, str) else extra)}
        start = time.monotonic()
        try:
            ep = torch.export.export(module, cases[0], dynamic_shapes=dynamic)
            torch._inductor.aoti_compile_and_package(ep, package_path=str(out / f"{name}.pt2"),
                                                     inductor_configs=cfg)
        except Exception as exc:  # recorded per model: one failing export must not hide the others' results
            manifest["errors"][name] = f"{type(exc).__name__}: {exc}"[:2000]
            traceback.print_exc()
            continue
        entry: dict[str, Any] = {"pt2": f"{name}.pt2", "cases": [], "seconds": round(time.monotonic() - start, 1),
                                 "vec_isa": vec_isa if extra == "vectorised" else None}
        with torch.no_grad():
            for k, args in enumerate(cases):
                res = module(*args)
                res = list(res) if isinstance(res, (tuple, list)) else [res]
                for i, a in enumerate(args):
                    _save(out / f"{name}.case{k}.in{i}.npy", a)
                for j, r in enumerate(res):
                    _save(out / f"{name}.case{k}.out{j}.npy", r)
                entry["cases"].append({"inputs": len(args), "outputs": len(res)})
        manifest["models"][name] = entry
        print(f"exported {name} in {entry['seconds']} s", flush=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
