// What a method (host/method.h) loaded on a CUDA device keeps beyond its container: its stream, its CUDA graph
// (capture after warm-up, replay after), the graph's memory and static inputs, and its counters.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "aoti_host/cuda/cuda.h"
#include "aoti_host/entry_points.h"
#include "aoti_host/tensor.h"

namespace aoti_host {
namespace cuda {

class Arena;

class MethodState {
 public:
  using ErrorText = std::function<std::string(const char* call)>;

  explicit MethodState(int device);
  ~MethodState();
  MethodState(const MethodState&) = delete;
  MethodState& operator=(const MethodState&) = delete;

  int device() const { return device_; }
  void* stream() const { return stream_; }
  void synchronize() const;

  // Graphs must be chosen before the first run: a graph-mode method runs through
  // RunSingleThreaded from its first call (Run and RunSingleThreaded share model slots unsafely).
  void enable_graphs(bool on, bool plugin_has_single_threaded_run);
  // Replay outputs: false (default), copies the caller owns; true, views of the graph's output memory,
  // valid until the method's next run (see aoti_host_program_set_cuda_graph_outputs).
  void borrow_graph_outputs(bool on) { borrow_outputs_ = on; }
  // The instantiated graph (cudaGraphExec_t), null before capture: for tools that time a bare replay.
  void* graph_exec() const { return graph_exec_; }
  const GraphStats& stats() const { return stats_; }

  // Weight upload of blob weights: bytes; seconds outside the copy engine (allocation, host copies into
  // pinned memory, waits); seconds of host-to-device copy; seconds in all.
  void record_upload(size_t bytes, double stage_s, double upload_s, double load_s) {
    upload_bytes_ = bytes, upload_stage_s_ = stage_s, upload_s_ = upload_s, upload_load_s_ = load_s;
  }
  double upload_load_seconds() const { return upload_load_s_; }
  size_t upload_bytes() const { return upload_bytes_; }
  double upload_stage_seconds() const { return upload_stage_s_; }
  double upload_seconds() const { return upload_s_; }
  // How the weights got there (the C API's weight_upload_*): "host", "stage" or "pageable" (static
  // storage; "" until blob weights are loaded), and for "host" the ring's chunks, chunk size and fill threads.
  void record_upload_path(const char* mode, size_t chunks, size_t chunk_bytes, size_t threads) {
    upload_mode_ = mode, upload_chunks_ = chunks, upload_chunk_bytes_ = chunk_bytes, upload_threads_ = threads;
  }
  const char* upload_mode() const { return upload_mode_; }
  size_t upload_chunks() const { return upload_chunks_; }
  size_t upload_chunk_bytes() const { return upload_chunk_bytes_; }
  size_t upload_threads() const { return upload_threads_; }

  // A device tensor for `t` (consumed): t itself when it already lives on this device, else a copy made on
  // this method's stream (its device and stream made current for the copy).
  Tensor* to_device(Tensor* t);

  // Runs the container on this method's stream; takes the input handles (as Run does) and fills
  // `outputs` with device tensors owned by the caller. caller_memory[i]: input i is the caller's own
  // device memory, used in place (not a copy the host made for this call), so a graph may read it where it
  // is while the caller keeps passing the same address. Throws Error(AOTI_HOST_RUN_FAILED) with the
  // plugin's message on failure.
  void run(const AotiEntryPoints& fns, AOTInductorModelContainerHandle container, std::vector<AtenTensorHandle>& inputs,
           const std::vector<char>& caller_memory, AtenTensorHandle* outputs, size_t num_outputs,
           const ErrorText& error_text);

  // Makes this method's stream (and device) current on the calling thread for the scope's life.
  class Scope {
   public:
    explicit Scope(const MethodState& s);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    int device_, prev_device_;
    void* prev_stream_;
  };

 private:
  void run_eager(const AotiEntryPoints& fns, AOTInductorModelContainerHandle container,
                 std::vector<AtenTensorHandle>& inputs, AtenTensorHandle* outputs, size_t num_outputs,
                 const ErrorText& error_text);
  bool capture(const AotiEntryPoints& fns, AOTInductorModelContainerHandle container,
               const std::vector<AtenTensorHandle>& inputs, const std::vector<char>& caller_memory,
               size_t num_outputs, const ErrorText& error_text);
  bool inputs_match(const std::vector<AtenTensorHandle>& inputs, std::string* why) const;
  bool direct_inputs_moved(const std::vector<AtenTensorHandle>& inputs);
  void replay(std::vector<AtenTensorHandle>& inputs, AtenTensorHandle* outputs, size_t num_outputs);
  std::string constants_not_on_device(const AotiEntryPoints& fns, AOTInductorModelContainerHandle container) const;
  void disable(const std::string& why);
  void drop_graph();

  int device_;
  void* stream_ = nullptr;
  bool graphs_ = false;
  bool single_threaded_ = false;
  int warmup_left_ = 2;
  GraphStats stats_;
  void* graph_ = nullptr;       // cudaGraph_t
  void* graph_exec_ = nullptr;  // cudaGraphExec_t
  std::unique_ptr<Arena> arena_;
  // What the graph reads for each input: a graph-owned buffer that each replay copies the caller's
  // input into, or (direct_[i]) the caller's own memory at the address it had at capture, which it must
  // keep passing: an input that moves is copied into a graph-owned buffer from then on (recapture).
  std::vector<std::unique_ptr<Tensor>> static_inputs_;
  std::vector<char> direct_;
  std::vector<char> moved_;  // inputs seen at another address than captured: never direct again
  std::vector<std::unique_ptr<Tensor>> graph_outputs_;
  bool borrow_outputs_ = false;
  bool logged_mismatch_ = false;
  size_t upload_bytes_ = 0;
  double upload_stage_s_ = 0, upload_s_ = 0, upload_load_s_ = 0;
  const char* upload_mode_ = "";
  size_t upload_chunks_ = 0, upload_chunk_bytes_ = 0, upload_threads_ = 0;
};

}  // namespace cuda
}  // namespace aoti_host
