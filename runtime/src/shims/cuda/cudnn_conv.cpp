// Convolutions through cuDNN, with a per-shape plan cache: each shape, layout, dtype and alignment gets its
// plan once, on its first call. First through cuDNN's graph API (cudnn_graph_conv.h: cudnn-frontend, as torch
// since 2.x: the engine heuristics mode A ranks first, or with AOTI_HOST_CUDNN_BENCHMARK=1 the fastest
// measured); where the graph API refuses a shape (logged once per shape), or AOTI_HOST_CUDNN_GRAPH=0, or the
// runtime was built without cudnn-frontend, through the legacy convolution API (cudnnConvolutionForward;
// transposed convolutions through cudnnConvolutionBackwardData, as ATen runs them; the algorithm cuDNN's
// heuristics rank first, torch's default cudnn.benchmark=False, or cudnnFind's fastest with
// AOTI_HOST_CUDNN_BENCHMARK=1). The legacy API's algorithms lack the fast bfloat16 and channels-last
// depthwise kernels: on the H200 those ran 2.6-9x slower through it than torch's through the graph API
// (bench/results/gpu-h200-cudnn-run2-bench-conv.log). The workspace comes from the device allocator (the
// graph's arena while capturing).
//
// cuDNN is loaded at the first convolution (dlopen, cudnn_api.h): the file AOTI_HOST_CUDNN_LIBRARY names, else
// in turn the soname libcudnn.so.9 (already loaded, e.g. by torch in the same process, or on the loader's path:
// LD_LIBRARY_PATH, this library's RUNPATH, ldconfig); the nvidia-cudnn-cu13 wheel beside the loaded
// nvidia-cuda-runtime wheel (site-packages/nvidia/{cu13,cudnn}/lib); beside the loaded libcudart (a toolkit
// with cuDNN installed into it). Missing, the convolutions run on the runtime's own direct kernel and the log
// says so once, naming the package; AOTI_HOST_CUDNN=on makes that an error, =off never loads it.
//
// Float32 convolutions may use TF32 tensor cores, as torch's do by default (torch.backends.cudnn.allow_tf32
// is True, unlike torch.backends.cuda.matmul.allow_tf32); AOTI_HOST_CUDNN_ALLOW_TF32=0 turns that off, as
// allow_tf32=False does in torch (the graph API then passes over engines noted TENSOR_CORE, as ATen's filter
// does). Float16 and bfloat16 accumulate in float32, as ATen's do.
#include "shims/cuda/cudnn_conv.h"

#include <dlfcn.h>
#include <link.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "shims/cuda/cudnn_api.h"
#include "shims/cuda/cudnn_graph_conv.h"

namespace aoti_host {
namespace cuda {
namespace {

namespace dc = aoti_host::dtype_code;
using cudnn::Api;

constexpr int kCudnnMajor = 9;
constexpr int kCudaMajor = CUDART_VERSION / 1000;
// The largest workspace a plan may take; algorithms that want more are passed over.
constexpr size_t kMaxWorkspace = size_t{256} << 20;

std::string package_name() { return "nvidia-cudnn-cu" + std::to_string(kCudaMajor); }

using Mode = CudnnMode;

struct Loaded {
  Api api;
  void* dl = nullptr;  // the dlopen handle, for cudnn_library()
  bool ok = false;
  std::string description;  // "cuDNN 9.19.0 (path)" or why it is not used
};

// The directory of the loaded libcudart (the nvidia-cuda-runtime wheel's nvidia/cu13/lib, or the toolkit's
// lib64), or "".
std::string cudart_dir() {
  const std::string soname = "libcudart.so." + std::to_string(kCudaMajor);
  void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return "";
  std::string dir;
  link_map* lm = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr) {
    dir = lm->l_name;
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "" : dir.substr(0, slash);
  }
  dlclose(h);
  return dir;
}

std::string loaded_path(void* h) {
  link_map* lm = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr && *lm->l_name) return lm->l_name;
  return "?";
}

Loaded load(Mode mode) {
  Loaded out;
  if (mode == Mode::kOff) {
    out.description = "cuDNN not used (AOTI_HOST_CUDNN=off)";
    return out;
  }
  const std::string so = "libcudnn.so." + std::to_string(kCudnnMajor);
  std::vector<std::string> candidates;
  const char* library = std::getenv("AOTI_HOST_CUDNN_LIBRARY");
  if (library != nullptr && *library != '\0') {
    candidates.push_back(library);
  } else {
    candidates.push_back(so);
    const std::string dir = cudart_dir();
    if (!dir.empty()) {
      candidates.push_back(dir + "/../../cudnn/lib/" + so);  // pip: nvidia/cu13/lib -> nvidia/cudnn/lib
      candidates.push_back(dir + "/" + so);
    }
  }
  std::string tried;
  void* h = nullptr;
  for (const std::string& c : candidates) {
    h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) break;
    const char* e = dlerror();
    tried += "\n  " + c + ": " + (e != nullptr ? e : "not found");
  }
  const std::string fix = "`pip install " + package_name() + "` (torch's CUDA " + std::to_string(kCudaMajor) +
                          " wheels install it), a system cuDNN " + std::to_string(kCudnnMajor) + " for CUDA " +
                          std::to_string(kCudaMajor) + " on the loader's path, or AOTI_HOST_CUDNN_LIBRARY=/path/to/" + so;
  if (h == nullptr) {
    out.description = "cuDNN " + std::to_string(kCudnnMajor) + " for CUDA " + std::to_string(kCudaMajor) +
                      " (package " + package_name() + ") was not found; tried:" + tried + "\n  fix: " + fix;
    return out;
  }
  const std::string path = loaded_path(h);
  std::string missing;
#define AOTI_CUDNN_RESOLVE(name, ret, params)                                                   \
  out.api.name = reinterpret_cast<ret(*) params>(dlsym(h, #name));                                \
  if (out.api.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #name;
  AOTI_CUDNN_FUNCTIONS(AOTI_CUDNN_RESOLVE)
#undef AOTI_CUDNN_RESOLVE
  if (!missing.empty()) {
    out.description = path + " lacks " + missing + " (not cuDNN " + std::to_string(kCudnnMajor) + "?); fix: " + fix;
    return out;
  }
  const size_t version = out.api.cudnnGetVersion();
  const size_t cudart = out.api.cudnnGetCudartVersion();
  const std::string version_str = std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                                  std::to_string(version % 100);
  if (static_cast<int>(version / 10000) != kCudnnMajor || static_cast<int>(cudart / 1000) != kCudaMajor) {
    out.description = path + " is cuDNN " + version_str + " for CUDA " + std::to_string(cudart / 1000) +
                      "; this runtime needs cuDNN " + std::to_string(kCudnnMajor) + " for CUDA " +
                      std::to_string(kCudaMajor) + "; fix: " + fix;
    return out;
  }
  // The library stays loaded for the process's lifetime (handles and plans live until exit).
  out.ok = true;
  out.dl = h;
  out.description = "cuDNN " + version_str + " (" + path + ")";
  return out;
}

// Loads cuDNN once and says once what happened: at info level where it loaded, a warning naming the package
// where it did not (AOTI_HOST_CUDNN=auto), an error on every convolution with AOTI_HOST_CUDNN=on.
const Loaded& loaded() {
  static std::once_flag once;
  static std::unique_ptr<Loaded> state;
  static Mode mode = Mode::kAuto;
  static std::string env_error;
  std::call_once(once, [] {
    try {
      mode = cudnn_mode_from_env("AOTI_HOST_CUDNN", "use cuDNN where it is found");
    } catch (const Error& e) {
      env_error = e.what();
    }
    state = std::make_unique<Loaded>(env_error.empty() ? load(mode) : Loaded{});
    if (!env_error.empty()) return;
    if (state->ok)
      log(LogLevel::Info, "convolutions on cuda run through %s, %s", state->description.c_str(),
          cudnn_graph::compiled() ? "its graph API first (cudnn-frontend)"
                                  : "its legacy API only (this runtime was built without cudnn-frontend)");
    else if (mode == Mode::kAuto)
      log(LogLevel::Warning,
          "convolutions on cuda run on the runtime's own direct kernel (much slower than cuDNN): %s",
          state->description.c_str());
  });
  if (!env_error.empty()) throw Error(env_error);
  if (!state->ok && mode == Mode::kOn)
    throw Error("AOTI_HOST_CUDNN=on asks for cuDNN, which did not load: " + state->description);
  return *state;
}

// AOTI_HOST_CUDNN_ALLOW_TF32 (read on every call, like torch's flag): unset or 1, float32 convolutions may
// use TF32 tensor cores (torch.backends.cudnn.allow_tf32's default, True); 0, they don't.
bool allow_tf32() {
  const char* v = std::getenv("AOTI_HOST_CUDNN_ALLOW_TF32");
  return v == nullptr || *v == '\0' || std::strcmp(v, "0") != 0;
}

// AOTI_HOST_CUDNN_BENCHMARK: unset or 0, each shape's algorithm is the one cuDNN's heuristics rank first
// (torch's default, cudnn.benchmark=False); 1, the fastest cudnnFind measures on the shape's first call outside
// graph capture (torch's cudnn.benchmark=True). Measured on the H200, ResNet-18 (batch 8, float32, graphs) ran
// 0.44 ms per call with the heuristics' choices and 1.30 ms with cudnnFind's, so measuring is not the default.
bool benchmark() {
  const char* v = std::getenv("AOTI_HOST_CUDNN_BENCHMARK");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// AOTI_HOST_CUDNN_GRAPH (read on every call): unset or 1, the graph API first (where the runtime was built
// with cudnn-frontend); 0, the legacy API only (to compare the two, or to step around a graph-API problem).
bool use_graph() {
  if (!cudnn_graph::compiled()) return false;
  const char* v = std::getenv("AOTI_HOST_CUDNN_GRAPH");
  return v == nullptr || *v == '\0' || std::strcmp(v, "0") != 0;
}

// The byte alignment of `p` (at most 16, what cuDNN's vectorized engines want), which the graph API's plan
// assumes of the operands it runs on.
int64_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 16;
  while (align > 1 && a % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

std::string status_str(const Api& api, cudnn::Status s) {
  const char* name = api.cudnnGetErrorString(s);
  return name != nullptr ? name : "CUDNN_STATUS_" + std::to_string(s);
}

void check(const Api& api, cudnn::Status s, const char* what) {
  if (s != cudnn::kStatusSuccess) throw Error(std::string(what) + " failed: " + status_str(api, s));
}

// One handle per thread and device (cuDNN handles are not shared between threads).
cudnn::Handle handle_for(const Api& api, int device, cudaStream_t stream) {
  struct Owned {
    const Api* api = nullptr;
    cudnn::Handle h = nullptr;
    ~Owned() {
      if (h != nullptr) api->cudnnDestroy(h);
    }
  };
  thread_local std::array<Owned, 64> handles;
  Owned& slot = handles.at(static_cast<size_t>(device));
  if (slot.h == nullptr) {
    slot.api = &api;
    const OnDevice on(device);  // a handle belongs to the device current when it is created
    check(api, api.cudnnCreate(&slot.h), "cudnnCreate");
  }
  check(api, api.cudnnSetStream(slot.h, stream), "cudnnSetStream");
  return slot.h;
}

// The strides of a packed tensor of `sizes` (N, C, spatial...) in NCHW order or channels-last (NHWC/NDHWC).
std::vector<int64_t> packed_strides(const std::vector<int64_t>& sizes, bool channels_last) {
  std::vector<int64_t> st(sizes.size());
  int64_t s = 1;
  if (!channels_last) {
    for (size_t d = sizes.size(); d-- > 0;) st[d] = s, s *= std::max<int64_t>(sizes[d], 1);
    return st;
  }
  st[1] = s, s *= std::max<int64_t>(sizes[1], 1);
  for (size_t d = sizes.size(); d-- > 2;) st[d] = s, s *= std::max<int64_t>(sizes[d], 1);
  st[0] = s;
  return st;
}

// Whether `t` (sizes as given) is laid out as packed_strides says, ignoring the strides of size-1 dims.
bool packed_as(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, bool channels_last) {
  const std::vector<int64_t> want = packed_strides(sizes, channels_last);
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] > 1 && strides[d] != want[d]) return false;
  return true;
}

// cuDNN takes 4-d and 5-d tensors: a 1-d convolution's [N, C, L] becomes [N, C, 1, L], as in ATen.
std::vector<int64_t> as_cudnn_dims(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out = sizes;
  if (out.size() == 3) out.insert(out.begin() + 2, 1);
  return out;
}

struct Plan {
  const Api* api = nullptr;
  std::atomic<bool> ok{false};
  std::atomic<bool> ran{false};  // executed once: later failures are errors, not refusals
  bool channels_last = false;
  cudnn::TensorDesc x = nullptr, y = nullptr, b = nullptr;
  cudnn::FilterDesc w = nullptr;
  cudnn::ConvDesc conv = nullptr;
  bool transposed = false;
  std::shared_ptr<cudnn_graph::Plan> graph;  // the graph API's plan, else the legacy API's algorithm below
  int algo = 0;
  size_t workspace = 0;
  const char* chosen_by = "heuristics";
  std::string why_not;
  ~Plan() {
    if (api == nullptr) return;
    if (x != nullptr) api->cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) api->cudnnDestroyTensorDescriptor(y);
    if (b != nullptr) api->cudnnDestroyTensorDescriptor(b);
    if (w != nullptr) api->cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) api->cudnnDestroyConvolutionDescriptor(conv);
  }
};

bool fits_int(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x > INT32_MAX || x < 0) return false;
  return true;
}

std::vector<int> to_int(const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); }

// Chooses the legacy API's algorithm for the plan's descriptors: the heuristics' first that cuDNN accepts within
// the workspace limit. A refusal leaves ok false and says why.
void choose_legacy(Plan& p, const Api& api, cudnn::Handle h) {
  std::array<cudnn::AlgoPerf, 16> perf{};
  int returned = 0;
  const cudnn::Status st =
      p.transposed ? api.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.x, p.conv, p.y, cudnn::kBwdDataAlgoCount,
                                                                     &returned, perf.data())
                   : api.cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y, cudnn::kFwdAlgoCount, &returned,
                                                                perf.data());
  if (st != cudnn::kStatusSuccess) {
    p.why_not = "the algorithm heuristics: " + status_str(api, st);
    return;
  }
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != cudnn::kStatusSuccess) continue;
    size_t bytes = 0;
    const cudnn::Status ws_st =
        p.transposed ? api.cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.x, p.conv, p.y, perf[i].algo, &bytes)
                     : api.cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, perf[i].algo, &bytes);
    if (ws_st != cudnn::kStatusSuccess || bytes > kMaxWorkspace) continue;
    p.algo = perf[i].algo, p.workspace = bytes, p.chosen_by = "heuristics", p.ok = true;
    return;
  }
  p.why_not = "no algorithm (of " + std::to_string(returned) + " ranked) accepts it";
}

// How a new plan may use the graph API: at all (use_graph), building every engine for measuring (benchmark
// outside capture), and the operands' byte alignments (x, w, y).
struct GraphChoice {
  int device = 0;
  bool enabled = false;
  bool every_engine = false;
  std::array<int64_t, 3> align{16, 16, 16};
};

// Builds the plan for one shape: the legacy API's descriptors (also what adds the bias), then the graph API's
// plan where it is enabled and accepts the shape, else the legacy API's algorithm. A refusal of both leaves ok
// false and says why; a refusal of the graph API alone is in *graph_refusal.
void build_plan(Plan& p, const Loaded& lib, cudnn::Handle h, int32_t dtype, const ConvSpec& s, int spatial,
                const std::vector<int64_t>& in_sizes, const std::vector<int64_t>& w_sizes,
                const std::vector<int64_t>& out_sizes, bool cl, bool has_bias, const GraphChoice& gc,
                std::string* graph_refusal) {
  const Api& api = lib.api;
  p.api = &api;
  p.channels_last = cl;
  p.transposed = s.transposed;
  cudnn::DataType data = cudnn::kDataFloat, compute = cudnn::kDataFloat;
  cudnn::MathType math = cudnn::kDefaultMath;
  switch (dtype) {
    case dc::kFloat32: math = allow_tf32() ? cudnn::kDefaultMath : cudnn::kFmaMath; break;
    case dc::kFloat64: data = compute = cudnn::kDataDouble; break;
    case dc::kFloat16: data = cudnn::kDataHalf, math = cudnn::kTensorOpMath; break;
    // Tensor cores allowed for bfloat16 as for float16 (DEFAULT_MATH leaves the choice to cuDNN).
    case dc::kBFloat16: data = cudnn::kDataBFloat16, math = cudnn::kTensorOpMath; break;
    default: p.why_not = "dtype " + std::string(dtype_name(dtype)) + " is not one cuDNN convolves"; return;
  }
  const std::vector<int64_t> xs = as_cudnn_dims(in_sizes), ws = as_cudnn_dims(w_sizes), ys = as_cudnn_dims(out_sizes);
  const std::vector<int64_t> xst = packed_strides(xs, cl), yst = packed_strides(ys, cl);
  if (!fits_int(xs) || !fits_int(ws) || !fits_int(ys) || !fits_int(xst) || !fits_int(yst)) {
    p.why_not = "a size or stride past 2^31";
    return;
  }
  const int nd = static_cast<int>(xs.size()), conv_nd = nd - 2;
  std::vector<int> pad(conv_nd, 0), stride(conv_nd, 1), dil(conv_nd, 1);
  const int lead = conv_nd - spatial;  // 1 for a 1-d convolution (its inserted height), else 0
  for (int d = 0; d < spatial; ++d) {
    const int e = d + (3 - spatial);
    pad[lead + d] = static_cast<int>(s.padding[e]);
    stride[lead + d] = static_cast<int>(s.stride[e]);
    dil[lead + d] = static_cast<int>(s.dilation[e]);
  }
  auto step = [&](cudnn::Status st, const char* what) {
    if (st != cudnn::kStatusSuccess && p.why_not.empty()) p.why_not = std::string(what) + ": " + status_str(api, st);
    return st == cudnn::kStatusSuccess;
  };
  const std::vector<int> xi = to_int(xs), xsi = to_int(xst), yi = to_int(ys), ysi = to_int(yst), wi = to_int(ws);
  if (!step(api.cudnnCreateTensorDescriptor(&p.x), "cudnnCreateTensorDescriptor") ||
      !step(api.cudnnSetTensorNdDescriptor(p.x, data, nd, xi.data(), xsi.data()), "input descriptor") ||
      !step(api.cudnnCreateTensorDescriptor(&p.y), "cudnnCreateTensorDescriptor") ||
      !step(api.cudnnSetTensorNdDescriptor(p.y, data, nd, yi.data(), ysi.data()), "output descriptor") ||
      !step(api.cudnnCreateFilterDescriptor(&p.w), "cudnnCreateFilterDescriptor") ||
      !step(api.cudnnSetFilterNdDescriptor(p.w, data, cl ? cudnn::kNHWC : cudnn::kNCHW, nd, wi.data()),
            "weight descriptor") ||
      !step(api.cudnnCreateConvolutionDescriptor(&p.conv), "cudnnCreateConvolutionDescriptor") ||
      !step(api.cudnnSetConvolutionNdDescriptor(p.conv, conv_nd, pad.data(), stride.data(), dil.data(),
                                                cudnn::kCrossCorrelation, compute),
            "convolution descriptor") ||
      !step(api.cudnnSetConvolutionGroupCount(p.conv, static_cast<int>(s.groups)), "cudnnSetConvolutionGroupCount") ||
      !step(api.cudnnSetConvolutionMathType(p.conv, math), "cudnnSetConvolutionMathType"))
    return;
  if (has_bias) {
    std::vector<int> bd(static_cast<size_t>(nd), 1), bst(static_cast<size_t>(nd), 1);
    bd[1] = static_cast<int>(ys[1]), bst[0] = static_cast<int>(ys[1]);
    if (!step(api.cudnnCreateTensorDescriptor(&p.b), "cudnnCreateTensorDescriptor") ||
        !step(api.cudnnSetTensorNdDescriptor(p.b, data, nd, bd.data(), bst.data()), "bias descriptor"))
      return;
  }
  if (gc.enabled) {
    cudnn_graph::Conv c;
    c.dtype = dtype, c.transposed = s.transposed, c.allow_tf32 = allow_tf32();
    c.x_dims = xs, c.x_strides = xst, c.y_dims = ys, c.y_strides = yst;
    c.w_dims = ws, c.w_strides = packed_strides(ws, cl);
    c.padding.assign(pad.begin(), pad.end()), c.stride.assign(stride.begin(), stride.end());
    c.dilation.assign(dil.begin(), dil.end());
    c.x_align = gc.align[0], c.w_align = gc.align[1], c.y_align = gc.align[2];
    c.max_workspace = static_cast<int64_t>(kMaxWorkspace);
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, gc.device) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, gc.device) == cudaSuccess)
      c.sm_version = major * 10 + minor;
    p.graph = cudnn_graph::build(h, c, gc.every_engine, graph_refusal);
    if (p.graph != nullptr) {
      p.workspace = static_cast<size_t>(cudnn_graph::workspace_size(*p.graph));
      p.ok = true;
      return;
    }
  }
  choose_legacy(p, api, h);
}

size_t workspace_size(const Api& api, cudnn::Handle h, const Plan& p, int algo) {
  size_t bytes = 0;
  const cudnn::Status st =
      p.transposed ? api.cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.x, p.conv, p.y, algo, &bytes)
                   : api.cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, algo, &bytes);
  return st == cudnn::kStatusSuccess ? bytes : SIZE_MAX;
}

// Replaces the heuristics' choice by the fastest algorithm cudnnFind measures on these operands (it runs each
// one, writing `y`, and synchronizes: never while capturing). Keeps the heuristics' choice where it fails.
void choose_by_find(Plan& p, const Api& api, cudnn::Handle h, const void* x, const void* w, void* y, int device) {
  const int count = p.transposed ? cudnn::kBwdDataAlgoCount : cudnn::kFwdAlgoCount;
  size_t ws_max = 0;
  for (int a = 0; a < count; ++a) {
    const size_t bytes = workspace_size(api, h, p, a);
    if (bytes != SIZE_MAX && bytes <= kMaxWorkspace) ws_max = std::max(ws_max, bytes);
  }
  std::unique_ptr<Tensor> ws;
  try {
    if (ws_max > 0) ws.reset(new_cuda(dtype_code::kUInt8, {static_cast<int64_t>(ws_max)}, device));
  } catch (const Error&) {
    return;  // no memory for the largest workspace: the heuristics' choice stands
  }
  void* wsp = ws ? ws->data_ptr() : nullptr;
  std::array<cudnn::AlgoPerf, 16> perf{};
  int returned = 0;
  const cudnn::Status st =
      p.transposed ? api.cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w, w, p.x, x, p.conv, p.y, y, count, &returned,
                                                                     perf.data(), wsp, ws_max)
                   : api.cudnnFindConvolutionForwardAlgorithmEx(h, p.x, x, p.w, w, p.conv, p.y, y, count, &returned,
                                                                perf.data(), wsp, ws_max);
  if (st != cudnn::kStatusSuccess) return;
  for (int i = 0; i < returned; ++i) {  // fastest first
    if (perf[i].status != cudnn::kStatusSuccess) continue;
    const size_t bytes = workspace_size(api, h, p, perf[i].algo);
    if (bytes > ws_max) continue;
    p.algo = perf[i].algo, p.workspace = bytes, p.chosen_by = "cudnnFind";
    return;
  }
}

std::string plan_key(int device, int32_t dtype, const ConvSpec& s, const std::vector<int64_t>& in_sizes,
                     const std::vector<int64_t>& w_sizes, bool cl, bool has_bias, const GraphChoice& gc) {
  std::vector<int64_t> k{device, dtype, s.transposed, s.groups, cl, has_bias, allow_tf32(), gc.enabled,
                         gc.align[0], gc.align[1], gc.align[2], static_cast<int64_t>(in_sizes.size())};
  k.insert(k.end(), in_sizes.begin(), in_sizes.end());
  k.insert(k.end(), w_sizes.begin(), w_sizes.end());
  for (int d = 0; d < 3; ++d) {
    k.push_back(s.stride[d]), k.push_back(s.padding[d]), k.push_back(s.dilation[d]), k.push_back(s.out_size[d]);
  }
  return std::string(reinterpret_cast<const char*>(k.data()), k.size() * sizeof(int64_t));
}

std::string describe(const ConvSpec& s, int32_t dtype, const std::vector<int64_t>& in_sizes,
                     const std::vector<int64_t>& w_sizes, bool cl) {
  std::string d = std::string(s.transposed ? "transposed convolution" : "convolution") + " of input " +
                  list_str(in_sizes) + ", weight " + list_str(w_sizes) + ", groups " + std::to_string(s.groups) + ", " +
                  dtype_name(dtype) + (cl ? ", channels-last" : "");
  return d;
}

// A device copy of `t` packed as cuDNN takes it (NCHW or channels-last), or null when `t` already is.
std::unique_ptr<Tensor> repacked(const Tensor& t, bool cl) {
  if (packed_as(t.sizes(), t.strides(), cl)) return nullptr;
  std::unique_ptr<Tensor> c(new_cuda(t.dtype(), t.sizes(), packed_strides(t.sizes(), cl), t.device_index()));
  copy(*c, t);
  return c;
}

}  // namespace

CudnnMode cudnn_mode_from_env(const char* var, const char* hint) {
  const char* env = std::getenv(var);
  const std::string v = env != nullptr ? env : "";
  if (v.empty() || v == "auto") return CudnnMode::kAuto;
  if (v == "on" || v == "1") return CudnnMode::kOn;
  if (v == "off" || v == "0") return CudnnMode::kOff;
  throw Error(std::string(var) + "=" + v + " is not one of auto|on|off; unset it to " + hint);
}

void* cudnn_library(std::string* why) {
  const Loaded& lib = loaded();
  if (!lib.ok && why != nullptr) *why = lib.description;
  return lib.ok ? lib.dl : nullptr;
}

bool cudnn_convolution(const Tensor& in, const Tensor& weight, const Tensor* bias, Tensor& out, const ConvSpec& s,
                       cudaStream_t stream) {
  const Loaded& lib = loaded();
  if (!lib.ok) return false;
  const Api& api = lib.api;
  const int device = in.device_index();
  const int spatial = static_cast<int>(in.dim()) - 2;
  // The output's layout (chosen by the caller as ATen's cudnn_conv_suggest_memory_format does) is the one
  // every operand takes; other layouts are refused (the caller's kernel takes any strides).
  bool cl = false;
  if (packed_as(out.sizes(), out.strides(), false)) cl = false;
  else if (packed_as(out.sizes(), out.strides(), true)) cl = true;
  else return false;
  const bool has_bias = bias != nullptr;
  // Operands in the plan's layout (ATen likewise makes input and weight contiguous in the suggested format).
  const std::unique_ptr<Tensor> in_c = repacked(in, cl), w_c = repacked(weight, cl);
  const Tensor& x = in_c ? *in_c : in;
  const Tensor& w = w_c ? *w_c : weight;
  const bool measuring = benchmark() && !capturing(stream);
  GraphChoice gc;
  gc.device = device;
  gc.enabled = use_graph();
  gc.every_engine = gc.enabled && measuring;
  gc.align = {alignment(x.data_ptr()), alignment(w.data_ptr()), alignment(out.data_ptr())};
  const std::string key = plan_key(device, in.dtype(), s, in.sizes(), weight.sizes(), cl, has_bias, gc);
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<Plan>> plans;
  static bool refused_logged = false, graph_refused_logged = false;
  auto refuse = [&](Plan& p) {  // logs once per shape that it runs on the direct kernel; the caller holds mu
    log(refused_logged ? LogLevel::Info : LogLevel::Warning,
        "cuDNN refuses the %s (%s): it runs on the runtime's own direct kernel",
        describe(s, in.dtype(), in.sizes(), weight.sizes(), cl).c_str(), p.why_not.c_str());
    refused_logged = true;
  };
  auto graph_refuse = [&](const std::string& why) {  // once per shape: it runs through the legacy API
    log(graph_refused_logged ? LogLevel::Info : LogLevel::Warning,
        "cuDNN's graph API refuses the %s (%s): it runs through cuDNN's legacy convolution API",
        describe(s, in.dtype(), in.sizes(), weight.sizes(), cl).c_str(), why.c_str());
    graph_refused_logged = true;
  };
  std::shared_ptr<Plan> plan;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = plans.find(key);
    if (it != plans.end()) plan = it->second;
  }
  cudnn::Handle h = handle_for(api, device, stream);
  std::shared_ptr<Plan> fresh;
  if (plan == nullptr) {
    fresh = std::make_shared<Plan>();
    std::string graph_refusal;
    const OnDevice on(device);  // engines are chosen for the current device
    build_plan(*fresh, lib, h, in.dtype(), s, spatial, in.sizes(), weight.sizes(), out.sizes(), cl, has_bias, gc,
               &graph_refusal);
    std::lock_guard<std::mutex> lock(mu);
    if (gc.enabled && fresh->graph == nullptr && !graph_refusal.empty()) graph_refuse(graph_refusal);
    if (!fresh->ok) {
      plans.emplace(key, fresh);
      refuse(*fresh);
      return false;
    }
    plan = fresh;
  }
  if (!plan->ok) return false;
  std::unique_ptr<Tensor> b_c;
  if (has_bias && bias->dim() == 1 && bias->strides()[0] != 1 && bias->numel() > 1) {
    b_c.reset(new_cuda(bias->dtype(), {bias->numel()}, device));
    copy(*b_c, *bias);
  }
  if (fresh != nullptr) {  // a new shape: measure its algorithms once where allowed, then share the plan
    if (measuring) {
      if (fresh->graph != nullptr) {
        std::unique_ptr<Tensor> mws;
        const int64_t bytes = cudnn_graph::measure_workspace_size(*fresh->graph);
        try {
          if (bytes > 0) mws.reset(new_cuda(dc::kUInt8, {bytes}, device));
        } catch (const Error&) {
        }
        if (bytes == 0 || mws != nullptr) {
          cudnn_graph::measure(*fresh->graph, h, x.data_ptr(), w.data_ptr(), out.data_ptr(), mws ? mws->data_ptr() : nullptr);
          fresh->workspace = static_cast<size_t>(cudnn_graph::workspace_size(*fresh->graph));
          if (cudnn_graph::measured(*fresh->graph)) fresh->chosen_by = "measured";
        }
      } else {
        choose_by_find(*fresh, api, h, x.data_ptr(), w.data_ptr(), out.data_ptr(), device);
      }
    }
    if (fresh->graph != nullptr)
      log(LogLevel::Debug, "cuDNN plan for the %s: graph API engine %s (%s), workspace %zu bytes",
          describe(s, in.dtype(), in.sizes(), weight.sizes(), cl).c_str(),
          cudnn_graph::engine_name(*fresh->graph).c_str(), fresh->chosen_by, fresh->workspace);
    else
      log(LogLevel::Debug, "cuDNN plan for the %s: legacy API algorithm %d (%s), workspace %zu bytes",
          describe(s, in.dtype(), in.sizes(), weight.sizes(), cl).c_str(), fresh->algo, fresh->chosen_by,
          fresh->workspace);
    std::lock_guard<std::mutex> lock(mu);
    plan = plans.emplace(key, fresh).first->second;
  }
  const float f_one = 1.f, f_zero = 0.f;
  const double d_one = 1.0, d_zero = 0.0;
  const bool dbl = in.dtype() == dc::kFloat64;
  const void* one = dbl ? static_cast<const void*>(&d_one) : &f_one;
  const void* zero = dbl ? static_cast<const void*>(&d_zero) : &f_zero;
  bool done = false;
  if (const std::shared_ptr<cudnn_graph::Plan> g = std::atomic_load(&plan->graph)) {
    std::unique_ptr<Tensor> ws;
    const int64_t bytes = cudnn_graph::workspace_size(*g);
    if (bytes > 0) ws.reset(new_cuda(dc::kUInt8, {bytes}, device));
    std::string why;
    done = cudnn_graph::execute(*g, h, x.data_ptr(), w.data_ptr(), out.data_ptr(), ws ? ws->data_ptr() : nullptr, &why);
    if (!done) {
      std::lock_guard<std::mutex> lock(mu);
      if (plan->ran)
        throw Error("cuDNN's graph API failed: " + why + " for the " +
                    describe(s, in.dtype(), in.sizes(), weight.sizes(), cl));
      // The graph API accepted the plan but not the call: this shape takes the legacy API from now on.
      if (std::atomic_load(&plan->graph) == g) {
        graph_refuse("the call failed: " + why);
        plan->ok = false;
        choose_legacy(*plan, api, h);
        std::atomic_store(&plan->graph, std::shared_ptr<cudnn_graph::Plan>());
      }
      if (!plan->ok) {
        refuse(*plan);
        return false;
      }
    }
  }
  if (!done) {
    std::unique_ptr<Tensor> ws;
    if (plan->workspace > 0) ws.reset(new_cuda(dc::kUInt8, {static_cast<int64_t>(plan->workspace)}, device));
    void* wsp = ws ? ws->data_ptr() : nullptr;
    const cudnn::Status st =
        s.transposed ? api.cudnnConvolutionBackwardData(h, one, plan->w, w.data_ptr(), plan->x, x.data_ptr(), plan->conv,
                                                        plan->algo, wsp, plan->workspace, zero, plan->y, out.data_ptr())
                     : api.cudnnConvolutionForward(h, one, plan->x, x.data_ptr(), plan->w, w.data_ptr(), plan->conv,
                                                   plan->algo, wsp, plan->workspace, zero, plan->y, out.data_ptr());
    if (st != cudnn::kStatusSuccess) {
      std::lock_guard<std::mutex> lock(mu);
      if (!plan->ran) {  // cuDNN accepted the plan but not the call: this shape takes our kernel from now on
        plan->ok = false;
        plan->why_not = "the call failed: " + status_str(api, st);
        refuse(*plan);
        return false;
      }
      throw Error(std::string(s.transposed ? "cudnnConvolutionBackwardData" : "cudnnConvolutionForward") +
                  " failed: " + status_str(api, st) + " for the " +
                  describe(s, in.dtype(), in.sizes(), weight.sizes(), cl));
    }
  }
  plan->ran = true;
  if (has_bias) {
    const Tensor& b = b_c ? *b_c : *bias;
    check(api, api.cudnnAddTensor(h, one, plan->b, b.data_ptr(), one, plan->y, out.data_ptr()), "cudnnAddTensor (bias)");
  }
  return true;
}

}  // namespace cuda
}  // namespace aoti_host
