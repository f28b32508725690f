// The floor of a CUDA-graph replay, next to the runtime's own per-call path, in one process:
//   graph_floor PKG.pt2 CALLS ROUNDS IN0.npy [IN1.npy ...]
// Loads the package on cuda:0 with graphs on, uploads the inputs once (device inputs, as a GPU server
// passes them) and runs until the runtime has captured the plugin's Run. Then, interleaved for ROUNDS
// rounds of CALLS calls each, it times
//   floor:  cudaGraphLaunch of that same graph exec + cudaStreamSynchronize, nothing else (the plugin's
//           kernels in a graph, replayed bare: no input or output handling at all);
//   ours:   Method::run on the same device inputs, outputs borrowed from graph memory and freed, then the
//           program's synchronize (what aoti-run --cuda-graphs --device-inputs does per call, minus the C API's
//           exception guard);
//   ours_copy: the same with output copies (the default contract: outputs the caller owns);
//   c_api:  a second program of the same package loaded and run through the C API exactly as aoti-run
//           --cuda-graphs --device-inputs runs it (aoti_host_program_run_method, borrowed outputs freed,
//           aoti_host_program_synchronize), on the same device inputs.
// Also the host's share, where the per-call path's extra time sits: the median time the floor's
// cudaGraphLaunch call takes to return (launch_host_us) and the one of Method::run (run_host_us: its input
// handling, the launch, its output handles); and the cost of two CUDA runtime calls the run path makes
// (cudaGetDevice, cudaGetDeviceCount), in ns per call.
// Prints one JSON line: medians over all calls of each side, and the graph counters.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "aoti_host/c_api.h"
#include "aoti_host/error.h"
#include "aoti_host/tensor.h"
#include "host/cuda/method_state.h"
#include "host/method.h"
#include "host/program.h"
#include "../../tools/npy.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void cuda_ok(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw aoti_host::Error(std::string(what) + ": " + cudaGetErrorString(rc));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace aoti_host;
  if (argc < 5) {
    std::fprintf(stderr, "usage: graph_floor PKG.pt2 CALLS ROUNDS IN0.npy [IN1.npy ...]\n");
    return 2;
  }
  try {
    const std::string pkg = argv[1];
    const long calls = std::strtol(argv[2], nullptr, 10), rounds = std::strtol(argv[3], nullptr, 10);
    if (calls < 1 || rounds < 1) throw Error("CALLS and ROUNDS must be positive");
    aoti_host_load_options options{};
    options.device = "cuda";
    options.num_models = 1;
    std::shared_ptr<Program> program = Program::load(pkg, options);
    Method& method = program->method(0);
    cuda::MethodState* state = method.cuda_state();
    if (state == nullptr) throw Error(pkg + ": not loaded on cuda");
    state->enable_graphs(true, method.has_single_threaded_run());

    // Inputs: read once, uploaded once; every call passes the same device memory.
    std::vector<NpyArray> arrays;
    std::vector<std::unique_ptr<Tensor>> device;
    std::vector<aoti_host_tensor_view> views;
    for (int i = 4; i < argc; ++i) arrays.push_back(read_npy(argv[i]));
    for (auto& a : arrays) {
      std::unique_ptr<Tensor> d(Tensor::empty_strided(a.dtype, a.sizes, a.strides, device_code::kCUDA, 0));
      cuda_ok(cudaMemcpy(d->data_ptr(), a.data.data(), a.data.size(), cudaMemcpyHostToDevice), "upload");
      views.push_back({d->data_ptr(), a.dtype, static_cast<int32_t>(a.sizes.size()), a.sizes.data(),
                       a.strides.data(), device_code::kCUDA, 0});
      device.push_back(std::move(d));
    }
    const size_t n_out = method.num_outputs();
    std::vector<AtenTensorHandle> outs(n_out);
    auto run_ours = [&]() {
      method.run(views.data(), views.size(), outs.data(), n_out);
      for (auto& h : outs) aoti_torch_delete_tensor_object(h), h = nullptr;
      state->synchronize();
    };
    for (int i = 0; i < 5; ++i) run_ours();  // warm-up runs, capture, replays
    aoti_host_program* capi = nullptr;
    if (aoti_host_program_load(pkg.c_str(), &options, &capi) != AOTI_HOST_OK ||
        aoti_host_program_set_cuda_graphs(capi, true) != AOTI_HOST_OK ||
        aoti_host_program_set_borrowed_graph_outputs(capi, true) != AOTI_HOST_OK)
      throw Error(std::string("C API load: ") + aoti_host_last_error());
    std::unique_ptr<aoti_host_program, void (*)(aoti_host_program*)> capi_owner(capi, aoti_host_program_free);
    auto run_capi = [&]() {
      if (aoti_host_program_run_method(capi, 0, nullptr, views.data(), views.size(), outs.data(), n_out) !=
          AOTI_HOST_OK)
        throw Error(std::string("C API run: ") + aoti_host_last_error());
      for (auto& h : outs) aoti_torch_delete_tensor_object(h), h = nullptr;
      aoti_host_program_synchronize(capi);
    };
    for (int i = 0; i < 5; ++i) run_capi();
    if (state->graph_exec() == nullptr)
      throw Error("no graph was captured: " + state->stats().disabled_reason);
    const auto exec = static_cast<cudaGraphExec_t>(state->graph_exec());
    const auto stream = static_cast<cudaStream_t>(state->stream());

    for (int i = 0; i < 2000; ++i) {  // the GPU at its steady clocks before anything is timed
      cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
      cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    }
    std::vector<double> floor_us, ours_us, copy_us, capi_us, launch_host_us, run_host_us;
    auto us = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
    // `calls` calls of submit() then wait(): the whole call into `total`, the host's part (submit) into `host`.
    auto time_split = [&](auto&& submit, auto&& wait, std::vector<double>& total, std::vector<double>& host) {
      for (long c = 0; c < calls; ++c) {
        const auto t0 = Clock::now();
        submit();
        const auto t1 = Clock::now();
        wait();
        const auto t2 = Clock::now();
        total.push_back(us(t0, t2));
        host.push_back(us(t0, t1));
      }
    };
    for (long r = 0; r < rounds; ++r) {
      time_split([&] { cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); },
                 [&] { cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }, floor_us, launch_host_us);
      state->borrow_graph_outputs(true);
      time_split([&] { method.run(views.data(), views.size(), outs.data(), n_out); },
                 [&] {
                   for (auto& h : outs) aoti_torch_delete_tensor_object(h), h = nullptr;
                   state->synchronize();
                 },
                 ours_us, run_host_us);
      state->borrow_graph_outputs(false);
      for (long c = 0; c < calls; ++c) {
        const auto t0 = Clock::now();
        run_ours();
        copy_us.push_back(us(t0, Clock::now()));
      }
      for (long c = 0; c < calls; ++c) {
        const auto t0 = Clock::now();
        run_capi();
        capi_us.push_back(us(t0, Clock::now()));
      }
    }
    auto ns_per_call = [](auto&& f) {
      const int n = 20000;
      const auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) f();
      return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
    };
    int sink = 0;
    const double get_device_ns = ns_per_call([&] { cudaGetDevice(&sink); });
    const double device_count_ns = ns_per_call([&] { cudaGetDeviceCount(&sink); });
    const auto& st = state->stats();
    std::printf("{\"floor_us\": %.2f, \"ours_us\": %.2f, \"ours_copy_us\": %.2f, \"c_api_us\": %.2f, "
                "\"launch_host_us\": %.2f, \"run_host_us\": %.2f, \"get_device_ns\": %.1f, \"device_count_ns\": %.1f, "
                "\"calls\": %ld, \"rounds\": %ld, \"captures\": %llu, \"replays\": %llu, \"input_copies\": %llu, "
                "\"output_copies\": %llu}\n",
                median(floor_us), median(ours_us), median(copy_us), median(capi_us), median(launch_host_us),
                median(run_host_us), get_device_ns, device_count_ns, calls, rounds,
                static_cast<unsigned long long>(st.captures), static_cast<unsigned long long>(st.replays),
                static_cast<unsigned long long>(st.input_copies), static_cast<unsigned long long>(st.output_copies));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graph_floor: %s\n", e.what());
    return 1;
  }
}
