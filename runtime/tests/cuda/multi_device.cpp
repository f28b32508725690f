// One package on two devices in one process, through the C API, with CUDA graphs on both:
//   cuda_multi_device PKG.pt2 REF0.npy IN0.npy [IN1.npy ...]
// The caller sits on cuda:0 with a stream of its own made current there (the stream guard shim, as a host
// program does); the package is loaded on cuda:1 and on cuda:0 and run in turn, host inputs then device inputs,
// through warm-up, capture and replays. Checked after every call: the caller's current device and its current
// streams of both devices are as it set them. Checked per program: its weights (every constant the container
// holds, cudaPointerGetAttributes) and its outputs are in its own device's memory, output 0 equals REF0 (eager
// torch), one graph was captured and replayed, and an input in the other device's memory is refused by name.
// Built with the CUDA variant only; run by tests/gpu/test_multi_gpu.py. Exit 2 (not a pass) with fewer than two
// visible devices, 1 when a check failed.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../check.h"
#include "../../tools/npy.h"
#include "aoti_host/c_api.h"
#include "aoti_host/shims.h"
#include "aoti_host/tensor.h"
#include "host/constants.h"
#include "host/method.h"
#include "host/program.h"

namespace {

using aoti_host::NpyArray;

constexpr int kRuns = 6;  // 2 eager warm-up runs, the capture, 3 replays

int pointer_device(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return -2;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
}

// Every constant of the program's method 0, read back from its container: all in cuda:`device`'s memory.
bool weights_on(const std::string& pkg, int device, size_t* count) {
  aoti_host_load_options o{};
  const std::string name = "cuda:" + std::to_string(device);
  o.device = name.c_str();
  o.num_models = 1;
  std::shared_ptr<aoti_host::Program> p = aoti_host::Program::load(pkg, o);
  const aoti_host::Method& m = p->method(0);
  bool ok = true;
  *count = 0;
  for (const auto& e : aoti_host::extract_constants(m.plugin(), m.container())) {
    const aoti_host::Tensor& t = *aoti_host::from_handle(e.handle);
    if (t.numel() == 0) continue;
    ++*count;
    const int on = pointer_device(t.data_ptr());
    if (on != device || t.device_index() != device) {
      std::printf("FAIL: %s on %s: constant %s is in the memory of device %d (its tensor says cuda:%d)\n",
                  pkg.c_str(), name.c_str(), e.fqn.c_str(), on, t.device_index());
      ok = false;
    }
  }
  return ok;
}

struct Caller {
  int device;
  void* stream0;  // the caller's current stream on cuda:0 (its own)
  void* stream1;  // and on cuda:1 (the legacy default, as it never set one)
};

bool caller_kept(const Caller& c, const char* after) {
  int d = -1;
  void *s0 = nullptr, *s1 = nullptr;
  cudaGetDevice(&d);
  aoti_torch_get_current_cuda_stream(0, &s0);
  aoti_torch_get_current_cuda_stream(1, &s1);
  if (d == c.device && s0 == c.stream0 && s1 == c.stream1) return true;
  std::printf("FAIL: after %s: the caller's current device is %d (set %d), its streams %p/%p (set %p/%p)\n", after,
              d, c.device, s0, s1, c.stream0, c.stream1);
  ++g_failures;
  return false;
}

double max_diff(const NpyArray& ref, AtenTensorHandle out) {
  AtenTensorHandle host = nullptr;
  if (aoti_host_tensor_to_cpu(out, &host) != AOTI_HOST_OK) return INFINITY;
  void* data = nullptr;
  aoti_torch_get_data_ptr(host, &data);
  int64_t numel = 0;
  aoti_torch_get_numel(host, &numel);
  double worst = ref.dtype == 6 && static_cast<size_t>(numel) * 4 == ref.data.size() ? 0.0 : INFINITY;
  const auto* a = static_cast<const float*>(data);
  const auto* b = reinterpret_cast<const float*>(ref.data.data());
  for (int64_t i = 0; std::isfinite(worst) && i < numel; ++i)
    worst = std::fmax(worst, std::fabs(a[i] - b[i]) / (1e-5 + 1e-4 * std::fabs(b[i])));
  aoti_torch_delete_tensor_object(host);
  return worst;  // <= 1: within rtol 1e-4, atol 1e-5 (float32 only)
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: cuda_multi_device PKG.pt2 REF0.npy IN0.npy [IN1.npy ...]\n");
    return 2;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    std::printf("needs two visible CUDA devices, %d visible\n", n);
    return 2;
  }
  const std::string pkg = argv[1];
  try {
    const NpyArray ref = aoti_host::read_npy(argv[2]);
    std::vector<NpyArray> arrays;
    for (int i = 3; i < argc; ++i) arrays.push_back(aoti_host::read_npy(argv[i]));

    // The caller: cuda:0 current, its own stream current there.
    cudaSetDevice(0);
    cudaStream_t mine = nullptr;
    cudaStreamCreate(&mine);
    CUDAStreamGuardHandle guard = nullptr;
    EXPECT(aoti_torch_create_cuda_stream_guard(mine, 0, &guard) == 0);
    const Caller caller{0, mine, nullptr};

    for (int dev : {1, 0}) {
      size_t count = 0;
      EXPECT(weights_on(pkg, dev, &count));
      std::printf("weights on cuda:%d: %zu constants, each in that device's memory\n", dev, count);
      EXPECT(count > 0);
      caller_kept(caller, "the weight check");
    }

    aoti_host_program* prog[2] = {nullptr, nullptr};  // prog[d] on cuda:d
    for (int dev : {1, 0}) {
      aoti_host_load_options o{};
      const std::string name = "cuda:" + std::to_string(dev);
      o.device = name.c_str();
      o.num_models = 1;
      if (aoti_host_program_load(pkg.c_str(), &o, &prog[dev]) != AOTI_HOST_OK ||
          aoti_host_program_set_cuda_graphs(prog[dev], true) != AOTI_HOST_OK) {
        std::printf("FAIL: load on %s: %s\n", name.c_str(), aoti_host_last_error());
        return 1;
      }
      caller_kept(caller, "a load");
    }
    size_t n_out = 0;
    aoti_host_program_num_outputs(prog[0], &n_out);
    std::vector<aoti_host_tensor_view> host(arrays.size());
    for (size_t k = 0; k < arrays.size(); ++k)
      host[k] = {arrays[k].data.data(), arrays[k].dtype, static_cast<int32_t>(arrays[k].sizes.size()),
                 arrays[k].sizes.data(), arrays[k].strides.data(), 0, 0};
    // Device inputs: each program's own copies, made on its device.
    std::vector<AtenTensorHandle> dev_in[2];
    std::vector<aoti_host_tensor_view> dev_views[2];
    for (int dev : {1, 0}) {
      for (size_t k = 0; k < arrays.size(); ++k) {
        AtenTensorHandle h = nullptr, d = nullptr;
        aoti_torch_create_tensor_from_blob(host[k].data, host[k].ndim, host[k].sizes, host[k].strides, 0,
                                           host[k].dtype, 0, 0, &h);
        EXPECT(aoti_host_tensor_to_cuda(h, dev, &d) == AOTI_HOST_OK);
        aoti_torch_delete_tensor_object(h);
        void* p = nullptr;
        aoti_torch_get_data_ptr(d, &p);
        EXPECT(pointer_device(p) == dev);
        dev_in[dev].push_back(d);
        dev_views[dev].push_back({p, host[k].dtype, host[k].ndim, host[k].sizes, host[k].strides, 1, dev});
      }
      caller_kept(caller, "aoti_host_tensor_to_cuda");
    }
    std::vector<AtenTensorHandle> outs(n_out);
    for (bool device_inputs : {false, true}) {
      for (int r = 0; r < kRuns; ++r) {
        for (int dev : {1, 0}) {
          const auto& views = device_inputs ? dev_views[dev] : host;
          const int rc = aoti_host_program_run_method(prog[dev], 0, nullptr, views.data(), views.size(), outs.data(),
                                                      n_out);
          if (rc != AOTI_HOST_OK) {
            std::printf("FAIL: run %d on cuda:%d: %s\n", r, dev, aoti_host_last_error());
            ++g_failures;
            continue;
          }
          caller_kept(caller, "a run");
          for (auto h : outs) {
            int32_t index = -1;
            void* p = nullptr;
            aoti_torch_get_device_index(h, &index);
            aoti_torch_get_data_ptr(h, &p);
            EXPECT(index == dev && pointer_device(p) == dev);
          }
          const double d = max_diff(ref, outs[0]);
          if (!(d <= 1.0)) {
            std::printf("FAIL: run %d on cuda:%d (%s inputs): output 0 differs from eager (%g x tolerance)\n", r,
                        dev, device_inputs ? "device" : "host", d);
            ++g_failures;
          }
          caller_kept(caller, "a device-to-host copy");
          for (auto& h : outs) aoti_torch_delete_tensor_object(h), h = nullptr;
          caller_kept(caller, "freeing outputs");
        }
      }
    }
    for (int dev : {1, 0}) {
      aoti_host_cuda_stats st{};
      EXPECT(aoti_host_program_cuda_stats(prog[dev], &st) == AOTI_HOST_OK);
      std::printf("cuda:%d: captures=%llu replays=%llu eager_runs=%llu%s%s\n", dev,
                  static_cast<unsigned long long>(st.graph_captures), static_cast<unsigned long long>(st.graph_replays),
                  static_cast<unsigned long long>(st.eager_runs), *st.graphs_disabled_reason ? " off: " : "",
                  st.graphs_disabled_reason);
      EXPECT(st.graph_captures >= 1 && st.graph_replays >= 3);
      // the other device's memory is refused by name, and the program stays usable
      const int other = 1 - dev;
      const int rc = aoti_host_program_run_method(prog[dev], 0, nullptr, dev_views[other].data(),
                                                  dev_views[other].size(), outs.data(), n_out);
      const std::string why = aoti_host_last_error();
      EXPECT(rc == AOTI_HOST_INVALID_ARGUMENT &&
             why.find("in the memory of cuda:" + std::to_string(other)) != std::string::npos &&
             why.find("the program runs on cuda:" + std::to_string(dev)) != std::string::npos);
      if (rc != AOTI_HOST_INVALID_ARGUMENT) std::printf("  other device's input: status %d: %s\n", rc, why.c_str());
      caller_kept(caller, "a refused run");
    }
    for (int dev : {1, 0}) {
      for (auto h : dev_in[dev]) aoti_torch_delete_tensor_object(h);
      aoti_host_program_free(prog[dev]);
      caller_kept(caller, "freeing a program");
    }
    EXPECT(aoti_torch_delete_cuda_stream_guard(guard) == 0);
    cudaStreamDestroy(mine);
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  return test_result("cuda_multi_device");
}
