// Attention through cuDNN's fused SDPA (cudnn_sdpa.h): one cudnn-frontend graph per problem (sizes, strides,
// dtype, scale, causal alignment, bias layout, logsumexp layout), built with cuDNN's heuristics' first engine
// that supports it, executed on the op's stream with its workspace from the device allocator (the graph's arena
// while capturing), as ATen's cuDNN attention does. Inference only: no dropout; the logsumexp (cuDNN's "stats",
// natural log) only where the caller wants it.
#include "shims/cuda/cudnn_sdpa.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/tensor.h"
#include "shims/cuda/cuda_util.h"
#include "shims/cuda/cudnn_conv.h"

#if defined(AOTI_HAVE_CUDNN_FRONTEND)
#include "shims/cuda/cudnn_fe.h"
#endif

namespace aoti_host {
namespace cuda {
namespace {

namespace dc = aoti_host::dtype_code;

using Mode = CudnnMode;

// Says once per process that attention runs on the runtime's own kernels, and why.
void say_unavailable(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&why] {
    log(LogLevel::Warning,
        "attention on cuda runs on the runtime's own kernels (much slower than cuDNN's fused attention): %s",
        why.c_str());
  });
}

#if defined(AOTI_HAVE_CUDNN_FRONTEND)

namespace fe = ::cudnn_frontend;

// The uids of the graph's tensors in the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kBias };

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  std::atomic<bool> ok{false};
  std::atomic<bool> ran{false};  // executed once: later failures are errors, not refusals
  std::string why_not;
};

// The causal mask's alignment: none, top-left (key j visible to query i when j <= i) or bottom-right (j <= i + N - M).
enum class Causal { kNone, kTopLeft, kBottomRight };

Causal causal_of(const AttentionSpec& s) {
  if (!s.causal) return Causal::kNone;
  return s.causal_offset == 0 ? Causal::kTopLeft : Causal::kBottomRight;
}

size_t elem_size(int32_t dtype) { return dtype == dc::kFloat32 ? 4 : 2; }

// The bias as cuDNN takes it, [B or 1, H or 1, M, N], as ATen hands it to cuDNN: batch and head dimensions it is
// broadcast over (stride 0) become size 1 (with the stride of a packed tensor of the rest); the query and key
// dimensions keep their full sizes and strides, 0 where broadcast (a key-padding mask's rows).
void bias_layout(const AttentionSpec& s, std::vector<int64_t>& dims, std::vector<int64_t>& strides) {
  dims = {s.b, s.h, s.m, s.n};
  strides = {s.bias_st[0], s.bias_st[1], s.bias_st[2], s.bias_st[3]};
  int64_t packed = std::max<int64_t>(1, std::max(strides[2] * s.m, strides[3] * s.n));
  for (int d = 1; d >= 0; --d) {
    if (strides[d] != 0 && dims[d] != 1) {
      packed = std::max(packed, strides[d] * dims[d]);
      continue;
    }
    dims[d] = 1;
    strides[d] = packed;
  }
}

// Why cuDNN can't take this problem as given, before asking it ("" where it may). cuDNN's fused attention reads
// float16/bfloat16 with unit-stride head dimensions and 16-byte aligned rows.
std::string precheck(int32_t dtype, const void* q, const void* k, const void* v, const void* bias, const void* out,
                     const AttentionSpec& s) {
  if (dtype != dc::kFloat16 && dtype != dc::kBFloat16)
    return std::string("dtype ") + dtype_name(dtype) + " (cuDNN's fused attention takes float16 and bfloat16)";
  if (s.bias_dtype == dc::kBool) return "a boolean mask (cuDNN's fused attention takes an additive bias)";
  if (s.bias_dtype >= 0 && s.bias_dtype != dtype) return "a bias of another dtype than the query's";
  if (s.causal && s.causal_offset < 0)
    return "a bottom-right causal mask with more queries than keys (rows with every key masked)";
  if (s.n == 0) return "no keys";
  if (s.d % 8 != 0 || s.dv % 8 != 0)
    return "head sizes " + std::to_string(s.d) + "/" + std::to_string(s.dv) + " (cuDNN needs multiples of 8)";
  const int64_t* st[] = {s.q_st, s.k_st, s.v_st, s.o_st};
  const void* ptr[] = {q, k, v, out};
  const char* name[] = {"query", "key", "value", "output"};
  const size_t es = elem_size(dtype);
  for (int t = 0; t < 4; ++t) {
    if (st[t][3] != 1) return std::string("a ") + name[t] + " whose head dimension is not unit-stride";
    if (reinterpret_cast<uintptr_t>(ptr[t]) % 16 != 0) return std::string("a ") + name[t] + " not 16-byte aligned";
    for (int d = 0; d < 3; ++d)
      if ((st[t][d] * static_cast<int64_t>(es)) % 16 != 0)
        return std::string("a ") + name[t] + " whose rows are not 16-byte aligned (strides)";
  }
  if (bias != nullptr) {
    std::vector<int64_t> dims, strides;
    bias_layout(s, dims, strides);
    if (dims[3] > 1 && strides[3] != 1) return "a bias whose key dimension is not unit-stride";
    if (reinterpret_cast<uintptr_t>(bias) % 16 != 0) return "a bias not 16-byte aligned";
  }
  return "";
}

std::string plan_key(int device, int32_t dtype, const AttentionSpec& s, bool stats, bool bias) {
  std::vector<int64_t> k{device, dtype, s.b, s.h, s.m, s.n, s.d, s.dv, static_cast<int64_t>(causal_of(s)), stats, bias};
  for (const int64_t* st : {s.q_st, s.k_st, s.v_st, s.o_st}) k.insert(k.end(), st, st + 4);
  if (bias) {
    std::vector<int64_t> dims, strides;
    bias_layout(s, dims, strides);
    k.insert(k.end(), dims.begin(), dims.end());
    k.insert(k.end(), strides.begin(), strides.end());
  }
  if (stats) k.insert(k.end(), s.lse_st, s.lse_st + 3);
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &s.scale, sizeof(scale_bits));
  k.push_back(scale_bits);
  return std::string(reinterpret_cast<const char*>(k.data()), k.size() * sizeof(int64_t));
}

std::string describe(int32_t dtype, const AttentionSpec& s, bool bias) {
  const char* causal[] = {"", ", causal (top-left)", ", causal (bottom-right)"};
  std::string d = "attention of B=" + std::to_string(s.b) + " H=" + std::to_string(s.h) + " M=" + std::to_string(s.m) +
                  " N=" + std::to_string(s.n) + " D=" + std::to_string(s.d) + " Dv=" + std::to_string(s.dv) + ", " +
                  dtype_name(dtype) + causal[static_cast<int>(causal_of(s))];
  if (bias) {
    std::vector<int64_t> dims, strides;
    bias_layout(s, dims, strides);
    d += ", with a bias of sizes " + list_str(dims) + " and strides " + list_str(strides);
  }
  return d;
}

// Builds the plan's graph for one problem; a refusal leaves ok false and says why (cuDNN's message).
void build_plan(Plan& p, cudnnHandle_t handle, int32_t dtype, const AttentionSpec& s, bool stats, bool bias) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dtype == dc::kBFloat16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, Uid uid, std::vector<int64_t> dims, std::vector<int64_t> strides) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dims)).set_stride(
        std::move(strides)));
  };
  auto Q = tensor("Q", kQ, {s.b, s.h, s.m, s.d}, {s.q_st[0], s.q_st[1], s.q_st[2], s.q_st[3]});
  auto K = tensor("K", kK, {s.b, s.h, s.n, s.d}, {s.k_st[0], s.k_st[1], s.k_st[2], s.k_st[3]});
  auto V = tensor("V", kV, {s.b, s.h, s.n, s.dv}, {s.v_st[0], s.v_st[1], s.v_st[2], s.v_st[3]});
  auto options = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(stats).set_attn_scale(s.scale);
  switch (causal_of(s)) {
    case Causal::kNone: break;
    case Causal::kTopLeft:
      options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
      break;
    case Causal::kBottomRight:
      options.set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT).set_diagonal_band_right_bound(0);
      break;
  }
  if (bias) {
    std::vector<int64_t> dims, strides;
    bias_layout(s, dims, strides);
    options.set_bias(tensor("bias", kBias, dims, strides));
  }
  auto [O, Stats] = g->sdpa(Q, K, V, options);
  O->set_output(true).set_uid(kO).set_dim({s.b, s.h, s.m, s.dv}).set_stride({s.o_st[0], s.o_st[1], s.o_st[2], s.o_st[3]});
  if (stats) {
    Stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({s.b, s.h, s.m, 1})
        .set_stride({s.lse_st[0], s.lse_st[1], s.lse_st[2], 1});
  }
  fe::error_t st = g->build(handle, {fe::HeurMode_t::A});
  if (!st.is_good()) {
    p.why_not = st.get_message();
    if (p.why_not.empty()) p.why_not = "cuDNN supports no engine for it";
    return;
  }
  int64_t ws = 0;
  st = g->get_workspace_size(ws);
  if (!st.is_good()) {
    p.why_not = "its workspace size: " + st.get_message();
    return;
  }
  p.graph = std::move(g);
  p.workspace = ws;
  p.ok = true;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<Plan>> plans;
  bool refused_logged = false;
};

Cache& cache() {
  static Cache* c = new Cache;  // plans live until exit (never destroyed after cuDNN may be gone)
  return *c;
}

void say_refused(Cache& c, const std::string& what, const std::string& why) {
  std::lock_guard<std::mutex> lock(c.mu);
  log(c.refused_logged ? LogLevel::Info : LogLevel::Warning,
      "cuDNN refuses the %s (%s): it runs on the runtime's own kernel", what.c_str(), why.c_str());
  c.refused_logged = true;
}

bool run(int32_t dtype, void* out, float* lse, const void* q, const void* k, const void* v, const void* bias,
         const AttentionSpec& s, int device, cudaStream_t stream) {
  Cache& c = cache();
  const bool stats = lse != nullptr, has_bias = bias != nullptr;
  const std::string key = plan_key(device, dtype, s, stats, has_bias);
  std::shared_ptr<Plan> plan;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.plans.find(key);
    if (it != c.plans.end()) plan = it->second;
  }
  if (plan != nullptr && !plan->ok) return false;
  // Alignment depends on the call's pointers, not only the plan's key: checked on every call.
  const std::string pre = precheck(dtype, q, k, v, bias, out, s);
  if (!pre.empty()) {
    if (plan == nullptr) {  // said once per problem: remembered as a refused plan
      auto refused = std::make_shared<Plan>();
      refused->why_not = pre;
      {
        std::lock_guard<std::mutex> lock(c.mu);
        c.plans.emplace(key, refused);
      }
      say_refused(c, describe(dtype, s, has_bias), pre);
    }
    return false;
  }
  const cudnnHandle_t handle = cudnn_fe::handle(device, stream);
  if (plan == nullptr) {
    auto fresh = std::make_shared<Plan>();
    try {
      build_plan(*fresh, handle, dtype, s, stats, has_bias);
    } catch (const std::exception& e) {
      fresh->ok = false;
      fresh->why_not = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(c.mu);
      plan = c.plans.emplace(key, fresh).first->second;
    }
    if (!fresh->ok) {
      say_refused(c, describe(dtype, s, has_bias), fresh->why_not);
      return false;
    }
    log(LogLevel::Debug, "cuDNN plan for the %s: workspace %lld bytes", describe(dtype, s, has_bias).c_str(),
        static_cast<long long>(fresh->workspace));
    if (!plan->ok) return false;
  }
  std::unique_ptr<Tensor> ws;
  if (plan->workspace > 0) ws.reset(new_cuda(dc::kUInt8, {plan->workspace}, device));
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)},
                                          {kV, const_cast<void*>(v)}, {kO, out}};
  if (stats) pack.emplace(kStats, lse);
  if (has_bias) pack.emplace(kBias, const_cast<void*>(bias));
  fe::error_t st;
  try {
    st = plan->graph->execute(handle, pack, ws ? ws->data_ptr() : nullptr);
  } catch (const std::exception& e) {
    st = fe::error_t{fe::error_code_t::GRAPH_EXECUTION_FAILED, e.what()};
  }
  if (!st.is_good()) {
    if (!plan->ran.load()) {  // cuDNN accepted the plan but not the call: this problem takes our kernel from now on
      plan->ok = false;
      plan->why_not = "the call failed: " + st.get_message();
      say_refused(c, describe(dtype, s, has_bias), plan->why_not);
      return false;
    }
    throw Error("cuDNN's fused attention failed for the " + describe(dtype, s, has_bias) + ": " + st.get_message());
  }
  plan->ran = true;
  return true;
}

#endif  // AOTI_HAVE_CUDNN_FRONTEND

}  // namespace

bool cudnn_attention(int32_t dtype, void* out, float* lse, const void* q, const void* k, const void* v,
                     const void* bias, const AttentionSpec& spec, int device, cudaStream_t stream) {
  const Mode mode = cudnn_mode_from_env("AOTI_HOST_CUDNN_SDPA", "run attention through cuDNN where it is available");
  if (mode == Mode::kOff) return false;
#if defined(AOTI_HAVE_CUDNN_FRONTEND)
  std::string why;
  if (!cudnn_fe::ready(&why)) {
    if (mode == Mode::kOn) throw Error("AOTI_HOST_CUDNN_SDPA=on asks for cuDNN's fused attention, but " + why);
    // ready() has thrown for a bad AOTI_HOST_CUDNN; off is quiet, as for convolutions.
    if (cudnn_mode_from_env("AOTI_HOST_CUDNN", "use cuDNN where it is found") != Mode::kOff) say_unavailable(why);
    return false;
  }
  static std::once_flag once;
  std::call_once(once, [] {
    const size_t v = cudnn_fe::version();
    log(LogLevel::Info, "attention on cuda runs through cuDNN %zu.%zu.%zu's fused attention (cudnn-frontend %d.%d.%d)",
        v / 10000, v / 100 % 100, v % 100, CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
        CUDNN_FRONTEND_PATCH_VERSION);
  });
  return run(dtype, out, lse, q, k, v, bias, spec, device, stream);
#else
  (void)dtype, (void)out, (void)lse, (void)q, (void)k, (void)v, (void)bias, (void)spec, (void)device, (void)stream;
  const std::string why =
      "this runtime was built without cudnn-frontend's and cuDNN's headers (docs/scons.md, \"cuDNN: attention on the "
      "GPU\": bash .ci/setup fetches them, then rebuild with scons cuda=on)";
  if (mode == Mode::kOn) throw Error("AOTI_HOST_CUDNN_SDPA=on asks for cuDNN's fused attention, but " + why);
  say_unavailable(why);
  return false;
#endif
}

}  // namespace cuda
}  // namespace aoti_host
