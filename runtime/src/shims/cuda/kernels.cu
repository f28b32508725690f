// Device kernels of the runtime itself (the plugin brings its own): strided copies (with dtype conversion)
// for copy_/clone, a direct (and transposed) convolution for aoti_torch_cuda_convolution, and the byte
// comparison behind same_bytes (whether two methods' device constants hold the same values).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "shims/cuda/cuda_util.h"
#include "shims/cuda/kernel_util.h"

namespace aoti_host {
namespace cuda {
namespace {

struct alignas(16) Bytes16 {
  uint64_t lo, hi;
};

template <class T>
__global__ void strided_copy_kernel(T* dst, const T* src, StridedSpec spec, int64_t numel) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t d_off, s_off;
    strided_offsets(spec, i, d_off, s_off);
    dst[d_off] = src[s_off];
  }
}

// One element of any dtype copy_ converts between: integers (bool, signed and unsigned) exactly as int64,
// floating and complex values as a double pair.
struct Value {
  double re, im;
  int64_t i;
  bool is_int;
};

__device__ Value load_value(const char* p, int32_t dt) {
  Value v{0.0, 0.0, 0, true};
  switch (dt) {
    case dtype_code::kBool: v.i = *reinterpret_cast<const uint8_t*>(p) != 0; break;
    case dtype_code::kUInt8: v.i = *reinterpret_cast<const uint8_t*>(p); break;
    case dtype_code::kInt8: v.i = *reinterpret_cast<const int8_t*>(p); break;
    case dtype_code::kInt16: v.i = *reinterpret_cast<const int16_t*>(p); break;
    case dtype_code::kUInt16: v.i = *reinterpret_cast<const uint16_t*>(p); break;
    case dtype_code::kInt32: v.i = *reinterpret_cast<const int32_t*>(p); break;
    case dtype_code::kUInt32: v.i = *reinterpret_cast<const uint32_t*>(p); break;
    case dtype_code::kInt64: v.i = *reinterpret_cast<const int64_t*>(p); break;
    case dtype_code::kUInt64: v.i = static_cast<int64_t>(*reinterpret_cast<const uint64_t*>(p)); break;
    default:
      v.is_int = false;
      switch (dt) {
        case dtype_code::kFloat16: v.re = __half2float(*reinterpret_cast<const __half*>(p)); break;
        case dtype_code::kBFloat16: v.re = __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p)); break;
        case dtype_code::kFloat32: v.re = *reinterpret_cast<const float*>(p); break;
        case dtype_code::kFloat64: v.re = *reinterpret_cast<const double*>(p); break;
        case dtype_code::kComplex64:
          v.re = reinterpret_cast<const float*>(p)[0], v.im = reinterpret_cast<const float*>(p)[1];
          break;
        case dtype_code::kComplex128:
          v.re = reinterpret_cast<const double*>(p)[0], v.im = reinterpret_cast<const double*>(p)[1];
          break;
        default: break;  // refused on the host before the launch
      }
  }
  return v;
}

template <class T>
__device__ void put_int(char* p, const Value& v) {
  *reinterpret_cast<T*>(p) = static_cast<T>(v.is_int ? v.i : static_cast<int64_t>(v.re));
}

// ATen's conversions: complex to real keeps the real part, real to complex gets a zero imaginary part,
// anything to bool is "non-zero", floating to integral truncates toward zero.
__device__ void store_value(char* p, int32_t dt, const Value& v) {
  const double re = v.is_int ? static_cast<double>(v.i) : v.re;
  switch (dt) {
    case dtype_code::kBool: *reinterpret_cast<uint8_t*>(p) = v.is_int ? v.i != 0 : (v.re != 0.0 || v.im != 0.0); break;
    case dtype_code::kUInt8: put_int<uint8_t>(p, v); break;
    case dtype_code::kInt8: put_int<int8_t>(p, v); break;
    case dtype_code::kInt16: put_int<int16_t>(p, v); break;
    case dtype_code::kUInt16: put_int<uint16_t>(p, v); break;
    case dtype_code::kInt32: put_int<int32_t>(p, v); break;
    case dtype_code::kUInt32: put_int<uint32_t>(p, v); break;
    case dtype_code::kInt64: put_int<int64_t>(p, v); break;
    case dtype_code::kUInt64: put_int<uint64_t>(p, v); break;
    case dtype_code::kFloat16:
      // through float, as c10::Half and c10::BFloat16 convert (a double rounds to float first)
      *reinterpret_cast<__half*>(p) = __float2half(v.is_int ? static_cast<float>(v.i) : static_cast<float>(v.re));
      break;
    case dtype_code::kBFloat16:
      *reinterpret_cast<__nv_bfloat16*>(p) =
          __float2bfloat16(v.is_int ? static_cast<float>(v.i) : static_cast<float>(v.re));
      break;
    case dtype_code::kFloat32: *reinterpret_cast<float*>(p) = v.is_int ? static_cast<float>(v.i) : static_cast<float>(v.re); break;
    case dtype_code::kFloat64: *reinterpret_cast<double*>(p) = re; break;
    case dtype_code::kComplex64:
      reinterpret_cast<float*>(p)[0] = v.is_int ? static_cast<float>(v.i) : static_cast<float>(v.re);
      reinterpret_cast<float*>(p)[1] = static_cast<float>(v.im);
      break;
    case dtype_code::kComplex128:
      reinterpret_cast<double*>(p)[0] = re;
      reinterpret_cast<double*>(p)[1] = v.im;
      break;
    default: break;  // refused on the host before the launch
  }
}

__global__ void convert_copy_kernel(char* dst, int32_t dst_dt, size_t dst_item, const char* src, int32_t src_dt,
                                    size_t src_item, StridedSpec spec, int64_t numel) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t d_off, s_off;
    strided_offsets(spec, i, d_off, s_off);
    store_value(dst + d_off * static_cast<int64_t>(dst_item), dst_dt,
                load_value(src + s_off * static_cast<int64_t>(src_item), src_dt));
  }
}

bool convertible(int32_t dt) {
  switch (dt) {
    case dtype_code::kBool: case dtype_code::kUInt8: case dtype_code::kInt8: case dtype_code::kInt16:
    case dtype_code::kUInt16: case dtype_code::kInt32: case dtype_code::kUInt32: case dtype_code::kInt64:
    case dtype_code::kUInt64: case dtype_code::kFloat16: case dtype_code::kBFloat16: case dtype_code::kFloat32:
    case dtype_code::kFloat64: case dtype_code::kComplex64: case dtype_code::kComplex128: return true;
    default: return false;
  }
}

// Sets *differ when any of the n bytes at a and b differ. 16 bytes per load where both addresses are
// 16-byte aligned, then byte by byte (any alignment, any n, including 0). Every writer stores the same 1.
__global__ void bytes_differ_kernel(const unsigned char* a, const unsigned char* b, size_t n, int* differ) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const bool wide = ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15) == 0;
  const size_t words = wide ? n / 16 : 0;
  const uint4* wa = reinterpret_cast<const uint4*>(a);
  const uint4* wb = reinterpret_cast<const uint4*>(b);
  for (size_t i = tid; i < words; i += stride) {
    const uint4 x = wa[i], y = wb[i];
    if (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w) {
      *differ = 1;
      return;
    }
  }
  for (size_t i = words * 16 + tid; i < n; i += stride) {
    if (a[i] != b[i]) {
      *differ = 1;
      return;
    }
  }
}

// One thread per output element (n, co, od, oh, ow); sums over the group's input channels and the kernel window.
template <class T>
__global__ void conv_kernel(T* out, const T* in, const T* w, const T* bias, ConvSpec s, int64_t numel) {
  using A = typename Acc<T>::type;
  const int64_t cin_g = s.c_in / s.groups, cout_g = s.c_out / s.groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i;
    const int64_t ow = rem % s.out_size[2];
    rem /= s.out_size[2];
    const int64_t oh = rem % s.out_size[1];
    rem /= s.out_size[1];
    const int64_t od = rem % s.out_size[0];
    rem /= s.out_size[0];
    const int64_t co = rem % s.c_out;
    const int64_t n = rem / s.c_out;
    const int64_t g = co / cout_g;
    A acc = s.has_bias ? ld(bias + co * s.bias_stride) : A(0);
    if (s.transposed) {
      // out[o] gathers in[i] * w[c, co_in_group, k] for every o = i * stride - padding + k * dilation
      const int64_t col = co - g * cout_g;
      const int64_t o[3] = {od, oh, ow};
      for (int64_t ci = 0; ci < cin_g; ++ci) {
        const int64_t c = g * cin_g + ci;
        for (int64_t kd = 0; kd < s.kernel[0]; ++kd) {
          const int64_t td = o[0] + s.padding[0] - kd * s.dilation[0];
          if (td < 0 || td % s.stride[0] != 0 || td / s.stride[0] >= s.in_size[0]) continue;
          for (int64_t kh = 0; kh < s.kernel[1]; ++kh) {
            const int64_t th = o[1] + s.padding[1] - kh * s.dilation[1];
            if (th < 0 || th % s.stride[1] != 0 || th / s.stride[1] >= s.in_size[1]) continue;
            for (int64_t kw = 0; kw < s.kernel[2]; ++kw) {
              const int64_t tw = o[2] + s.padding[2] - kw * s.dilation[2];
              if (tw < 0 || tw % s.stride[2] != 0 || tw / s.stride[2] >= s.in_size[2]) continue;
              const A x = ld(in + n * s.in_strides[0] + c * s.in_strides[1] + (td / s.stride[0]) * s.in_strides[2] +
                               (th / s.stride[1]) * s.in_strides[3] + (tw / s.stride[2]) * s.in_strides[4]);
              const A k = ld(w + c * s.w_strides[0] + col * s.w_strides[1] + kd * s.w_strides[2] +
                               kh * s.w_strides[3] + kw * s.w_strides[4]);
              acc += x * k;
            }
          }
        }
      }
      out[n * s.out_strides[0] + co * s.out_strides[1] + od * s.out_strides[2] + oh * s.out_strides[3] +
          ow * s.out_strides[4]] = cvt<T>(acc);
      continue;
    }
    for (int64_t ci = 0; ci < cin_g; ++ci) {
      const int64_t c = g * cin_g + ci;
      for (int64_t kd = 0; kd < s.kernel[0]; ++kd) {
        const int64_t id = od * s.stride[0] - s.padding[0] + kd * s.dilation[0];
        if (id < 0 || id >= s.in_size[0]) continue;
        for (int64_t kh = 0; kh < s.kernel[1]; ++kh) {
          const int64_t ih = oh * s.stride[1] - s.padding[1] + kh * s.dilation[1];
          if (ih < 0 || ih >= s.in_size[1]) continue;
          for (int64_t kw = 0; kw < s.kernel[2]; ++kw) {
            const int64_t iw = ow * s.stride[2] - s.padding[2] + kw * s.dilation[2];
            if (iw < 0 || iw >= s.in_size[2]) continue;
            const A x = ld(in + n * s.in_strides[0] + c * s.in_strides[1] + id * s.in_strides[2] +
                             ih * s.in_strides[3] + iw * s.in_strides[4]);
            const A k = ld(w + co * s.w_strides[0] + ci * s.w_strides[1] + kd * s.w_strides[2] +
                             kh * s.w_strides[3] + kw * s.w_strides[4]);
            acc += x * k;
          }
        }
      }
    }
    out[n * s.out_strides[0] + co * s.out_strides[1] + od * s.out_strides[2] + oh * s.out_strides[3] +
        ow * s.out_strides[4]] = cvt<T>(acc);
  }
}

template <class T>
void conv_launch(void* out, const void* in, const void* w, const void* bias, const ConvSpec& s, cudaStream_t st) {
  const int64_t numel = s.n * s.c_out * s.out_size[0] * s.out_size[1] * s.out_size[2];
  if (numel == 0) return;
  const unsigned block = 256;
  conv_kernel<T><<<grid_for(numel, block), block, 0, st>>>(static_cast<T*>(out), static_cast<const T*>(in),
                                                            static_cast<const T*>(w), static_cast<const T*>(bias), s,
                                                            numel);
  AOTI_CUDA_CHECK(cudaGetLastError());
}

// Elements of itemsize bytes copied as one W each.
template <class W>
void copy_as(void* dst, const void* src, const StridedSpec& spec, int64_t numel, unsigned grid, unsigned block,
             cudaStream_t stream) {
  strided_copy_kernel<<<grid, block, 0, stream>>>(static_cast<W*>(dst), static_cast<const W*>(src), spec, numel);
  AOTI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_strided_copy(void* dst, const void* src, const StridedSpec& spec, int64_t numel, size_t itemsize,
                         cudaStream_t stream) {
  if (numel == 0) return;
  const unsigned block = 256;
  const unsigned grid = grid_for(numel, block);
  switch (itemsize) {
    case 1: return copy_as<uint8_t>(dst, src, spec, numel, grid, block, stream);
    case 2: return copy_as<uint16_t>(dst, src, spec, numel, grid, block, stream);
    case 4: return copy_as<uint32_t>(dst, src, spec, numel, grid, block, stream);
    case 8: return copy_as<uint64_t>(dst, src, spec, numel, grid, block, stream);
    case 16: return copy_as<Bytes16>(dst, src, spec, numel, grid, block, stream);
    default:
      throw Error("device copy: element size " + std::to_string(itemsize) + " is not supported");
  }
}

void launch_convert_copy(void* dst, int32_t dst_dtype, const void* src, int32_t src_dtype, const StridedSpec& spec,
                         int64_t numel, cudaStream_t stream) {
  for (int32_t dt : {src_dtype, dst_dtype})
    if (!convertible(dt))
      throw Error(std::string("copy_ on cuda: converting ") + dtype_name(src_dtype) + " to " + dtype_name(dst_dtype) +
                  " is not supported (" + dtype_name(dt) + " is not one of bool, the integer, floating and complex "
                  "dtypes)");
  if (numel == 0) return;
  convert_copy_kernel<<<grid_for(numel, 256), 256, 0, stream>>>(
      static_cast<char*>(dst), dst_dtype, element_size(dst_dtype), static_cast<const char*>(src), src_dtype,
      element_size(src_dtype), spec, numel);
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_convolution(int32_t dtype, void* out, const void* in, const void* weight, const void* bias,
                        const ConvSpec& spec, cudaStream_t stream) {
  dispatch_float(dtype, "convolution",
                 [&](auto tag) { conv_launch<decltype(tag)>(out, in, weight, bias, spec, stream); });
}

bool same_bytes(const void* a, const void* b, size_t n, int device) {
  if (n == 0 || a == b) return true;
  const OnDevice on(device);
  cudaStream_t stream = stream_of(device);
  int* flag = nullptr;
  int differ = 0;
  try {
    flag = static_cast<int*>(allocate(sizeof(int), device));
    AOTI_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream));
    const unsigned block = 256;
    const bool wide = ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15) == 0;
    const int64_t units = static_cast<int64_t>(wide ? n / 16 + 1 : n);  // one thread each, grid-stride beyond
    bytes_differ_kernel<<<grid_for(units, block), block, 0, stream>>>(
        static_cast<const unsigned char*>(a), static_cast<const unsigned char*>(b), n, flag);
    AOTI_CUDA_CHECK(cudaGetLastError());
    // The one download: 4 bytes, then the stream is waited for (pageable destination).
    AOTI_CUDA_CHECK(cudaMemcpyAsync(&differ, flag, sizeof(int), cudaMemcpyDeviceToHost, stream));
    AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    release(flag, device);
    throw;
  }
  release(flag, device);
  return differ == 0;
}

}  // namespace cuda
}  // namespace aoti_host
