// aoti_torch_cuda_* fallbacks beyond the matrix products and convolution: scaled-dot-product attention
// (efficient and flash), sort/topk, cumulative scans, embedding bags, scatter, searchsorted/bucketize.
// Prototypes are torch's (generated/c_shim_cuda.h). Outputs get the sizes, strides, dtypes and devices ATen's CUDA kernels give
// them, since plugins reinterpret returned tensors with the layout recorded at compile time; kernels are
// in op_kernels.cu and run on the thread's current stream.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../cpu/strided.h"
#include "../shim_util.h"
#include "aoti_host/cuda/cuda.h"
#include "aoti_host/error.h"
#include "aoti_host/shims.h"
#include "cuda_util.h"
#include "op_kernels.h"

using aoti_host::Error;
using aoti_host::from_handle;
using aoti_host::list_str;
using aoti_host::Tensor;
using aoti_host::to_handle;
namespace dc = aoti_host::dtype_code;
namespace cu = aoti_host::cuda;

namespace {

using aoti_host::shim::guarded;
using aoti_host::shim::tensor_arg;
using Shape = std::vector<int64_t>;
using Owned = std::unique_ptr<Tensor>;

const Tensor* optional_arg(const AtenTensorHandle* h) {
  return (h != nullptr && *h != nullptr) ? from_handle(*h) : nullptr;
}

void need(const void* p, const char* name) {
  if (p == nullptr) throw Error(std::string("output pointer '") + name + "' is null");
}

void require_cuda(const Tensor& t, const char* name, int device) {
  if (t.device_type() != aoti_host::device_code::kCUDA || t.device_index() != device)
    throw Error(std::string("'") + name + "' is on " + aoti_host::device_type_name(t.device_type()) + ":" +
                std::to_string(t.device_index()) + ", expected cuda:" + std::to_string(device));
}

void require_dtype(const Tensor& t, int32_t dt, const char* name) {
  if (t.dtype() != dt)
    throw Error(std::string("'") + name + "' has dtype " + aoti_host::dtype_name(t.dtype()) + ", expected " +
                aoti_host::dtype_name(dt));
}

Tensor* new_cuda(int32_t dtype, const Shape& sizes, const Shape& strides, int device) {
  return Tensor::empty_strided(dtype, sizes, strides, aoti_host::device_code::kCUDA, device);
}
Tensor* new_cuda(int32_t dtype, const Shape& sizes, int device) {
  return new_cuda(dtype, sizes, Tensor::contiguous_strides(sizes), device);
}

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  const int64_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    throw Error("dim " + std::to_string(dim) + " is out of range for a " + std::to_string(ndim) + "-d tensor");
  return dim < 0 ? dim + n : dim;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  AOTI_CUDA_CHECK(cudaStreamIsCapturing(stream, &st));
  return st != cudaStreamCaptureStatusNone;
}

// A device flag the kernels raise on an out-of-range index (they skip such an element, so memory stays
// safe). Read back after the launch, except while a graph is captured (no synchronisation is allowed
// then; a bad index in a replay is skipped without an error).
class BadIndexFlag {
 public:
  BadIndexFlag(int device, cudaStream_t stream) : stream_(stream) {
    t_.reset(new_cuda(dc::kInt32, {1}, device));
    AOTI_CUDA_CHECK(cudaMemsetAsync(t_->data_ptr(), 0, sizeof(int), stream));
  }
  int* ptr() const { return static_cast<int*>(t_->data_ptr()); }
  void check(const std::string& what) const {
    if (capturing(stream_)) return;
    int v = 0;
    AOTI_CUDA_CHECK(cudaMemcpyAsync(&v, ptr(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
    AOTI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (v != 0) throw Error(what);
  }

 private:
  cudaStream_t stream_;
  Owned t_;
};

// The lines along `dim` of tensors with the given sizes (0-d: one line of one element).
cu::LineSpec make_lines(const Shape& sizes, int64_t dim, const std::vector<const Shape*>& strides) {
  cu::LineSpec s{};
  if (sizes.empty()) {
    s.nd = 0, s.lines = 1, s.n = 1;
    for (int k = 0; k < 3; ++k) s.step[k] = 1;
    return s;
  }
  if (sizes.size() > static_cast<size_t>(cu::kMaxDims))
    throw Error("tensors of more than " + std::to_string(cu::kMaxDims) + " dimensions are not supported");
  s.n = sizes[static_cast<size_t>(dim)];
  s.lines = 1;
  int o = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (static_cast<int64_t>(d) == dim) continue;
    s.sizes[o] = sizes[d];
    for (size_t k = 0; k < strides.size(); ++k) s.strides[k][o] = (*strides[k])[d];
    s.lines *= sizes[d];
    ++o;
  }
  s.nd = o;
  for (size_t k = 0; k < strides.size(); ++k) s.step[k] = (*strides[k])[static_cast<size_t>(dim)];
  return s;
}

// --- attention -----------------------------------------------------------------------------------

struct AttentionArgs {
  const Tensor* q;
  const Tensor* k;
  const Tensor* v;
  const Tensor* bias;
  double dropout_p;
  bool causal;
  const double* scale;
};

// Checks q/k/v/bias ([B, H, M, D], [B, H, N, D], [B, H, N, Dv], bias broadcastable to [B, H, M, N])
// and fills the spec's sizes, input strides, scale and bias.
cu::AttentionSpec attention_spec(const AttentionArgs& a, int device) {
  const Tensor &q = *a.q, &k = *a.k, &v = *a.v;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    throw Error("query " + list_str(q.sizes()) + ", key " + list_str(k.sizes()) + " and value " +
                list_str(v.sizes()) + " must be 4-d [batch, heads, sequence, head size]");
  require_cuda(q, "query", device);
  require_cuda(k, "key", device);
  require_cuda(v, "value", device);
  require_dtype(k, q.dtype(), "key");
  require_dtype(v, q.dtype(), "value");
  if (a.dropout_p != 0.0)
    throw Error("dropout_p " + std::to_string(a.dropout_p) +
                " is not supported (inference only: export the model in eval mode, or with dropout_p=0)");
  cu::AttentionSpec s{};
  s.b = q.sizes()[0], s.h = q.sizes()[1], s.m = q.sizes()[2], s.d = q.sizes()[3];
  s.n = k.sizes()[2], s.dv = v.sizes()[3];
  if (k.sizes()[0] != s.b || v.sizes()[0] != s.b || k.sizes()[1] != s.h || v.sizes()[1] != s.h ||
      k.sizes()[3] != s.d || v.sizes()[2] != s.n)
    throw Error("query " + list_str(q.sizes()) + ", key " + list_str(k.sizes()) + " and value " +
                list_str(v.sizes()) + " do not fit together");
  for (int d = 0; d < 4; ++d) s.q_st[d] = q.strides()[d], s.k_st[d] = k.strides()[d], s.v_st[d] = v.strides()[d];
  s.scale = static_cast<float>(a.scale != nullptr ? *a.scale : 1.0 / std::sqrt(static_cast<double>(s.d)));
  s.causal = a.causal;
  s.bias_dtype = -1;
  if (a.bias != nullptr) {
    const Tensor& bias = *a.bias;
    require_cuda(bias, "attn_bias", device);
    if (bias.dtype() != q.dtype() && bias.dtype() != dc::kBool)
      throw Error("attn_bias has dtype " + std::string(aoti_host::dtype_name(bias.dtype())) +
                  "; expected the query's dtype " + aoti_host::dtype_name(q.dtype()) + " or bool");
    const Shape full{s.b, s.h, s.m, s.n};
    if (bias.dim() > 4) throw Error("attn_bias " + list_str(bias.sizes()) + " has more than 4 dimensions");
    const int64_t lead = 4 - bias.dim();
    for (int d = 0; d < 4; ++d) {
      if (d < lead) {
        s.bias_st[d] = 0;
        continue;
      }
      const int64_t sz = bias.sizes()[static_cast<size_t>(d - lead)];
      if (sz != full[static_cast<size_t>(d)] && sz != 1)
        throw Error("attn_bias " + list_str(bias.sizes()) + " does not broadcast to " + list_str(full));
      s.bias_st[d] = sz == 1 ? 0 : bias.strides()[static_cast<size_t>(d - lead)];
    }
    s.bias_dtype = bias.dtype();
  }
  return s;
}

// Runs attention through cuBLAS (cu::attention_gemm) when the problem is big enough to pay for its
// launches or the head size is past the fused kernel's limit, else through the fused kernel.
// AOTI_HOST_CUDA_ATTENTION=kernel or =gemm forces one path (gemm still falls back to the kernel for
// layouts cuBLAS can't take), for benchmarks and tests; it is read on every call.
void run_attention(int32_t dtype, void* out, float* lse, const void* q, const void* k, const void* v, const void* bias,
                   const cu::AttentionSpec& s, int device) {
  if (s.m == 0 || s.b == 0 || s.h == 0) return;
  const cudaStream_t stream = cu::stream_of(device);
  const char* force = std::getenv("AOTI_HOST_CUDA_ATTENTION");
  const std::string mode = force != nullptr ? force : "";
  if (!mode.empty() && mode != "kernel" && mode != "gemm")
    throw Error("AOTI_HOST_CUDA_ATTENTION is '" + mode + "'; expected kernel, gemm or unset");
  const bool big = s.m * s.n >= 128 * 128 || s.d > cu::kMaxHeadDim || s.dv > cu::kMaxHeadDim;
  const bool gemm = mode == "gemm" || (mode.empty() && big);
  if (gemm && cu::attention_gemm(dtype, out, lse, q, k, v, bias, s, device, stream)) return;
  cu::launch_attention(dtype, out, lse, q, k, v, bias, s, stream);
}

// A zero-filled tensor of 8-byte elements for the philox seed/offset outputs (no dropout, so no random
// state to report).
Tensor* zeros64(int32_t dtype, const Shape& sizes, bool on_cuda, int device) {
  if (!on_cuda) {
    Owned t(Tensor::empty_strided(dtype, sizes, Tensor::contiguous_strides(sizes), aoti_host::device_code::kCPU, 0));
    std::memset(t->data_ptr(), 0, t->storage_nbytes());
    return t.release();
  }
  Owned t(new_cuda(dtype, sizes, device));
  cu::zero(*t);
  return t.release();
}

// --- embedding bag -------------------------------------------------------------------------------

void embedding_bag(AtenTensorHandle weight_h, AtenTensorHandle indices_h, AtenTensorHandle offsets_h, int64_t mode,
                   AtenTensorHandle* psw_h, int32_t include_last_offset, int64_t padding_idx,
                   AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2, AtenTensorHandle* ret3) {
  need(ret0, "ret0"), need(ret1, "ret1"), need(ret2, "ret2"), need(ret3, "ret3");
  const Tensor& w = tensor_arg(weight_h, "weight");
  const Tensor& idx = tensor_arg(indices_h, "indices");
  const Tensor& off = tensor_arg(offsets_h, "offsets");
  const Tensor* psw = optional_arg(psw_h);
  const int device = w.device_index();
  require_cuda(w, "weight", device);
  require_cuda(idx, "indices", device);
  require_cuda(off, "offsets", device);
  if (w.dim() != 2) throw Error("weight " + list_str(w.sizes()) + " must be 2-d");
  if (idx.dim() != 1 || off.dim() != 1)
    throw Error("indices " + list_str(idx.sizes()) + " and offsets " + list_str(off.sizes()) +
                " must be 1-d (2-d input is flattened with its offsets before this op)");
  for (const Tensor* t : {&idx, &off})
    if (t->dtype() != dc::kInt32 && t->dtype() != dc::kInt64)
      throw Error(std::string(t == &idx ? "indices" : "offsets") + " has dtype " + aoti_host::dtype_name(t->dtype()) +
                  "; expected int32 or int64");
  if (mode < 0 || mode > 2) throw Error("mode " + std::to_string(mode) + " is not 0 (sum), 1 (mean) or 2 (max)");
  cu::EmbeddingBagSpec s{};
  s.num_indices = idx.sizes()[0];
  s.num_bags = off.sizes()[0];
  if (include_last_offset != 0) {
    if (s.num_bags < 1) throw Error("include_last_offset needs at least one offset");
    s.num_bags -= 1;
  }
  s.features = w.sizes()[1], s.num_weights = w.sizes()[0];
  s.w_st[0] = w.strides()[0], s.w_st[1] = w.strides()[1];
  s.idx_step = idx.strides()[0], s.off_step = off.strides()[0];
  s.mode = mode, s.padding_idx = padding_idx;
  s.indices_int32 = idx.dtype() == dc::kInt32, s.offsets_int32 = off.dtype() == dc::kInt32;
  s.index_dtype = s.indices_int32 && s.offsets_int32 ? dc::kInt32 : dc::kInt64;
  if (psw != nullptr) {
    if (mode != 0) throw Error("per_sample_weights are only supported with mode sum (0), got mode " +
                               std::to_string(mode));
    require_cuda(*psw, "per_sample_weights", device);
    require_dtype(*psw, w.dtype(), "per_sample_weights");
    if (psw->dim() != 1 || psw->sizes()[0] != s.num_indices)
      throw Error("per_sample_weights " + list_str(psw->sizes()) + " must be 1-d with one weight per index (" +
                  std::to_string(s.num_indices) + ")");
    s.psw_step = psw->strides()[0];
  }
  Owned out(new_cuda(w.dtype(), {s.num_bags, s.features}, device));
  Owned o2b(new_cuda(s.index_dtype, {s.num_indices}, device));
  Owned bag_size(new_cuda(s.index_dtype, off.sizes(), device));
  Owned max_idx(new_cuda(s.index_dtype, mode == 2 ? Shape{s.num_bags, s.features} : Shape{0}, device));
  s.out_st[0] = out->strides()[0], s.out_st[1] = out->strides()[1];
  cu::zero(*o2b);
  cu::zero(*bag_size);
  if (s.num_bags > 0 && s.num_indices > 0 && off.numel() > 0) {
    const cudaStream_t stream = cu::stream_of(device);
    BadIndexFlag bad(device, stream);
    cu::launch_embedding_bag(w.dtype(), w.data_ptr(), idx.data_ptr(), off.data_ptr(),
                             psw != nullptr ? psw->data_ptr() : nullptr, out->data_ptr(), o2b->data_ptr(),
                             bag_size->data_ptr(), max_idx->data_ptr(), bad.ptr(), s, stream);
    bad.check("an index is out of range for the " + std::to_string(s.num_weights) + " rows of weight");
  } else if (out->numel() > 0) {
    cu::zero(*out);
    if (mode == 2) cu::zero(*max_idx);
  }
  *ret0 = to_handle(out.release());
  *ret1 = to_handle(o2b.release());
  *ret2 = to_handle(bag_size.release());
  *ret3 = to_handle(max_idx.release());
}

// --- scatter -------------------------------------------------------------------------------------

cu::ScatterOp parse_reduce(const char* reduce) {
  if (reduce == nullptr) throw Error("reduce is a null string");
  const std::string r(reduce);
  if (r == "sum") return cu::ScatterOp::kSum;
  if (r == "prod") return cu::ScatterOp::kProd;
  if (r == "mean") return cu::ScatterOp::kMean;
  if (r == "amax") return cu::ScatterOp::kAmax;
  if (r == "amin") return cu::ScatterOp::kAmin;
  throw Error("reduce '" + r + "' is not one of sum, prod, mean, amax, amin");
}

// out = self scattered with (index, src or value) along dim, reduced by op.
void scatter(AtenTensorHandle out_h, AtenTensorHandle self_h, int64_t dim, AtenTensorHandle index_h,
             AtenTensorHandle src_h, double value, cu::ScatterOp op, bool include_self) {
  Tensor& out = tensor_arg(out_h, "out");
  const Tensor& self = tensor_arg(self_h, "self");
  const Tensor& index = tensor_arg(index_h, "index");
  const Tensor* src = src_h != nullptr ? &tensor_arg(src_h, "src") : nullptr;
  const int device = self.device_index();
  require_cuda(self, "self", device);
  require_cuda(out, "out", device);
  require_cuda(index, "index", device);
  require_dtype(index, dc::kInt64, "index");
  require_dtype(out, self.dtype(), "out");
  if (out.sizes() != self.sizes())
    throw Error("out " + list_str(out.sizes()) + " must have self's sizes " + list_str(self.sizes()));
  if (src != nullptr) {
    require_cuda(*src, "src", device);
    require_dtype(*src, self.dtype(), "src");
  }
  const int64_t nd = self.dim();
  dim = wrap_dim(dim, nd);
  const Shape one{1};
  const Shape& ssz = nd == 0 ? one : self.sizes();
  const Shape& isz = index.dim() == 0 ? one : index.sizes();
  if (static_cast<int64_t>(isz.size()) != static_cast<int64_t>(ssz.size()) && index.numel() > 0)
    throw Error("index " + list_str(index.sizes()) + " must have as many dimensions as self " + list_str(self.sizes()));
  if (static_cast<int64_t>(ssz.size()) > cu::kMaxDims)
    throw Error("tensors of more than " + std::to_string(cu::kMaxDims) + " dimensions are not supported");
  if (&out != &self && out.data_ptr() != self.data_ptr()) cu::copy(out, self);
  if (index.numel() == 0) return;
  cu::ScatterSpec s{};
  s.nd = static_cast<int>(isz.size());
  s.dim = dim;
  s.numel = index.numel();
  s.out_dim_size = ssz[static_cast<size_t>(dim)];
  for (int d = 0; d < s.nd; ++d) {
    const size_t u = static_cast<size_t>(d);
    if (d != dim && isz[u] > ssz[u])
      throw Error("index " + list_str(index.sizes()) + " is larger than self " + list_str(self.sizes()) +
                  " in dimension " + std::to_string(d));
    if (src != nullptr) {
      const Shape& srcsz = src->dim() == 0 ? one : src->sizes();
      if (srcsz.size() != isz.size() || isz[u] > srcsz[u])
        throw Error("index " + list_str(index.sizes()) + " is larger than src " + list_str(src->sizes()));
      s.src_st[d] = src->dim() == 0 ? 0 : src->strides()[u];
    }
    s.idx_sizes[d] = isz[u];
    s.idx_st[d] = index.dim() == 0 ? 0 : index.strides()[u];
    s.out_st[d] = nd == 0 ? 0 : out.strides()[u];
  }
  const cudaStream_t stream = cu::stream_of(device);
  BadIndexFlag bad(device, stream);
  if (op != cu::ScatterOp::kAssign && !include_self)
    cu::launch_scatter_fill_identity(out.dtype(), out.data_ptr(), static_cast<const int64_t*>(index.data_ptr()), s,
                                     op, bad.ptr(), stream);
  cu::launch_scatter(out.dtype(), out.data_ptr(), static_cast<const int64_t*>(index.data_ptr()),
                     src != nullptr ? src->data_ptr() : nullptr, value, s, op, bad.ptr(), stream);
  if (op == cu::ScatterOp::kMean) {
    Owned counts(new_cuda(dc::kInt32, ssz, device));
    cu::zero(*counts);
    cu::launch_scatter_count(static_cast<int32_t*>(counts->data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
                             s, counts->strides().data(), stream);
    cu::StridedSpec os{};
    os.ndim = static_cast<int>(ssz.size());
    for (int d = 0; d < os.ndim; ++d) {
      os.sizes[d] = ssz[static_cast<size_t>(d)];
      os.dst_strides[d] = nd == 0 ? 0 : out.strides()[static_cast<size_t>(d)];
      os.src_strides[d] = counts->strides()[static_cast<size_t>(d)];
    }
    cu::launch_scatter_mean_divide(out.dtype(), out.data_ptr(), static_cast<const int32_t*>(counts->data_ptr()), os,
                                   counts->numel(), include_self ? 1 : 0, stream);
  }
  bad.check("an index is out of range for dimension " + std::to_string(dim) + " of size " +
            std::to_string(s.out_dim_size));
}

// --- sort / scans --------------------------------------------------------------------------------

void sort_into(const Tensor& self, int64_t dim, bool descending, int64_t keep, Tensor& values, Tensor& indices) {
  const Shape one{1};
  const bool zd = self.dim() == 0;
  const Shape& sst = zd ? one : self.strides();
  const Shape& vst = zd ? one : values.strides();
  const Shape& ist = zd ? one : indices.strides();
  const cu::LineSpec ls = make_lines(zd ? Shape{} : self.sizes(), dim, {&sst, &vst, &ist});
  cu::launch_sort(self.dtype(), self.data_ptr(), values.data_ptr(), static_cast<int64_t*>(indices.data_ptr()), ls,
                  keep, descending, cu::stream_of(self.device_index()));
}

void sort_shim(AtenTensorHandle self_h, int64_t dim, bool descending, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  need(ret0, "ret0"), need(ret1, "ret1");
  const Tensor& self = tensor_arg(self_h, "self");
  const int device = self.device_index();
  require_cuda(self, "self", device);
  dim = wrap_dim(dim, self.dim());
  // ATen's sort.stable meta: self's strides when non-overlapping and dense, else dense in self's order.
  const Shape strides = aoti_host::cpu::detail::empty_like_strides(self);
  Owned v(new_cuda(self.dtype(), self.sizes(), strides, device));
  Owned ix(new_cuda(dc::kInt64, self.sizes(), strides, device));
  if (self.numel() > 0) sort_into(self, dim, descending, self.dim() == 0 ? 1 : self.sizes()[dim], *v, *ix);
  *ret0 = to_handle(v.release());
  *ret1 = to_handle(ix.release());
}

int32_t scan_out_dtype(const Tensor& self, const int32_t* dtype) {
  if (dtype != nullptr) return *dtype;
  const int32_t dt = self.dtype();
  const bool integral = dt == dc::kUInt8 || dt == dc::kInt8 || dt == dc::kInt16 || dt == dc::kInt32 ||
                        dt == dc::kInt64 || dt == dc::kBool;
  return integral ? dc::kInt64 : dt;
}

void scan_shim(AtenTensorHandle self_h, int64_t dim, int32_t* dtype, AtenTensorHandle* ret0, bool product) {
  need(ret0, "ret0");
  const Tensor& self = tensor_arg(self_h, "self");
  const int device = self.device_index();
  require_cuda(self, "self", device);
  dim = wrap_dim(dim, self.dim());
  const int32_t odt = scan_out_dtype(self, dtype);
  Owned out(new_cuda(odt, self.sizes(), device));  // ATen: contiguous
  if (self.numel() > 0) {
    const Shape one{1};
    const bool zd = self.dim() == 0;
    const Shape& sst = zd ? one : self.strides();
    const Shape& ost = zd ? one : out->strides();
    const cu::LineSpec ls = make_lines(zd ? Shape{} : self.sizes(), dim, {&sst, &ost});
    cu::launch_scan(self.dtype(), odt, self.data_ptr(), out->data_ptr(), ls, product, cu::stream_of(device));
  }
  *ret0 = to_handle(out.release());
}

void cum_extreme_shim(AtenTensorHandle self_h, int64_t dim, AtenTensorHandle* ret0, AtenTensorHandle* ret1, bool max) {
  need(ret0, "ret0"), need(ret1, "ret1");
  const Tensor& self = tensor_arg(self_h, "self");
  const int device = self.device_index();
  require_cuda(self, "self", device);
  dim = wrap_dim(dim, self.dim());
  Owned v(new_cuda(self.dtype(), self.sizes(), device));
  Owned ix(new_cuda(dc::kInt64, self.sizes(), device));
  if (self.numel() > 0) {
    const Shape one{1};
    const bool zd = self.dim() == 0;
    const Shape& sst = zd ? one : self.strides();
    const Shape& vst = zd ? one : v->strides();
    const Shape& ist = zd ? one : ix->strides();
    const cu::LineSpec ls = make_lines(zd ? Shape{} : self.sizes(), dim, {&sst, &vst, &ist});
    cu::launch_cum_extreme(self.dtype(), self.data_ptr(), v->data_ptr(), static_cast<int64_t*>(ix->data_ptr()), ls,
                           max, cu::stream_of(device));
  }
  *ret0 = to_handle(v.release());
  *ret1 = to_handle(ix.release());
}

// --- searchsorted / bucketize --------------------------------------------------------------------

bool integral(int32_t dt) {
  return dt == dc::kUInt8 || dt == dc::kInt8 || dt == dc::kInt16 || dt == dc::kInt32 || dt == dc::kInt64;
}
bool floating(int32_t dt) {
  return dt == dc::kFloat16 || dt == dc::kBFloat16 || dt == dc::kFloat32 || dt == dc::kFloat64;
}

// ATen's searchsorted: out has self's sizes (contiguous), int32 or int64.
Tensor* searchsorted(const Tensor& seq, const Tensor& self, bool out_int32, bool right, const char* const* side,
                     const Tensor* sorter) {
  const int device = seq.device_index();
  require_cuda(seq, "sorted_sequence", device);
  require_cuda(self, "self", device);
  for (const Tensor* t : {&seq, &self})
    if (!integral(t->dtype()) && !floating(t->dtype()))
      throw Error(std::string(t == &seq ? "sorted_sequence" : "self") + " has dtype " +
                  aoti_host::dtype_name(t->dtype()) + "; expected a floating or integer dtype");
  if (side != nullptr && *side != nullptr) {
    const std::string sd(*side);
    if (sd != "left" && sd != "right") throw Error("side is '" + sd + "'; expected 'left' or 'right'");
    if (sd == "left" && right) throw Error("side 'left' contradicts right=True");
    right = sd == "right";
  }
  if (seq.dim() == 0) throw Error("sorted_sequence is 0-dimensional; it needs at least one dimension");
  const Shape lead(seq.sizes().begin(), seq.sizes().end() - 1);
  if (seq.dim() > 1 && (self.dim() != seq.dim() || Shape(self.sizes().begin(), self.sizes().end() - 1) != lead))
    throw Error("sorted_sequence has sizes " + list_str(seq.sizes()) +
                ": a multi-dimensional sequence needs input values with the same leading dimensions (got " +
                list_str(self.sizes()) + ")");
  if (sorter != nullptr) {
    require_cuda(*sorter, "sorter", device);
    require_dtype(*sorter, dc::kInt64, "sorter");
    if (sorter->sizes() != seq.sizes())
      throw Error("sorter " + list_str(sorter->sizes()) + " must have sorted_sequence's sizes " +
                  list_str(seq.sizes()));
  }
  if (self.dim() > cu::kMaxDims || seq.dim() > cu::kMaxDims)
    throw Error("tensors of more than " + std::to_string(cu::kMaxDims) + " dimensions are not supported");
  Owned out(new_cuda(out_int32 ? dc::kInt32 : dc::kInt64, self.sizes(), device));
  cu::SearchSpec s{};
  s.nd = static_cast<int>(self.dim());
  for (int d = 0; d < s.nd; ++d) {
    s.sizes[d] = self.sizes()[static_cast<size_t>(d)];
    s.self_st[d] = self.strides()[static_cast<size_t>(d)];
  }
  s.numel = self.numel();
  s.inner = self.dim() == 0 ? 1 : self.sizes().back();
  s.one_d = seq.dim() == 1;
  s.outer_nd = static_cast<int>(seq.dim() - 1);
  for (int d = 0; d < s.outer_nd; ++d) {
    s.outer_sizes[d] = lead[static_cast<size_t>(d)];
    s.seq_outer_st[d] = seq.strides()[static_cast<size_t>(d)];
    s.sorter_outer_st[d] = sorter != nullptr ? sorter->strides()[static_cast<size_t>(d)] : 0;
  }
  s.n = seq.sizes().back();
  s.seq_step = seq.strides().back();
  s.sorter_step = sorter != nullptr ? sorter->strides().back() : 0;
  s.seq_dtype = seq.dtype(), s.self_dtype = self.dtype();
  s.ints = integral(seq.dtype()) && integral(self.dtype());
  s.right = right, s.out_int32 = out_int32;
  if (s.numel > 0) {
    const cudaStream_t stream = cu::stream_of(device);
    if (s.n == 0) {
      cu::zero(*out);
    } else {
      BadIndexFlag bad(device, stream);
      cu::launch_searchsorted(seq.data_ptr(), self.data_ptr(),
                              sorter != nullptr ? static_cast<const int64_t*>(sorter->data_ptr()) : nullptr,
                              out->data_ptr(), s, bad.ptr(), stream);
      bad.check("a sorter index is out of range for a sequence of length " + std::to_string(s.n));
    }
  }
  return out.release();
}

}  // namespace

extern "C" {

// ATen's _scaled_dot_product_efficient_attention on CUDA: output [B, H, M, Dv] laid out as a
// contiguous [B, M, H, Dv] transposed; logsumexp float32 [B, H, ceil(M / 32) * 32] (the rows past M
// are padding) or [B, H, 0]; philox seed and offset 0-d int64, on the CPU (on the GPU while a graph is
// captured). Causal masking is top-left aligned (key j visible to query i when j <= i).
AOTI_HOST_API AOTITorchError aoti_torch_cuda__scaled_dot_product_efficient_attention(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, AtenTensorHandle* attn_bias,
    int32_t compute_log_sumexp, double dropout_p, int32_t is_causal, double* scale, AtenTensorHandle* ret0,
    AtenTensorHandle* ret1, AtenTensorHandle* ret2, AtenTensorHandle* ret3) {
  return guarded("aoti_torch_cuda__scaled_dot_product_efficient_attention", [&] {
    need(ret0, "ret0"), need(ret1, "ret1"), need(ret2, "ret2"), need(ret3, "ret3");
    const Tensor& q = tensor_arg(query, "query");
    const int device = q.device_index();
    AttentionArgs a{&q, &tensor_arg(key, "key"), &tensor_arg(value, "value"), optional_arg(attn_bias), dropout_p,
                    is_causal != 0, scale};
    cu::AttentionSpec s = attention_spec(a, device);
    s.causal_offset = 0;
    Owned out(new_cuda(q.dtype(), {s.b, s.h, s.m, s.dv}, {s.m * s.h * s.dv, s.dv, s.h * s.dv, 1}, device));
    const int64_t lse_len = compute_log_sumexp != 0 ? (s.m + 31) / 32 * 32 : 0;
    Owned lse(new_cuda(dc::kFloat32, {s.b, s.h, lse_len}, device));
    for (int d = 0; d < 4; ++d) s.o_st[d] = out->strides()[static_cast<size_t>(d)];
    for (int d = 0; d < 3; ++d) s.lse_st[d] = lse->strides()[static_cast<size_t>(d)];
    const cudaStream_t stream = cu::stream_of(device);
    run_attention(q.dtype(), out->data_ptr(), lse_len > 0 ? static_cast<float*>(lse->data_ptr()) : nullptr,
                  q.data_ptr(), a.k->data_ptr(), a.v->data_ptr(), a.bias != nullptr ? a.bias->data_ptr() : nullptr, s,
                  device);
    const bool on_gpu = capturing(stream);
    Owned seed(zeros64(dc::kInt64, {}, on_gpu, device)), offset(zeros64(dc::kInt64, {}, on_gpu, device));
    *ret0 = to_handle(out.release());
    *ret1 = to_handle(lse.release());
    *ret2 = to_handle(seed.release());
    *ret3 = to_handle(offset.release());
  });
}

// ATen's _scaled_dot_product_flash_attention on CUDA: output laid out like at::empty_like of the query
// transposed to [B, M, H, D], transposed back (head sizes must be multiples of 8, as in ATen);
// logsumexp float32 [B, H, M]; cum_seq_q/k undefined (null handles); max_q = M, max_k = N; the rng
// state uint64 [2] and an unused uint64 0-d tensor on the GPU (zeros: no dropout); debug mask [0]
// (only return_debug_mask=False). Causal masking is bottom-right aligned, as in the flash kernel (the same as
// top-left when M == N).
AOTI_HOST_API AOTITorchError aoti_torch_cuda__scaled_dot_product_flash_attention(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, double dropout_p, int32_t is_causal,
    int32_t return_debug_mask, double* scale, AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2,
    AtenTensorHandle* ret3, int64_t* ret4, int64_t* ret5, AtenTensorHandle* ret6, AtenTensorHandle* ret7,
    AtenTensorHandle* ret8) {
  return guarded("aoti_torch_cuda__scaled_dot_product_flash_attention", [&] {
    need(ret0, "ret0"), need(ret1, "ret1"), need(ret2, "ret2"), need(ret3, "ret3"), need(ret4, "ret4");
    need(ret5, "ret5"), need(ret6, "ret6"), need(ret7, "ret7"), need(ret8, "ret8");
    if (return_debug_mask != 0) throw Error("return_debug_mask=True is not supported (inference only)");
    const Tensor& q = tensor_arg(query, "query");
    const int device = q.device_index();
    AttentionArgs a{&q, &tensor_arg(key, "key"), &tensor_arg(value, "value"), nullptr, dropout_p, is_causal != 0,
                    scale};
    cu::AttentionSpec s = attention_spec(a, device);
    if (s.dv != s.d)
      throw Error("flash attention needs equal query and value head sizes, got " + std::to_string(s.d) + " and " +
                  std::to_string(s.dv));
    s.causal_offset = s.n - s.m;
    if (s.d % 8 != 0)
      throw Error("head size " + std::to_string(s.d) +
                  " is not a multiple of 8 (ATen's flash kernel refuses it too; scaled_dot_product_attention "
                  "pads the head size before choosing it)");
    // at::empty_like(query.transpose(1, 2)), transposed back
    Owned qt(q.alias({s.b, s.m, s.h, s.d}, {q.strides()[0], q.strides()[2], q.strides()[1], q.strides()[3]},
                     q.storage_offset()));
    const Shape t_strides = aoti_host::cpu::detail::empty_like_strides(*qt);
    Owned out(new_cuda(q.dtype(), {s.b, s.h, s.m, s.d}, {t_strides[0], t_strides[2], t_strides[1], t_strides[3]},
                       device));
    Owned lse(new_cuda(dc::kFloat32, {s.b, s.h, s.m}, device));
    for (int d = 0; d < 4; ++d) s.o_st[d] = out->strides()[static_cast<size_t>(d)];
    for (int d = 0; d < 3; ++d) s.lse_st[d] = lse->strides()[static_cast<size_t>(d)];
    run_attention(q.dtype(), out->data_ptr(), static_cast<float*>(lse->data_ptr()), q.data_ptr(), a.k->data_ptr(),
                  a.v->data_ptr(), nullptr, s, device);
    Owned seed(zeros64(dc::kUInt64, {2}, true, device)), offset(zeros64(dc::kUInt64, {}, true, device));
    Owned debug(new_cuda(q.dtype(), {0}, device));
    *ret0 = to_handle(out.release());
    *ret1 = to_handle(lse.release());
    *ret2 = nullptr;
    *ret3 = nullptr;
    *ret4 = s.m;
    *ret5 = s.n;
    *ret6 = to_handle(seed.release());
    *ret7 = to_handle(offset.release());
    *ret8 = to_handle(debug.release());
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_sort(AtenTensorHandle self, int64_t dim, int32_t descending,
                                                  AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cuda_sort", [&] { sort_shim(self, dim, descending != 0, ret0, ret1); });
}

// Sorts stably whatever `stable` says (a stable order is a valid result of the unstable sort too).
AOTI_HOST_API AOTITorchError aoti_torch_cuda_sort_stable(AtenTensorHandle self, int32_t* stable, int64_t dim,
                                                         int32_t descending, AtenTensorHandle* ret0,
                                                         AtenTensorHandle* ret1) {
  (void)stable;
  return guarded("aoti_torch_cuda_sort_stable", [&] { sort_shim(self, dim, descending != 0, ret0, ret1); });
}

// Results come sorted (largest first for largest=True), ties in index order; a valid order for
// sorted=False too. Outputs are contiguous, as ATen's topk meta makes them.
AOTI_HOST_API AOTITorchError aoti_torch_cuda_topk(AtenTensorHandle self, int64_t k, int64_t dim, int32_t largest,
                                                  int32_t sorted, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  (void)sorted;
  return guarded("aoti_torch_cuda_topk", [&] {
    need(ret0, "ret0"), need(ret1, "ret1");
    const Tensor& t = tensor_arg(self, "self");
    const int device = t.device_index();
    require_cuda(t, "self", device);
    dim = wrap_dim(dim, t.dim());
    const int64_t n = t.dim() == 0 ? 1 : t.sizes()[static_cast<size_t>(dim)];
    if (k < 0 || k > n)
      throw Error("k " + std::to_string(k) + " is out of range for dimension " + std::to_string(dim) + " of size " +
                  std::to_string(n));
    Shape sizes = t.sizes();
    if (t.dim() > 0) sizes[static_cast<size_t>(dim)] = k;
    Owned v(new_cuda(t.dtype(), sizes, device));
    Owned ix(new_cuda(dc::kInt64, sizes, device));
    if (t.numel() > 0 && k > 0) sort_into(t, dim, largest != 0, k, *v, *ix);
    *ret0 = to_handle(v.release());
    *ret1 = to_handle(ix.release());
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_cumsum(AtenTensorHandle self, int64_t dim, int32_t* dtype,
                                                    AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_cumsum", [&] { scan_shim(self, dim, dtype, ret0, false); });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_cumprod(AtenTensorHandle self, int64_t dim, int32_t* dtype,
                                                     AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_cumprod", [&] { scan_shim(self, dim, dtype, ret0, true); });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_cummax(AtenTensorHandle self, int64_t dim, AtenTensorHandle* ret0,
                                                    AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cuda_cummax", [&] { cum_extreme_shim(self, dim, ret0, ret1, true); });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_cummin(AtenTensorHandle self, int64_t dim, AtenTensorHandle* ret0,
                                                    AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cuda_cummin", [&] { cum_extreme_shim(self, dim, ret0, ret1, false); });
}

// ATen's _embedding_bag_cuda: output [bags, features]; offset2bag [indices]; bag_size with offsets'
// sizes (its last entry 0 when include_last_offset); max_indices [bags, features] for mode max (-1 for
// an empty bag), else [0]. Index outputs are int32 when indices and offsets both are, else int64.
AOTI_HOST_API AOTITorchError aoti_torch_cuda__embedding_bag(AtenTensorHandle weight, AtenTensorHandle indices,
                                                            AtenTensorHandle offsets, int32_t scale_grad_by_freq,
                                                            int64_t mode, int32_t sparse,
                                                            AtenTensorHandle* per_sample_weights,
                                                            int32_t include_last_offset, int64_t padding_idx,
                                                            AtenTensorHandle* ret0, AtenTensorHandle* ret1,
                                                            AtenTensorHandle* ret2, AtenTensorHandle* ret3) {
  (void)scale_grad_by_freq;  // gradient-only options: no effect on the forward result
  (void)sparse;
  return guarded("aoti_torch_cuda__embedding_bag", [&] {
    embedding_bag(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx, ret0, ret1,
                  ret2, ret3);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda__embedding_bag_forward_only(
    AtenTensorHandle weight, AtenTensorHandle indices, AtenTensorHandle offsets, int32_t scale_grad_by_freq,
    int64_t mode, int32_t sparse, AtenTensorHandle* per_sample_weights, int32_t include_last_offset,
    int64_t padding_idx, AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2,
    AtenTensorHandle* ret3) {
  (void)scale_grad_by_freq;
  (void)sparse;
  return guarded("aoti_torch_cuda__embedding_bag_forward_only", [&] {
    embedding_bag(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx, ret0, ret1,
                  ret2, ret3);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_scatter_src_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                             AtenTensorHandle index, AtenTensorHandle src) {
  return guarded("aoti_torch_cuda_scatter_src_out", [&] {
    if (src == nullptr) throw Error("argument 'src' is a null tensor handle");
    scatter(out, self, dim, index, src, 0.0, cu::ScatterOp::kAssign, true);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_scatter_value_out(AtenTensorHandle out, AtenTensorHandle self,
                                                               int64_t dim, AtenTensorHandle index, double value) {
  return guarded("aoti_torch_cuda_scatter_value_out",
                 [&] { scatter(out, self, dim, index, nullptr, value, cu::ScatterOp::kAssign, true); });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_scatter_reduce_two_out(AtenTensorHandle out, AtenTensorHandle self,
                                                                    int64_t dim, AtenTensorHandle index,
                                                                    AtenTensorHandle src, const char* reduce,
                                                                    int32_t include_self) {
  return guarded("aoti_torch_cuda_scatter_reduce_two_out", [&] {
    if (src == nullptr) throw Error("argument 'src' is a null tensor handle");
    scatter(out, self, dim, index, src, 0.0, parse_reduce(reduce), include_self != 0);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_searchsorted_Tensor(AtenTensorHandle sorted_sequence,
                                                                  AtenTensorHandle self, int32_t out_int32,
                                                                  int32_t right, const char** side,
                                                                  AtenTensorHandle* sorter, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_searchsorted_Tensor", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(searchsorted(tensor_arg(sorted_sequence, "sorted_sequence"), tensor_arg(self, "self"),
                                   out_int32 != 0, right != 0, side, optional_arg(sorter)));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_bucketize_Tensor(AtenTensorHandle self, AtenTensorHandle boundaries,
                                                              int32_t out_int32, int32_t right,
                                                              AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_bucketize_Tensor", [&] {
    need(ret0, "ret0");
    const Tensor& b = tensor_arg(boundaries, "boundaries");
    if (b.dim() != 1)
      throw Error("boundaries has " + std::to_string(b.dim()) + " dimensions; bucketize needs a 1-d tensor");
    *ret0 = to_handle(searchsorted(b, tensor_arg(self, "self"), out_int32 != 0, right != 0, nullptr, nullptr));
  });
}

}  // extern "C"
