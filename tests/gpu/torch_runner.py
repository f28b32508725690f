"""torch's own AOTI runner on its default (libtorch-linked) CUDA plugin, with a line per step (tests/gpu/run.sh
runs it under segv_trace.so). PROMOTE=1 first loads the shared libstdc++.so.6 RTLD_GLOBAL, as our host does for
plugins that carry their own exported C++ runtime.

    python tests/gpu/torch_runner.py ARTIFACTS
"""

from __future__ import annotations

import ctypes
import os
import sys

if os.environ.get("PROMOTE") == "1":
    ctypes.CDLL("libstdc++.so.6", mode=os.RTLD_NOW | os.RTLD_GLOBAL)

import numpy as np  # noqa: E402
import torch  # noqa: E402

art = sys.argv[1]
m = torch._inductor.aoti_load_package(art + "/small_mlp_default.pt2")
print("torch runner: loaded", flush=True)
y = m(torch.from_numpy(np.load(art + "/small_mlp.in0.npy")).cuda())
torch.cuda.synchronize()
y = y[0] if isinstance(y, list | tuple) else y
ref = np.load(art + "/small_mlp.ref0.npy")
print("torch runner: ran, max abs error vs eager", float(np.max(np.abs(y.cpu().numpy() - ref))), flush=True)
