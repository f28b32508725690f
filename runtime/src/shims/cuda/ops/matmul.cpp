// mm, addmm and bmm on CUDA through cuBLAS (cublasGemmEx, no TF32: float32 results match eager torch with its
// default allow_tf32=False; addmm with a bias row through one cublasLt matmul), and the cuBLAS path of attention
// (attention_gemm).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <memory>
#include <tuple>
#include <string>
#include <vector>

#include "shims/cuda/ops/op_util.h"
#include "shims/cuda/ops/ops.h"

using aoti_host::Error;
using aoti_host::list_str;
using aoti_host::Tensor;
using aoti_host::cuda::require_cuda;

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(other)";
  }
}

void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string(what) + " failed: " + cublas_name(s));
}

// One handle per thread and device, with a fixed workspace, so no call allocates (graph capture
// forbids it) and handles are never shared between threads.
struct Handle {
  cublasHandle_t h = nullptr;
  void* workspace = nullptr;
  ~Handle() {
    if (h != nullptr) cublasDestroy(h);
    if (workspace != nullptr) cudaFree(workspace);
  }
};

// One T per thread and device, made by make() on first use.
template <class T, class Make>
T& per_thread(int device, Make&& make) {
  thread_local std::array<std::unique_ptr<T>, 64> slots;
  auto& slot = slots.at(static_cast<size_t>(device));
  if (!slot) slot = make();
  return *slot;
}

cublasHandle_t handle_for(int device) {
  Handle& h = per_thread<Handle>(device, [device] {
    const aoti_host::cuda::OnDevice on(device);  // a handle and its workspace belong to the device current here
    auto h = std::make_unique<Handle>();
    cublas_check(cublasCreate(&h->h), "cublasCreate");
    AOTI_CUDA_CHECK(cudaMalloc(&h->workspace, kWorkspaceBytes));
    cublas_check(cublasSetWorkspace(h->h, h->workspace, kWorkspaceBytes), "cublasSetWorkspace");
    cublas_check(cublasSetMathMode(h->h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    return h;
  });
  cublas_check(cublasSetStream(h.h, aoti_host::cuda::stream_of(device)), "cublasSetStream");
  return h.h;
}

struct GemmType {
  cudaDataType_t data;
  cublasComputeType_t compute;
};

GemmType gemm_type(int32_t dtype, const char* op) {
  switch (dtype) {
    case dc::kFloat32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case dc::kFloat64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case dc::kFloat16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case dc::kBFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    default:
      throw Error(std::string(op) + " on cuda: dtype " + aoti_host::dtype_name(dtype) +
                  " is not supported (float32, float64, float16, bfloat16)");
  }
}

// How cuBLAS (column-major) sees a row-major-indexed matrix view [rows, cols] with strides (s0, s1):
// rowmajor -> its transpose is column-major with ld s0 (op N in the C^T = B^T A^T formulation);
// colmajor -> op T with ld s1. Anything else must be copied first.
struct Operand {
  bool ok;
  cublasOperation_t op;
  int64_t ld;
};

Operand operand(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  const int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
  if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= c1)) return {true, CUBLAS_OP_N, rows > 1 ? s0 : c1};
  if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= r1)) return {true, CUBLAS_OP_T, cols > 1 ? s1 : r1};
  return {false, CUBLAS_OP_N, 0};
}

// A contiguous copy when the view can't be handed to cuBLAS as it is.
const Tensor& gemm_ready(const Tensor& t, std::unique_ptr<Tensor>& keep) {
  const size_t nd = t.sizes().size();
  const Operand o = operand(t.sizes()[nd - 2], t.sizes()[nd - 1], t.strides()[nd - 2], t.strides()[nd - 1]);
  if (o.ok) return t;
  keep.reset(aoti_host::cuda::clone_contiguous(t));
  return *keep;
}
// out[b] = alpha * a[b] @ m[b] + beta * out[b] for b < batch (batch 0: plain 2-d).
void gemm(Tensor& out, const Tensor& a_in, const Tensor& b_in, double alpha, double beta, const char* op) {
  const bool batched = out.dim() == 3;
  const size_t nd = batched ? 3 : 2;
  if (a_in.dim() != static_cast<int64_t>(nd) || b_in.dim() != static_cast<int64_t>(nd) ||
      out.dim() != static_cast<int64_t>(nd))
    throw Error(std::string(op) + ": expected " + std::to_string(nd) + "-d tensors, got " + list_str(a_in.sizes()) +
                ", " + list_str(b_in.sizes()) + " -> " + list_str(out.sizes()));
  const int64_t batch = batched ? out.sizes()[0] : 1;
  const int64_t m = a_in.sizes()[nd - 2], k = a_in.sizes()[nd - 1], n = b_in.sizes()[nd - 1];
  if (b_in.sizes()[nd - 2] != k || out.sizes()[nd - 2] != m || out.sizes()[nd - 1] != n ||
      (batched && (a_in.sizes()[0] != batch || b_in.sizes()[0] != batch)))
    throw Error(std::string(op) + ": shapes " + list_str(a_in.sizes()) + " @ " + list_str(b_in.sizes()) +
                " do not give " + list_str(out.sizes()));
  if (a_in.dtype() != out.dtype() || b_in.dtype() != out.dtype())
    throw Error(std::string(op) + ": mixed dtypes " + aoti_host::dtype_name(a_in.dtype()) + ", " +
                aoti_host::dtype_name(b_in.dtype()) + " -> " + aoti_host::dtype_name(out.dtype()));
  const int device = out.device_index();
  require_cuda(out, "out", op, device);
  require_cuda(a_in, "mat1", op, device);
  require_cuda(b_in, "mat2", op, device);
  if (m == 0 || n == 0 || batch == 0) return;
  std::unique_ptr<Tensor> ka, kb, kout;
  const Tensor& a = gemm_ready(a_in, ka);
  const Tensor& b = gemm_ready(b_in, kb);
  Tensor* c = &out;
  const Operand oc = operand(m, n, out.strides()[nd - 2], out.strides()[nd - 1]);
  if (!oc.ok || oc.op != CUBLAS_OP_N) {
    kout.reset(aoti_host::cuda::clone_contiguous(out));  // keeps out's values for beta != 0
    c = kout.get();
  }
  const Operand oa = operand(m, k, a.strides()[nd - 2], a.strides()[nd - 1]);
  const Operand ob = operand(k, n, b.strides()[nd - 2], b.strides()[nd - 1]);
  const Operand occ = operand(m, n, c->strides()[nd - 2], c->strides()[nd - 1]);
  const GemmType t = gemm_type(out.dtype(), op);
  cublasHandle_t h = handle_for(device);
  const float af = static_cast<float>(alpha), bf = static_cast<float>(beta);
  const void* pa = t.compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha) : &af;
  const void* pb = t.compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta) : &bf;
  const int ki = static_cast<int>(k);
  // C^T (n x m, column-major) = B^T (n x k) * A^T (k x m)
  if (!batched) {
    cublas_check(cublasGemmEx(h, ob.op, oa.op, static_cast<int>(n), static_cast<int>(m), ki, pa, b.data_ptr(), t.data,
                              static_cast<int>(ob.ld), a.data_ptr(), t.data, static_cast<int>(oa.ld), pb,
                              c->data_ptr(), t.data, static_cast<int>(occ.ld), t.compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  } else {
    cublas_check(cublasGemmStridedBatchedEx(h, ob.op, oa.op, static_cast<int>(n), static_cast<int>(m), ki, pa,
                                            b.data_ptr(), t.data, static_cast<int>(ob.ld), b.strides()[0],
                                            a.data_ptr(), t.data, static_cast<int>(oa.ld), a.strides()[0], pb,
                                            c->data_ptr(), t.data, static_cast<int>(occ.ld), c->strides()[0],
                                            static_cast<int>(batch), t.compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  }
  if (kout) aoti_host::cuda::copy(out, *kout);
}

// addmm with a bias row, as ATen does it (gemm_and_bias): one cublasLt matmul whose epilogue adds the bias,
// instead of a broadcast copy of the bias into out followed by a gemm with beta = 1 (two kernels, two nodes
// in a captured graph). Descriptors and the heuristic's algorithm are made once per problem and thread.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  ~LtPlan() {
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

constexpr size_t kLtWorkspaceBytes = size_t{4} << 20;

struct LtHandle {
  cublasLtHandle_t h = nullptr;
  void* workspace = nullptr;
  // (m, n, k, dtype, op a, op b, lda, ldb, pointer alignments of a, b, c and bias) -> plan
  std::map<std::tuple<int64_t, int64_t, int64_t, int32_t, int, int, int64_t, int64_t, int, int, int, int>,
           std::unique_ptr<LtPlan>> plans;
  ~LtHandle() {
    plans.clear();
    if (h != nullptr) cublasLtDestroy(h);
    if (workspace != nullptr) cudaFree(workspace);
  }
};

LtHandle& lt_for(int device) {
  return per_thread<LtHandle>(device, [device] {
    const aoti_host::cuda::OnDevice on(device);
    auto h = std::make_unique<LtHandle>();
    cublas_check(cublasLtCreate(&h->h), "cublasLtCreate");
    AOTI_CUDA_CHECK(cudaMalloc(&h->workspace, kLtWorkspaceBytes));
    return h;
  });
}

int alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  for (int a : {16, 8, 4, 2})
    if (v % static_cast<uintptr_t>(a) == 0) return a;
  return 1;
}

// true when done; false when the case is not one the epilogue path takes (the caller falls back).
bool addmm_bias_lt(Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b, double alpha) {
  if (out.dim() != 2 || a.dim() != 2 || b.dim() != 2) return false;
  const int32_t dt = out.dtype();
  if (dt != dc::kFloat32 && dt != dc::kFloat16 && dt != dc::kBFloat16) return false;
  if (a.dtype() != dt || b.dtype() != dt || bias.dtype() != dt) return false;
  const int64_t m = out.sizes()[0], n = out.sizes()[1], k = a.sizes()[1];
  if (m < 1 || n < 1 || k < 1 || a.sizes()[0] != m || b.sizes()[0] != k || b.sizes()[1] != n) return false;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) return false;
  // the bias: [n] contiguous, or a row broadcast over out ([m or 1, n] with strides (0 or any for size 1, 1))
  const bool row = (bias.dim() == 1 && bias.sizes()[0] == n && (n == 1 || bias.strides()[0] == 1)) ||
                   (bias.dim() == 2 && bias.sizes()[1] == n && (n == 1 || bias.strides()[1] == 1) &&
                    (bias.sizes()[0] == 1 || (bias.sizes()[0] == m && bias.strides()[0] == 0)));
  if (!row) return false;
  const int device = out.device_index();
  for (const Tensor* t : {&a, &b, &bias})
    if (t->device_type() != aoti_host::device_code::kCUDA || t->device_index() != device) return false;
  // out row-major contiguous rows (C^T column-major with ld = its row stride); a and b as cuBLAS takes them
  const Operand oc = operand(m, n, out.strides()[0], out.strides()[1]);
  const Operand oa = operand(m, k, a.strides()[0], a.strides()[1]);
  const Operand ob = operand(k, n, b.strides()[0], b.strides()[1]);
  if (!oc.ok || oc.op != CUBLAS_OP_N || !oa.ok || !ob.ok) return false;
  LtHandle& lt = lt_for(device);
  const auto key = std::make_tuple(m, n, k, dt, static_cast<int>(oa.op), static_cast<int>(ob.op), oa.ld, ob.ld,
                                   alignment(a.data_ptr()), alignment(b.data_ptr()), alignment(out.data_ptr()),
                                   alignment(bias.data_ptr()));
  std::unique_ptr<LtPlan>& plan = lt.plans[key];
  if (!plan) {
    plan = std::make_unique<LtPlan>();
    const cudaDataType_t data = gemm_type(dt, "addmm").data;
    const cublasOperation_t opa = ob.op, opb = oa.op;  // C^T (n x m) = B^T (n x k) * A^T (k x m)
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const int64_t rows_a = opa == CUBLAS_OP_N ? n : k, cols_a = opa == CUBLAS_OP_N ? k : n;
    const int64_t rows_b = opb == CUBLAS_OP_N ? k : m, cols_b = opb == CUBLAS_OP_N ? m : k;
    bool made = cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)) ==
                    CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)) ==
                    CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)) ==
                    CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&plan->a, data, static_cast<uint64_t>(rows_a), static_cast<uint64_t>(cols_a),
                                           ob.ld) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&plan->b, data, static_cast<uint64_t>(rows_b), static_cast<uint64_t>(cols_b),
                                           oa.ld) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&plan->c, data, static_cast<uint64_t>(n), static_cast<uint64_t>(m), oc.ld) ==
                    CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreference_t pref = nullptr;
    if (made && cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
      const uint64_t ws = kLtWorkspaceBytes;
      const uint32_t al[4] = {static_cast<uint32_t>(std::get<8>(key)), static_cast<uint32_t>(std::get<9>(key)),
                              static_cast<uint32_t>(std::get<10>(key)), static_cast<uint32_t>(std::get<10>(key))};
      // cuBLAS's A is our b, its B our a
      made = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[1],
                                                  sizeof(al[1])) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[0],
                                                  sizeof(al[0])) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2],
                                                  sizeof(al[2])) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3],
                                                  sizeof(al[3])) == CUBLAS_STATUS_SUCCESS;
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      made = made && cublasLtMatmulAlgoGetHeuristic(lt.h, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1,
                                                    &result, &found) == CUBLAS_STATUS_SUCCESS &&
             found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
      if (made) plan->algo = result.algo;
      cublasLtMatmulPreferenceDestroy(pref);
    }
    plan->ok = made;
  }
  if (!plan->ok) return false;
  const void* bias_ptr = bias.data_ptr();
  cublas_check(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                              sizeof(bias_ptr)),
               "cublasLtMatmulDescSetAttribute(bias)");
  const float af = static_cast<float>(alpha), bf = 0.0f;
  cublas_check(cublasLtMatmul(lt.h, plan->desc, &af, b.data_ptr(), plan->a, a.data_ptr(), plan->b, &bf,
                              out.data_ptr(), plan->c, out.data_ptr(), plan->c, &plan->algo, lt.workspace,
                              kLtWorkspaceBytes, aoti_host::cuda::stream_of(device)),
               "cublasLtMatmul");
  return true;
}

}  // namespace

namespace aoti_host {
namespace cuda {

bool attention_gemm(int32_t dtype, void* out, float* lse, const void* q, const void* k, const void* v,
                    const void* bias, const AttentionSpec& spec, int device, cudaStream_t stream) {
  const AttentionSpec& s = spec;
  size_t esize = 0;
  cudaDataType_t data{};
  switch (dtype) {
    case dc::kFloat32: esize = 4, data = CUDA_R_32F; break;
    case dc::kFloat16: esize = 2, data = CUDA_R_16F; break;
    case dc::kBFloat16: esize = 2, data = CUDA_R_16BF; break;
    default: return false;
  }
  if (s.b < 1 || s.h < 1 || s.m < 1 || s.n < 1 || s.d < 1 || s.dv < 1) return false;
  if (s.m > INT_MAX || s.n > INT_MAX - 7 || s.d > INT_MAX || s.dv > INT_MAX) return false;
  // Per batch entry, q is [M, D] (strides q_st[2], q_st[3]), k^T [D, N], v [N, Dv], out [M, Dv]. A check
  // at the full sizes covers every block of rows and keys (the conditions only get weaker for fewer).
  const Operand oq = operand(s.m, s.d, s.q_st[2], s.q_st[3]);
  const Operand okt = operand(s.d, s.n, s.k_st[3], s.k_st[2]);
  const Operand ov = operand(s.n, s.dv, s.v_st[2], s.v_st[3]);
  const Operand oo = operand(s.m, s.dv, s.o_st[2], s.o_st[3]);
  if (!oq.ok || !okt.ok || !ov.ok || !oo.ok || oo.op != CUBLAS_OP_N) return false;
  for (const Operand* o : {&oq, &okt, &ov, &oo})
    if (o->ld > INT_MAX) return false;
  // One strided batch over the B * H entries when every tensor steps uniformly over them (b * H + h);
  // else (a [B, M, H, D] layout, say) one pointer-array batch over them, so the launches do not grow with B.
  const int64_t* sts[4] = {s.q_st, s.k_st, s.v_st, s.o_st};
  bool strided = true;
  for (const int64_t* st : sts) strided = strided && (s.b == 1 || s.h == 1 || st[0] == s.h * st[1]);
  if (!strided && dtype != dc::kFloat32 && s.d <= kMaxHeadDim && s.dv <= kMaxHeadDim) {
    // cuBLAS's tensor-core kernels need the pointers of a pointer-array batch 16-byte aligned (it cannot see
    // them to check); a layout that does not give that runs on the fused kernel.
    bool aligned = true;
    for (const void* p : {q, k, v, static_cast<const void*>(out)}) aligned = aligned && alignment(p) == 16;
    for (const int64_t* st : sts)
      for (int d = 0; d < 3; ++d) aligned = aligned && (st[d] * static_cast<int64_t>(esize)) % 16 == 0;
    if (!aligned) return false;
  }
  const int64_t entries = s.b * s.h;
  int64_t entry_st[4];
  for (int t = 0; t < 4; ++t) entry_st[t] = s.h == 1 ? sts[t][0] : sts[t][1];
  // Scratch per (entry, query row): the float32 scores in rows of ld (a multiple of 8: 16-byte aligned rows for
  // the softmax's float4 accesses and for cuBLAS), and the probabilities in the input dtype unless they overwrite
  // the scores (float32).
  const int64_t ld = (s.n + 7) / 8 * 8;
  const size_t row_bytes = static_cast<size_t>(ld) * (4 + (dtype == dc::kFloat32 ? 0 : esize));
  if (row_bytes > kAttentionScratchBytes) return false;
  // blocks of rows_per query rows of `group` entries: all entries when one row of each fits, else fewer
  int64_t group = entries;
  int64_t rows_per = static_cast<int64_t>(kAttentionScratchBytes / (static_cast<size_t>(entries) * row_bytes));
  if (rows_per == 0) rows_per = 1, group = static_cast<int64_t>(kAttentionScratchBytes / row_bytes);
  // causal: blocks of rows skip the keys no row of theirs sees (about 8 blocks: a little over half the work of the
  // full square, for few launches)
  if (s.causal) rows_per = std::min<int64_t>(rows_per, std::max<int64_t>(128, (s.m + 7) / 8));
  rows_per = std::min(rows_per, s.m);
  group = std::min<int64_t>(group, INT_MAX);
  const int64_t blocks = (s.m + rows_per - 1) / rows_per;
  const int64_t estride = rows_per * ld;  // scores (and probs) of one entry
  const size_t score_bytes = static_cast<size_t>(group * estride) * 4;
  const size_t prob_off = (score_bytes + 255) / 256 * 256;
  const size_t prob_end = dtype == dc::kFloat32 ? score_bytes : prob_off + static_cast<size_t>(group * estride) * esize;
  const size_t ptr_off = (prob_end + 255) / 256 * 256;
  const int64_t ptr_count = strided ? 0 : group * (4 + 2 * blocks);
  const size_t total = ptr_off + static_cast<size_t>(ptr_count) * sizeof(void*);
  std::unique_ptr<Tensor> scratch(
      Tensor::empty_strided(dc::kUInt8, {static_cast<int64_t>(total)}, {1}, aoti_host::device_code::kCUDA, device));
  char* base = static_cast<char*>(scratch->data_ptr());
  float* scores = reinterpret_cast<float*>(base);
  void* probs = dtype == dc::kFloat32 ? static_cast<void*>(base) : static_cast<void*>(base + prob_off);
  void** ptrs = reinterpret_cast<void**>(base + ptr_off);
  cublasHandle_t h = handle_for(device);  // on the thread's current stream, the one `stream` is
  const float one = 1.f, zero = 0.f, scale = s.scale;
  const int64_t es = static_cast<int64_t>(esize);
  auto at = [&](const void* p, int64_t elems) {
    return static_cast<const void*>(static_cast<const char*>(p) + elems * es);
  };
  for (int64_t g0 = 0; g0 < entries; g0 += group) {
    const int64_t gc = std::min(group, entries - g0);
    const int64_t b0 = g0 / s.h, h0 = g0 % s.h;
    // the group's first entry in each tensor
    const void* qg = at(q, b0 * s.q_st[0] + h0 * s.q_st[1]);
    const void* kg = at(k, b0 * s.k_st[0] + h0 * s.k_st[1]);
    const void* vg = at(v, b0 * s.v_st[0] + h0 * s.v_st[1]);
    const void* og = at(out, b0 * s.o_st[0] + h0 * s.o_st[1]);
    if (!strided) {
      AttentionPtrSpec ps{};
      const void* bases[6] = {kg, vg, scores, probs, qg, og};
      const int64_t own0 = s.h * estride, own1 = estride;  // scratch: entry e at e * estride
      const int64_t st0[6] = {s.k_st[0], s.v_st[0], own0, own0, s.q_st[0], s.o_st[0]};
      const int64_t st1[6] = {s.k_st[1], s.v_st[1], own1, own1, s.q_st[1], s.o_st[1]};
      for (int t = 0; t < 6; ++t) {
        const int64_t bytes = t == 2 ? 4 : es;  // scores are float32, probs the dtype
        ps.base[t] = static_cast<const char*>(bases[t]);
        ps.st0[t] = st0[t] * bytes, ps.st1[t] = st1[t] * bytes;
      }
      ps.row_step[0] = rows_per * s.q_st[2] * es, ps.row_step[1] = rows_per * s.o_st[2] * es;
      ps.count = gc, ps.bh0 = g0, ps.heads = s.h, ps.blocks = blocks;
      launch_attention_pointers(ptrs, ps, stream);
    }
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const int64_t i0 = kb * rows_per, rows = std::min(rows_per, s.m - i0);
      int64_t n_eff = s.n;  // keys any row of this block can see
      if (s.causal) n_eff = std::max<int64_t>(1, std::min(s.n, i0 + rows + s.causal_offset));
      const Operand a = operand(rows, s.d, s.q_st[2], s.q_st[3]);
      const Operand kt = operand(s.d, n_eff, s.k_st[3], s.k_st[2]);
      const Operand vv = operand(n_eff, s.dv, s.v_st[2], s.v_st[3]);
      const Operand o = operand(rows, s.dv, s.o_st[2], s.o_st[3]);
      const Operand p = operand(rows, n_eff, ld, 1);
      if (!a.ok || !kt.ok || !vv.ok || !o.ok || o.op != CUBLAS_OP_N || !p.ok)
        throw Error("attention on cuda: internal error: a block's layout does not fit cuBLAS");
      const int ni = static_cast<int>(n_eff), ri = static_cast<int>(rows), gi = static_cast<int>(gc);
      // scores^T (n_eff x rows, column-major, ld) = (k^T)^T-as-stored x q^T, as in gemm() above
      if (strided) {
        cublas_check(cublasGemmStridedBatchedEx(h, kt.op, a.op, ni, ri, static_cast<int>(s.d), &scale, kg, data,
                                                static_cast<int>(kt.ld), entry_st[1], at(qg, i0 * s.q_st[2]), data,
                                                static_cast<int>(a.ld), entry_st[0], &zero, scores, CUDA_R_32F,
                                                static_cast<int>(ld), estride, gi, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT),
                     "cublasGemmStridedBatchedEx (attention scores)");
      } else {
        void* const* fixed = ptrs;  // [K, V, S, P][gc]
        void* const* row_ptrs = ptrs + (4 + 2 * kb) * gc;  // [Q, O][gc] of this block
        cublas_check(cublasGemmBatchedEx(h, kt.op, a.op, ni, ri, static_cast<int>(s.d), &scale, fixed, data,
                                         static_cast<int>(kt.ld), row_ptrs, data, static_cast<int>(a.ld), &zero,
                                         fixed + 2 * gc, CUDA_R_32F, static_cast<int>(ld), gi, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT),
                     "cublasGemmBatchedEx (attention scores)");
      }
      AttentionSpec bs = s;
      bs.n = n_eff;
      launch_attention_softmax(dtype, scores, probs, lse, bias, bs, i0, rows, g0, gc, ld, estride, stream);
      // out^T (dv x rows) = v^T x p^T
      if (strided) {
        cublas_check(cublasGemmStridedBatchedEx(h, vv.op, p.op, static_cast<int>(s.dv), ri, ni, &one, vg, data,
                                                static_cast<int>(vv.ld), entry_st[2], probs, data,
                                                static_cast<int>(p.ld), estride, &zero,
                                                const_cast<void*>(at(og, i0 * s.o_st[2])), data,
                                                static_cast<int>(o.ld), entry_st[3], gi, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT),
                     "cublasGemmStridedBatchedEx (attention output)");
      } else {
        void* const* fixed = ptrs;
        void* const* row_ptrs = ptrs + (4 + 2 * kb) * gc;
        cublas_check(cublasGemmBatchedEx(h, vv.op, p.op, static_cast<int>(s.dv), ri, ni, &one, fixed + gc, data,
                                         static_cast<int>(vv.ld), fixed + 3 * gc, data, static_cast<int>(p.ld),
                                         &zero, row_ptrs + gc, data, static_cast<int>(o.ld), gi,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmBatchedEx (attention output)");
      }
    }
  }
  return true;
}

void mm_out(Tensor& out, const Tensor& self, const Tensor& mat2) { gemm(out, self, mat2, 1.0, 0.0, "mm"); }

void bmm_out(Tensor& out, const Tensor& self, const Tensor& mat2) {
  if (out.dim() != 3) throw Error("bmm: out must be 3-d, got " + list_str(out.sizes()));
  gemm(out, self, mat2, 1.0, 0.0, "bmm");
}

// out = beta * self + alpha * (mat1 @ mat2); self broadcasts to out (a bias row, usually). With
// beta == 0 self is not read, as in ATen.
void addmm_out(Tensor& out, const Tensor& self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha) {
  if (out.dim() != 2) throw Error("addmm: out must be 2-d, got " + list_str(out.sizes()));
  if (beta == 1.0 && out.data_ptr() != self.data_ptr() && addmm_bias_lt(out, self, mat1, mat2, alpha)) return;
  if (beta != 0.0 && out.data_ptr() != self.data_ptr()) cuda::copy(out, self);
  gemm(out, mat1, mat2, alpha, beta, "addmm");
}

}  // namespace cuda
}  // namespace aoti_host
