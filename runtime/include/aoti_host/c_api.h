/* The C API of the host runtime: load a plugin (a .pt2 package or a plugin .so) as a program, check
 * inputs against its contract, run it. Every call returns an aoti_host_status; on failure
 * aoti_host_last_error() gives the message (thread-local, valid until the next call on the thread).
 * Outputs are AtenTensorHandles owned by the caller: read them with the exported aoti_torch_get_*
 * shims and free them with aoti_torch_delete_tensor_object. The structs and prototypes here are also
 * data in toolchain/spec/c_api.toml, from which the ctypes module toolchain/runtime/_abi.py is generated;
 * tests/unit/test_c_api_spec.py fails when the two disagree. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aoti_host/export.h"
#include "aoti_host/status.h" /* aoti_host_status: generated from toolchain/spec/c_api.toml */

#ifdef __cplusplus
extern "C" {
#endif

struct AtenTensorOpaque;

typedef struct aoti_host_program aoti_host_program;

/* A borrowed view of caller memory, handed to the plugin without a copy. Strides in elements. */
typedef struct aoti_host_tensor_view {
  void* data;
  int32_t dtype; /* torch ScalarType code: float32 = 6, int64 = 4, ... */
  int32_t ndim;
  const int64_t* sizes;
  const int64_t* strides;    /* NULL: contiguous */
  int32_t device_type;       /* 0 = cpu */
  int32_t device_index;
} aoti_host_tensor_view;

/* What the plugin's contract says about one input or output (from the package's contract entry). */
typedef struct aoti_host_tensor_spec {
  const char* name;
  int32_t dtype;          /* -1: unknown */
  int32_t ndim;           /* -1: unknown */
  const int64_t* sizes;   /* ndim entries; -1 marks a dynamic dimension */
  const int64_t* min_sizes;
  const int64_t* max_sizes;
} aoti_host_tensor_spec;

typedef struct aoti_host_load_options {
  const char* weights_path; /* a weights blob for a plugin .so that keeps its weights outside; NULL */
  const char* device;       /* "cpu" (default when NULL) */
  size_t num_models;        /* concurrent Run slots in the container; 0 means 1 */
  int32_t no_weight_sharing; /* nonzero: each method of a multi-method program keeps its own weights */
} aoti_host_load_options;

AOTI_HOST_API const char* aoti_host_version(void);
AOTI_HOST_API const char* aoti_host_last_error(void);
AOTI_HOST_API const char* aoti_host_status_name(int status);

AOTI_HOST_API int aoti_host_program_load(const char* path, const aoti_host_load_options* options,
                                         aoti_host_program** out);
AOTI_HOST_API void aoti_host_program_free(aoti_host_program* program);

AOTI_HOST_API int aoti_host_program_num_inputs(const aoti_host_program* program, size_t* out);
AOTI_HOST_API int aoti_host_program_num_outputs(const aoti_host_program* program, size_t* out);
/* has_contract: whether the package carried a contract (dtype/shape checks) */
AOTI_HOST_API int aoti_host_program_has_contract(const aoti_host_program* program, bool* out);
AOTI_HOST_API int aoti_host_program_input_spec(const aoti_host_program* program, size_t index,
                                               aoti_host_tensor_spec* out);
AOTI_HOST_API int aoti_host_program_output_spec(const aoti_host_program* program, size_t index,
                                                aoti_host_tensor_spec* out);

/* Checks inputs against the contract, then runs. outputs must have room for num_outputs handles. */
AOTI_HOST_API int aoti_host_program_run(aoti_host_program* program, const aoti_host_tensor_view* inputs,
                                        size_t num_inputs, struct AtenTensorOpaque** outputs,
                                        size_t num_outputs);

/* A host (cpu) copy of a tensor handle, contiguous; the input handle stays the caller's. Works for
 * cpu and cuda tensors (outputs of a program loaded on "cuda" live on the device). */
AOTI_HOST_API int aoti_host_tensor_to_cpu(struct AtenTensorOpaque* tensor, struct AtenTensorOpaque** out);

/* A device (cuda:device_index) copy of a tensor handle, same strides; AOTI_HOST_NOT_SUPPORTED in a
 * runtime built without CUDA. */
AOTI_HOST_API int aoti_host_tensor_to_cuda(struct AtenTensorOpaque* tensor, int32_t device_index,
                                           struct AtenTensorOpaque** out);

/* CUDA programs (loaded with device "cuda" or "cuda:N"); AOTI_HOST_NOT_SUPPORTED otherwise. */
typedef struct aoti_host_cuda_stats {
  uint64_t graph_captures, graph_replays, eager_runs;
  const char* graphs_disabled_reason; /* "" while graphs are on or not asked for; valid until the next call */
  uint64_t weight_upload_bytes;       /* blob-mode weights uploaded at load (0: embedded weights) */
  double weight_stage_seconds;        /* outside the host-to-device copy: allocation, pinned staging, waits */
  double weight_upload_seconds;       /* the host-to-device copy (copy engine time when the host uploads the
                                         weights; AOTInductorModelUpdateConstantsFromBlob when the plugin does) */
  double weight_load_seconds;         /* the whole weight load, start to finish */
  const char* weight_upload_mode;     /* how blob weights reached the device: "host" (placed by the host through
                                         its pinned ring), "stage" (the plugin's loader, from a pinned copy),
                                         "pageable" (the plugin's loader, from where the blob is); "" for
                                         embedded weights. Static storage. */
  uint64_t weight_upload_chunks;      /* "host": chunks the pinned ring moved (1 when the ring could not be
                                         pinned and the copy went from pageable memory); 0 otherwise */
  uint64_t weight_upload_chunk_bytes; /* "host": the ring's chunk size (AOTI_HOST_UPLOAD_CHUNK_MB, fixed by the
                                         process's first upload; 0 without a ring); 0 otherwise */
  uint64_t weight_upload_threads;     /* "host": host threads that filled the chunks (AOTI_HOST_UPLOAD_THREADS,
                                         at most one per chunk); 0 otherwise */
  uint64_t graph_input_copies;        /* inputs replays copied into graph-owned buffers (0 while the caller
                                         passes its device inputs at the addresses they had at capture) */
  uint64_t graph_output_copies;       /* outputs replays copied out of graph memory (0 with borrowed outputs) */
} aoti_host_cuda_stats;

/* Capture Run into a CUDA graph after warm-up and replay it; choose before the first run. Graphs stay
 * off (with a logged reason, see stats) when a constant is not device-resident or capture fails. */
AOTI_HOST_API int aoti_host_program_set_cuda_graphs(aoti_host_program* program, bool enable);
/* Graph replays: a device input the caller passes at the address it had at capture is read where it is
 * (no copy); one passed elsewhere is copied into a graph-owned buffer (from then on, for that input).
 * Outputs of a replay are, by default, device copies the caller owns. borrowed = true: they are views of the
 * graph's own output memory instead (no allocation, no copy), valid until the program's next run (or its
 * free); free the handles as usual. Work the caller queues on the program's stream (or the legacy default
 * stream, with which it orders) before that next run reads them correctly without a synchronisation: the
 * next replay is queued after it. Copy out (aoti_host_tensor_to_cuda/to_cpu) what must live longer. Eager
 * runs (warm-up, inputs of another shape) always return owned tensors. */
AOTI_HOST_API int aoti_host_program_set_borrowed_graph_outputs(aoti_host_program* program, bool borrowed);
AOTI_HOST_API int aoti_host_program_cuda_stats(const aoti_host_program* program, aoti_host_cuda_stats* out);
/* Waits until the program's device work is done (a no-op for cpu programs). */
AOTI_HOST_API int aoti_host_program_synchronize(const aoti_host_program* program);
/* The cudaStream_t the program runs on (blocking: it orders with the legacy default stream). */
AOTI_HOST_API int aoti_host_program_cuda_stream(const aoti_host_program* program, void** out);

/* Programs with several methods. aoti_host_program_load also takes a directory (its methods.json, else
 * every *.pt2 in it, named by file stem) or a methods.json manifest ({"methods": [{"name": "forward",
 * "package": "forward.pt2"}, ...]}): each package is one method. Weights are shared across methods by
 * original FQN (loaded once). The single-method calls above act on method 0 ("forward" when present). */
AOTI_HOST_API int aoti_host_program_num_methods(const aoti_host_program* program, size_t* out);
AOTI_HOST_API int aoti_host_program_method_name(const aoti_host_program* program, size_t method, const char** out);
/* AOTI_HOST_NOT_FOUND (the message lists the methods) when there is no such method */
AOTI_HOST_API int aoti_host_program_find_method(const aoti_host_program* program, const char* name, size_t* out);
AOTI_HOST_API int aoti_host_program_method_num_inputs(const aoti_host_program* program, size_t method, size_t* out);
AOTI_HOST_API int aoti_host_program_method_num_outputs(const aoti_host_program* program, size_t method, size_t* out);

typedef struct aoti_host_session aoti_host_session;

/* Runs one method; session NULL: the program's own state (what aoti_host_program_run uses). */
AOTI_HOST_API int aoti_host_program_run_method(aoti_host_program* program, size_t method, aoti_host_session* session,
                                               const aoti_host_tensor_view* inputs, size_t num_inputs,
                                               struct AtenTensorOpaque** outputs, size_t num_outputs);

/* Constants shared across methods, and the bytes the runtime copied to keep constants and session state.
 * A copy is counted in host_* when either side is in host memory (a cpu program), in device_* when both are
 * device memory: those run device-to-device on a method's stream and never pass through host memory, so a
 * cuda program counts 0 in host_copy_bytes and state_host_copy_bytes. Values of two cuda constants are
 * compared on the device (only a 4-byte result is downloaded). */
typedef struct aoti_host_weight_stats {
  size_t constants;       /* over all methods (0 when no method has the entries call) */
  size_t shared;          /* constants a method borrows from another method instead of holding a copy */
  size_t shared_bytes;    /* the bytes those copies would have taken */
  size_t mismatched;      /* same FQN, different dtype/sizes/strides/device/values: the method keeps its own copy */
  size_t host_copy_bytes; /* bytes copied in host memory to keep a method's unshared constants (its blob is freed) */
  size_t device_copy_bytes;       /* the same, copied device-to-device */
  size_t state_host_copy_bytes;   /* bytes of state copied in host memory: the initial copy at load, session
                                     create/clone/reset, and a run in another session than the last one's */
  size_t state_device_copy_bytes; /* the same, copied device-to-device */
} aoti_host_weight_stats;
AOTI_HOST_API int aoti_host_program_weight_stats(const aoti_host_program* program, aoti_host_weight_stats* out);

/* Mutable-state sessions: a session owns its copies of the program's Buffer constants (state a model
 * mutates in place); a run in a session sees only that session's state. A new session starts from the
 * state as loaded; clone copies a session's current state; reset returns it to the state as loaded.
 * AOTI_HOST_NOT_SUPPORTED when a method's plugin lacks the constants entries call (torch < 2.13).
 * A session keeps its program's resources alive until it is freed. */
AOTI_HOST_API int aoti_host_session_create(aoti_host_program* program, aoti_host_session** out);
AOTI_HOST_API int aoti_host_session_clone(aoti_host_session* session, aoti_host_session** out);
AOTI_HOST_API int aoti_host_session_reset(aoti_host_session* session);
AOTI_HOST_API void aoti_host_session_free(aoti_host_session* session);
/* Buffer constants a session holds (0 for a stateless model) */
AOTI_HOST_API int aoti_host_program_num_state_tensors(const aoti_host_program* program, size_t* out);

/* Layouts. strict (every method): refuse an input whose layout differs from the one the plugin was built
 * for, instead of converting it. set_input_layout: the layout method `method`'s plugin expects for input
 * `index`, as strides in elements (only their order matters: e.g. channels-last {HWC, 1, WC, C}), for a
 * package without a contract; with a contract it must agree with it. ndim 0 clears it. */
AOTI_HOST_API int aoti_host_program_set_strict(aoti_host_program* program, bool strict);
AOTI_HOST_API int aoti_host_program_set_input_layout(aoti_host_program* program, size_t method, size_t index,
                                                     const int64_t* strides, int32_t ndim);

#ifdef __cplusplus
}  /* extern "C" */
#endif
