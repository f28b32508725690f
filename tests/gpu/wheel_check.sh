#!/usr/bin/env bash
# The CUDA runtime wheel on the GPU machine: install it (no network: --no-deps, next to the nvidia-* wheels
# torch brought), then aoti-run --version, what its library resolves cudart/cuBLAS to, and a CUDA program run
# through the Python module with nothing but the wheel to find the runtime (no AOTI_HOST_LIBRARY).
#   bash tests/gpu/wheel_check.sh WHEEL ARTIFACTS_DIR      (after tests/gpu/run.sh made ARTIFACTS_DIR)
set -uo pipefail
WHEEL=${1:?usage: wheel_check.sh WHEEL ARTIFACTS_DIR}; ART=${2:?usage: wheel_check.sh WHEEL ARTIFACTS_DIR}
PY=${PYTHON:-python3}
SITE=$(mktemp -d)  # private (0700): the "site-packages" the wheel is installed into
trap 'rm -rf "$SITE"' EXIT
$PY -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEEL" || exit 2
# The wheel's RUNPATH looks for the nvidia-* wheels in its own site-packages: point that at torch's.
NV=$($PY -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)/nvidia
echo "nvidia wheels: $NV ($(ls "$NV" 2>/dev/null | tr '\n' ' '))"
ln -s "$NV" "$SITE/nvidia"
LIB=$SITE/aoti_toolchain_cuda/_host/lib/libaoti_host.so
readelf -d -W "$LIB" | grep -E "RPATH|RUNPATH|NEEDED"
ldd "$LIB" | grep -E "cudart|cublas|openblas|sleef|gomp|not found"
"$SITE/aoti_toolchain_cuda/_host/bin/aoti-run" --version
unset AOTI_HOST_LIBRARY AOTI_RUN
PYTHONPATH=$SITE:${PYTHONPATH:-} $PY - "$ART" <<'PYEOF'
import sys, pathlib, numpy as np
from toolchain import hostlib, runtime
art = pathlib.Path(sys.argv[1])
print("runtime found:", hostlib.candidates("cuda")[:2])
with runtime.load(art / "mlp.pt2", device="cuda") as prog:
    xs = [np.load(p) for p in sorted(art.glob("mlp.in*.npy"))]
    refs = [np.load(p) for p in sorted(art.glob("mlp.ref*.npy"))]
    outs = prog.run(xs)
    err = max(float(np.max(np.abs(o - r))) for o, r in zip(outs, refs))
    print("library:", prog.library_path if hasattr(prog, "library_path") else "?", "max abs error vs eager:", err)
    sys.exit(0 if err < 1e-4 else 1)
PYEOF
echo "wheel check: exit $?"
