#!/usr/bin/env bash
# The ONE command for the GPU machine: build the CUDA runtime with its nvcc, export CUDA plugins with its
# torch, run the GPU tests (aoti-run and the Python module against eager torch) and the GPU benchmark.
#   bash tests/gpu/run.sh            (from the repository root; writes logs/results under $OUT if set)
# Exit status: non-zero if the build, the export or any test fails (the benchmark runs regardless).
# The log starts with the commit it ran at ($OUT/commit.txt, also the first line of pytest.log):
# AOTI_GPU_COMMIT when set (the GPU machine's copy of the tree carries a .git that need not match it), else
# git's HEAD with the number of tracked files changed since.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
OUT=${OUT:-$REPO/build/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
NPROC=$(nproc 2>/dev/null || echo 4)
step() { echo; echo "=== $* ($(date -u +%T))"; }

step "commit"
if [ -n "${AOTI_GPU_COMMIT:-}" ]; then
  COMMIT_LINE="commit $AOTI_GPU_COMMIT (AOTI_GPU_COMMIT)"
elif COMMIT=$(git rev-parse HEAD 2>/dev/null); then
  DIRTY=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)
  COMMIT_LINE="commit $COMMIT ($DIRTY tracked file(s) changed since)"
else
  COMMIT_LINE="commit unknown (not a git checkout and AOTI_GPU_COMMIT unset)"
fi
echo "$COMMIT_LINE" | tee "$OUT/commit.txt"

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
nvcc --version | tail -1
$PY -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
$PY -c 'from cuda.bindings import runtime as r; print("cuda.bindings ok, devices:", r.cudaGetDeviceCount()[1])' \
  || echo "cuda-python missing: the Python device-buffer tests will skip"

step "build (scons cuda=on with this machine's nvcc)"
# OpenBLAS and Sleef (the CPU fallbacks and vectorised plugins need them) are not installed on the GPU
# machine and it has no network: take them along unpacked from the .debs (`.deps`, docs/scons.md "CUDA and the GPU machine").
DEPS_ARG=""
if [ -d "$REPO/.deps/lib/x86_64-linux-gnu" ]; then
  ( cd "$REPO/.deps/lib/x86_64-linux-gnu" && ln -sf libopenblas.so.0 libopenblas.so && ln -sf libsleef.so.3 libsleef.so )
  DEPS_ARG="deps_prefix=$REPO/.deps"
  export LD_LIBRARY_PATH="$REPO/.deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
command -v scons >/dev/null || { echo "scons not found: install the scons wheel (docs/scons.md, \"CUDA and the GPU machine\")"; exit 2; }
if ! scons -Q cuda=on $DEPS_ARG -j"$NPROC" >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; exit 2
fi
BUILD_VARIANT=$(ls -d build/cuda-*-release | head -1)
echo "scons cuda=on: built $BUILD_VARIANT"
export AOTI_HOST_LIBRARY=$REPO/$BUILD_VARIANT/dist/lib/libaoti_host.so AOTI_RUN=$REPO/$BUILD_VARIANT/dist/bin/aoti-run
ls -la "$AOTI_HOST_LIBRARY" "$AOTI_RUN" || exit 2

step "export CUDA plugins with this machine's torch"
# Plugins load from a sealed memfd (the default); cubins go to the private file cache, kept in the build dir.
export AOTI_GPU_ARTIFACTS=$REPO/build/gpu-artifacts XDG_CACHE_HOME=$REPO/build/xdg-cache
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

step "Python module smoke test (in-process load of a CUDA plugin, every fault traced to library+offset)"
TRACE=""
# The tracer is built outside $OUT: the device tool brings back at most 8 files, which the logs need.
if gcc -shared -fPIC -O1 -o "$REPO/build/segv_trace.so" tests/gpu/segv_trace.c -ldl 2>>"$OUT/build.log"; then
  TRACE="$REPO/build/segv_trace.so"
fi
for variant in "" --torch-first; do
  LD_PRELOAD=$TRACE $PY tests/gpu/smoke.py "$AOTI_GPU_ARTIFACTS" --device-buffers $variant 2>&1 | grep -v "^W[0-9]" | tail -40
  SMOKE_RC=${PIPESTATUS[0]}
  echo "smoke ${variant:-plain}: exit $SMOKE_RC"
  # the library comes back only to resolve a crash trace's offsets (addr2line)
  [ "$SMOKE_RC" = 0 ] || cp "$AOTI_HOST_LIBRARY" "$OUT/" 2>/dev/null || true
done

step "torch's runner on its own default (libtorch-linked) CUDA plugin, every fault traced"
# (about a minute per load there; TORCH_RUNNER_TRACE=0 skips it)
if [ "${TORCH_RUNNER_TRACE:-1}" = 1 ] && [ -f "$AOTI_GPU_ARTIFACTS/small_mlp_default.pt2" ]; then
  for promote in 0 1; do  # 1: the shared libstdc++.so.6 made global first, as our host does
    PROMOTE=$promote LD_PRELOAD=$TRACE timeout 240 $PY tests/gpu/torch_runner.py "$AOTI_GPU_ARTIFACTS" 2>&1 | grep -v "^W[0-9]" | tail -40
    echo "torch runner on its default plugin (libstdc++ global first: $promote): exit ${PIPESTATUS[0]}"
  done
  $PY -m toolchain verify "$AOTI_GPU_ARTIFACTS/small_mlp_default.pt2" --profile host 2>&1 | tail -25
fi

step "GPU tests"
echo "$COMMIT_LINE" > "$OUT/pytest.log"
# -o addopts=: not pyproject's `-n auto` (pytest-xdist is not installed here; one GPU runs the tests in turn)
# The tests compare with eager float32 under allow_tf32=False (cuDNN and cuBLAS): the runtime's cuDNN
# convolutions leave TF32 off too (their default is torch's, allow_tf32=True; test_cudnn.py checks both).
AOTI_HOST_CUDNN_ALLOW_TF32=0 OUT="$OUT" $PY -m pytest tests/gpu/test_cuda.py tests/gpu/test_cuda_state.py tests/gpu/test_cuda_half.py tests/gpu/test_cuda_ops.py tests/gpu/test_cudnn.py tests/gpu/test_cudnn_decls.py tests/gpu/test_target_gpu.py tests/gpu/test_corpus_cuda.py tests/gpu/test_torch_packages_gpu.py -v -rs -p no:cacheprovider -o addopts= 2>&1 | tee -a "$OUT/pytest.log" | grep -E "PASS|FAIL|ERROR|SKIP|passed|failed|error" | tail -60
TEST_RC=${PIPESTATUS[0]}
grep -E "^(E |FAILED)" "$OUT/pytest.log" | head -60

step "attention fallback against torch's kernels"
$PY tests/gpu/bench_attention.py 2>&1 | tee "$OUT/bench_attention.log" | grep -v "^W[0-9]"

step "convolutions (cuDNN, the direct kernel) against torch's kernels"
$PY tests/gpu/bench_conv.py 2>&1 | tee "$OUT/bench_conv.log" | grep -v "^W[0-9]"

step "GPU benchmark"
BENCH_QUICK=${BENCH_QUICK:-0} $PY bench/bench_gpu.py --artifacts "$AOTI_GPU_ARTIFACTS" --aoti-run "$AOTI_RUN" --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | grep -v "^W[0-9]"

step "done: tests exit $TEST_RC at $COMMIT_LINE"
exit "$TEST_RC"
