// aoti_torch_cuda_* fallbacks beyond the matrix products and convolution: scaled-dot-product attention
// (efficient and flash), sort/topk, cumulative scans, embedding bags, scatter, index_put/index_reduce,
// searchsorted/bucketize, histc, repeat_interleave, the data-sized nonzero and masked_select, pooling
// (the windows and output layouts of ops/pool.cpp's plans) and the int8 matrix products.
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

#include "aoti_host/cuda/cuda.h"
#include "aoti_host/error.h"
#include "aoti_host/shims.h"
#include "shims/cpu/strided.h"
#include "shims/cuda/cuda_util.h"
#include "shims/cuda/op_kernels.h"
#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"
#include "shims/shim_util.h"

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

using aoti_host::shim::need;
using aoti_host::shim::optional_arg;
using cu::capturing;
using cu::require_cuda;

void require_dtype(const Tensor& t, int32_t dt, const char* name) {
  if (t.dtype() != dt)
    throw Error(std::string("'") + name + "' has dtype " + aoti_host::dtype_name(t.dtype()) + ", expected " +
                aoti_host::dtype_name(dt));
}

using cu::new_cuda;

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  const int64_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    throw Error("dim " + std::to_string(dim) + " is out of range for a " + std::to_string(ndim) + "-d tensor");
  return dim < 0 ? dim + n : dim;
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
void scatter_tensors(Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, const Tensor* src, double value,
                     cu::ScatterOp op, bool include_self) {
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

void scatter(AtenTensorHandle out_h, AtenTensorHandle self_h, int64_t dim, AtenTensorHandle index_h,
             AtenTensorHandle src_h, double value, cu::ScatterOp op, bool include_self) {
  scatter_tensors(tensor_arg(out_h, "out"), tensor_arg(self_h, "self"), dim, tensor_arg(index_h, "index"),
                  src_h != nullptr ? &tensor_arg(src_h, "src") : nullptr, value, op, include_self);
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

// --- nonzero / masked_select ----------------------------------------------------------------------

void refuse_capture(cudaStream_t stream, const char* op) {
  if (capturing(stream))
    throw Error(std::string(op) +
                ": the output's size depends on the data, which needs a synchronisation that a CUDA graph "
                "capture forbids; run this model without CUDA graphs");
}

cu::SelectSpec select_spec(const Shape& sizes, const Shape& pred_st, const Shape& src_st, size_t pred_size,
                           uint64_t pred_bits) {
  if (sizes.size() > static_cast<size_t>(cu::kMaxDims))
    throw Error("tensors of more than " + std::to_string(cu::kMaxDims) + " dimensions are not supported");
  cu::SelectSpec s{};
  s.nd = static_cast<int>(sizes.size());
  s.numel = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    s.sizes[d] = sizes[d], s.pred_st[d] = pred_st[d], s.src_st[d] = src_st[d];
    s.numel *= sizes[d];
  }
  s.pred_size = static_cast<int>(pred_size);
  s.pred_bits = pred_bits;
  return s;
}

// The two passes of an ordered selection: per-block counts, their exclusive prefix sums (on the host,
// after one synchronisation) as the blocks' output offsets on the device; returns the total.
int64_t select_offsets(const void* pred, const cu::SelectSpec& s, int device, Owned& offsets) {
  const cudaStream_t stream = cu::stream_of(device);
  const int64_t blocks = (s.numel + cu::kSelectBlock - 1) / cu::kSelectBlock;
  offsets.reset(new_cuda(dc::kInt64, {blocks}, device));
  if (blocks == 0) return 0;
  cu::launch_select_count(pred, s, static_cast<int64_t*>(offsets->data_ptr()), stream);
  std::vector<int64_t> host(static_cast<size_t>(blocks));
  AOTI_CUDA_CHECK(cudaMemcpyAsync(host.data(), offsets->data_ptr(), host.size() * sizeof(int64_t),
                                  cudaMemcpyDeviceToHost, stream));
  AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
  int64_t total = 0;
  for (int64_t& c : host) {
    const int64_t n = c;
    c = total;
    total += n;
  }
  AOTI_CUDA_CHECK(cudaMemcpyAsync(offsets->data_ptr(), host.data(), host.size() * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, stream));
  AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));  // `host` is read until the copy is done
  return total;
}

// Bits of an element that make it non-zero (the sign bit alone does not, for floating dtypes).
uint64_t nonzero_bits(int32_t dt) {
  switch (dt) {
    case dc::kBool:
    case dc::kUInt8:
    case dc::kInt8:
    case dc::kInt16:
    case dc::kInt32:
    case dc::kInt64: return ~uint64_t{0};
    case dc::kFloat16:
    case dc::kBFloat16: return 0x7fffu;
    case dc::kFloat32: return 0x7fffffffu;
    case dc::kFloat64: return 0x7fffffffffffffffull;
    default:
      throw Error(std::string("self has dtype ") + aoti_host::dtype_name(dt) +
                  "; nonzero takes bool, integer and floating dtypes");
  }
}

// ATen's CUDA nonzero: int64 [count, ndim] stored column-major (strides [1, count]), rows in row-major
// order of the hits.
Tensor* nonzero(const Tensor& self) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  const cudaStream_t stream = cu::stream_of(device);
  refuse_capture(stream, "nonzero");
  const uint64_t bits = nonzero_bits(self.dtype());
  const cu::SelectSpec s = select_spec(self.sizes(), self.strides(), self.strides(), self.itemsize(), bits);
  Owned offsets;
  const int64_t count = self.numel() == 0 ? 0 : select_offsets(self.data_ptr(), s, device, offsets);
  const int64_t nd = self.dim();
  Owned out(new_cuda(dc::kInt64, {count, nd}, {1, std::max<int64_t>(count, 1)}, device));
  if (count > 0 && nd > 0)
    cu::launch_select_write(self.data_ptr(), s, static_cast<const int64_t*>(offsets->data_ptr()),
                            static_cast<int64_t*>(out->data_ptr()), count, nullptr, nullptr, 0, stream);
  return out.release();
}

// self and mask broadcast together; the selected elements of self in row-major order, 1-d contiguous.
Tensor* masked_select(const Tensor& self, const Tensor& mask) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  require_cuda(mask, "mask", device);
  if (mask.dtype() != dc::kBool)
    throw Error(std::string("mask has dtype ") + aoti_host::dtype_name(mask.dtype()) +
                "; masked_select expects a bool mask");
  const cudaStream_t stream = cu::stream_of(device);
  refuse_capture(stream, "masked_select");
  Shape shape = self.sizes();
  if (!aoti_host::ops::broadcast_into(shape, mask.sizes()))
    throw Error("self with sizes " + list_str(self.sizes()) + " and mask with sizes " + list_str(mask.sizes()) +
                " do not broadcast");
  const Shape sst = aoti_host::cpu::detail::broadcast_strides(self, shape, "self");
  const Shape mst = aoti_host::cpu::detail::broadcast_strides(mask, shape, "mask");
  const size_t item = self.itemsize();
  if (item != 1 && item != 2 && item != 4 && item != 8 && item != 16)
    throw Error(std::string("self has dtype ") + aoti_host::dtype_name(self.dtype()) + ", which masked_select on cuda does not take");
  const cu::SelectSpec s = select_spec(shape, mst, sst, 1, ~uint64_t{0});
  Owned offsets;
  const int64_t count = s.numel == 0 ? 0 : select_offsets(mask.data_ptr(), s, device, offsets);
  Owned out(new_cuda(self.dtype(), {count}, device));
  if (count > 0)
    cu::launch_select_write(mask.data_ptr(), s, static_cast<const int64_t*>(offsets->data_ptr()), nullptr, 0,
                            self.data_ptr(), out->data_ptr(), item, stream);
  return out.release();
}

// --- histc / repeat_interleave -------------------------------------------------------------------

// ATen's CUDA histc: bins of equal width over [min, max] (the data's own range when min == max),
// counted in self's dtype, contiguous [bins].
Tensor* histc(const Tensor& self, int64_t bins, double min, double max) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  const int32_t dt = self.dtype();
  if (!floating(dt))
    throw Error(std::string("self has dtype ") + aoti_host::dtype_name(dt) + "; histc takes a floating dtype");
  if (bins <= 0) throw Error("bins is " + std::to_string(bins) + "; it must be positive");
  if (min > max) throw Error("max (" + std::to_string(max) + ") is less than min (" + std::to_string(min) + ")");
  const cudaStream_t stream = cu::stream_of(device);
  const cu::SelectSpec s = select_spec(self.sizes(), self.strides(), self.strides(), self.itemsize(), 0);
  double lo = aoti_host::ops::round_to(dt, min), hi = aoti_host::ops::round_to(dt, max);
  if (min == max && s.numel > 0) {  // the data's range: one synchronisation, as in ATen
    if (capturing(stream))
      throw Error("histc with min == max takes its range from the data, which needs a synchronisation that a "
                  "CUDA graph capture forbids; give histc an explicit range");
    Owned mm(new_cuda(dc::kFloat64, {2}, device));
    Owned nan(new_cuda(dc::kInt32, {1}, device));
    const double init[2] = {HUGE_VAL, -HUGE_VAL};
    AOTI_CUDA_CHECK(cudaMemcpyAsync(mm->data_ptr(), init, sizeof(init), cudaMemcpyHostToDevice, stream));
    AOTI_CUDA_CHECK(cudaMemsetAsync(nan->data_ptr(), 0, sizeof(int), stream));
    cu::launch_minmax(dt, self.data_ptr(), s, static_cast<double*>(mm->data_ptr()), static_cast<int*>(nan->data_ptr()),
                      stream);
    double got[2] = {0, 0};
    int has_nan = 0;
    AOTI_CUDA_CHECK(cudaMemcpyAsync(got, mm->data_ptr(), sizeof(got), cudaMemcpyDeviceToHost, stream));
    AOTI_CUDA_CHECK(cudaMemcpyAsync(&has_nan, nan->data_ptr(), sizeof(int), cudaMemcpyDeviceToHost, stream));
    AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (has_nan != 0) throw Error("range of [nan, nan] is not finite");
    lo = got[0], hi = got[1];
  }
  if (lo == hi) {
    lo = aoti_host::ops::round_to(dt, lo - 1);
    hi = aoti_host::ops::round_to(dt, hi + 1);
  }
  if (!std::isfinite(lo) || !std::isfinite(hi))
    throw Error("range of [" + std::to_string(lo) + ", " + std::to_string(hi) + "] is not finite");
  Owned out(new_cuda(dt, {bins}, device));
  Owned counts(new_cuda(dc::kInt64, {bins}, device));
  cu::zero(*counts);
  cu::launch_histc(dt, self.data_ptr(), s, lo, hi, bins, static_cast<unsigned long long*>(counts->data_ptr()),
                   out->data_ptr(), stream);
  return out.release();
}

// ATen's repeat_interleave(repeats): [sum(repeats)] of repeats' dtype, index i repeated repeats[i]
// times. Without output_size the total is read back (a synchronisation, refused during graph capture).
Tensor* repeat_interleave(const Tensor& repeats, const int64_t* output_size) {
  const int device = repeats.device_index();
  require_cuda(repeats, "repeats", device);
  const int32_t dt = repeats.dtype();
  if (dt != dc::kInt32 && dt != dc::kInt64)
    throw Error(std::string("repeats has dtype ") + aoti_host::dtype_name(dt) + "; expected int32 or int64");
  if (repeats.dim() != 1)
    throw Error("repeats has " + std::to_string(repeats.dim()) + " dimensions; expected a 1-d tensor");
  if (output_size != nullptr && *output_size < 0)
    throw Error("output_size is " + std::to_string(*output_size) + "; it must not be negative");
  const cudaStream_t stream = cu::stream_of(device);
  const int64_t n = repeats.sizes()[0];
  Owned cum(new_cuda(dc::kInt64, {n}, device));
  if (n > 0) {
    const Shape step{repeats.strides()[0]}, cstep{1};
    const cu::LineSpec ls = make_lines({n}, 0, {&step, &cstep, &cstep});
    cu::launch_scan(dt, dc::kInt64, repeats.data_ptr(), cum->data_ptr(), ls, false, stream);
  }
  int64_t total = 0;
  if (output_size != nullptr) {
    total = *output_size;
  } else if (n > 0) {
    if (capturing(stream))
      throw Error("repeat_interleave without output_size: the output's size depends on the data, which needs a "
                  "synchronisation that a CUDA graph capture forbids");
    AOTI_CUDA_CHECK(cudaMemcpyAsync(&total, static_cast<const int64_t*>(cum->data_ptr()) + (n - 1), sizeof(int64_t),
                                    cudaMemcpyDeviceToHost, stream));
    AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (total < 0) throw Error("repeats has a negative value");
  }
  Owned out(new_cuda(dt, {total}, device));
  if (n > 0) {
    BadIndexFlag bad(device, stream);
    cu::launch_repeat_interleave(dt, repeats.data_ptr(), repeats.strides()[0],
                                 static_cast<const int64_t*>(cum->data_ptr()), n, out->data_ptr(), total, bad.ptr(),
                                 stream);
    bad.check("repeats has a negative value, or its sum is not output_size (" + std::to_string(total) + ")");
  }
  return out.release();
}

// --- index_reduce / index_put ----------------------------------------------------------------------

// ATen's index_reduce: a contiguous copy of self where self[..., index[i], ...] is reduced with
// source[..., i, ...] along dim (prod, mean, amax, amin). Runs as a scatter_reduce whose index is the
// 1-d index expanded over source's shape (stride 0 outside dim).
Tensor* index_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, const char* reduce,
                     bool include_self) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  require_cuda(source, "source", device);
  require_cuda(index, "index", device);
  require_dtype(source, self.dtype(), "source");
  if (index.dtype() != dc::kInt64)
    throw Error(std::string("index has dtype ") + aoti_host::dtype_name(index.dtype()) +
                "; index_reduce on cuda takes int64 indices");
  if (reduce == nullptr) throw Error("reduce is a null string");
  const std::string r(reduce);
  if (r != "prod" && r != "mean" && r != "amax" && r != "amin")
    throw Error("reduce '" + r + "' is not one of prod, mean, amax, amin");
  if (self.dim() == 0) throw Error("self is 0-dimensional; index_reduce on cuda needs at least one dimension");
  if (index.dim() > 1) throw Error("index has sizes " + list_str(index.sizes()) + "; expected a 1-d tensor");
  dim = wrap_dim(dim, self.dim());
  Shape want = self.sizes();
  want[static_cast<size_t>(dim)] = index.numel();
  if (source.sizes() != want)
    throw Error("source has sizes " + list_str(source.sizes()) + "; expected " + list_str(want) +
                " (self's sizes with dimension " + std::to_string(dim) + " the index length)");
  Shape ist(want.size(), 0);
  ist[static_cast<size_t>(dim)] = index.dim() == 0 ? 1 : index.strides()[0];
  Owned idx(index.alias(want, ist, index.storage_offset()));
  Owned out(new_cuda(self.dtype(), self.sizes(), device));
  scatter_tensors(*out, self, dim, *idx, &source, 0.0, parse_reduce(reduce), include_self);
  return out.release();
}

// ATen's index_put (functional): a copy of self laid out like it (empty_like) with
// out[indices] = values (or += with accumulate). Indices: int64/int32 tensors broadcast together, None
// for a whole dimension, bool/uint8 masks as their nonzero coordinates (a synchronisation). The indexed
// dimensions' result goes where the first of them is when they are adjacent, else first.
Tensor* index_put(const Tensor& self, const std::vector<const Tensor*>& indices_in, const Tensor& values,
                  bool accumulate) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  require_cuda(values, "values", device);
  require_dtype(values, self.dtype(), "values");
  std::vector<Owned> owned;
  std::vector<const Tensor*> idx;
  for (const Tensor* t : indices_in) {
    if (t == nullptr) {
      idx.push_back(nullptr);
      continue;
    }
    require_cuda(*t, "indices", device);
    if (t->dtype() == dc::kBool || t->dtype() == dc::kUInt8) {
      Owned nz(t->dtype() == dc::kBool ? nonzero(*t) : nullptr);
      if (!nz) {  // a uint8 mask: its bytes as bool
        Owned as_bool(t->alias_as(dc::kBool, t->sizes(), t->strides(), t->storage_offset()));
        nz.reset(nonzero(*as_bool));
      }
      const int64_t k = nz->sizes()[0];
      for (int64_t d = 0; d < t->dim(); ++d) {
        owned.emplace_back(nz->alias({k}, {nz->strides()[0]}, nz->storage_offset() + d * nz->strides()[1]));
        idx.push_back(owned.back().get());
      }
      owned.push_back(std::move(nz));
    } else if (t->dtype() == dc::kInt64 || t->dtype() == dc::kInt32) {
      idx.push_back(t);
    } else {
      throw Error(std::string("an index has dtype ") + aoti_host::dtype_name(t->dtype()) +
                  "; expected int64, int32, bool or uint8");
    }
  }
  const int64_t nd = self.dim();
  if (static_cast<int64_t>(idx.size()) > nd)
    throw Error("too many indices (" + std::to_string(idx.size()) + ") for a tensor of " + std::to_string(nd) +
                " dimension(s)");
  if (nd > cu::kMaxDims)
    throw Error("tensors of more than " + std::to_string(cu::kMaxDims) + " dimensions are not supported");
  idx.resize(static_cast<size_t>(nd), nullptr);
  Shape bshape;
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < nd; ++d) {
    const Tensor* t = idx[static_cast<size_t>(d)];
    if (t == nullptr) continue;
    if (first < 0) first = d;
    last = d;
    const Shape before = bshape;
    if (!aoti_host::ops::broadcast_into(bshape, t->sizes()))
      throw Error("index shapes " + list_str(t->sizes()) + " and " + list_str(before) + " do not broadcast");
  }
  Owned out(new_cuda(self.dtype(), self.sizes(), aoti_host::cpu::detail::empty_like_strides(self), device));
  cu::copy(*out, self);
  if (first < 0) first = last = nd;
  bool adjacent = true;
  for (int64_t d = first; d <= last && d < nd; ++d) adjacent = adjacent && idx[static_cast<size_t>(d)] != nullptr;
  Shape rshape;
  std::vector<int> rdim(static_cast<size_t>(nd), 0);
  int64_t bpos = 0;
  if (adjacent) {
    for (int64_t d = 0; d < first && d < nd; ++d) {
      rdim[static_cast<size_t>(d)] = static_cast<int>(rshape.size());
      rshape.push_back(self.sizes()[static_cast<size_t>(d)]);
    }
    bpos = static_cast<int64_t>(rshape.size());
    rshape.insert(rshape.end(), bshape.begin(), bshape.end());
    for (int64_t d = last + 1; d < nd; ++d) {
      rdim[static_cast<size_t>(d)] = static_cast<int>(rshape.size());
      rshape.push_back(self.sizes()[static_cast<size_t>(d)]);
    }
  } else {
    rshape = bshape;
    for (int64_t d = 0; d < nd; ++d) {
      if (idx[static_cast<size_t>(d)] != nullptr) continue;
      rdim[static_cast<size_t>(d)] = static_cast<int>(rshape.size());
      rshape.push_back(self.sizes()[static_cast<size_t>(d)]);
    }
  }
  if (rshape.size() > static_cast<size_t>(cu::kMaxDims))
    throw Error("the indexed shape " + list_str(rshape) + " has more than " + std::to_string(cu::kMaxDims) +
                " dimensions");
  const Shape vst = aoti_host::cpu::detail::broadcast_strides(values, rshape, "values");
  cu::IndexPutSpec s{};
  s.nd = static_cast<int>(nd);
  s.rnd = static_cast<int>(rshape.size());
  s.numel = 1;
  for (size_t r = 0; r < rshape.size(); ++r) s.rsizes[r] = rshape[r], s.numel *= rshape[r];
  for (size_t r = 0; r < rshape.size(); ++r) s.val_st[r] = vst[r];
  for (int64_t d = 0; d < nd; ++d) {
    const size_t u = static_cast<size_t>(d);
    s.self_sizes[d] = self.sizes()[u];
    s.out_st[d] = out->strides()[u];
    s.rdim[d] = rdim[u];
    const Tensor* t = idx[u];
    if (t == nullptr) continue;
    s.idx[d] = t->data_ptr();
    s.idx_int32[d] = t->dtype() == dc::kInt32;
    // the index tensor right-aligned within the broadcast block, which starts at result dim b0
    const size_t off = bshape.size() - t->sizes().size();
    const size_t b0 = adjacent ? static_cast<size_t>(bpos) : 0;
    for (size_t k = 0; k < t->sizes().size(); ++k)
      if (t->sizes()[k] != 1) s.idx_st[d][b0 + off + k] = t->strides()[k];
  }
  if (s.numel > 0 && self.numel() > 0) {
    const cudaStream_t stream = cu::stream_of(device);
    BadIndexFlag bad(device, stream);
    cu::launch_index_put(self.dtype(), out->data_ptr(), values.data_ptr(), s, accumulate, bad.ptr(), stream);
    bad.check("an index is out of bounds for the indexed dimension of self " + list_str(self.sizes()));
  }
  return out.release();
}

// --- pooling / int8 matrix products --------------------------------------------------------------

// Runs a pooling plan (ops::plan_*: arguments checked, ATen's output layout) on self's device; indices
// (int64, out's layout) for the max kinds.
void run_pool(const Tensor& self, const aoti_host::ops::PoolPlan& plan, Tensor** out, Tensor** indices) {
  const int device = self.device_index();
  Owned o(new_cuda(self.dtype(), plan.out_sizes, plan.out_strides, device));
  Owned ix(indices != nullptr ? new_cuda(dc::kInt64, plan.out_sizes, plan.out_strides, device) : nullptr);
  cu::PoolSpec sp{};
  sp.w = plan.w;
  const int nd = plan.w.nd;
  sp.lead = static_cast<int>(self.dim()) - nd;
  sp.total = plan.planes;
  for (int d = 0; d < sp.lead; ++d) {
    sp.lead_sizes[d] = self.sizes()[static_cast<size_t>(d)];
    sp.in_lead_st[d] = self.strides()[static_cast<size_t>(d)];
    sp.out_lead_st[d] = plan.out_strides[static_cast<size_t>(d)];
  }
  for (int d = 0; d < nd; ++d) {
    sp.in_sp_st[d] = self.strides()[static_cast<size_t>(sp.lead + d)];
    sp.out_sp_st[d] = plan.out_strides[static_cast<size_t>(sp.lead + d)];
    sp.total *= plan.w.out_sp[d];
  }
  cu::launch_pool(self.dtype(), self.data_ptr(), o->data_ptr(), ix ? static_cast<int64_t*>(ix->data_ptr()) : nullptr,
                  sp, cu::stream_of(device));
  *out = o.release();
  if (indices != nullptr) *indices = ix.release();
}

const Tensor& cuda_self(AtenTensorHandle h) {
  const Tensor& self = tensor_arg(h, "self");
  require_cuda(self, "self", self.device_index());
  return self;
}

cu::MatmulSpec matmul_spec(const Tensor& a, const Tensor& b, const Tensor& out) {
  cu::MatmulSpec s{};
  s.m = a.sizes()[0], s.k = a.sizes()[1], s.n = out.sizes()[1];
  for (int i = 0; i < 2; ++i) s.a_st[i] = a.strides()[i], s.b_st[i] = b.strides()[i], s.out_st[i] = out.strides()[i];
  return s;
}

void int_mm(Tensor& out, const Tensor& self, const Tensor& mat2) {
  const int device = self.device_index();
  require_cuda(self, "self", device), require_cuda(mat2, "mat2", device), require_cuda(out, "out", device);
  aoti_host::ops::check_int_mm(out, self, mat2);
  cu::launch_int_mm(static_cast<const int8_t*>(self.data_ptr()), static_cast<const int8_t*>(mat2.data_ptr()),
                    static_cast<int32_t*>(out.data_ptr()), matmul_spec(self, mat2, out), cu::stream_of(device));
}

Tensor* weight_int8pack_mm(const Tensor& self, const Tensor& mat2, const Tensor& scales) {
  const int device = self.device_index();
  require_cuda(self, "self", device), require_cuda(mat2, "mat2", device), require_cuda(scales, "scales", device);
  aoti_host::ops::check_weight_int8pack_mm(self, mat2, scales);
  const int32_t dt = self.dtype();
  Owned out(new_cuda(dt, {self.sizes()[0], mat2.sizes()[0]}, device));
  cu::MatmulSpec s = matmul_spec(self, mat2, *out);
  s.scale_step = scales.strides()[0];
  cu::launch_weight_int8pack_mm(dt, self.data_ptr(), static_cast<const int8_t*>(mat2.data_ptr()), scales.data_ptr(),
                                out->data_ptr(), s, cu::stream_of(device));
  return out.release();
}

AOTITorchError adaptive_pool_shim(const char* name, int nd, bool max, AtenTensorHandle self,
                                  const int64_t* output_size, int64_t output_size_len_, AtenTensorHandle* ret0,
                                  AtenTensorHandle* ret1) {
  return guarded(name, [&] {
    need(ret0, "ret0");
    if (max) need(ret1, "ret1");
    const Tensor& self_t = cuda_self(self);
    Tensor *v = nullptr, *i = nullptr;
    run_pool(self_t,
             aoti_host::ops::plan_adaptive_pool(
                 nd, self_t, aoti_host::shim::int_list(output_size, output_size_len_, "output_size"), max),
             &v, max ? &i : nullptr);
    *ret0 = to_handle(v);
    if (max) *ret1 = to_handle(i);
  });
}

AOTITorchError avg_pool_shim(const char* name, int nd, AtenTensorHandle self, const int64_t* kernel_size,
                             int64_t kernel_size_len_, const int64_t* stride, int64_t stride_len_,
                             const int64_t* padding, int64_t padding_len_, int32_t ceil_mode,
                             int32_t count_include_pad, int64_t* divisor_override, AtenTensorHandle* ret0) {
  return guarded(name, [&] {
    need(ret0, "ret0");
    using aoti_host::shim::int_list;
    const Tensor& self_t = cuda_self(self);
    Tensor* v = nullptr;
    run_pool(self_t,
             aoti_host::ops::plan_avg_pool(nd, self_t, int_list(kernel_size, kernel_size_len_, "kernel_size"),
                                           int_list(stride, stride_len_, "stride"),
                                           int_list(padding, padding_len_, "padding"), ceil_mode != 0,
                                           count_include_pad != 0, divisor_override),
             &v, nullptr);
    *ret0 = to_handle(v);
  });
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

AOTI_HOST_API AOTITorchError aoti_torch_cuda_searchsorted_Scalar(AtenTensorHandle sorted_sequence, double self,
                                                                 int32_t out_int32, int32_t right, const char** side,
                                                                 AtenTensorHandle* sorter, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_searchsorted_Scalar", [&] {
    need(ret0, "ret0");
    const Tensor& seq = tensor_arg(sorted_sequence, "sorted_sequence");
    const int device = seq.device_index();
    require_cuda(seq, "sorted_sequence", device);
    if (seq.dim() != 1)
      throw Error("sorted_sequence has sizes " + list_str(seq.sizes()) +
                  "; a scalar value needs a 1-d sorted sequence");
    // ATen wraps the scalar as a number and compares in the promoted dtype: the sequence's for a floating
    // sequence, float32 for an integer one; the rounded value, held as float64, compares the same way.
    const double v = aoti_host::ops::round_to(floating(seq.dtype()) ? seq.dtype() : dc::kFloat32, self);
    Owned value(new_cuda(dc::kFloat64, {}, device));
    cu::launch_fill_f64(static_cast<double*>(value->data_ptr()), v, cu::stream_of(device));
    *ret0 = to_handle(searchsorted(seq, *value, out_int32 != 0, right != 0, side, optional_arg(sorter)));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_histc(AtenTensorHandle self, int64_t bins, double min, double max,
                                                   AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_histc", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(histc(tensor_arg(self, "self"), bins, min, max));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_repeat_interleave_Tensor(AtenTensorHandle repeats, int64_t* output_size,
                                                                      AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_repeat_interleave_Tensor", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(repeat_interleave(tensor_arg(repeats, "repeats"), output_size));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_nonzero(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_nonzero", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(nonzero(tensor_arg(self, "self")));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_masked_select(AtenTensorHandle self, AtenTensorHandle mask,
                                                           AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_masked_select", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(masked_select(tensor_arg(self, "self"), tensor_arg(mask, "mask")));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_index_put(AtenTensorHandle self, const AtenTensorHandle** indices,
                                                       int64_t indices_len_, AtenTensorHandle values,
                                                       int32_t accumulate, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_index_put", [&] {
    need(ret0, "ret0");
    if (indices_len_ < 0) throw Error("indices has negative length " + std::to_string(indices_len_));
    if (indices_len_ > 0 && indices == nullptr)
      throw Error("indices is null but its length is " + std::to_string(indices_len_));
    // A list of optional tensors: each entry a pointer to a handle, null (or a null handle) for None.
    std::vector<const Tensor*> idx;
    for (int64_t i = 0; i < indices_len_; ++i) idx.push_back(optional_arg(indices[i]));
    *ret0 = to_handle(index_put(tensor_arg(self, "self"), idx, tensor_arg(values, "values"), accumulate != 0));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_index_reduce(AtenTensorHandle self, int64_t dim, AtenTensorHandle index,
                                                          AtenTensorHandle source, const char* reduce,
                                                          int32_t include_self, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda_index_reduce", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(index_reduce(tensor_arg(self, "self"), dim, tensor_arg(index, "index"),
                                   tensor_arg(source, "source"), reduce, include_self != 0));
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

AOTI_HOST_API AOTITorchError aoti_torch_cuda_max_pool2d_with_indices(
    AtenTensorHandle self, const int64_t* kernel_size, int64_t kernel_size_len_, const int64_t* stride,
    int64_t stride_len_, const int64_t* padding, int64_t padding_len_, const int64_t* dilation, int64_t dilation_len_,
    int32_t ceil_mode, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cuda_max_pool2d_with_indices", [&] {
    need(ret0, "ret0"), need(ret1, "ret1");
    using aoti_host::shim::int_list;
    const Tensor& self_t = cuda_self(self);
    Tensor *v = nullptr, *i = nullptr;
    run_pool(self_t,
             aoti_host::ops::plan_max_pool2d(self_t, int_list(kernel_size, kernel_size_len_, "kernel_size"),
                                             int_list(stride, stride_len_, "stride"),
                                             int_list(padding, padding_len_, "padding"),
                                             int_list(dilation, dilation_len_, "dilation"), ceil_mode != 0),
             &v, &i);
    *ret0 = to_handle(v), *ret1 = to_handle(i);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_adaptive_max_pool2d(AtenTensorHandle self, const int64_t* output_size,
                                                                 int64_t output_size_len_, AtenTensorHandle* ret0,
                                                                 AtenTensorHandle* ret1) {
  return adaptive_pool_shim("aoti_torch_cuda_adaptive_max_pool2d", 2, true, self, output_size, output_size_len_, ret0,
                            ret1);
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_adaptive_max_pool3d(AtenTensorHandle self, const int64_t* output_size,
                                                                 int64_t output_size_len_, AtenTensorHandle* ret0,
                                                                 AtenTensorHandle* ret1) {
  return adaptive_pool_shim("aoti_torch_cuda_adaptive_max_pool3d", 3, true, self, output_size, output_size_len_, ret0,
                            ret1);
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda__adaptive_avg_pool2d(AtenTensorHandle self, const int64_t* output_size,
                                                                  int64_t output_size_len_, AtenTensorHandle* ret0) {
  return adaptive_pool_shim("aoti_torch_cuda__adaptive_avg_pool2d", 2, false, self, output_size, output_size_len_,
                            ret0, nullptr);
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda__adaptive_avg_pool3d(AtenTensorHandle self, const int64_t* output_size,
                                                                  int64_t output_size_len_, AtenTensorHandle* ret0) {
  return adaptive_pool_shim("aoti_torch_cuda__adaptive_avg_pool3d", 3, false, self, output_size, output_size_len_,
                            ret0, nullptr);
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_avg_pool2d(AtenTensorHandle self, const int64_t* kernel_size,
                                                        int64_t kernel_size_len_, const int64_t* stride,
                                                        int64_t stride_len_, const int64_t* padding,
                                                        int64_t padding_len_, int32_t ceil_mode,
                                                        int32_t count_include_pad, int64_t* divisor_override,
                                                        AtenTensorHandle* ret0) {
  return avg_pool_shim("aoti_torch_cuda_avg_pool2d", 2, self, kernel_size, kernel_size_len_, stride, stride_len_,
                       padding, padding_len_, ceil_mode, count_include_pad, divisor_override, ret0);
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_avg_pool3d(AtenTensorHandle self, const int64_t* kernel_size,
                                                        int64_t kernel_size_len_, const int64_t* stride,
                                                        int64_t stride_len_, const int64_t* padding,
                                                        int64_t padding_len_, int32_t ceil_mode,
                                                        int32_t count_include_pad, int64_t* divisor_override,
                                                        AtenTensorHandle* ret0) {
  return avg_pool_shim("aoti_torch_cuda_avg_pool3d", 3, self, kernel_size, kernel_size_len_, stride, stride_len_,
                       padding, padding_len_, ceil_mode, count_include_pad, divisor_override, ret0);
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda__int_mm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                         AtenTensorHandle mat2) {
  return guarded("aoti_torch_cuda__int_mm_out", [&] {
    int_mm(tensor_arg(out, "out"), tensor_arg(self, "self"), tensor_arg(mat2, "mat2"));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda__weight_int8pack_mm(AtenTensorHandle self, AtenTensorHandle mat2,
                                                                 AtenTensorHandle scales, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cuda__weight_int8pack_mm", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(weight_int8pack_mm(tensor_arg(self, "self"), tensor_arg(mat2, "mat2"),
                                         tensor_arg(scales, "scales")));
  });
}

}  // extern "C"
