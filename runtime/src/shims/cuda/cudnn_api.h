// The part of cuDNN 9's C API the CUDA runtime calls, declared here and resolved with dlopen/dlsym at the
// first convolution (cudnn_conv.cpp), so that building the CUDA variant needs no cuDNN headers or libraries
// (CI compiles it without them) and a machine without cuDNN still runs, on our own kernels.
//
// Every declaration below is cuDNN 9's own (cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h): the handle and
// descriptor types use cuDNN's struct tags, the enum values are cuDNN's, the functions keep cuDNN's
// parameter lists. tests/cuda/test_cudnn_decls.cpp compiles this header beside the real headers, where they
// exist (tests/gpu/test_cudnn.py, on the GPU machine), and static_asserts that every value, struct layout and
// function type matches.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

// cuDNN's opaque handle and descriptor structs, by their own tags (global, as in cudnn_graph.h/cudnn_ops.h).
struct cudnnContext;
struct cudnnTensorStruct;
struct cudnnFilterStruct;
struct cudnnConvolutionStruct;

namespace aoti_host {
namespace cudnn {

using Handle = cudnnContext*;
using TensorDesc = cudnnTensorStruct*;
using FilterDesc = cudnnFilterStruct*;
using ConvDesc = cudnnConvolutionStruct*;

// cuDNN's enums are C enums (int-sized); they travel as int through the declared functions.
using Status = int;  // cudnnStatus_t
constexpr Status kStatusSuccess = 0;         // CUDNN_STATUS_SUCCESS
constexpr Status kStatusNotSupported = 3000;  // CUDNN_STATUS_NOT_SUPPORTED

using DataType = int;  // cudnnDataType_t
constexpr DataType kDataFloat = 0;     // CUDNN_DATA_FLOAT
constexpr DataType kDataDouble = 1;    // CUDNN_DATA_DOUBLE
constexpr DataType kDataHalf = 2;      // CUDNN_DATA_HALF
constexpr DataType kDataBFloat16 = 9;  // CUDNN_DATA_BFLOAT16

using MathType = int;  // cudnnMathType_t
constexpr MathType kDefaultMath = 0;   // CUDNN_DEFAULT_MATH: tensor cores allowed, float32 through TF32 too
constexpr MathType kTensorOpMath = 1;  // CUDNN_TENSOR_OP_MATH
constexpr MathType kFmaMath = 3;       // CUDNN_FMA_MATH: no tensor cores (float32 stays float32)

using TensorFormat = int;  // cudnnTensorFormat_t
constexpr TensorFormat kNCHW = 0;  // CUDNN_TENSOR_NCHW
constexpr TensorFormat kNHWC = 1;  // CUDNN_TENSOR_NHWC

using ConvMode = int;  // cudnnConvolutionMode_t
constexpr ConvMode kCrossCorrelation = 1;  // CUDNN_CROSS_CORRELATION (what torch's convolution computes)

using Determinism = int;  // cudnnDeterminism_t

using FwdAlgo = int;  // cudnnConvolutionFwdAlgo_t
constexpr int kFwdAlgoCount = 8;  // CUDNN_CONVOLUTION_FWD_ALGO_COUNT
using BwdDataAlgo = int;  // cudnnConvolutionBwdDataAlgo_t
constexpr int kBwdDataAlgoCount = 6;  // CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT

// cudnnConvolutionFwdAlgoPerf_t / cudnnConvolutionBwdDataAlgoPerf_t (the same layout)
struct AlgoPerf {
  int algo;
  Status status;
  float time;
  size_t memory;
  Determinism determinism;
  MathType mathType;
  int reserved[3];
};

// X(name, return type, parameter list): every function the runtime resolves, with cuDNN's signature.
#define AOTI_CUDNN_FUNCTIONS(X)                                                                                    \
  X(cudnnGetVersion, size_t, (void))                                                                               \
  X(cudnnGetCudartVersion, size_t, (void))                                                                         \
  X(cudnnGetErrorString, const char*, (::aoti_host::cudnn::Status))                                                \
  X(cudnnCreate, ::aoti_host::cudnn::Status, (::aoti_host::cudnn::Handle*))                                        \
  X(cudnnDestroy, ::aoti_host::cudnn::Status, (::aoti_host::cudnn::Handle))                                        \
  X(cudnnSetStream, ::aoti_host::cudnn::Status, (::aoti_host::cudnn::Handle, cudaStream_t))                        \
  X(cudnnCreateTensorDescriptor, ::aoti_host::cudnn::Status, (::aoti_host::cudnn::TensorDesc*))                    \
  X(cudnnDestroyTensorDescriptor, ::aoti_host::cudnn::Status, (::aoti_host::cudnn::TensorDesc))                    \
  X(cudnnSetTensorNdDescriptor, ::aoti_host::cudnn::Status,                                                        \
    (::aoti_host::cudnn::TensorDesc, ::aoti_host::cudnn::DataType, int, const int*, const int*))                   \
  X(cudnnCreateFilterDescriptor, ::aoti_host::cudnn::Status, (::aoti_host::cudnn::FilterDesc*))                    \
  X(cudnnDestroyFilterDescriptor, ::aoti_host::cudnn::Status, (::aoti_host::cudnn::FilterDesc))                    \
  X(cudnnSetFilterNdDescriptor, ::aoti_host::cudnn::Status,                                                        \
    (::aoti_host::cudnn::FilterDesc, ::aoti_host::cudnn::DataType, ::aoti_host::cudnn::TensorFormat, int,          \
     const int*))                                                                                                  \
  X(cudnnAddTensor, ::aoti_host::cudnn::Status,                                                                    \
    (::aoti_host::cudnn::Handle, const void*, const ::aoti_host::cudnn::TensorDesc, const void*, const void*,      \
     const ::aoti_host::cudnn::TensorDesc, void*))                                                                 \
  X(cudnnCreateConvolutionDescriptor, ::aoti_host::cudnn::Status, (::aoti_host::cudnn::ConvDesc*))                 \
  X(cudnnDestroyConvolutionDescriptor, ::aoti_host::cudnn::Status, (::aoti_host::cudnn::ConvDesc))                 \
  X(cudnnSetConvolutionNdDescriptor, ::aoti_host::cudnn::Status,                                                   \
    (::aoti_host::cudnn::ConvDesc, int, const int*, const int*, const int*, ::aoti_host::cudnn::ConvMode,          \
     ::aoti_host::cudnn::DataType))                                                                                \
  X(cudnnSetConvolutionGroupCount, ::aoti_host::cudnn::Status, (::aoti_host::cudnn::ConvDesc, int))                \
  X(cudnnSetConvolutionMathType, ::aoti_host::cudnn::Status,                                                       \
    (::aoti_host::cudnn::ConvDesc, ::aoti_host::cudnn::MathType))                                                  \
  X(cudnnGetConvolutionForwardAlgorithm_v7, ::aoti_host::cudnn::Status,                                            \
    (::aoti_host::cudnn::Handle, const ::aoti_host::cudnn::TensorDesc, const ::aoti_host::cudnn::FilterDesc,       \
     const ::aoti_host::cudnn::ConvDesc, const ::aoti_host::cudnn::TensorDesc, const int, int*,                    \
     ::aoti_host::cudnn::AlgoPerf*))                                                                               \
  X(cudnnFindConvolutionForwardAlgorithmEx, ::aoti_host::cudnn::Status,                                            \
    (::aoti_host::cudnn::Handle, const ::aoti_host::cudnn::TensorDesc, const void*,                                \
     const ::aoti_host::cudnn::FilterDesc, const void*, const ::aoti_host::cudnn::ConvDesc,                        \
     const ::aoti_host::cudnn::TensorDesc, void*, const int, int*, ::aoti_host::cudnn::AlgoPerf*, void*, size_t))  \
  X(cudnnGetConvolutionForwardWorkspaceSize, ::aoti_host::cudnn::Status,                                           \
    (::aoti_host::cudnn::Handle, const ::aoti_host::cudnn::TensorDesc, const ::aoti_host::cudnn::FilterDesc,       \
     const ::aoti_host::cudnn::ConvDesc, const ::aoti_host::cudnn::TensorDesc, ::aoti_host::cudnn::FwdAlgo,        \
     size_t*))                                                                                                     \
  X(cudnnConvolutionForward, ::aoti_host::cudnn::Status,                                                           \
    (::aoti_host::cudnn::Handle, const void*, const ::aoti_host::cudnn::TensorDesc, const void*,                   \
     const ::aoti_host::cudnn::FilterDesc, const void*, const ::aoti_host::cudnn::ConvDesc,                        \
     ::aoti_host::cudnn::FwdAlgo, void*, size_t, const void*, const ::aoti_host::cudnn::TensorDesc, void*))        \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7, ::aoti_host::cudnn::Status,                                       \
    (::aoti_host::cudnn::Handle, const ::aoti_host::cudnn::FilterDesc, const ::aoti_host::cudnn::TensorDesc,       \
     const ::aoti_host::cudnn::ConvDesc, const ::aoti_host::cudnn::TensorDesc, const int, int*,                    \
     ::aoti_host::cudnn::AlgoPerf*))                                                                               \
  X(cudnnFindConvolutionBackwardDataAlgorithmEx, ::aoti_host::cudnn::Status,                                       \
    (::aoti_host::cudnn::Handle, const ::aoti_host::cudnn::FilterDesc, const void*,                                \
     const ::aoti_host::cudnn::TensorDesc, const void*, const ::aoti_host::cudnn::ConvDesc,                        \
     const ::aoti_host::cudnn::TensorDesc, void*, const int, int*, ::aoti_host::cudnn::AlgoPerf*, void*, size_t))  \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize, ::aoti_host::cudnn::Status,                                      \
    (::aoti_host::cudnn::Handle, const ::aoti_host::cudnn::FilterDesc, const ::aoti_host::cudnn::TensorDesc,       \
     const ::aoti_host::cudnn::ConvDesc, const ::aoti_host::cudnn::TensorDesc, ::aoti_host::cudnn::BwdDataAlgo,    \
     size_t*))                                                                                                     \
  X(cudnnConvolutionBackwardData, ::aoti_host::cudnn::Status,                                                      \
    (::aoti_host::cudnn::Handle, const void*, const ::aoti_host::cudnn::FilterDesc, const void*,                   \
     const ::aoti_host::cudnn::TensorDesc, const void*, const ::aoti_host::cudnn::ConvDesc,                        \
     ::aoti_host::cudnn::BwdDataAlgo, void*, size_t, const void*, const ::aoti_host::cudnn::TensorDesc, void*))

// The resolved entry points (one member per function above, named as in cuDNN).
struct Api {
#define AOTI_CUDNN_MEMBER(name, ret, params) ret(*name) params = nullptr;
  AOTI_CUDNN_FUNCTIONS(AOTI_CUDNN_MEMBER)
#undef AOTI_CUDNN_MEMBER
};

}  // namespace cudnn
}  // namespace aoti_host
