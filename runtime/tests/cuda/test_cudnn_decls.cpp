// The runtime's own declarations of cuDNN (runtime/src/shims/cuda/cudnn_api.h, resolved with dlsym) against
// cuDNN's real headers: compiled where the headers exist (tests/gpu/test_cudnn.py: the nvidia-cudnn wheel's
// include/), every check is a static_assert, so this file compiling is the test; running it prints the count.
#include <cudnn.h>

#include <cstddef>
#include <cstdio>
#include <type_traits>

#include "shims/cuda/cudnn_api.h"

namespace c = aoti_host::cudnn;

static_assert(CUDNN_MAJOR == 9, "cudnn_api.h declares cuDNN 9's API");

// The same handle and descriptor types (cuDNN's struct tags).
static_assert(std::is_same_v<c::Handle, cudnnHandle_t>);
static_assert(std::is_same_v<c::TensorDesc, cudnnTensorDescriptor_t>);
static_assert(std::is_same_v<c::FilterDesc, cudnnFilterDescriptor_t>);
static_assert(std::is_same_v<c::ConvDesc, cudnnConvolutionDescriptor_t>);

// The same enum values.
static_assert(c::kStatusSuccess == CUDNN_STATUS_SUCCESS);
static_assert(c::kStatusNotSupported == CUDNN_STATUS_NOT_SUPPORTED);
static_assert(c::kDataFloat == CUDNN_DATA_FLOAT && c::kDataDouble == CUDNN_DATA_DOUBLE);
static_assert(c::kDataHalf == CUDNN_DATA_HALF && c::kDataBFloat16 == CUDNN_DATA_BFLOAT16);
static_assert(c::kDefaultMath == CUDNN_DEFAULT_MATH && c::kTensorOpMath == CUDNN_TENSOR_OP_MATH &&
              c::kFmaMath == CUDNN_FMA_MATH);
static_assert(c::kNCHW == CUDNN_TENSOR_NCHW && c::kNHWC == CUDNN_TENSOR_NHWC);
static_assert(c::kCrossCorrelation == CUDNN_CROSS_CORRELATION);
static_assert(c::kFwdAlgoCount == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
static_assert(c::kBwdDataAlgoCount == CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
// Every enum travels as an int.
static_assert(sizeof(cudnnStatus_t) == sizeof(int) && sizeof(cudnnDataType_t) == sizeof(int) &&
              sizeof(cudnnMathType_t) == sizeof(int) && sizeof(cudnnTensorFormat_t) == sizeof(int) &&
              sizeof(cudnnConvolutionMode_t) == sizeof(int) && sizeof(cudnnDeterminism_t) == sizeof(int) &&
              sizeof(cudnnConvolutionFwdAlgo_t) == sizeof(int) && sizeof(cudnnConvolutionBwdDataAlgo_t) == sizeof(int));

// The perf structs' layout, member by member.
#define SAME_LAYOUT(real)                                                                                   \
  static_assert(sizeof(real) == sizeof(c::AlgoPerf) && alignof(real) == alignof(c::AlgoPerf));            \
  static_assert(offsetof(real, algo) == offsetof(c::AlgoPerf, algo));                                      \
  static_assert(offsetof(real, status) == offsetof(c::AlgoPerf, status));                                  \
  static_assert(offsetof(real, time) == offsetof(c::AlgoPerf, time));                                      \
  static_assert(offsetof(real, memory) == offsetof(c::AlgoPerf, memory));                                  \
  static_assert(offsetof(real, determinism) == offsetof(c::AlgoPerf, determinism));                        \
  static_assert(offsetof(real, mathType) == offsetof(c::AlgoPerf, mathType));                              \
  static_assert(offsetof(real, reserved) == offsetof(c::AlgoPerf, reserved) &&                             \
                sizeof(real::reserved) == sizeof(c::AlgoPerf::reserved));
SAME_LAYOUT(cudnnConvolutionFwdAlgoPerf_t)
SAME_LAYOUT(cudnnConvolutionBwdDataAlgoPerf_t)

// Function types, after mapping each enum to int and each perf struct to ours (checked above): the same
// return type and parameter list, position by position.
template <class T, class = void>
struct Canon {
  using type = T;
};
template <class T>
struct Canon<T, std::enable_if_t<std::is_enum_v<T>>> {
  using type = int;
};
template <class T>
struct Canon<T*> {
  using type = typename Canon<T>::type*;
};
template <class T>
struct Canon<const T> {
  using type = const typename Canon<T>::type;
};
template <>
struct Canon<cudnnConvolutionFwdAlgoPerf_t> {
  using type = c::AlgoPerf;
};
template <>
struct Canon<cudnnConvolutionBwdDataAlgoPerf_t> {
  using type = c::AlgoPerf;
};
template <class R, class... A>
struct Canon<R (*)(A...)> {
  using type = typename Canon<R>::type (*)(typename Canon<A>::type...);
};

int checked = 0;
#define SAME_FUNCTION(name, ret, params)                                                                    \
  static_assert(std::is_same_v<Canon<decltype(&::name)>::type, Canon<ret(*) params>::type>,               \
                #name ": cudnn_api.h's declaration differs from cuDNN's");                                  \
  static const int name##_checked = ++checked;
AOTI_CUDNN_FUNCTIONS(SAME_FUNCTION)

int main() {
  std::printf("cudnn_api.h matches cuDNN %d.%d.%d's headers: %d functions, their types, enums and structs\n",
              CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, checked);
  return checked > 0 ? 0 : 1;
}
