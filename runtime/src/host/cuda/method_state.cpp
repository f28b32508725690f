#include "host/cuda/method_state.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>

#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/status.h"
#include "shims/cuda/arena.h"
#include "shims/cuda/cuda_util.h"

namespace aoti_host {
namespace cuda {
namespace {

void delete_handles(std::vector<AtenTensorHandle>& hs) {
  for (auto h : hs) delete from_handle(h);
  hs.clear();
}

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + list_str(t.sizes()) + " strides " + list_str(t.strides()) + " on " +
         device_type_name(t.device_type());
}

// A device copy of t with the same strides (the span from its first element).
Tensor* same_layout_copy(const Tensor& t, int device, cudaStream_t stream) {
  std::unique_ptr<Tensor> out(Tensor::empty_strided(t.dtype(), t.sizes(), t.strides(), device_code::kCUDA, device));
  const size_t n = compute_storage_nbytes(t.sizes(), t.strides(), t.itemsize(), 0);
  if (n > 0) AOTI_CUDA_CHECK(cudaMemcpyAsync(out->data_ptr(), t.data_ptr(), n, cudaMemcpyDeviceToDevice, stream));
  return out.release();
}

}  // namespace

MethodState::Scope::Scope(const MethodState& s) : device_(s.device_) {
  prev_device_ = current_device();
  if (prev_device_ != device_) set_device(device_);
  prev_stream_ = current_stream(device_);
  set_current_stream(device_, s.stream_);
}

MethodState::Scope::~Scope() {
  set_current_stream(device_, prev_stream_);
  if (prev_device_ != device_) cudaSetDevice(prev_device_);
}

MethodState::MethodState(int device) : device_(device) {
  require_device(device, "load");
  const OnDevice on(device);  // the stream is created on the current device
  cudaStream_t s = nullptr;
  // A blocking stream: work on the legacy default stream (a caller's copies) orders with it.
  check(cudaStreamCreateWithFlags(&s, cudaStreamDefault), "cudaStreamCreateWithFlags");
  stream_ = s;
}

MethodState::~MethodState() {
  // The stream, the graph and its memory are the device's; what fails here (the runtime unloading at exit)
  // still frees what it can.
  std::unique_ptr<OnDevice> on;
  try {
    on = std::make_unique<OnDevice>(device_);
  } catch (const Error&) {
  }
  if (stream_ != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  drop_graph();
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void MethodState::synchronize() const {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
}

void MethodState::drop_graph() {
  if (graph_exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  graph_exec_ = graph_ = nullptr;
  graph_outputs_.clear();  // arena-backed: their deleters do nothing
  static_inputs_.clear();
  if (stream_ != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  arena_.reset();
}

void MethodState::enable_graphs(bool on, bool plugin_has_single_threaded_run) {
  if (stats_.captures + stats_.replays + stats_.eager_runs > 0)
    throw Error("CUDA graphs must be chosen before the first run", AOTI_HOST_INVALID_ARGUMENT);
  graphs_ = on;
  single_threaded_ = on && plugin_has_single_threaded_run;
  stats_.disabled_reason.clear();
  if (on && !plugin_has_single_threaded_run)
    disable("the plugin does not export AOTInductorModelContainerRunSingleThreaded (torch < 2.6), and Run "
            "records and waits on events that capture would invalidate");
}

void MethodState::disable(const std::string& why) {
  graphs_ = false;
  stats_.disabled_reason = why;
  log(LogLevel::Warning, "cuda graphs off: %s", why.c_str());
}

Tensor* MethodState::to_device(Tensor* t) {
  std::unique_ptr<Tensor> owned(t);
  if (t->device_type() == device_code::kCUDA) {
    if (t->device_index() != device_)
      throw Error("input on cuda:" + std::to_string(t->device_index()) + ", the program runs on cuda:" +
                  std::to_string(device_), AOTI_HOST_INVALID_ARGUMENT);
    return owned.release();
  }
  const Scope scope(*this);  // the copy goes on this method's stream (no scope for device inputs: no work)
  std::unique_ptr<Tensor> d(
      Tensor::empty_strided(t->dtype(), t->sizes(), t->strides(), device_code::kCUDA, device_));
  copy(*d, *t);
  return d.release();
}

std::string MethodState::constants_not_on_device(const AotiEntryPoints& fns,
                                                  AOTInductorModelContainerHandle container) const {
  if (fns.AOTInductorModelContainerExtractConstantsMapEntries == nullptr) {
    log(LogLevel::Info,
        "cuda graphs: the plugin has no AOTInductorModelContainerExtractConstantsMapEntries (torch < 2.13); its "
        "constants were uploaded by the plugin itself into its device blob at Create, so they are device-resident");
    return "";
  }
  const AOTInductorConstantMapEntry* entries = nullptr;
  size_t n = 0;
  if (fns.AOTInductorModelContainerExtractConstantsMapEntries(container, &entries, &n, false) != AOTI_RUNTIME_SUCCESS)
    return "AOTInductorModelContainerExtractConstantsMapEntries failed, so device residency cannot be checked";
  for (size_t i = 0; i < n; ++i) {
    const Tensor* t = entries[i].handle != nullptr ? from_handle(entries[i].handle) : nullptr;
    if (t == nullptr) continue;
    if (t->device_type() != device_code::kCUDA)
      return std::string("constant '") + (entries[i].name ? entries[i].name : "?") + "' (" + describe(*t) +
             ") is not in device memory";
  }
  log(LogLevel::Debug, "cuda graphs: all %zu constants are device-resident (entries call)", n);
  return "";
}

void MethodState::run_eager(const AotiEntryPoints& fns, AOTInductorModelContainerHandle container,
                             std::vector<AtenTensorHandle>& inputs, AtenTensorHandle* outputs, size_t num_outputs,
                             const ErrorText& error_text) {
  auto fn = single_threaded_ ? fns.AOTInductorModelContainerRunSingleThreaded : fns.AOTInductorModelContainerRun;
  const char* name = single_threaded_ ? "AOTInductorModelContainerRunSingleThreaded" : "AOTInductorModelContainerRun";
  clear_last_error();
  const AOTIRuntimeError rc = fn(container, inputs.data(), inputs.size(), outputs, num_outputs,
                                 reinterpret_cast<AOTInductorStreamHandle>(stream_), nullptr);
  inputs.clear();  // the plugin owns (and has deleted) them now
  ++stats_.eager_runs;
  if (rc != AOTI_RUNTIME_SUCCESS) throw Error(error_text(name), AOTI_HOST_RUN_FAILED);
}

bool MethodState::capture(const AotiEntryPoints& fns, AOTInductorModelContainerHandle container,
                           const std::vector<AtenTensorHandle>& inputs, const std::vector<char>& caller_memory,
                           size_t num_outputs, const ErrorText& error_text) {
  const std::string why = constants_not_on_device(fns, container);
  if (!why.empty()) {
    disable(why);
    return false;
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  // Each input is read where the caller keeps it (its own device memory, until it moves) or from a
  // graph-owned buffer at a fixed address that each replay copies the caller's input into.
  moved_.resize(inputs.size(), 0);
  static_inputs_.clear();
  direct_.assign(inputs.size(), 0);
  std::vector<AtenTensorHandle> cap_in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = *from_handle(inputs[i]);
    direct_[i] = i < caller_memory.size() && caller_memory[i] && !moved_[i];
    // A direct input's record aliases the caller's storage, which it never frees (borrowed, no deleter).
    static_inputs_.emplace_back(direct_[i] ? t.alias(t.sizes(), t.strides(), t.storage_offset())
                                           : same_layout_copy(t, device_, s));
    const Tensor& in = *static_inputs_.back();
    cap_in.push_back(to_handle(in.alias(in.sizes(), in.strides(), in.storage_offset())));
  }
  AOTI_CUDA_CHECK(cudaStreamSynchronize(s));

  arena_ = std::make_unique<Arena>(device_);
  std::vector<AtenTensorHandle> outs(num_outputs, nullptr);
  cudaGraph_t graph = nullptr;
  clear_last_error();
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  set_thread_arena(arena_.get());
  const AOTIRuntimeError rc = fns.AOTInductorModelContainerRunSingleThreaded(
      container, cap_in.data(), cap_in.size(), outs.data(), num_outputs, reinterpret_cast<AOTInductorStreamHandle>(s),
      nullptr);
  set_thread_arena(nullptr);
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  arena_->release_deferred();
  std::string failure;
  if (rc != AOTI_RUNTIME_SUCCESS) failure = error_text("AOTInductorModelContainerRunSingleThreaded under capture");
  if (failure.empty() && end != cudaSuccess)
    failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    const cudaError_t inst = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    if (inst != cudaSuccess) failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
  }
  if (!failure.empty()) {
    cudaGetLastError();
    for (auto h : outs)
      if (h != nullptr) delete from_handle(h);
    if (graph != nullptr) cudaGraphDestroy(graph);
    graph_ = nullptr;
    drop_graph();
    disable("capture failed: " + failure);
    return false;
  }
  graph_ = graph;
  graph_exec_ = exec;
  graph_outputs_.clear();
  for (auto h : outs) graph_outputs_.emplace_back(from_handle(h));
  ++stats_.captures;
  size_t direct = 0;
  for (char d : direct_) direct += d ? 1 : 0;
  log(LogLevel::Info,
      "cuda graphs: captured Run (%zu inputs, %zu read in place, %zu outputs, %zu bytes of graph memory)",
      inputs.size(), direct, num_outputs, arena_->bytes_used());
  return true;
}

bool MethodState::inputs_match(const std::vector<AtenTensorHandle>& inputs, std::string* why) const {
  if (inputs.size() != static_inputs_.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& a = *from_handle(inputs[i]);
    const Tensor& b = *static_inputs_[i];
    if (a.dtype() != b.dtype() || a.sizes() != b.sizes() || a.strides() != b.strides()) {
      *why = "input " + std::to_string(i) + " is " + describe(a) + ", the graph was captured for " + describe(b);
      return false;
    }
  }
  return true;
}

// A direct input the caller now passes at another address: the graph reads the captured address, which is
// no longer the caller's input. That input goes through a graph-owned buffer from now on; the graph is
// captured again (at most once per input over the method's life).
bool MethodState::direct_inputs_moved(const std::vector<AtenTensorHandle>& inputs) {
  bool moved = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!direct_[i] || from_handle(inputs[i])->data_ptr() == static_inputs_[i]->data_ptr()) continue;
    moved_[i] = 1;
    moved = true;
    log(LogLevel::Info, "cuda graphs: input %zu moved (captured at %p, now %p): it is copied into a graph-owned "
        "buffer from now on; capturing again", i, static_inputs_[i]->data_ptr(), from_handle(inputs[i])->data_ptr());
  }
  return moved;
}

void MethodState::replay(std::vector<AtenTensorHandle>& inputs, AtenTensorHandle* outputs, size_t num_outputs) {
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& src = *from_handle(inputs[i]);
    Tensor& dst = *static_inputs_[i];
    if (src.data_ptr() == dst.data_ptr()) continue;  // already where the graph reads it
    const size_t n = compute_storage_nbytes(src.sizes(), src.strides(), src.itemsize(), 0);
    if (n > 0) AOTI_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToDevice, s));
    ++stats_.input_copies;
  }
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec_), s), "cudaGraphLaunch");
  // The caller's buffers may be freed as soon as we return: their frees are stream-ordered after the copy
  // (and, for inputs read in place, after the graph that reads them). The host work below overlaps the graph.
  delete_handles(inputs);
  // Graph memory is overwritten by the next replay: copies, unless the caller took the borrowing contract.
  for (size_t k = 0; k < num_outputs; ++k) {
    const Tensor& g = *graph_outputs_[k];
    if (borrow_outputs_) {
      outputs[k] = to_handle(g.alias(g.sizes(), g.strides(), g.storage_offset()));
    } else {
      outputs[k] = to_handle(same_layout_copy(g, device_, s));
      ++stats_.output_copies;
    }
  }
  ++stats_.replays;
}

void MethodState::run(const AotiEntryPoints& fns, AOTInductorModelContainerHandle container,
                       std::vector<AtenTensorHandle>& inputs, const std::vector<char>& caller_memory,
                       AtenTensorHandle* outputs, size_t num_outputs, const ErrorText& error_text) {
  Scope scope(*this);
  if (!graphs_) return run_eager(fns, container, inputs, outputs, num_outputs, error_text);
  if (graph_exec_ == nullptr && warmup_left_ > 0) {
    --warmup_left_;
    return run_eager(fns, container, inputs, outputs, num_outputs, error_text);
  }
  if (graph_exec_ == nullptr && !capture(fns, container, inputs, caller_memory, num_outputs, error_text))
    return run_eager(fns, container, inputs, outputs, num_outputs, error_text);
  std::string why;
  if (!inputs_match(inputs, &why)) {
    if (!logged_mismatch_) {
      log(LogLevel::Warning, "cuda graphs: %s; running without the graph", why.c_str());
      logged_mismatch_ = true;
    }
    return run_eager(fns, container, inputs, outputs, num_outputs, error_text);
  }
  if (direct_inputs_moved(inputs)) {
    drop_graph();
    if (!capture(fns, container, inputs, caller_memory, num_outputs, error_text))
      return run_eager(fns, container, inputs, outputs, num_outputs, error_text);
  }
  replay(inputs, outputs, num_outputs);
}

}  // namespace cuda
}  // namespace aoti_host
