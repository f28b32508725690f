// A program (the C API's aoti_host_program; ExecuTorch's naming): N plugins (one .pt2 each) loaded as the
// methods (method.h) of one model, sharing weights by original FQN, and the mutable state (Buffer constants)
// that sessions own.
//
// Weight sharing: the first method that holds an FQN is its owner. A later method gets the owner's tensor
// under its own INTERNAL name (FQN and internal name differ: fc1.weight vs fc1_weight) through
// AOTInductorModelContainerUpdateUserManagedConstantBufferPairs, after dtype, sizes, strides, device and the
// bytes are compared (host tensors with memcmp, CUDA tensors by a kernel on the device: only a 4-byte flag
// is downloaded); a mismatch keeps the method's own copy and logs a line. A method whose weights are
// embedded loads them at Create, gets the shared ones in its inactive buffer, swaps, and frees its own
// blob; a method whose weights are in a blob never loads it (a temporary probe container reads the
// blob's tensors for the checks and is deleted). Plugins without the entries call load their own weights.
//
// Sessions: the container keeps one set of Buffer tensors (the working state); a session holds its own
// copies, and a run in a session first saves the working state to the session that last ran and loads
// this one's (nothing is copied while the same session keeps running). Runs of a program with state are
// serialised. Rebinding the container's constants per session instead is not an option: torch 2.13 caches
// each constant's data pointer (ConstantHandle) until an Update* call, and every user-managed Update* wraps
// the tensor in a new handle that the container never deletes.
//
// On CUDA every copy of constants and state is device-to-device (cuda::copy of two device tensors) on a
// method's stream: a constant's own copy on the stream of the method (or probe) that holds it; state copies
// on the stream of the method that last ran in the program (or is about to), made to wait (an event) for
// the stream that queued the state's work before. Runs that mutate the state are thus ordered across the
// methods' streams. Only the load waits for the device (each method's stream once, and the 4-byte result
// of each value comparison). WeightStats counts the bytes copied by memory kind (host vs device).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "aoti_host/c_api_types.h"
#include "aoti_host/tensor.h"
#include "host/method.h"

namespace aoti_host {

struct MethodSpec {
  std::string name;
  std::string path;
};

// A directory (its methods.json, else every *.pt2, named by stem), a manifest (.json), or one package
// or plugin (one method, "forward"). Throws Error with the fix.
std::vector<MethodSpec> resolve_methods(const std::string& path);

struct WeightStats {
  size_t constants = 0;       // over all methods
  size_t shared = 0;          // constants a method borrows from another method
  size_t shared_bytes = 0;    // bytes those would have taken again
  size_t mismatched = 0;      // same FQN, different dtype/sizes/strides/device/values: own copy kept
  // Bytes copied to keep a method's unshared constants (its blob or buffer is freed): in host memory (a cpu
  // program), and device-to-device (a cuda program; nothing of those goes through host memory).
  size_t host_copy_bytes = 0;
  size_t device_copy_bytes = 0;
  // Bytes of session state copied (new, clone, reset, and a run in another session than the last one),
  // by the same split.
  size_t state_host_copy_bytes = 0;
  size_t state_device_copy_bytes = 0;
};

class SessionState;

class Program {
 public:
  // Weights are shared across methods unless options.no_weight_sharing.
  static std::shared_ptr<Program> load(const std::string& path, const aoti_host_load_options& options);
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  size_t size() const { return methods_.size(); }
  const std::string& name(size_t i) const { return names_.at(i); }
  Method& method(size_t i) { return *methods_.at(i); }
  const Method& method(size_t i) const { return *methods_.at(i); }
  size_t find(const std::string& name) const;  // throws Error(NOT_FOUND) listing the methods
  WeightStats weight_stats() const;  // a snapshot (runs in sessions update the state counters)
  const std::string& path() const { return path_; }

  // Empty when sessions work; else why they answer NotSupported.
  const std::string& sessions_unsupported() const { return no_sessions_; }
  size_t num_state_tensors() const { return slots_.size(); }

  // session == nullptr: the program's own state (what runs without a session see).
  void run(size_t method, SessionState* session, const aoti_host_tensor_view* inputs, size_t num_inputs,
           AtenTensorHandle* outputs, size_t num_outputs);

  // Sessions (session.cpp). new_session: a fresh copy of the state as loaded.
  std::unique_ptr<SessionState> new_session(const std::shared_ptr<Program>& self);
  std::unique_ptr<SessionState> clone_session(const std::shared_ptr<Program>& self, SessionState& from);
  void reset_session(SessionState& s);
  void release_session(SessionState& s);

 private:
  Program() = default;
  void share(size_t k, const aoti_host_load_options& options, struct Pool& pool);
  void find_state();
  void switch_to(SessionState* s);  // mu_ held, under order_state
  // mu_ held: makes the stream (and device) of `method` current on this thread until the result is
  // destroyed, ordered after the state's last work (which may have been queued on another method's stream);
  // the state's work goes to that stream from then on. Null for a cpu program. Without a method: the stream
  // of the method that last worked on the state.
  StreamScopePtr order_state(size_t method);
  StreamScopePtr order_state() { return order_state(state_method_); }
  std::vector<std::unique_ptr<Tensor>> copy_state(bool from_initial);  // mu_ held, under order_state
  std::unique_ptr<Tensor> copy_value(const Tensor& src);  // a new state tensor, counted
  void copy_value(Tensor& dst, const Tensor& src);        // dst <- src, counted

  struct Slot {
    std::string fqn;
    std::vector<AtenTensorHandle> working;  // the containers' tensors, one per distinct storage
    std::unique_ptr<Tensor> initial;        // the value as loaded
  };

  std::string path_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Method>> methods_;
  std::vector<std::vector<std::string>> user_managed_;  // per method: internal names handed over user-managed
  std::vector<std::unique_ptr<Tensor>> host_owned_;     // copies the runtime owns and the containers point into
  WeightStats stats_;
  std::string no_sessions_;
  std::vector<Slot> slots_;
  mutable std::mutex mu_;
  size_t state_method_ = 0;  // the method whose stream queued the state's last work (CUDA)
  std::unique_ptr<SessionState> own_state_;
  SessionState* current_ = nullptr;  // whose values the working tensors hold; nullptr: a released session's
};

class SessionState {
 public:
  ~SessionState();
  SessionState(const SessionState&) = delete;
  SessionState& operator=(const SessionState&) = delete;
  Program& program() { return *owner_; }

 private:
  friend class Program;
  SessionState() = default;
  std::shared_ptr<Program> keep_;  // a session keeps its program alive; null for the program's own state
  Program* owner_ = nullptr;
  std::vector<std::unique_ptr<Tensor>> values;  // one per slot, valid when the session is not current
};

}  // namespace aoti_host
