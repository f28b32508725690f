// The graph-API convolution path (cudnn_graph_conv.h): compiled where SCons found cudnn-frontend's and cuDNN's
// headers (AOTI_HAVE_CUDNN_FRONTEND, docs/scons.md); without them compiled() is false and cudnn_conv.cpp never
// builds a plan through it.
#include "shims/cuda/cudnn_graph_conv.h"

#include <stdexcept>

#include "aoti_host/tensor.h"

#if defined(AOTI_HAVE_CUDNN_FRONTEND)

#include <mutex>
#include <unordered_map>

#include "shims/cuda/cudnn_fe.h"

namespace aoti_host {
namespace cuda {
namespace cudnn_graph {

namespace fe = cudnn_frontend;
namespace dc = aoti_host::dtype_code;

class Plan {
 public:
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t x_uid = 0, w_uid = 0, y_uid = 0;
  int64_t workspace = 0;
  std::string engine;
  bool measured = false;
};

namespace {

constexpr int64_t kX = 1, kW = 2, kY = 3;  // the tensors' uids in every graph

// Fails with the frontend's message, naming the step.
void check(fe::error_t status, const char* step) {
  if (status.is_bad()) throw std::runtime_error(std::string(step) + ": " + status.get_message());
}

}  // namespace

bool compiled() { return true; }

std::shared_ptr<Plan> build(cudnn::Handle handle, const Conv& c, bool every_engine, std::string* why) {
  if (!cudnn_fe::ready(why)) return nullptr;
  fe::DataType_t io = fe::DataType_t::FLOAT, compute = fe::DataType_t::FLOAT;
  switch (c.dtype) {
    case dc::kFloat32: break;
    case dc::kFloat16: io = fe::DataType_t::HALF; break;
    case dc::kBFloat16: io = fe::DataType_t::BFLOAT16; break;
    case dc::kFloat64: io = compute = fe::DataType_t::DOUBLE; break;
    default: *why = "dtype " + std::string(dtype_name(c.dtype)) + " is not one cuDNN convolves"; return nullptr;
  }
  try {
    auto plan = std::make_shared<Plan>();
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(io).set_intermediate_data_type(compute).set_compute_data_type(compute);
    if (c.sm_version > 0) g->set_sm_version(c.sm_version);
    auto operand = [&g](const char* name, int64_t uid, const std::vector<int64_t>& dims,
                        const std::vector<int64_t>& strides, int64_t align) {
      return g->tensor(
          fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides).set_alignment(
              align));
    };
    auto X = operand("x", kX, c.x_dims, c.x_strides, c.x_align);
    auto W = operand("w", kW, c.w_dims, c.w_strides, c.w_align);
    std::shared_ptr<fe::graph::Tensor_attributes> Y;
    if (c.transposed) {
      Y = g->conv_dgrad(X, W,
                        fe::graph::Conv_dgrad_attributes()
                            .set_name("transposed")
                            .set_padding(c.padding)
                            .set_stride(c.stride)
                            .set_dilation(c.dilation));
    } else {
      Y = g->conv_fprop(X, W,
                        fe::graph::Conv_fprop_attributes()
                            .set_name("conv")
                            .set_padding(c.padding)
                            .set_stride(c.stride)
                            .set_dilation(c.dilation));
    }
    Y->set_output(true).set_uid(kY).set_dim(c.y_dims).set_stride(c.y_strides).set_alignment(c.y_align).set_data_type(io);
    check(g->validate(), "validate");
    check(g->build_operation_graph(handle), "build_operation_graph");
    // Heuristics mode A (cuDNN's instant mode, torch's default), then the fallback list, as ATen queries them.
    check(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans");
    // ATen's filter: never engines that down-convert inputs; float32 stays off tensor cores without TF32.
    std::vector<fe::NumericalNote_t> barred{fe::NumericalNote_t::DOWN_CONVERT_INPUTS};
    if (c.dtype == dc::kFloat32 && !c.allow_tf32) barred.push_back(fe::NumericalNote_t::TENSOR_CORE);
    g->deselect_numeric_notes(barred);
    if (c.max_workspace > 0) g->deselect_workspace_greater_than(c.max_workspace);
    check(g->check_support(handle), "check_support");
    check(g->build_plans(handle, every_engine ? fe::BuildPlanPolicy_t::ALL : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE),
          "build_plans");
    check(g->get_workspace_size(plan->workspace), "get_workspace_size");
    std::string name;
    if (g->get_plan_name(name).is_good()) plan->engine = name;
    plan->graph = std::move(g);
    plan->x_uid = kX, plan->w_uid = kW, plan->y_uid = kY;
    return plan;
  } catch (const std::exception& e) {
    *why = e.what();
    return nullptr;
  }
}

int64_t workspace_size(const Plan& p) { return p.workspace; }

int64_t measure_workspace_size(const Plan& p) { return p.graph->get_autotune_workspace_size(); }

void measure(Plan& p, cudnn::Handle handle, const void* x, const void* w, void* y, void* workspace) {
  std::unordered_map<int64_t, void*> pack{{p.x_uid, const_cast<void*>(x)}, {p.w_uid, const_cast<void*>(w)}, {p.y_uid, y}};
  try {
    if (p.graph->autotune(handle, pack, workspace).is_bad()) return;  // the heuristics' choice stands
    int64_t bytes = 0;
    if (p.graph->get_workspace_size(bytes).is_good()) p.workspace = bytes;
    std::string name;
    if (p.graph->get_plan_name(name).is_good()) p.engine = name;
    p.measured = true;
  } catch (const std::exception&) {
  }
}

const std::string& engine_name(const Plan& p) { return p.engine; }

bool measured(const Plan& p) { return p.measured; }

bool execute(const Plan& p, cudnn::Handle handle, const void* x, const void* w, void* y, void* workspace,
             std::string* why) {
  std::unordered_map<int64_t, void*> pack{{p.x_uid, const_cast<void*>(x)}, {p.w_uid, const_cast<void*>(w)}, {p.y_uid, y}};
  try {
    fe::error_t st = p.graph->execute(handle, pack, workspace);
    if (st.is_good()) return true;
    *why = st.get_message();
  } catch (const std::exception& e) {
    *why = e.what();
  }
  return false;
}

}  // namespace cudnn_graph
}  // namespace cuda
}  // namespace aoti_host

#else  // built without cudnn-frontend's headers: every convolution takes the legacy API

namespace aoti_host {
namespace cuda {
namespace cudnn_graph {

class Plan {};

bool compiled() { return false; }

std::shared_ptr<Plan> build(cudnn::Handle, const Conv&, bool, std::string* why) {
  *why = "this runtime was built without cudnn-frontend's headers";
  return nullptr;
}

int64_t workspace_size(const Plan&) { return 0; }

int64_t measure_workspace_size(const Plan&) { return 0; }

void measure(Plan&, cudnn::Handle, const void*, const void*, void*, void*) {}

bool measured(const Plan&) { return false; }

const std::string& engine_name(const Plan&) {
  static const std::string none;
  return none;
}

bool execute(const Plan&, cudnn::Handle, const void*, const void*, void*, void*, std::string* why) {
  *why = "this runtime was built without cudnn-frontend's headers";
  return false;
}

}  // namespace cudnn_graph
}  // namespace cuda
}  // namespace aoti_host

#endif
