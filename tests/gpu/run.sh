#!/usr/bin/env bash
# The ONE command for the GPU machine: build the CUDA runtime with its nvcc, export CUDA plugins with its
# torch, run the GPU tests (aoti-run and the Python module against eager torch) and the GPU benchmark.
#   bash tests/gpu/run.sh            (from the repository root; writes logs/results under $OUT if set)
# Exit status: non-zero if the build, the export or any test fails (the benchmark runs regardless).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
OUT=${OUT:-$REPO/build/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
NPROC=$(nproc 2>/dev/null || echo 4)
step() { echo; echo "=== $* ($(date -u +%T))"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
nvcc --version | tail -1
$PY -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
$PY -c 'from cuda.bindings import runtime as r; print("cuda.bindings ok, devices:", r.cudaGetDeviceCount()[1])' \
  || echo "cuda-python missing: the Python device-buffer tests will skip"

step "build (scons cuda=on, else the direct fallback build)"
BUILD_VARIANT=""
if command -v scons >/dev/null && scons -Q cuda=on -j"$NPROC" >"$OUT/build.log" 2>&1; then
  BUILD_VARIANT=$(ls -d build/cuda-*-release 2>/dev/null | head -1)
  echo "scons cuda=on: built $BUILD_VARIANT"
else
  echo "scons cuda=on unavailable or failed (tail of its log below); using tests/gpu/build_cuda.py"
  tail -3 "$OUT/build.log" 2>/dev/null
  $PY tests/gpu/build_cuda.py build/cuda-direct -j "$NPROC" >>"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 2; }
  BUILD_VARIANT=build/cuda-direct
fi
export AOTI_HOST_LIBRARY=$REPO/$BUILD_VARIANT/dist/lib/libaoti_host.so AOTI_RUN=$REPO/$BUILD_VARIANT/dist/bin/aoti-run
ls -la "$AOTI_HOST_LIBRARY" "$AOTI_RUN" || exit 2

step "export CUDA plugins with this machine's torch"
export AOTI_GPU_ARTIFACTS=$REPO/build/gpu-artifacts AOTI_HOST_CACHE_DIR=$REPO/build/plugin-cache
$PY tests/gpu/prepare.py "$AOTI_GPU_ARTIFACTS" ${PREPARE_ONLY:-} 2>&1 | grep -v "^W[0-9]" | tail -40
[ -f "$AOTI_GPU_ARTIFACTS/manifest.json" ] || { echo "export failed"; exit 3; }

step "what a CUDA plugin imports"
SO=$(unzip -Z1 "$AOTI_GPU_ARTIFACTS/mlp.pt2" | grep '\.so$' | head -1)
unzip -o -q "$AOTI_GPU_ARTIFACTS/mlp.pt2" "$SO" -d "$OUT/mlp_pt2" && \
  { readelf -d -W "$OUT/mlp_pt2/$SO" | grep NEEDED; nm -D --undefined-only "$OUT/mlp_pt2/$SO" | grep -c aoti_torch_ | sed 's/^/aoti_torch_ imports: /';
    nm -D --undefined-only "$OUT/mlp_pt2/$SO" | grep -o 'cuda[A-Za-z]*' | sort -u | tr '\n' ' '; echo; }

step "GPU tests"
$PY -m pytest tests/gpu -v -rs -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | grep -E "PASS|FAIL|ERROR|SKIP|passed|failed|error" | tail -60
TEST_RC=${PIPESTATUS[0]}
grep -E "^(E |FAILED)" "$OUT/pytest.log" | head -60

step "GPU benchmark"
$PY bench/bench_gpu.py --artifacts "$AOTI_GPU_ARTIFACTS" --aoti-run "$AOTI_RUN" --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | grep -v "^W[0-9]"

step "done: tests exit $TEST_RC"
exit "$TEST_RC"
