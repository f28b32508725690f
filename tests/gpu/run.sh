#!/usr/bin/env bash
# The ONE command for the GPU machine: build the CUDA runtime with its nvcc while the CUDA plugins are exported
# with its torch (tests/gpu/prepare.py, several processes), run the GPU tests (aoti-run and the Python module
# against eager torch; the test files spread over pytest-xdist workers) and the GPU benchmarks.
#   bash tests/gpu/run.sh            (from the repository root; logs and results under $OUT if set)
# On the lent H200 (device tool, carry .whl .deps; estimated 450 s with BENCH_QUICK=1, at most GPU_RUN_BUDGET_S):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl &&
#   export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH && AOTI_GPU_COMMIT=<sha> BENCH_QUICK=1 timeout 560 bash tests/gpu/run.sh
# Knobs (environment):
#   BENCH_QUICK=1         quick benchmarks: bench_conv's subset, bench_gpu without torch's AOTI runner (a minute
#                         per load there) and without the direct-kernel and cudnn.benchmark rows of ResNet-18
#   GPU_BENCH=0           no benchmarks (tests only)
#   GPU_TESTS=0           no tests (benchmarks only; the exit status then says only whether the exports worked)
#   GPU_RUN_BUDGET_S=520  seconds the whole command may take: a benchmark runs only in what is left (stopped at
#                         the budget, skipped when too little is left), so the run always ends with its summary
#                         and the tests' exit status instead of being killed by an outer timeout
#   GPU_TEST_JOBS=4       pytest-xdist workers for the tests (each test file on one worker); 1: one process
#   PREPARE_JOBS=4        processes exporting the plugins
#   TORCH_RUNNER_TRACE=1  also trace torch's own runner on its default plugin (a minute per load there);
#                         default 0 with BENCH_QUICK=1, else 1
#   PREPARE_ONLY="..."    extra arguments for prepare.py (e.g. --only mlp)
#   GPU_MODELS=1          also bench/bench_models_gpu.py (real architectures, ours against torch's eager, CUDA
#                         graphs and AOTI runner): its exports start beside prepare.py, its timing runs last, in
#                         what is left of the budget (whatever GPU_BENCH says); JSON in $OUT/models.json.
#                         GPU_MODELS_ARGS="...": its options (--models, --dtypes, --batches, --pipelines, ...)
# Exit status: 2 if the build fails, 3 if no plugin was exported, else non-zero if a test failed, an export job
# failed or a test of tests/gpu/test_cuda_state.py skipped (they must run here); the benchmarks never decide it.
# $OUT (at most 8 files: what the device tool brings back): run.log (all of this command's output), commit.txt,
# pytest.log, bench.log, bench.json, models.json (GPU_MODELS=1), and from the tests corpus-cuda.txt,
# preflight-messages.txt; the runtime
# library only when a smoke test failed (to resolve a crash trace's offsets with addr2line).
# The logs start with the commit they ran at: AOTI_GPU_COMMIT when set (the GPU machine's copy of the tree
# carries a .git that need not match it), else git's HEAD with the number of tracked files changed since.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
OUT=${OUT:-$REPO/build/gpu-out}
mkdir -p "$OUT" "$REPO/build"
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
NPROC=$(nproc 2>/dev/null || echo 4)
BENCH_QUICK=${BENCH_QUICK:-0}
BUDGET=${GPU_RUN_BUDGET_S:-520}
TEST_JOBS=${GPU_TEST_JOBS:-4}
PREPARE_JOBS=${PREPARE_JOBS:-4}
if [ "$BENCH_QUICK" = 1 ]; then TORCH_RUNNER_TRACE=${TORCH_RUNNER_TRACE:-0}; else TORCH_RUNNER_TRACE=${TORCH_RUNNER_TRACE:-1}; fi
step() { echo; echo "=== $* ($(date -u +%T), ${SECONDS} s)"; }
noise() { grep -v "^W[0-9]"; }  # torch's glog warnings

# The whole run, in a function so that its output can go through tee (its body is left unindented).
run_all() {
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
echo "BENCH_QUICK=$BENCH_QUICK GPU_BENCH=${GPU_BENCH:-1} GPU_RUN_BUDGET_S=$BUDGET GPU_TEST_JOBS=$TEST_JOBS" \
     "PREPARE_JOBS=$PREPARE_JOBS TORCH_RUNNER_TRACE=$TORCH_RUNNER_TRACE"

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
nvcc --version | tail -1
$PY -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
$PY -c 'from cuda.bindings import runtime as r; print("cuda.bindings ok, devices:", r.cudaGetDeviceCount()[1])' \
  || echo "cuda-python missing: the Python device-buffer tests will skip"

# OpenBLAS and Sleef (the CPU fallbacks and vectorised plugins need them) are not installed on the GPU
# machine and it has no network: take them along unpacked from the .debs (`.deps`, docs/scons.md "CUDA and the GPU machine").
DEPS_ARG=""
if [ -d "$REPO/.deps/lib/x86_64-linux-gnu" ]; then
  ( cd "$REPO/.deps/lib/x86_64-linux-gnu" && ln -sf libopenblas.so.0 libopenblas.so && ln -sf libsleef.so.3 libsleef.so )
  DEPS_ARG="deps_prefix=$REPO/.deps"
  export LD_LIBRARY_PATH="$REPO/.deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
command -v scons >/dev/null || { echo "scons not found: install the scons wheel (docs/scons.md, \"CUDA and the GPU machine\")"; exit 2; }

step "export CUDA plugins with this machine's torch ($PREPARE_JOBS processes), while scons cuda=on builds"
# Plugins load from a sealed memfd (the default); cubins go to the private file cache, kept in the build dir.
# One inductor cache for the export and the tests' own exports: its precompiled header is built once.
export AOTI_GPU_ARTIFACTS=$REPO/build/gpu-artifacts XDG_CACHE_HOME=$REPO/build/xdg-cache
export TORCHINDUCTOR_CACHE_DIR=$AOTI_GPU_ARTIFACTS/build/torch/inductor-cache
SKIP=()  # what nothing in this run uses: the benchmark's model, torch's own default plugin
[ "${GPU_BENCH:-1}" = 0 ] && SKIP+=(resnet18)
[ "$TORCH_RUNNER_TRACE" = 1 ] || [ "$BENCH_QUICK" != 1 ] || SKIP+=(small_mlp_default)
# shellcheck disable=SC2086  # PREPARE_ONLY is a list of arguments
$PY tests/gpu/prepare.py "$AOTI_GPU_ARTIFACTS" --jobs "$PREPARE_JOBS" --skip "${SKIP[@]}" ${PREPARE_ONLY:-} \
  >"$REPO/build/gpu-prepare.log" 2>&1 &
PREPARE_PID=$!
if [ "${GPU_MODELS:-0}" = 1 ]; then  # the real-architecture benchmark's exports, while the rest runs
  # shellcheck disable=SC2086  # GPU_MODELS_ARGS is a list of arguments
  $PY bench/bench_models_gpu.py --export-only --jobs 4 --budget-s "$BUDGET" ${GPU_MODELS_ARGS:-} \
    >"$REPO/build/gpu-models-export.log" 2>&1 &
  MODELS_EXPORT_PID=$!
fi
if ! scons -Q cuda=on $DEPS_ARG -j"$NPROC" >"$REPO/build/gpu-build.log" 2>&1; then
  tail -40 "$REPO/build/gpu-build.log"; kill "$PREPARE_PID"; exit 2
fi
BUILD_VARIANT=$(ls -d build/cuda-*-release | head -1)
echo "scons cuda=on: built $BUILD_VARIANT (${SECONDS} s)"
export AOTI_HOST_LIBRARY=$REPO/$BUILD_VARIANT/dist/lib/libaoti_host.so AOTI_RUN=$REPO/$BUILD_VARIANT/dist/bin/aoti-run
ls -la "$AOTI_HOST_LIBRARY" "$AOTI_RUN" || { kill "$PREPARE_PID"; exit 2; }
wait "$PREPARE_PID"
PREPARE_RC=$?
noise <"$REPO/build/gpu-prepare.log" | grep -E "^prepare|Error|error:|Traceback|^  File" | tail -60
echo "prepare.py: exit $PREPARE_RC (${SECONDS} s)"
# (a model list without a single model: every export failed)
$PY -c 'import json, sys; sys.exit(not json.load(open(sys.argv[1])))' "$AOTI_GPU_ARTIFACTS/manifest.json" 2>/dev/null \
  || { noise <"$REPO/build/gpu-prepare.log" | tail -40; echo "export failed: no model exported"; exit 3; }

step "what a CUDA plugin imports"
$PY - "$AOTI_GPU_ARTIFACTS" "$REPO/build/gpu-plugin.so" <<'PYEOF'
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
rm -f "$REPO/build/gpu-plugin.so"

step "Python module smoke test (in-process load of a CUDA plugin, every fault traced to library+offset)"
TRACE=""
# The tracer is built outside $OUT: the device tool brings back at most 8 files, which the logs need.
if gcc -shared -fPIC -O1 -o "$REPO/build/segv_trace.so" tests/gpu/segv_trace.c -ldl 2>>"$REPO/build/gpu-build.log"; then
  TRACE="$REPO/build/segv_trace.so"
fi
for variant in "" --torch-first; do
  LD_PRELOAD=$TRACE $PY tests/gpu/smoke.py "$AOTI_GPU_ARTIFACTS" --device-buffers $variant 2>&1 | noise | tail -40
  SMOKE_RC=${PIPESTATUS[0]}
  echo "smoke ${variant:-plain}: exit $SMOKE_RC"
  # the library comes back only to resolve a crash trace's offsets (addr2line)
  [ "$SMOKE_RC" = 0 ] || cp "$AOTI_HOST_LIBRARY" "$OUT/" 2>/dev/null || true
done

if [ "$TORCH_RUNNER_TRACE" = 1 ] && [ -f "$AOTI_GPU_ARTIFACTS/small_mlp_default.pt2" ]; then
  step "torch's runner on its own default (libtorch-linked) CUDA plugin, every fault traced (a minute per load)"
  for promote in 0 1; do  # 1: the shared libstdc++.so.6 made global first, as our host does
    PROMOTE=$promote LD_PRELOAD=$TRACE timeout 240 $PY tests/gpu/torch_runner.py "$AOTI_GPU_ARTIFACTS" 2>&1 | noise | tail -40
    echo "torch runner on its default plugin (libstdc++ global first: $promote): exit ${PIPESTATUS[0]}"
  done
  $PY -m toolchain verify "$AOTI_GPU_ARTIFACTS/small_mlp_default.pt2" --profile host 2>&1 | tail -25
fi

TEST_RC=0
if [ "${GPU_TESTS:-1}" != 0 ]; then  # GPU_TESTS=0: the benchmarks alone
step "GPU tests"
echo "$COMMIT_LINE" > "$OUT/pytest.log"
XDIST=()
if [ "$TEST_JOBS" -gt 1 ] && $PY -c "import xdist" 2>/dev/null; then
  # each test file on one worker, so its module fixtures (its exports) run once; the files start in the order
  # given below (the longest first: the corpus exports ~20 models), not xdist's most-tests-first
  XDIST=(-n "$TEST_JOBS" --dist loadfile --no-loadscope-reorder)
  # the workers that export share the cores out for inductor's kernel-compile pools (default: one per core each)
  TC=$((NPROC / TEST_JOBS)); export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-$((TC > 2 ? TC : 2))}
else
  echo "tests in one process (GPU_TEST_JOBS=$TEST_JOBS or pytest-xdist missing)"
fi
# -o addopts=: not pyproject's `-n auto` (one worker per core) but XDIST's workers, or none.
# The tests compare with eager float32 under allow_tf32=False (cuDNN and cuBLAS): the runtime's cuDNN
# convolutions leave TF32 off too (their default is torch's, allow_tf32=True; test_cudnn.py checks both).
AOTI_HOST_CUDNN_ALLOW_TF32=0 OUT="$OUT" $PY -m pytest "${XDIST[@]}" tests/gpu/test_corpus_cuda.py \
  tests/gpu/test_torch_packages_gpu.py tests/gpu/test_cuda_ops.py tests/gpu/test_cuda.py tests/gpu/test_cuda_state.py \
  tests/gpu/test_cuda_half.py tests/gpu/test_cudnn.py tests/gpu/test_cudnn_decls.py tests/gpu/test_target_gpu.py \
  tests/gpu/test_multi_gpu.py tests/gpu/test_alloc_shims.py tests/gpu/test_cudnn_sdpa.py \
  -v -rfEs -p no:cacheprovider -o addopts= 2>&1 | tee -a "$OUT/pytest.log" | grep -E "PASS|FAIL|ERROR|SKIP|passed|failed|error" | tail -60
TEST_RC=${PIPESTATUS[0]}
grep -E "^(E |FAILED)" "$OUT/pytest.log" | head -60
# CUDA sessions and device weight sharing must run here (prepare.py gives torch < 2.13's plugins the entries
# call they need): a skip of that file's tests fails the run.
STATE_SKIPS=$(grep -cE "SKIPPED.*tests/gpu/test_cuda_state\.py|tests/gpu/test_cuda_state\.py.*SKIPPED" "$OUT/pytest.log")
STATE_PASSED=$(grep -cE "PASSED.*tests/gpu/test_cuda_state\.py::|tests/gpu/test_cuda_state\.py::.*PASSED" "$OUT/pytest.log")
echo "tests/gpu/test_cuda_state.py: $STATE_PASSED passed, $STATE_SKIPS skip line(s)"
if [ "$STATE_SKIPS" != 0 ] || [ "$STATE_PASSED" = 0 ]; then
  echo "FAILED: tests/gpu/test_cuda_state.py must run on the GPU machine (skip reasons above and in pytest.log)"
  [ "$TEST_RC" != 0 ] || TEST_RC=1
fi
fi
[ "$PREPARE_RC" = 0 ] || { echo "FAILED: prepare.py exit $PREPARE_RC (export jobs above)"; [ "$TEST_RC" != 0 ] || TEST_RC=1; }

# bench NAME MIN_S COMMAND...: runs COMMAND in what is left of the budget (at least MIN_S, else skipped)
bench() {
  local name=$1 min=$2 left=$((BUDGET - SECONDS))
  shift 2
  step "$name"
  if [ "$left" -lt "$min" ]; then
    echo "skipped: ${left} s left of GPU_RUN_BUDGET_S=$BUDGET, it needs ${min} s" | tee -a "$OUT/bench.log"
    return
  fi
  echo "=== $name (at most ${left} s)" >>"$OUT/bench.log"
  timeout -k 5 "$left" "$@" 2>&1 | tee -a "$OUT/bench.log" | noise
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || echo "$name: exit $rc$([ "$rc" = 124 ] && echo " (stopped at the budget)")" | tee -a "$OUT/bench.log"
}
if [ "${GPU_BENCH:-1}" != 0 ]; then
  : >"$OUT/bench.log"
  export BENCH_QUICK
  bench "attention fallback against torch's kernels" 20 $PY tests/gpu/bench_attention.py
  bench "convolutions (cuDNN, the direct kernel) against torch's kernels" 30 $PY tests/gpu/bench_conv.py
  bench "GPU benchmark (ResNet-18, small and wide MLP, cold start, weight load)" 60 \
    $PY bench/bench_gpu.py --artifacts "$AOTI_GPU_ARTIFACTS" --aoti-run "$AOTI_RUN" --json "$OUT/bench.json"
fi
if [ "${GPU_MODELS:-0}" = 1 ]; then  # the background exports go on beside it (a row is exported once: locked)
  grep -E "exported|FAILED" "$REPO/build/gpu-models-export.log"
  # shellcheck disable=SC2086
  bench "real architectures against torch (bench_models_gpu.py)" 60 $PY bench/bench_models_gpu.py \
    --budget-s $((BUDGET - SECONDS - 10)) --json "$OUT/models.json" ${GPU_MODELS_ARGS:-}
  kill -TERM "$MODELS_EXPORT_PID" 2>/dev/null
  wait "$MODELS_EXPORT_PID"
fi

step "done: tests exit $TEST_RC at $COMMIT_LINE"
exit "$TEST_RC"
}

# everything this command prints also goes to $OUT/run.log
run_all 2>&1 | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
