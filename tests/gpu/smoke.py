"""GPU run smoke test of the Python module: load a CUDA plugin in-process and run it once, with a line per
step so a crash names the step (tests/gpu/run.sh runs it under segv_trace.so before the test suite).

    python tests/gpu/smoke.py ARTIFACTS [--torch-first] [--device-buffers]
--torch-first imports torch before the host library (the test suite's processes may have torch loaded).
"""

from __future__ import annotations

import faulthandler
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def step(msg: str) -> None:
    print(f"smoke: {msg}", flush=True)


def main() -> int:
    faulthandler.enable()
    art = Path(sys.argv[1])
    if "--torch-first" in sys.argv:
        step("import torch")
        import torch

        torch.zeros(1, device="cuda")
    import numpy as np

    from toolchain import runtime

    step(f"library {runtime.default_library('cuda')}")
    lib = runtime.library(None, "cuda")
    step(f"loaded, version {lib.version}")
    step("load mlp.pt2 on cuda")
    prog = runtime.load(art / "mlp.pt2", device="cuda")
    x = np.load(art / "mlp.in0.npy")
    step("run with a host array")
    out = prog.run([x])[0]
    ref = np.load(art / "mlp.ref0.npy")
    err = float(np.max(np.abs(out - ref)))
    step(f"output {out.shape}, max abs error vs eager {err:.3g}")
    if "--device-buffers" in sys.argv:
        from toolchain.runtime import cuda

        step("run with device buffers")
        dx = cuda.DeviceArray.from_numpy(x)
        dout = prog.run([dx], device_outputs=True)[0]
        err = float(np.max(np.abs(dout.numpy() - ref)))
        step(f"device output max abs error {err:.3g}")
    prog.close()
    step("ok")
    return 0 if err <= 1e-4 * max(1.0, float(np.max(np.abs(ref)))) + 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
