// The C API: every call converts exceptions into a status and a thread-local message.
#include "aoti_host/c_api.h"

#include <new>

#include "aoti_host/error.h"
#include "aoti_host/tensor.h"
#include "host/method.h"
#include "host/program.h"
#if CUDA_AVAILABLE
#include "host/cuda/method_state.h"
#endif

// A program (host/program.h) is a set of methods (host/method.h); the single-method calls use method 0.
struct aoti_host_program {
  std::shared_ptr<aoti_host::Program> set;
  aoti_host::Method* impl;  // method 0
};

struct aoti_host_session {
  std::shared_ptr<aoti_host::Program> set;
  std::unique_ptr<aoti_host::SessionState> state;
};

namespace {

template <typename F>
int guarded(F&& f) {
  try {
    aoti_host::clear_last_error();
    f();
    return AOTI_HOST_OK;
  } catch (const aoti_host::Error& e) {
    aoti_host::set_last_error(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    aoti_host::set_last_error("out of memory");
    return AOTI_HOST_INTERNAL;
  } catch (const std::exception& e) {
    aoti_host::set_last_error(std::string("internal error: ") + e.what());
    return AOTI_HOST_INTERNAL;
  } catch (...) {
    aoti_host::set_last_error("internal error: unknown exception");
    return AOTI_HOST_INTERNAL;
  }
}

void require(const void* p, const char* what) {
  if (p == nullptr) throw aoti_host::Error(std::string(what) + " is NULL", AOTI_HOST_INVALID_ARGUMENT);
}

// What method 0's contract says about input or output `index`.
int tensor_spec(const aoti_host_program* program, bool output, size_t index, aoti_host_tensor_spec* out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    const aoti_host::Method& m = *program->impl;
    if (index >= (output ? m.num_outputs() : m.num_inputs()))
      throw aoti_host::Error(std::string(output ? "output" : "input") + " index " + std::to_string(index) +
                                 " out of range", AOTI_HOST_INVALID_ARGUMENT);
    const aoti_host::TensorContract& c = output ? m.output(index) : m.input(index);
    out->name = c.name.c_str();
    out->dtype = c.dtype;
    out->ndim = c.dtype < 0 ? -1 : static_cast<int32_t>(c.sizes.size());
    out->sizes = c.sizes.data();
    out->min_sizes = c.min_sizes.data();
    out->max_sizes = c.max_sizes.data();
  });
}

}  // namespace

extern "C" {

const char* aoti_host_last_error(void) { return aoti_host::last_error().c_str(); }

const char* aoti_host_status_name(int status) {
  switch (status) {
    case AOTI_HOST_OK: return "ok";
    case AOTI_HOST_INVALID_ARGUMENT: return "invalid-argument";
    case AOTI_HOST_NOT_FOUND: return "not-found";
    case AOTI_HOST_LOAD_FAILED: return "load-failed";
    case AOTI_HOST_INVALID_PROGRAM: return "invalid-program";
    case AOTI_HOST_RUN_FAILED: return "run-failed";
    case AOTI_HOST_NOT_SUPPORTED: return "not-supported";
    case AOTI_HOST_INTERNAL: return "internal";
    default: return "unknown";
  }
}

int aoti_host_program_load(const char* path, const aoti_host_load_options* options, aoti_host_program** out) {
  return guarded([&] {
    require(path, "path");
    require(out, "out");
    *out = nullptr;
    aoti_host_load_options defaults{nullptr, nullptr, 1, 0};
    const aoti_host_load_options& o = options != nullptr ? *options : defaults;
    auto set = aoti_host::Program::load(path, o);
    aoti_host::Method* first = &set->method(0);
    *out = new aoti_host_program{std::move(set), first};
  });
}

void aoti_host_program_free(aoti_host_program* program) { delete program; }

int aoti_host_program_num_inputs(const aoti_host_program* program, size_t* out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    *out = program->impl->num_inputs();
  });
}

int aoti_host_program_num_outputs(const aoti_host_program* program, size_t* out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    *out = program->impl->num_outputs();
  });
}

int aoti_host_program_has_contract(const aoti_host_program* program, bool* out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    *out = program->impl->has_contract();
  });
}

int aoti_host_program_input_spec(const aoti_host_program* program, size_t index, aoti_host_tensor_spec* out) {
  return tensor_spec(program, false, index, out);
}

int aoti_host_program_output_spec(const aoti_host_program* program, size_t index, aoti_host_tensor_spec* out) {
  return tensor_spec(program, true, index, out);
}

int aoti_host_program_run(aoti_host_program* program, const aoti_host_tensor_view* inputs, size_t num_inputs,
                          struct AtenTensorOpaque** outputs, size_t num_outputs) {
  return guarded([&] {
    require(program, "program");
    program->set->run(0, nullptr, inputs, num_inputs, outputs, num_outputs);
  });
}

namespace {
size_t method_index(const aoti_host_program* program, size_t method) {
  if (method >= program->set->size())
    throw aoti_host::Error("method index " + std::to_string(method) + " out of range (" +
                               std::to_string(program->set->size()) + " methods)", AOTI_HOST_INVALID_ARGUMENT);
  return method;
}
}  // namespace

int aoti_host_program_num_methods(const aoti_host_program* program, size_t* out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    *out = program->set->size();
  });
}

int aoti_host_program_method_name(const aoti_host_program* program, size_t method, const char** out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    *out = program->set->name(method_index(program, method)).c_str();
  });
}

int aoti_host_program_find_method(const aoti_host_program* program, const char* name, size_t* out) {
  return guarded([&] {
    require(program, "program"), require(name, "name"), require(out, "out");
    *out = program->set->find(name);
  });
}

int aoti_host_program_method_num_inputs(const aoti_host_program* program, size_t method, size_t* out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    *out = program->set->method(method_index(program, method)).num_inputs();
  });
}

int aoti_host_program_method_num_outputs(const aoti_host_program* program, size_t method, size_t* out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    *out = program->set->method(method_index(program, method)).num_outputs();
  });
}

int aoti_host_program_run_method(aoti_host_program* program, size_t method, aoti_host_session* session,
                                 const aoti_host_tensor_view* inputs, size_t num_inputs,
                                 struct AtenTensorOpaque** outputs, size_t num_outputs) {
  return guarded([&] {
    require(program, "program");
    program->set->run(method_index(program, method), session != nullptr ? session->state.get() : nullptr, inputs,
                      num_inputs, outputs, num_outputs);
  });
}

int aoti_host_program_weight_stats(const aoti_host_program* program, aoti_host_weight_stats* out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    const aoti_host::WeightStats s = program->set->weight_stats();
    *out = aoti_host_weight_stats{s.constants,       s.shared,
                                  s.shared_bytes,    s.mismatched,
                                  s.host_copy_bytes, s.device_copy_bytes,
                                  s.state_host_copy_bytes, s.state_device_copy_bytes};
  });
}

int aoti_host_session_create(aoti_host_program* program, aoti_host_session** out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    *out = nullptr;
    auto state = program->set->new_session(program->set);
    *out = new aoti_host_session{program->set, std::move(state)};
  });
}

int aoti_host_session_clone(aoti_host_session* session, aoti_host_session** out) {
  return guarded([&] {
    require(session, "session"), require(out, "out");
    *out = nullptr;
    auto state = session->set->clone_session(session->set, *session->state);
    *out = new aoti_host_session{session->set, std::move(state)};
  });
}

int aoti_host_session_reset(aoti_host_session* session) {
  return guarded([&] {
    require(session, "session");
    session->set->reset_session(*session->state);
  });
}

void aoti_host_session_free(aoti_host_session* session) {
  if (session == nullptr) return;
  session->state.reset();  // before the program it may be the last owner of
  delete session;
}

int aoti_host_program_num_state_tensors(const aoti_host_program* program, size_t* out) {
  return guarded([&] {
    require(program, "program"), require(out, "out");
    *out = program->set->num_state_tensors();
  });
}

int aoti_host_program_set_strict(aoti_host_program* program, bool strict) {
  return guarded([&] {
    require(program, "program");
    for (size_t m = 0; m < program->set->size(); ++m) program->set->method(m).set_strict(strict);
  });
}

int aoti_host_program_set_input_layout(aoti_host_program* program, size_t method, size_t index,
                                       const int64_t* strides, int32_t ndim) {
  return guarded([&] {
    require(program, "program");
    if (ndim < 0) throw aoti_host::Error("ndim is negative", AOTI_HOST_INVALID_ARGUMENT);
    if (ndim > 0) require(strides, "strides");
    program->set->method(method_index(program, method))
        .set_input_layout(index, std::vector<int64_t>(strides, strides + ndim));
  });
}

int aoti_host_tensor_to_cpu(struct AtenTensorOpaque* tensor, struct AtenTensorOpaque** out) {
  return guarded([&] {
    require(tensor, "tensor"), require(out, "out");
    const aoti_host::Tensor& t = *aoti_host::from_handle(tensor);
#if CUDA_AVAILABLE
    if (t.device_type() == aoti_host::device_code::kCUDA) {
      *out = aoti_host::to_handle(aoti_host::cuda::to_host(t));
      return;
    }
#endif
    *out = aoti_host::to_handle(t.clone_contiguous());
  });
}

int aoti_host_tensor_to_cuda(struct AtenTensorOpaque* tensor, int32_t device_index, struct AtenTensorOpaque** out) {
  return guarded([&] {
    require(tensor, "tensor"), require(out, "out");
#if CUDA_AVAILABLE
    const aoti_host::Tensor& t = *aoti_host::from_handle(tensor);
    std::unique_ptr<aoti_host::Tensor> d(aoti_host::Tensor::empty_strided(
        t.dtype(), t.sizes(), t.strides(), aoti_host::device_code::kCUDA, device_index));
    aoti_host::cuda::copy(*d, t);
    *out = aoti_host::to_handle(d.release());
#else
    (void)device_index;
    throw aoti_host::Error("this runtime was built without CUDA (scons cuda=on)", AOTI_HOST_NOT_SUPPORTED);
#endif
  });
}

#if CUDA_AVAILABLE
}  // extern "C": C++ helpers below return C++ types
namespace {
aoti_host::cuda::MethodState& cuda_of(const aoti_host_program* program) {
  require(program, "program");
  auto* s = program->impl->cuda_state();
  if (s == nullptr)
    throw aoti_host::Error(program->impl->path() + ": not loaded on a cuda device (load with device \"cuda\")",
                           AOTI_HOST_NOT_SUPPORTED);
  return *s;
}
}  // namespace
extern "C" {

int aoti_host_program_set_cuda_graphs(aoti_host_program* program, bool enable) {
  return guarded([&] {
    cuda_of(program);  // refuses a cpu program
    for (size_t k = 0; k < program->set->size(); ++k) {
      aoti_host::Method& m = program->set->method(k);
      m.cuda_state()->enable_graphs(enable, m.has_single_threaded_run());
    }
  });
}

int aoti_host_program_set_borrowed_graph_outputs(aoti_host_program* program, bool borrowed) {
  return guarded([&] { cuda_of(program).borrow_graph_outputs(borrowed); });
}

int aoti_host_program_cuda_stats(const aoti_host_program* program, aoti_host_cuda_stats* out) {
  return guarded([&] {
    const auto& s = cuda_of(program);
    require(out, "out");
    const auto& g = s.stats();
    out->graph_captures = g.captures, out->graph_replays = g.replays, out->eager_runs = g.eager_runs;
    out->graphs_disabled_reason = g.disabled_reason.c_str();
    out->weight_upload_bytes = s.upload_bytes();
    out->weight_stage_seconds = s.upload_stage_seconds();
    out->weight_upload_seconds = s.upload_seconds();
    out->weight_load_seconds = s.upload_load_seconds();
    out->weight_upload_mode = s.upload_mode();
    out->weight_upload_chunks = s.upload_chunks();
    out->graph_input_copies = g.input_copies, out->graph_output_copies = g.output_copies;
    out->weight_upload_chunk_bytes = s.upload_chunk_bytes();
    out->weight_upload_threads = s.upload_threads();
  });
}

int aoti_host_program_synchronize(const aoti_host_program* program) {
  return guarded([&] {
    require(program, "program");
    for (size_t k = 0; k < program->set->size(); ++k)
      if (auto* s = program->set->method(k).cuda_state()) s->synchronize();
  });
}

int aoti_host_program_cuda_stream(const aoti_host_program* program, void** out) {
  return guarded([&] {
    const auto& s = cuda_of(program);
    require(out, "out");
    *out = s.stream();
  });
}

int aoti_host_program_method_cuda_stream(const aoti_host_program* program, size_t method, void** out) {
  return guarded([&] {
    cuda_of(program);  // refuses a cpu program
    require(out, "out");
    const auto* s = program->set->method(method_index(program, method)).cuda_state();
    if (s == nullptr)
      throw aoti_host::Error("method " + std::to_string(method) + " does not run on a cuda device",
                             AOTI_HOST_NOT_SUPPORTED);
    *out = s->stream();
  });
}

int aoti_host_program_method_synchronize(const aoti_host_program* program, size_t method) {
  return guarded([&] {
    require(program, "program");
    if (auto* s = program->set->method(method_index(program, method)).cuda_state()) s->synchronize();
  });
}
#else
int aoti_host_program_method_synchronize(const aoti_host_program* program, size_t method) {
  return guarded([&] {
    require(program, "program");
    method_index(program, method);
  });
}
int aoti_host_program_method_cuda_stream(const aoti_host_program*, size_t, void**) {
  aoti_host::set_last_error("cuda stream: this runtime was built without CUDA (scons cuda=on)");
  return AOTI_HOST_NOT_SUPPORTED;
}
int aoti_host_program_synchronize(const aoti_host_program* program) {
  return guarded([&] { require(program, "program"); });
}
int aoti_host_program_set_cuda_graphs(aoti_host_program*, bool) {
  aoti_host::set_last_error("CUDA graphs: this runtime was built without CUDA (scons cuda=on)");
  return AOTI_HOST_NOT_SUPPORTED;
}
int aoti_host_program_set_borrowed_graph_outputs(aoti_host_program*, bool) {
  aoti_host::set_last_error("CUDA graphs: this runtime was built without CUDA (scons cuda=on)");
  return AOTI_HOST_NOT_SUPPORTED;
}
int aoti_host_program_cuda_stats(const aoti_host_program*, aoti_host_cuda_stats*) {
  aoti_host::set_last_error("cuda stats: this runtime was built without CUDA (scons cuda=on)");
  return AOTI_HOST_NOT_SUPPORTED;
}
int aoti_host_program_cuda_stream(const aoti_host_program*, void**) {
  aoti_host::set_last_error("cuda stream: this runtime was built without CUDA (scons cuda=on)");
  return AOTI_HOST_NOT_SUPPORTED;
}
#endif

}  // extern "C"
