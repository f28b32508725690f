// Convolutions through cuDNN's graph (backend) API, built with NVIDIA's header-only cudnn-frontend, as torch
// runs them (ATen's Conv_v8.cpp): one graph per shape holding a single convolution node (conv_fprop, or
// conv_dgrad for a transposed convolution), the engine configurations heuristics mode A ranks followed by
// cuDNN's fallback list, minus the numerical notes torch filters out, and the first that builds.
//
// cuDNN itself is loaded by cudnn_conv.cpp (one library for both APIs: the frontend resolves its calls in that
// library, cudnn_fe.h). A runtime built without the frontend's headers (compiled() is false) runs every
// convolution through the legacy API.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shims/cuda/cudnn_api.h"

namespace aoti_host {
namespace cuda {
namespace cudnn_graph {

// Whether this build carries the graph path (the CUDA variant compiled against cudnn-frontend's headers).
bool compiled();

// One convolution as cuDNN takes it: 4-d or 5-d dims (a 1-d convolution with an inserted height of 1, as in
// ATen), the operands' strides and byte alignments. A transposed convolution runs as the backward-data pass
// of the forward convolution it transposes: x is its input (cuDNN's dy), y its output (dx).
struct Conv {
  int32_t dtype = 0;
  bool transposed = false;
  bool allow_tf32 = true;  // float32 may use tensor cores (TF32), as torch.backends.cudnn.allow_tf32
  std::vector<int64_t> x_dims, x_strides, w_dims, w_strides, y_dims, y_strides;
  std::vector<int64_t> padding, stride, dilation;  // one per convolved dim
  int64_t x_align = 16, w_align = 16, y_align = 16;  // bytes the data pointers are aligned to
  int64_t max_workspace = 0;                         // engines that want more are passed over
  int sm_version = 0;  // the device's compute capability (90 for sm_90): else the frontend asks its own cudart
};

class Plan;  // a finalized graph and its execution plan

// Builds the plan for `c` with `handle` (of the device the plan will run on). Returns null, saying why in *why, where the graph API refuses the shape (no engine
// supports it, or none builds). The plan runs the heuristics' first engine that builds; every_engine builds
// all of them, for measure() to choose from.
std::shared_ptr<Plan> build(cudnn::Handle handle, const Conv& c, bool every_engine, std::string* why);

// Bytes of workspace the plan's execution needs.
int64_t workspace_size(const Plan& p);

// Bytes of workspace measure() needs (the largest of the built engines').
int64_t measure_workspace_size(const Plan& p);

// Runs each built engine on x/w/y (writing y) and keeps the fastest, as torch's cudnn.benchmark=True does;
// synchronizes the device, so never while capturing. Where measuring fails the heuristics' choice stands.
void measure(Plan& p, cudnn::Handle handle, const void* x, const void* w, void* y, void* workspace);

// Whether measure() chose the plan's engine.
bool measured(const Plan& p);

// The engine the plan runs (cuDNN's name for it, e.g. "eng12_k2=3"), for the log.
const std::string& engine_name(const Plan& p);

// Runs the plan on `handle`'s stream. Returns false, saying why, where cuDNN fails.
bool execute(const Plan& p, cudnn::Handle handle, const void* x, const void* w, void* y, void* workspace,
             std::string* why);

}  // namespace cudnn_graph
}  // namespace cuda
}  // namespace aoti_host
