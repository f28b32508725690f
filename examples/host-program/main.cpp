// A minimal host: load a .pt2 through the runtime's C API, run it once on inputs of 0.01 * i (float32,
// every input's shape from the package's contract), print each output's shape and sum.
//   host-program MODEL.pt2
#include <aoti_host/c_api.h>
#include <aoti_host/shims.h>

#include <cstdio>
#include <vector>

namespace {

constexpr int32_t kFloat32 = 6;  // torch ScalarType code

int fail(const char* what) {
  std::fprintf(stderr, "host-program: %s: %s\n", what, aoti_host_last_error());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: host-program MODEL.pt2\n");
    return 2;
  }
  std::printf("runtime %s\n", aoti_host_version());
  aoti_host_program* program = nullptr;
  if (aoti_host_program_load(argv[1], nullptr, &program) != 0) return fail(argv[1]);
  size_t n_in = 0, n_out = 0;
  if (aoti_host_program_num_inputs(program, &n_in) != 0 || aoti_host_program_num_outputs(program, &n_out) != 0) {
    aoti_host_program_free(program);
    return fail("counting inputs and outputs");
  }
  std::vector<std::vector<float>> data(n_in);
  std::vector<std::vector<int64_t>> sizes(n_in);
  std::vector<aoti_host_tensor_view> views(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    aoti_host_tensor_spec spec{};
    if (aoti_host_program_input_spec(program, i, &spec) != 0) {
      aoti_host_program_free(program);
      return fail("reading the contract");
    }
    if (spec.dtype != kFloat32 || spec.ndim < 0) {
      std::fprintf(stderr, "host-program: input %zu is not float32 with a known rank; this example feeds only those\n", i);
      aoti_host_program_free(program);
      return 1;
    }
    size_t numel = 1;
    for (int32_t d = 0; d < spec.ndim; ++d) {
      const int64_t size = spec.sizes[d] >= 0 ? spec.sizes[d] : (spec.min_sizes ? spec.min_sizes[d] : 1);
      sizes[i].push_back(size < 1 ? 1 : size);
      numel *= static_cast<size_t>(sizes[i].back());
    }
    data[i].resize(numel);
    for (size_t k = 0; k < numel; ++k) data[i][k] = 0.01f * static_cast<float>(k % 100);
    views[i] = aoti_host_tensor_view{data[i].data(), kFloat32, spec.ndim, sizes[i].data(), nullptr, 0, 0};
  }
  std::vector<AtenTensorHandle> outputs(n_out, nullptr);
  if (aoti_host_program_run(program, views.data(), n_in, outputs.data(), n_out) != 0) {
    aoti_host_program_free(program);
    return fail("run");
  }
  int rc = 0;
  for (size_t o = 0; o < n_out; ++o) {
    int64_t dim = 0, numel = 0;
    int64_t* out_sizes = nullptr;
    int32_t dtype = 0;
    void* ptr = nullptr;
    if (aoti_torch_get_dim(outputs[o], &dim) != 0 || aoti_torch_get_sizes(outputs[o], &out_sizes) != 0 ||
        aoti_torch_get_numel(outputs[o], &numel) != 0 || aoti_torch_get_dtype(outputs[o], &dtype) != 0 ||
        aoti_torch_get_data_ptr(outputs[o], &ptr) != 0) {
      rc = fail("reading an output");
    } else {
      std::printf("output %zu: shape [", o);
      for (int64_t d = 0; d < dim; ++d) std::printf("%s%lld", d ? ", " : "", static_cast<long long>(out_sizes[d]));
      double sum = 0;
      if (dtype == kFloat32) {
        for (int64_t k = 0; k < numel; ++k) sum += static_cast<const float*>(ptr)[k];
      }
      std::printf("] sum %.6g\n", sum);
    }
    aoti_torch_delete_tensor_object(outputs[o]);
  }
  aoti_host_program_free(program);
  return rc;
}
