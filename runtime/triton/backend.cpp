// A Triton Inference Server backend ("aoti_toolchain") over the host runtime's C API: a model is a .pt2
// package (or a program of several methods), an instance loads it on its device and runs requests without
// LibTorch. Design, model repository layout and config.pbtxt: docs/serving.md.
//
// The runtime library is not linked: it is opened RTLD_GLOBAL at TRITONBACKEND_Initialize (Triton opens
// backends RTLD_LOCAL, and plugins bind their aoti_torch_* shims from the global scope), from
// $AOTI_HOST_LIBRARY or else libaoti_host.so beside this library, and its C API is resolved by name.
//
// Triton's C API comes from triton_api.h, this project's declaration of the part the backend uses (no Triton
// sources are needed to build it; tests/integration/test_triton_server.py holds it to the real server).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "aoti_host/c_api.h"
#include "base/json.h"

#pragma GCC visibility push(default)  // the TRITONBACKEND_* entry points this library implements
#include "triton_api.h"
#pragma GCC visibility pop

namespace {

using Tensor = AtenTensorOpaque*;

// The C API and the shims used to read outputs, resolved from the runtime library.
struct Api {
  void* handle = nullptr;
  decltype(&aoti_host_last_error) last_error = nullptr;
  decltype(&aoti_host_program_load) load = nullptr;
  decltype(&aoti_host_program_free) free_program = nullptr;
  decltype(&aoti_host_program_set_cuda_graphs) set_cuda_graphs = nullptr;
  decltype(&aoti_host_program_find_method) find_method = nullptr;
  decltype(&aoti_host_program_method_num_inputs) method_num_inputs = nullptr;
  decltype(&aoti_host_program_method_num_outputs) method_num_outputs = nullptr;
  decltype(&aoti_host_program_input_spec) input_spec = nullptr;
  decltype(&aoti_host_program_output_spec) output_spec = nullptr;
  decltype(&aoti_host_program_run_method) run_method = nullptr;
  decltype(&aoti_host_program_num_state_tensors) num_state_tensors = nullptr;
  decltype(&aoti_host_session_create) session_create = nullptr;
  decltype(&aoti_host_session_free) session_free = nullptr;
  decltype(&aoti_host_tensor_to_cpu) to_cpu = nullptr;
  decltype(&aoti_host_program_method_synchronize) method_synchronize = nullptr;
  decltype(&aoti_host_program_method_cuda_stream) method_cuda_stream = nullptr;
  // shims of a CUDA runtime (absent from a CPU-only one): the thread's current stream
  int32_t (*create_stream_guard)(void*, int32_t, void**) = nullptr;
  int32_t (*delete_stream_guard)(void*) = nullptr;
  int32_t (*get_data_ptr)(Tensor, void**) = nullptr;
  int32_t (*get_dtype)(Tensor, int32_t*) = nullptr;
  int32_t (*get_dim)(Tensor, int64_t*) = nullptr;
  int32_t (*get_sizes)(Tensor, int64_t**) = nullptr;
  int32_t (*get_strides)(Tensor, int64_t**) = nullptr;
  int32_t (*get_device_type)(Tensor, int32_t*) = nullptr;
  int32_t (*delete_tensor)(Tensor) = nullptr;
};
Api g_api;

TRITONSERVER_Error* error(TRITONSERVER_Error_Code code, const std::string& message) {
  return TRITONSERVER_ErrorNew(code, ("aoti_toolchain: " + message).c_str());
}

TRITONSERVER_Error* runtime_error(const std::string& what) {
  const char* detail = g_api.last_error ? g_api.last_error() : "";
  return error(TRITONSERVER_ERROR_INTERNAL, what + ": " + (detail ? detail : ""));
}

#define RETURN_IF_ERROR(expr)                     \
  do {                                            \
    TRITONSERVER_Error* err__ = (expr);           \
    if (err__ != nullptr) return err__;           \
  } while (false)

template <typename F>
bool resolve(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(::dlsym(handle, name));
  return out != nullptr;
}

TRITONSERVER_Error* open_runtime() {
  std::string path;
  if (const char* env = std::getenv("AOTI_HOST_LIBRARY"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&open_runtime), &info) == 0 || info.dli_fname == nullptr)
      return error(TRITONSERVER_ERROR_INTERNAL, "cannot find this backend's own path (dladdr); set AOTI_HOST_LIBRARY");
    path = info.dli_fname;
    path = path.substr(0, path.rfind('/') + 1) + "libaoti_host.so";
  }
  // RTLD_NODELETE: TRITONBACKEND_Finalize drops this reference, but the runtime stays mapped for the life of the
  // process (what it loaded, OpenBLAS's thread pool, the CUDA libraries, cannot be unmapped under a live
  // process); when Triton loads the backend again, dlopen finds it loaded.
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
  if (h == nullptr) {
    const char* why = ::dlerror();
    return error(TRITONSERVER_ERROR_UNAVAILABLE, path + ": cannot load the host runtime: " + (why ? why : "") +
                                                     " (install libaoti_host.so beside the backend or set "
                                                     "AOTI_HOST_LIBRARY)");
  }
  Api a;
  a.handle = h;
  bool ok = resolve(h, "aoti_host_last_error", a.last_error) && resolve(h, "aoti_host_program_load", a.load) &&
            resolve(h, "aoti_host_program_free", a.free_program) &&
            resolve(h, "aoti_host_program_set_cuda_graphs", a.set_cuda_graphs) &&
            resolve(h, "aoti_host_program_find_method", a.find_method) &&
            resolve(h, "aoti_host_program_method_num_inputs", a.method_num_inputs) &&
            resolve(h, "aoti_host_program_method_num_outputs", a.method_num_outputs) &&
            resolve(h, "aoti_host_program_input_spec", a.input_spec) &&
            resolve(h, "aoti_host_program_output_spec", a.output_spec) &&
            resolve(h, "aoti_host_program_run_method", a.run_method) &&
            resolve(h, "aoti_host_program_num_state_tensors", a.num_state_tensors) &&
            resolve(h, "aoti_host_session_create", a.session_create) &&
            resolve(h, "aoti_host_session_free", a.session_free) &&
            resolve(h, "aoti_host_tensor_to_cpu", a.to_cpu) &&
            resolve(h, "aoti_host_program_method_synchronize", a.method_synchronize) &&
            resolve(h, "aoti_host_program_method_cuda_stream", a.method_cuda_stream) &&
            resolve(h, "aoti_torch_get_data_ptr", a.get_data_ptr) &&
            resolve(h, "aoti_torch_get_dtype", a.get_dtype) && resolve(h, "aoti_torch_get_dim", a.get_dim) &&
            resolve(h, "aoti_torch_get_sizes", a.get_sizes) && resolve(h, "aoti_torch_get_strides", a.get_strides) &&
            resolve(h, "aoti_torch_get_device_type", a.get_device_type) &&
            resolve(h, "aoti_torch_delete_tensor_object", a.delete_tensor);
  if (ok && (resolve(h, "aoti_torch_create_cuda_stream_guard", a.create_stream_guard) !=
             resolve(h, "aoti_torch_delete_cuda_stream_guard", a.delete_stream_guard)))
    ok = false;
  if (!ok) {
    ::dlclose(h);
    return error(TRITONSERVER_ERROR_UNAVAILABLE, path + ": lacks a C API function this backend needs (an older "
                                                        "runtime?): rebuild it with scons");
  }
  g_api = a;
  return nullptr;
}

// Triton datatype <-> torch ScalarType code (toolchain/spec/abi.toml) and element size.
struct Dtype {
  TRITONSERVER_DataType triton;
  int32_t code;
  size_t size;
};
constexpr Dtype kDtypes[] = {
    {TRITONSERVER_TYPE_BOOL, 11, 1}, {TRITONSERVER_TYPE_UINT8, 0, 1}, {TRITONSERVER_TYPE_INT8, 1, 1},
    {TRITONSERVER_TYPE_INT16, 2, 2}, {TRITONSERVER_TYPE_INT32, 3, 4}, {TRITONSERVER_TYPE_INT64, 4, 8},
    {TRITONSERVER_TYPE_FP16, 5, 2},  {TRITONSERVER_TYPE_FP32, 6, 4},  {TRITONSERVER_TYPE_FP64, 7, 8},
    {TRITONSERVER_TYPE_BF16, 15, 2},
};
const Dtype* by_triton(TRITONSERVER_DataType t) {
  for (const auto& d : kDtypes)
    if (d.triton == t) return &d;
  return nullptr;
}
const Dtype* by_code(int32_t c) {
  for (const auto& d : kDtypes)
    if (d.code == c) return &d;
  return nullptr;
}

// Triton's model configuration, as TRITONSERVER_MessageSerializeToJson gives it, is read with the runtime's
// JSON reader (base/json.h, compiled into this library by config_json.cpp) for the few fields the backend reads:
// parameters, input and output names.
using aoti_host::Json;

// The string member `key` of an object; "" when absent or not a string.
std::string string_at(const Json& object, const std::string& key) {
  const Json* v = object.get(key);
  return v != nullptr && v->is_string() ? v->string() : "";
}

// A string parameter of the model configuration (parameters { key: "method" value: { string_value: "embed" } }
// in config.pbtxt; "parameters": {"method": {"string_value": "embed"}} in its JSON); "" when absent.
std::string config_parameter(const Json& config, const std::string& key) {
  const Json* params = config.get("parameters");
  const Json* entry = params != nullptr ? params->get(key) : nullptr;
  return entry != nullptr ? string_at(*entry, "string_value") : "";
}

// The names of the config's "input" or "output" entries, in the order the configuration lists them.
std::vector<std::string> config_names(const Json& config, const char* key) {
  std::vector<std::string> out;
  const Json* list = config.get(key);
  if (list != nullptr && list->is_array())
    for (const Json& e : list->array()) out.push_back(string_at(e, "name"));
  return out;
}

// An integer field of the configuration's JSON (Triton writes int64 fields as strings); `otherwise` when absent.
int64_t integer_at(const Json& object, const std::string& key, int64_t otherwise) {
  const Json* v = object.get(key);
  if (v != nullptr && v->is_integer()) return v->integer();
  if (v != nullptr && v->is_string() && !v->string().empty()) {
    char* end = nullptr;
    long long n = std::strtoll(v->string().c_str(), &end, 10);
    if (*end == '\0') return n;
  }
  return otherwise;
}

// The instances the configuration's instance groups give on the CPU (count per group, default 1).
size_t cpu_instance_count(const Json& config) {
  size_t n = 0;
  const Json* groups = config.get("instance_group");
  if (groups != nullptr && groups->is_array())
    for (const Json& g : groups->array())
      if (string_at(g, "kind") == "KIND_CPU") n += static_cast<size_t>(std::max<int64_t>(integer_at(g, "count", 1), 0));
  return n;
}

// The instances the configuration's instance groups give on GPU `device`: each KIND_GPU group's count on every
// GPU it lists (Triton fills in the visible GPUs for a group that lists none; none listed counts as every GPU).
size_t gpu_instance_count(const Json& config, int32_t device) {
  size_t n = 0;
  const Json* groups = config.get("instance_group");
  if (groups == nullptr || !groups->is_array()) return 0;
  for (const Json& g : groups->array()) {
    if (string_at(g, "kind") != "KIND_GPU") continue;
    const Json* gpus = g.get("gpus");
    bool here = gpus == nullptr || !gpus->is_array() || gpus->array().empty();
    if (!here)
      for (const Json& id : gpus->array())
        here |= (id.is_integer() && id.integer() == device) || (id.is_string() && id.string() == std::to_string(device));
    if (here) n += static_cast<size_t>(std::max<int64_t>(integer_at(g, "count", 1), 0));
  }
  return n;
}

struct ModelState {
  std::string artifact;  // model.pt2, or a program directory / methods.json
  std::string method;    // empty: the first ("forward" when present)
  bool cuda_graphs = false;
  std::vector<std::string> config_inputs, config_outputs;  // the configuration's names, in its order
  // > 0: dimension 0 of every input and output is the batch (the configuration's max_batch_size, which
  // triton-repo writes only when the contract says so): the requests of an Execute are stacked along it
  int64_t max_batch_size = 0;
  // The program the model's CPU instances share (a stateless one): loaded once with one run slot per CPU
  // instance, so the weights (and their packed copies) are held once per model, not once per instance.
  size_t cpu_instances = 0;
  Json config;  // the configuration: its GPU instance groups give the instances a GPU program is shared by
  struct Shared {
    aoti_host_program* program = nullptr;
    size_t users = 0;
    size_t next_method = 0;  // GPU: the replica the next instance takes
    size_t methods = 0;
  };
  std::mutex mu;  // guards the members below (Triton may create instances on several threads)
  std::map<std::string, Shared> shared;  // by device: "cpu", "cuda:N"
  bool stateful = false;  // the CPU program has mutable state: each instance loads its own (runs would serialise)
};

struct InstanceState {
  ModelState* model = nullptr;
  aoti_host_program* program = nullptr;  // the instance's own, or its model's shared one
  std::string shared;  // the device whose shared program this is ("": its own)
  bool replica = false;  // `method` is one of the shared GPU program's copies of the model's package
  aoti_host_session* session = nullptr;  // the instance's own mutable state, for a stateful program
  bool on_gpu = false;
  int32_t device_id = 0;
  void* stream = nullptr;  // a GPU instance's: its method's stream
  size_t method = 0, num_inputs = 0, num_outputs = 0;
  std::vector<std::string> input_names, output_names;  // method 0: from the contract; else INPUT__k/OUTPUT__k
  std::vector<std::vector<char>> scratch;  // per input: the stacked (or gathered) input of a run, reused
  ~InstanceState() {
    if (session) g_api.session_free(session);
    if (program == nullptr) return;
    if (shared.empty()) {
      g_api.free_program(program);
      return;
    }
    std::lock_guard<std::mutex> lock(model->mu);
    auto it = model->shared.find(shared);
    if (it != model->shared.end() && --it->second.users == 0) {
      g_api.free_program(it->second.program);
      model->shared.erase(it);
    }
  }
};

struct TensorDeleter {
  void operator()(AtenTensorOpaque* t) const {
    if (t) g_api.delete_tensor(t);
  }
};
using TensorPtr = std::unique_ptr<AtenTensorOpaque, TensorDeleter>;

// A GPU instance's method stream as the thread's current one (nothing for a CPU instance).
class StreamScope {
 public:
  explicit StreamScope(const InstanceState* st) {
    if (st->on_gpu && g_api.create_stream_guard(st->stream, st->device_id, &guard_) != 0) {
      guard_ = nullptr;
      std::fprintf(stderr, "aoti_toolchain: cannot make the instance's stream current (%s): this run uses the "
                   "legacy default stream\n", g_api.last_error ? g_api.last_error() : "");
    }
  }
  ~StreamScope() {
    if (guard_ != nullptr) g_api.delete_stream_guard(guard_);
  }
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  void* guard_ = nullptr;
};

bool file_exists(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

// Index of a request input or a requested output by name: the contract's names, then Triton's INPUT__k.
long slot_of(const std::vector<std::string>& names, const char* name, const char* prefix, size_t count) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<long>(i);
  size_t n = std::strlen(prefix);
  if (std::strncmp(name, prefix, n) == 0 && name[n] != '\0') {
    char* end = nullptr;
    long k = std::strtol(name + n, &end, 10);
    if (*end == '\0' && k >= 0 && static_cast<size_t>(k) < count) return k;
  }
  return -1;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// One input of a request as Triton hands it over, checked: datatype, shape, and its host buffers in order.
struct RequestInput {
  const Dtype* dtype = nullptr;
  std::vector<int64_t> shape;
  std::vector<std::pair<const char*, uint64_t>> buffers;
  uint64_t byte_size = 0;
};

// A request of the Execute call: its response, its inputs by the method's input slot, its error (sent in its
// response; nullptr: it succeeded) and when its run computed.
struct Pending {
  TRITONBACKEND_Request* request = nullptr;
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* error = nullptr;
  std::vector<RequestInput> inputs;
  uint64_t compute_start = 0, compute_end = 0;
};

TRITONSERVER_Error* read_inputs(const InstanceState* st, TRITONBACKEND_Request* request, std::vector<RequestInput>& out) {
  uint32_t input_count = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInputCount(request, &input_count));
  if (input_count != st->num_inputs)
    return error(TRITONSERVER_ERROR_INVALID_ARG, "the model takes " + std::to_string(st->num_inputs) +
                                                     " input(s), the request has " + std::to_string(input_count));
  out.assign(st->num_inputs, RequestInput{});
  for (uint32_t i = 0; i < input_count; ++i) {
    TRITONBACKEND_Input* input = nullptr;
    RETURN_IF_ERROR(TRITONBACKEND_RequestInputByIndex(request, i, &input));
    const char* name = nullptr;
    TRITONSERVER_DataType datatype;
    const int64_t* shape = nullptr;
    uint32_t dims = 0, buffers = 0;
    uint64_t byte_size = 0;
    RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, &name, &datatype, &shape, &dims, &byte_size, &buffers));
    long slot = slot_of(st->input_names, name, "INPUT__", st->num_inputs);
    if (slot < 0 || out[slot].dtype != nullptr)
      return error(TRITONSERVER_ERROR_INVALID_ARG, std::string("unexpected or repeated input '") + name + "'");
    RequestInput& in = out[slot];
    in.dtype = by_triton(datatype);
    if (in.dtype == nullptr)
      return error(TRITONSERVER_ERROR_INVALID_ARG, std::string("input '") + name + "': datatype " +
                                                       TRITONSERVER_DataTypeString(datatype) + " is not supported");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < dims; ++d) {
      if (shape[d] < 0) return error(TRITONSERVER_ERROR_INVALID_ARG, std::string("input '") + name + "': negative dim");
      numel *= static_cast<uint64_t>(shape[d]);
    }
    if (numel * in.dtype->size != byte_size)
      return error(TRITONSERVER_ERROR_INVALID_ARG, std::string("input '") + name + "': " + std::to_string(byte_size) +
                                                       " bytes for " + std::to_string(numel) + " elements");
    in.shape.assign(shape, shape + dims);
    in.byte_size = byte_size;
    // Host memory only: device memory is refused (the CPU copy is Triton's job: the backend asks for host
    // buffers, see docs/serving.md); a GPU instance's runtime uploads the (stacked) input once per run.
    uint64_t total = 0;
    for (uint32_t b = 0; b < buffers; ++b) {
      const void* buf = nullptr;
      uint64_t size = 0;
      TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_CPU;
      int64_t mem_id = 0;
      RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, b, &buf, &size, &mem, &mem_id));
      if (mem == TRITONSERVER_MEMORY_GPU)
        return error(TRITONSERVER_ERROR_UNSUPPORTED, std::string("input '") + name + "' is in GPU memory");
      in.buffers.emplace_back(static_cast<const char*>(buf), size);
      total += size;
    }
    if (total != byte_size)
      return error(TRITONSERVER_ERROR_INVALID_ARG, std::string("input '") + name + "': buffers do not add up");
  }
  return nullptr;
}

// Rows of dimension 0 a request brings to a stacked run: every input's dimension 0 when they agree, else -1
// (the request then runs alone).
int64_t batch_rows(const Pending& p) {
  int64_t rows = -1;
  for (const RequestInput& in : p.inputs) {
    if (in.shape.empty() || (rows >= 0 && in.shape[0] != rows)) return -1;
    rows = in.shape[0];
  }
  return rows;
}

// Whether two requests' inputs can be stacked: the same datatypes and the same shapes beyond dimension 0.
bool same_trailing(const Pending& a, const Pending& b) {
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const RequestInput &x = a.inputs[i], &y = b.inputs[i];
    if (x.dtype != y.dtype || x.shape.size() != y.shape.size() ||
        !std::equal(x.shape.begin() + 1, x.shape.end(), y.shape.begin() + 1))
      return false;
  }
  return true;
}

// An output of a run as host memory to copy responses from: the run's own tensor when it is a contiguous host
// tensor, else a contiguous host copy (a GPU instance's outputs come back to the host here).
struct HostOutput {
  TensorPtr copy;
  const char* data = nullptr;
  const Dtype* dtype = nullptr;
  std::vector<int64_t> sizes;
  uint64_t bytes = 0;
};

TRITONSERVER_Error* host_output(Tensor t, HostOutput& out) {
  int32_t device_type = -1;
  int64_t ndim = 0;
  int64_t *sizes = nullptr, *strides = nullptr;
  if (g_api.get_device_type(t, &device_type) || g_api.get_dim(t, &ndim) || g_api.get_sizes(t, &sizes) ||
      g_api.get_strides(t, &strides))
    return runtime_error("reading an output");
  bool contiguous = true;
  for (int64_t d = ndim - 1, expected = 1; d >= 0; expected *= sizes[d], --d)
    if (sizes[d] != 1 && strides[d] != expected) contiguous = false;
  Tensor host = t;
  if (device_type != 0 || !contiguous) {
    Tensor raw = nullptr;
    if (g_api.to_cpu(t, &raw) != 0) return runtime_error("copying an output to the host");
    out.copy.reset(raw);
    host = raw;
  }
  void* data = nullptr;
  int32_t code = 0;
  if (g_api.get_data_ptr(host, &data) || g_api.get_dtype(host, &code) || g_api.get_dim(host, &ndim) ||
      g_api.get_sizes(host, &sizes))
    return runtime_error("reading an output");
  out.dtype = by_code(code);
  if (out.dtype == nullptr) return error(TRITONSERVER_ERROR_UNSUPPORTED, "output dtype " + std::to_string(code));
  out.data = static_cast<const char*>(data);
  out.sizes.assign(sizes, sizes + ndim);
  out.bytes = out.dtype->size;
  for (int64_t s : out.sizes) out.bytes *= static_cast<uint64_t>(s);
  return nullptr;
}

// Copies the outputs `request` asks for into its response: rows [first, first + rows) of dimension 0 of a
// stacked run's outputs (rows < 0: the whole of each output).
TRITONSERVER_Error* respond(const InstanceState* st, const Pending& p, std::vector<Tensor>& raw,
                            std::vector<HostOutput>& host, int64_t first, int64_t rows) {
  uint32_t requested = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestOutputCount(p.request, &requested));
  for (uint32_t r = 0; r < requested; ++r) {
    const char* name = nullptr;
    RETURN_IF_ERROR(TRITONBACKEND_RequestOutputName(p.request, r, &name));
    long k = slot_of(st->output_names, name, "OUTPUT__", st->num_outputs);
    if (k < 0) return error(TRITONSERVER_ERROR_INVALID_ARG, std::string("unknown output '") + name + "'");
    HostOutput& h = host[k];
    if (h.dtype == nullptr) RETURN_IF_ERROR(host_output(raw[k], h));
    std::vector<int64_t> shape = h.sizes;
    uint64_t offset = 0, bytes = h.bytes;
    if (rows >= 0) {  // the caller checked that dimension 0 is the stacked rows
      const uint64_t row_bytes = shape[0] > 0 ? h.bytes / static_cast<uint64_t>(shape[0]) : 0;
      offset = row_bytes * static_cast<uint64_t>(first);
      bytes = row_bytes * static_cast<uint64_t>(rows);
      shape[0] = rows;
    }
    TRITONBACKEND_Output* out = nullptr;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(p.response, &out, name, h.dtype->triton, shape.data(),
                                                 static_cast<uint32_t>(shape.size())));
    void* dst = nullptr;
    TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_CPU;
    int64_t mem_id = 0;
    RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(out, &dst, bytes, &mem, &mem_id));
    if (mem == TRITONSERVER_MEMORY_GPU)
      return error(TRITONSERVER_ERROR_UNSUPPORTED, std::string("output '") + name + "': Triton gave GPU memory");
    if (bytes) std::memcpy(dst, h.data + offset, bytes);
  }
  return nullptr;
}

// Runs the requests `group` (indexes into `pending`) in one run and answers each: one request with its inputs
// as they are (a single host buffer used in place); several with their inputs stacked along dimension 0 into
// one contiguous buffer per input, each response getting its own rows of every output. Returns false, having
// answered nothing, when a stacked run fails or an output's dimension 0 is not the stacked rows: the caller
// then runs each request alone, so that one request never fails another. A lone request's failure is its
// response's error. Reports the run to Triton (execution count, batch size = the rows run).
bool run_group(InstanceState* st, TRITONBACKEND_ModelInstance* instance, std::vector<Pending>& pending,
               const std::vector<size_t>& group, bool batched) {
  const bool stacked = group.size() > 1;
  Pending& lead = pending[group[0]];
  int64_t total_rows = 0;
  for (size_t idx : group) total_rows += batched ? batch_rows(pending[idx]) : 0;
  std::vector<aoti_host_tensor_view> views(st->num_inputs);
  std::vector<std::vector<int64_t>> shapes(st->num_inputs);
  if (st->scratch.size() < st->num_inputs) st->scratch.resize(st->num_inputs);
  for (size_t slot = 0; slot < st->num_inputs; ++slot) {
    const RequestInput& in = lead.inputs[slot];
    shapes[slot] = in.shape;
    const char* data = nullptr;
    if (!stacked && in.buffers.size() == 1) {
      data = in.buffers[0].first;
    } else {
      uint64_t bytes = 0;
      for (size_t idx : group) bytes += pending[idx].inputs[slot].byte_size;
      std::vector<char>& buf = st->scratch[slot];
      buf.resize(bytes);
      char* dst = buf.data();
      for (size_t idx : group)
        for (const auto& [src, size] : pending[idx].inputs[slot].buffers) {
          if (size) std::memcpy(dst, src, size);
          dst += size;
        }
      data = buf.data();
      if (stacked) shapes[slot][0] = total_rows;
    }
    views[slot] = aoti_host_tensor_view{const_cast<char*>(data), in.dtype->code, static_cast<int32_t>(shapes[slot].size()),
                                        shapes[slot].data(), nullptr, 0, 0};
  }
  std::vector<Tensor> raw(st->num_outputs, nullptr);
  const uint64_t start = now_ns();
  // the runtime checks the inputs against the method's contract (dtype, rank, each dimension's range)
  int rc = g_api.run_method(st->program, st->method, st->session, views.data(), views.size(), raw.data(), raw.size());
  const uint64_t end = now_ns();
  std::vector<TensorPtr> outputs;
  for (Tensor t : raw) outputs.emplace_back(t);
  if (rc != 0) {
    const std::string detail = g_api.last_error() ? g_api.last_error() : "";
    // A device-side assert (or any sticky CUDA error) leaves the context unusable for every later run, as
    // in torch: when the device cannot even synchronise after a failed run, end the process so that the
    // server's supervisor restarts it, instead of failing every request from now on.
    if (st->on_gpu && g_api.method_synchronize(st->program, st->method) != 0) {
      std::fprintf(stderr, "aoti_toolchain: the CUDA context is unusable after a failed run (%s): aborting\n",
                   detail.c_str());
      std::abort();
    }
    if (stacked) return false;
    lead.error = error(rc == AOTI_HOST_INVALID_ARGUMENT ? TRITONSERVER_ERROR_INVALID_ARG : TRITONSERVER_ERROR_INTERNAL,
                       detail.empty() ? "run failed" : detail);
  } else {
    if (stacked) {
      for (Tensor t : raw) {
        int64_t ndim = 0;
        int64_t* sizes = nullptr;
        if (g_api.get_dim(t, &ndim) || g_api.get_sizes(t, &sizes) || ndim < 1 || sizes[0] != total_rows)
          return false;
      }
    }
    std::vector<HostOutput> host(st->num_outputs);
    int64_t first = 0;
    for (size_t idx : group) {
      Pending& p = pending[idx];
      const int64_t rows = stacked ? batch_rows(p) : -1;
      p.error = respond(st, p, raw, host, first, rows);
      first += stacked ? rows : 0;
    }
  }
  for (size_t idx : group) {
    pending[idx].compute_start = start;
    pending[idx].compute_end = end;
  }
  TRITONSERVER_Error* stat = TRITONBACKEND_ModelInstanceReportBatchStatistics(
      instance, batched ? static_cast<uint64_t>(std::max<int64_t>(total_rows, 1)) : 1, start, start, end, now_ns());
  if (stat) TRITONSERVER_ErrorDelete(stat);
  return true;
}

// The package of the model's method (`method`, "" for the first) in its artifact: the artifact itself when it
// is a .pt2 (whose one method is "forward"), else the package methods.json names for it; "" when there is none
// (the load then reports what is wrong).
std::string method_package(const std::string& artifact, const std::string& method) {
  const auto slash = artifact.rfind('/');
  const std::string dir = artifact.substr(0, slash + 1);
  if (artifact.size() < 5 || artifact.compare(artifact.size() - 5, 5, ".json") != 0)
    return method.empty() || method == "forward" ? artifact : "";
  std::ifstream in(artifact, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Json doc;
  try {
    doc = Json::parse(text, artifact);
  } catch (const std::exception&) {
    return "";
  }
  const Json* list = doc.get("methods");
  if (list == nullptr || !list->is_array()) return "";
  for (const Json& m : list->array()) {
    const std::string name = string_at(m, "name"), package = string_at(m, "package");
    if (package.empty() || !(method.empty() || name == method)) continue;
    return package[0] == '/' ? package : dir + package;
  }
  return "";
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Loads `copies` copies of `package` on `device` as the methods of one program: each copy is a method with its
// own container, stream and CUDA graph (one GPU instance runs one), the runtime shares their weights by FQN (where
// the plugin lists its constants: torch >= 2.13; an older plugin's copies keep their own weights), and the process's
// CUDA context, libraries and kernels are there once. The manifest lives in a temporary file for the load only.
TRITONSERVER_Error* load_replicas(const std::string& package, size_t copies, const std::string& device,
                                  aoti_host_program** out) {
  char* real = ::realpath(package.c_str(), nullptr);
  if (real == nullptr) return error(TRITONSERVER_ERROR_NOT_FOUND, package + ": no such file");
  std::string manifest = "{\"schema\": 1, \"methods\": [";
  for (size_t k = 0; k < copies; ++k)
    manifest += std::string(k ? ", " : "") + "{\"name\": \"instance" + std::to_string(k) + "\", \"package\": " +
                json_string(real) + "}";
  manifest += "]}\n";
  std::free(real);
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/aoti_triton_XXXXXX.json";
  int fd = ::mkstemps(path.data(), 5);
  if (fd < 0) return error(TRITONSERVER_ERROR_INTERNAL, path + ": cannot create the replicas' manifest");
  const bool written = ::write(fd, manifest.data(), manifest.size()) == static_cast<ssize_t>(manifest.size());
  ::close(fd);
  TRITONSERVER_Error* err = nullptr;
  aoti_host_load_options options{nullptr, device.c_str(), 1, 0};
  if (!written)
    err = error(TRITONSERVER_ERROR_INTERNAL, path + ": cannot write the replicas' manifest");
  else if (g_api.load(path.c_str(), &options, out) != 0)
    err = runtime_error(package + ": load on " + device);
  ::unlink(path.c_str());
  return err;
}

// Deletes the State a model or instance holds (read with `get`: TRITONBACKEND_ModelState or
// TRITONBACKEND_ModelInstanceState), at its finalize.
template <typename State, typename Object>
TRITONSERVER_Error* delete_state(Object* object, TRITONSERVER_Error* (*get)(Object*, void**)) {
  void* state = nullptr;
  RETURN_IF_ERROR(get(object, &state));
  delete static_cast<State*>(state);
  return nullptr;
}

}  // namespace

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  uint32_t major = 0, minor = 0;
  RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
  if (major != TRITONBACKEND_API_VERSION_MAJOR || minor < TRITONBACKEND_API_VERSION_MINOR)
    return error(TRITONSERVER_ERROR_UNSUPPORTED, "built for backend API " +
                                                     std::to_string(TRITONBACKEND_API_VERSION_MAJOR) + "." +
                                                     std::to_string(TRITONBACKEND_API_VERSION_MINOR) + ", the server has " +
                                                     std::to_string(major) + "." + std::to_string(minor));
  return open_runtime();
}

// Triton unloads the backend once no model uses it (every ModelFinalize has run): drop the runtime library's
// reference (it stays mapped: RTLD_NODELETE, see open_runtime) and forget its functions, so that a later
// Initialize opens it afresh.
TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  if (g_api.handle != nullptr && ::dlclose(g_api.handle) != 0) {
    const char* why = ::dlerror();
    g_api = Api{};
    return error(TRITONSERVER_ERROR_INTERNAL, std::string("closing the host runtime: ") + (why ? why : ""));
  }
  g_api = Api{};
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* location = nullptr;
  TRITONBACKEND_ArtifactType type;
  uint64_t version = 0;
  RETURN_IF_ERROR(TRITONBACKEND_ModelRepository(model, &type, &location));
  RETURN_IF_ERROR(TRITONBACKEND_ModelVersion(model, &version));
  if (type != TRITONBACKEND_ARTIFACT_FILESYSTEM)
    return error(TRITONSERVER_ERROR_UNSUPPORTED, "the model repository must be a filesystem");
  auto state = std::make_unique<ModelState>();
  const std::string dir = std::string(location) + "/" + std::to_string(version) + "/";
  for (const char* name : {"model.pt2", "methods.json"})
    if (state->artifact.empty() && file_exists(dir + name)) state->artifact = dir + name;
  if (state->artifact.empty())
    return error(TRITONSERVER_ERROR_NOT_FOUND, dir + ": no model.pt2 or methods.json (export with aoti-toolchain)");
  TRITONSERVER_Message* config = nullptr;
  RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &config));
  const char* json = nullptr;
  size_t size = 0;
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(config, &json, &size);
  Json doc;
  if (err == nullptr) {
    try {
      doc = Json::parse(std::string(json, size), "the model configuration Triton gave");
    } catch (const std::exception& e) {
      err = error(TRITONSERVER_ERROR_INTERNAL, e.what());
    }
  }
  TRITONSERVER_Error* del = TRITONSERVER_MessageDelete(config);
  if (del != nullptr) TRITONSERVER_ErrorDelete(del);
  RETURN_IF_ERROR(err);
  state->method = config_parameter(doc, "method");
  const std::string graphs = config_parameter(doc, "cuda_graphs");
  state->cuda_graphs = graphs == "true" || graphs == "1";
  state->config_inputs = config_names(doc, "input");
  state->config_outputs = config_names(doc, "output");
  state->max_batch_size = integer_at(doc, "max_batch_size", 0);
  state->cpu_instances = cpu_instance_count(doc);
  state->config = std::move(doc);
  RETURN_IF_ERROR(TRITONBACKEND_ModelSetState(model, state.release()));
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  return delete_state<ModelState>(model, TRITONBACKEND_ModelState);
}

// GPU instances of one device (cuda:<device id>) share one program, loaded by the first with a copy of the
// model's package per GPU instance on that device (load_replicas): each instance runs its own copy, with its own
// container, stream, staging buffers and CUDA graph (a CUDA method runs one run at a time), while the CUDA
// context, the libraries and the weights (shared by FQN where the plugin lists its constants) are there once.
// CPU instances share one program, loaded by the first with a run slot per CPU instance (the AOTInductor
// container's models share its constants, and runs of a stateless program go concurrently), unless it has
// mutable state: then each loads its own (with a session), since runs of one program in several sessions take
// turns.
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  TRITONBACKEND_Model* model = nullptr;
  void* mstate = nullptr;
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &mstate));
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceKind(instance, &kind));
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceDeviceId(instance, &device_id));
  ModelState* ms = static_cast<ModelState*>(mstate);
  auto st = std::make_unique<InstanceState>();
  st->model = ms;
  st->on_gpu = kind == TRITONSERVER_INSTANCEGROUPKIND_GPU;
  st->device_id = device_id;
  const std::string device = st->on_gpu ? "cuda:" + std::to_string(device_id) : "cpu";
  if (!st->on_gpu && ms->cpu_instances > 1) {
    std::lock_guard<std::mutex> lock(ms->mu);
    auto it = ms->shared.find(device);
    if (it != ms->shared.end()) {
      st->program = it->second.program;
      st->shared = device;
      ++it->second.users;
    } else if (!ms->stateful) {
      aoti_host_load_options options{nullptr, device.c_str(), ms->cpu_instances, 0};
      if (g_api.load(ms->artifact.c_str(), &options, &st->program) != 0) return runtime_error(ms->artifact + ": load");
      size_t state_tensors = 0;
      if (g_api.num_state_tensors(st->program, &state_tensors) == 0 && state_tensors == 0) {
        ms->shared[device] = ModelState::Shared{st->program, 1, 0, 0};
        st->shared = device;
      } else {
        ms->stateful = true;  // this instance keeps the program as its own
      }
    }
  }
  const std::string package = st->on_gpu ? method_package(ms->artifact, ms->method) : "";
  if (st->on_gpu && !package.empty()) {
    // GPU instances of one device share a program holding a copy of the package per instance (load_replicas),
    // loaded by the first: each instance runs its own copy. A stateful program gives each instance a session
    // below, as one loaded alone would.
    std::lock_guard<std::mutex> lock(ms->mu);
    auto it = ms->shared.find(device);
    if (it == ms->shared.end()) {
      const size_t copies = std::max<size_t>(gpu_instance_count(ms->config, device_id), 1);
      aoti_host_program* program = nullptr;
      RETURN_IF_ERROR(load_replicas(package, copies, device, &program));
      if (ms->cuda_graphs && g_api.set_cuda_graphs(program, true) != 0) {
        TRITONSERVER_Error* err = runtime_error("enabling CUDA graphs");
        g_api.free_program(program);
        return err;
      }
      it = ms->shared.emplace(device, ModelState::Shared{program, 0, 0, copies}).first;
      std::fprintf(stderr, "aoti_toolchain: %s: %zu GPU instance(s) on %s share one program (%zu copies of %s)\n",
                   ms->artifact.c_str(), copies, device.c_str(), copies, package.c_str());
    }
    ModelState::Shared& sh = it->second;
    if (sh.next_method < sh.methods) {
      st->program = sh.program;
      st->shared = device;
      st->replica = true;
      st->method = sh.next_method++;
      ++sh.users;
    }
  }
  if (st->program == nullptr) {
    aoti_host_load_options options{nullptr, device.c_str(), 1, 0};
    if (g_api.load(ms->artifact.c_str(), &options, &st->program) != 0) return runtime_error(ms->artifact + ": load");
    if (ms->cuda_graphs && st->on_gpu && g_api.set_cuda_graphs(st->program, true) != 0)
      return runtime_error("enabling CUDA graphs");
  }
  if (!st->replica && !ms->method.empty() && g_api.find_method(st->program, ms->method.c_str(), &st->method) != 0)
    return runtime_error("parameter method");
  if (g_api.method_num_inputs(st->program, st->method, &st->num_inputs) != 0 ||
      g_api.method_num_outputs(st->program, st->method, &st->num_outputs) != 0)
    return runtime_error("reading the method's arity");
  // Input and output names: method 0's from the runtime (its contract); another method's from the
  // configuration, in its order (aoti-toolchain triton-repo writes them in the method's contract order); else
  // Triton's INPUT__k/OUTPUT__k. Every name the configuration lists must then be one of them, so that a
  // configuration that does not fit the program fails the load, not each request.
  auto names = [&](bool inputs, size_t n, const char* prefix) {
    const std::vector<std::string>& listed = inputs ? ms->config_inputs : ms->config_outputs;
    std::vector<std::string> out;
    for (size_t i = 0; i < n; ++i) {
      aoti_host_tensor_spec spec{};
      // a replica is a copy of method 0's package: method 0's contract names are its own
      int rc = st->method == 0 || st->replica ? (inputs ? g_api.input_spec : g_api.output_spec)(st->program, i, &spec)
                                              : 1;
      if (rc == 0 && spec.name != nullptr && *spec.name)
        out.push_back(spec.name);
      else if (!st->replica && st->method != 0 && listed.size() == n && !listed[i].empty())
        out.push_back(listed[i]);
      else
        out.push_back(prefix + std::to_string(i));
    }
    return out;
  };
  st->input_names = names(true, st->num_inputs, "INPUT__");
  st->output_names = names(false, st->num_outputs, "OUTPUT__");
  auto check = [&](const std::vector<std::string>& listed, const std::vector<std::string>& known, const char* prefix,
                   const char* what) -> TRITONSERVER_Error* {
    for (const std::string& name : listed) {
      if (slot_of(known, name.c_str(), prefix, known.size()) >= 0) continue;
      std::string all;
      for (const std::string& k : known) all += (all.empty() ? "" : ", ") + k;
      return error(TRITONSERVER_ERROR_INVALID_ARG, "config.pbtxt " + std::string(what) + " '" + name +
                                                       "' is not one of the method's (" + all +
                                                       "): write the configuration with aoti-toolchain triton-repo");
    }
    return nullptr;
  };
  if (st->on_gpu && (g_api.create_stream_guard == nullptr ||
                     g_api.method_cuda_stream(st->program, st->method, &st->stream) != 0))
    return g_api.create_stream_guard == nullptr
               ? error(TRITONSERVER_ERROR_UNAVAILABLE, "KIND_GPU: the host runtime was built without CUDA "
                                                       "(build it with scons cuda=on)")
               : runtime_error("reading the method's CUDA stream");
  RETURN_IF_ERROR(check(ms->config_inputs, st->input_names, "INPUT__", "input"));
  RETURN_IF_ERROR(check(ms->config_outputs, st->output_names, "OUTPUT__", "output"));
  size_t state_tensors = 0;
  if (g_api.num_state_tensors(st->program, &state_tensors) == 0 && state_tensors > 0 &&
      g_api.session_create(st->program, &st->session) != 0)
    return runtime_error("creating the instance's session");
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceSetState(instance, st.release()));
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  return delete_state<InstanceState>(instance, TRITONBACKEND_ModelInstanceState);
}

// Every request gets its own response (an error response for a bad one) and is released here. For a model
// with a batch dimension (max_batch_size > 0) the requests Triton's dynamic batcher hands over together are
// stacked along dimension 0 into runs of at most max_batch_size rows: requests whose inputs have the same
// datatypes and the same shapes beyond dimension 0 share a run, in order; the others run alone. Each run is
// reported to Triton as one execution of its rows (the model's statistics: execution_count, batch_stats).
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests, const uint32_t count) {
  void* state = nullptr;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &state));
  auto* st = static_cast<InstanceState*>(state);
  const uint64_t exec_start = now_ns();
  std::vector<Pending> pending(count);
  for (uint32_t r = 0; r < count; ++r) {
    Pending& p = pending[r];
    p.request = requests[r];
    p.compute_start = p.compute_end = exec_start;
    p.error = TRITONBACKEND_ResponseNew(&p.response, p.request);
    if (p.error == nullptr) p.error = read_inputs(st, p.request, p.inputs);
  }
  const int64_t max_rows = st->model->max_batch_size;
  const bool batched = max_rows > 0;
  std::vector<std::vector<size_t>> groups;  // requests run together, each group one run
  std::vector<int64_t> group_rows;
  for (size_t r = 0; r < pending.size(); ++r) {
    if (pending[r].error != nullptr) continue;
    const int64_t rows = batched ? batch_rows(pending[r]) : -1;
    size_t g = groups.size();
    if (rows > 0 && rows <= max_rows)
      for (size_t k = 0; k < groups.size(); ++k)
        if (group_rows[k] > 0 && group_rows[k] + rows <= max_rows && same_trailing(pending[groups[k][0]], pending[r])) {
          g = k;
          break;
        }
    if (g == groups.size()) {
      groups.emplace_back();
      group_rows.push_back(rows > 0 && rows <= max_rows ? 0 : -1);  // -1: runs alone
    }
    groups[g].push_back(r);
    if (group_rows[g] >= 0) group_rows[g] += rows;
  }
  {
    // A GPU instance copies and frees its outputs on its method's stream: work on the legacy default stream
    // (the thread's current stream otherwise) is refused while another instance's stream captures its graph,
    // and would wait on every instance's work.
    const StreamScope on_stream(st);
    for (const std::vector<size_t>& group : groups)
      if (!run_group(st, instance, pending, group, batched))
        for (size_t r : group) run_group(st, instance, pending, {r}, batched);  // a lone request always answers
  }
  const uint64_t exec_end = now_ns();
  for (Pending& p : pending) {
    const bool ok = p.error == nullptr;
    if (p.response != nullptr) {
      TRITONSERVER_Error* sent = TRITONBACKEND_ResponseSend(p.response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, p.error);
      if (sent) TRITONSERVER_ErrorDelete(sent);
    } else if (p.error != nullptr) {
      TRITONSERVER_ErrorDelete(p.error);
    }
    TRITONSERVER_Error* stat = TRITONBACKEND_ModelInstanceReportStatistics(instance, p.request, ok, exec_start,
                                                                           p.compute_start, p.compute_end, exec_end);
    if (stat) TRITONSERVER_ErrorDelete(stat);
    TRITONSERVER_Error* rel = TRITONBACKEND_RequestRelease(p.request, TRITONSERVER_REQUEST_RELEASE_ALL);
    if (rel) TRITONSERVER_ErrorDelete(rel);
  }
  return nullptr;
}

}  // extern "C"
