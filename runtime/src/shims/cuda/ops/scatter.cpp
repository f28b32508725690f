// scatter (src, value, reduce), index_reduce and index_put on CUDA.
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "shims/cpu/strided.h"
#include "shims/cuda/ops/op_util.h"
#include "shims/cuda/ops/ops.h"
#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace cuda {
namespace {

ScatterOp parse_reduce(const std::string& r) {
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

}  // namespace

void scatter_src(Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_tensors(out, self, dim, index, &src, 0.0, ScatterOp::kAssign, true);
}

void scatter_value(Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, double value) {
  scatter_tensors(out, self, dim, index, nullptr, value, ScatterOp::kAssign, true);
}

void scatter_reduce(Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                    const std::string& reduce, bool include_self) {
  scatter_tensors(out, self, dim, index, &src, 0.0, parse_reduce(reduce), include_self);
}

// ATen's index_reduce: a contiguous copy of self where self[..., index[i], ...] is reduced with
// source[..., i, ...] along dim (prod, mean, amax, amin). Runs as a scatter_reduce whose index is the
// 1-d index expanded over source's shape (stride 0 outside dim).
Tensor* index_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, const std::string& reduce,
                     bool include_self) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  require_cuda(source, "source", device);
  require_cuda(index, "index", device);
  require_dtype(source, self.dtype(), "source");
  if (index.dtype() != dc::kInt64)
    throw Error(std::string("index has dtype ") + aoti_host::dtype_name(index.dtype()) +
                "; index_reduce on cuda takes int64 indices");
  const std::string& r = reduce;
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
  int64_t first = -1, last = -1;
  const Shape bshape = aoti_host::ops::broadcast_indices(idx, nd, first, last);
  if (nd > cu::kMaxDims)
    throw Error("tensors of more than " + std::to_string(cu::kMaxDims) + " dimensions are not supported");
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

}  // namespace cuda
}  // namespace aoti_host
