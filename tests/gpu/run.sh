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
# AOTI_GPU_BUILD=direct forces the fallback (to compare it with the SCons build; see bench/RESULTS.md).
if [ "${AOTI_GPU_BUILD:-scons}" = scons ] && command -v scons >/dev/null && scons -Q cuda=on -j"$NPROC" >"$OUT/build.log" 2>&1; then
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
$PY - "$AOTI_GPU_ARTIFACTS" "$OUT/plugin.so" <<'PYEOF'
import pathlib, subprocess, sys, zipfile
union = set()
for pt2 in sorted(pathlib.Path(sys.argv[1]).glob("*.pt2")):
    zf = zipfile.ZipFile(pt2)
    so = next(n for n in zf.namelist() if n.endswith(".so"))
    open(sys.argv[2], "wb").write(zf.read(so))
    und = subprocess.run(["nm", "-D", "--undefined-only", sys.argv[2]], capture_output=True, text=True).stdout.split()
    shims = sorted(s for s in und if s.startswith("aoti_torch_"))
    union |= set(shims)
    dyn = subprocess.run(["readelf", "-d", "-W", sys.argv[2]], capture_output=True, text=True).stdout
    needed = [l.split("[")[1].rstrip("]") for l in dyn.splitlines() if "NEEDED" in l]
    cubins = sum(n.endswith(".cubin") for n in zf.namelist())
    dsyms = subprocess.run(["readelf", "--dyn-syms", "-W", sys.argv[2]], capture_output=True, text=True).stdout
    rows = [l.split() for l in dsyms.splitlines() if len(l.split()) >= 8 and l.split()[6] != "UND"]
    unique = sum(r[4] == "UNIQUE" for r in rows)
    std = sum(r[7].startswith("_ZNSt") or r[7].startswith("_ZSt") for r in rows)
    print(f"{pt2.name}: {len(shims)} shims, DT_NEEDED {needed}, {cubins} cubin files in the package, "
          f"exports {std} std:: symbols and {unique} GNU_UNIQUE symbols (its own C++ runtime)")
    if pt2.name == "mlp.pt2":
        print("  cuda runtime imports:", sorted({s.split("@")[0] for s in und if s.startswith("cuda")}))
print(f"union of aoti_torch_ imports ({len(union)}):", " ".join(sorted(union)))
PYEOF
rm -f "$OUT/plugin.so"

step "Python module smoke test (in-process load of a CUDA plugin; backtrace and the other build if it crashes)"
SMOKE='import numpy as np, os; from toolchain import runtime; a=os.environ["AOTI_GPU_ARTIFACTS"]
p = runtime.load(a + "/mlp.pt2", device="cuda"); print("smoke ok:", p.run([np.load(a + "/mlp.in0.npy")])[0].shape)'
if ! $PY -c "$SMOKE"; then
  echo "the Python module failed with $AOTI_HOST_LIBRARY; backtrace (cuda-gdb):"
  cuda-gdb -batch -ex run -ex bt --args $PY -c "$SMOKE" 2>&1 | grep -E "^#|signal|Error" | head -30
  if [ "$BUILD_VARIANT" != build/cuda-direct ]; then
    $PY tests/gpu/build_cuda.py build/cuda-direct -j "$NPROC" >>"$OUT/build.log" 2>&1 && \
      AOTI_HOST_LIBRARY=$REPO/build/cuda-direct/dist/lib/libaoti_host.so $PY -c "$SMOKE" && echo "(with the direct build)"
  fi
fi

step "GPU tests"
$PY -m pytest tests/gpu/test_cuda.py -v -rs -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | grep -E "PASS|FAIL|ERROR|SKIP|passed|failed|error" | tail -60
TEST_RC=${PIPESTATUS[0]}
grep -E "^(E |FAILED)" "$OUT/pytest.log" | head -60

step "GPU benchmark"
BENCH_QUICK=${BENCH_QUICK:-0} $PY bench/bench_gpu.py --artifacts "$AOTI_GPU_ARTIFACTS" --aoti-run "$AOTI_RUN" --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | grep -v "^W[0-9]"

step "done: tests exit $TEST_RC"
exit "$TEST_RC"
