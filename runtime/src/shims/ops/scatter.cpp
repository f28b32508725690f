// aten::scatter (src and value), scatter_reduce.two, index_put (with accumulate), index_reduce.
// Every op writes a copy of self with updates applied in index order; floating values are combined in
// double, integers in (wrapping) int64. amax/amin propagate NaN; mean on integers floors like ATen.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

namespace {

enum class Reduce { Assign, Sum, Prod, Mean, Max, Min };

Reduce parse_reduce(const std::string& r, bool allow_sum) {
  if (r == "sum" && allow_sum) return Reduce::Sum;
  if (r == "prod") return Reduce::Prod;
  if (r == "mean") return Reduce::Mean;
  if (r == "amax") return Reduce::Max;
  if (r == "amin") return Reduce::Min;
  throw Error("reduce is '" + r + "'; expected " + (allow_sum ? "'sum', " : "") + "'prod', 'mean', 'amax' or 'amin'");
}

struct Update {
  int64_t target;  // linear index into self's shape
  double fval;
  int64_t ival;
};

// Writes self with the updates applied into out (out has self's sizes, any strides).
void apply(Tensor& out, const Tensor& self, const std::vector<Update>& ups, Reduce op, bool include_self) {
  const int64_t n = self.numel();
  const int32_t dt = self.dtype();
  const bool fl = is_floating(dt);
  std::vector<double> fv(static_cast<size_t>(fl ? n : 0));
  std::vector<int64_t> iv(static_cast<size_t>(fl ? 0 : n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = offset_of(i, self.sizes(), self.strides());
    if (fl) {
      fv[static_cast<size_t>(i)] = load_f(self.data_ptr(), dt, at);
    } else {
      iv[static_cast<size_t>(i)] = load_i(self.data_ptr(), dt, at);
    }
  }
  std::vector<int64_t> count(static_cast<size_t>(n), 1);
  if (!include_self && op != Reduce::Assign) {
    for (const Update& u : ups) {
      const size_t t = static_cast<size_t>(u.target);
      count[t] = 0;
      if (fl) {
        fv[t] = op == Reduce::Prod ? 1.0
                : op == Reduce::Max ? -std::numeric_limits<double>::infinity()
                : op == Reduce::Min ? std::numeric_limits<double>::infinity()
                                    : 0.0;
      } else {
        iv[t] = op == Reduce::Prod ? 1
                : op == Reduce::Max ? std::numeric_limits<int64_t>::min()
                : op == Reduce::Min ? std::numeric_limits<int64_t>::max()
                                    : 0;
      }
    }
  }
  for (const Update& u : ups) {
    const size_t t = static_cast<size_t>(u.target);
    ++count[t];
    if (fl) {
      double& v = fv[t];
      const double s = u.fval;
      switch (op) {
        case Reduce::Assign: v = s; break;
        case Reduce::Sum:
        case Reduce::Mean: v += s; break;
        case Reduce::Prod: v *= s; break;
        case Reduce::Max: v = std::isnan(s) ? s : std::max(v, s); break;
        case Reduce::Min: v = std::isnan(s) ? s : std::min(v, s); break;
      }
    } else {
      int64_t& v = iv[t];
      const int64_t s = u.ival;
      switch (op) {
        case Reduce::Assign: v = s; break;
        case Reduce::Sum:
        case Reduce::Mean: v = static_cast<int64_t>(static_cast<uint64_t>(v) + static_cast<uint64_t>(s)); break;
        case Reduce::Prod: v = static_cast<int64_t>(static_cast<uint64_t>(v) * static_cast<uint64_t>(s)); break;
        case Reduce::Max: v = std::max(v, s); break;
        case Reduce::Min: v = std::min(v, s); break;
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    const int64_t at = offset_of(i, out.sizes(), out.strides());
    if (fl) {
      double v = fv[k];
      if (op == Reduce::Mean) v = round_to(dt, v) / static_cast<double>(std::max<int64_t>(count[k], 1));
      store_f(out.data_ptr(), dt, at, v);
    } else {
      int64_t v = iv[k];
      if (op == Reduce::Mean) {
        const int64_t c = std::max<int64_t>(count[k], 1);
        const int64_t q = v / c;
        v = (v % c != 0 && ((v < 0) != (c < 0))) ? q - 1 : q;  // floor division
      }
      store_i(out.data_ptr(), dt, at, v);
    }
  }
}

int64_t linear_of(const Shape& pos, const Shape& sizes) {
  int64_t l = 0;
  for (size_t d = 0; d < sizes.size(); ++d) l = l * sizes[d] + pos[d];
  return l;
}

void check_index(const Tensor& index, const char* arg) {
  check_cpu(index, arg);
  if (index.dtype() != kInt64 && index.dtype() != kInt32) {
    throw Error(std::string(arg) + " has dtype " + dtype_name(index.dtype()) + "; expected int64");
  }
}

// The scatter family's updates: for every position p of index, self[p with p[dim] = index[p]] gets
// src[p] (or value when src is null).
std::vector<Update> scatter_updates(const Tensor& self, int64_t dim, const Tensor& index, const Tensor* src,
                                    double value) {
  check_index(index, "index");
  const int64_t nd = std::max<int64_t>(self.dim(), 1);
  const Shape ssz = self.dim() == 0 ? Shape{1} : self.sizes();
  const Shape isz = index.dim() == 0 ? Shape{1} : index.sizes();
  const Shape ist = index.dim() == 0 ? Shape{1} : index.strides();
  if (static_cast<int64_t>(isz.size()) != nd) {
    throw Error("index has " + std::to_string(index.dim()) + " dimensions but self has " + std::to_string(self.dim()));
  }
  Shape srcsz, srcst;
  if (src != nullptr) {
    check_cpu(*src, "src");
    srcsz = src->dim() == 0 ? Shape{1} : src->sizes();
    srcst = src->dim() == 0 ? Shape{1} : src->strides();
    if (static_cast<int64_t>(srcsz.size()) != nd) {
      throw Error("src has " + std::to_string(src->dim()) + " dimensions but self has " + std::to_string(self.dim()));
    }
  }
  for (int64_t d = 0; d < nd; ++d) {
    if ((d != dim && isz[d] > ssz[d]) || (src != nullptr && isz[d] > srcsz[d])) {
      throw Error("index has sizes " + str(index.sizes()) + ", larger than self " + str(self.sizes()) +
                  (src ? " or src " + str(src->sizes()) : std::string()) + " outside dimension " + std::to_string(dim));
    }
  }
  std::vector<Update> ups;
  const int64_t total = numel_of(isz);
  ups.reserve(static_cast<size_t>(total));
  Shape pos(static_cast<size_t>(nd));
  const bool fl = is_floating(self.dtype());
  for (int64_t i = 0; i < total; ++i) {
    int64_t rem = i;
    for (int64_t d = nd; d-- > 0;) {
      pos[d] = rem % isz[d];
      rem /= isz[d];
    }
    Shape tgt = pos;
    int64_t ioff = 0, soff = 0;
    for (int64_t d = 0; d < nd; ++d) {
      ioff += pos[d] * ist[d];
      if (src != nullptr) soff += pos[d] * srcst[d];
    }
    const int64_t idx = load_i(index.data_ptr(), index.dtype(), ioff);
    if (idx < 0 || idx >= ssz[dim]) {
      throw Error("index " + std::to_string(idx) + " is out of bounds for dimension " + std::to_string(dim) +
                  " with size " + std::to_string(ssz[dim]));
    }
    tgt[dim] = idx;
    Update u{linear_of(tgt, ssz), value, static_cast<int64_t>(value)};
    if (src != nullptr) {
      if (fl) {
        u.fval = load_f(src->data_ptr(), src->dtype(), soff);
      } else {
        u.ival = load_i(src->data_ptr(), src->dtype(), soff);
      }
    }
    ups.push_back(u);
  }
  return ups;
}

void check_out(const Tensor& out, const Tensor& self) {
  check_cpu(out, "out");
  check_cpu(self, "self");
  check_compute_dtype(self.dtype(), "self");
  check_dtype(out, self.dtype(), "out");
  check_same_sizes(out, self, "out", "self");
}

}  // namespace

void scatter_src(Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  check_out(out, self);
  check_dtype(src, self.dtype(), "src");
  dim = wrap_dim(dim, self.dim(), "dim");
  apply(out, self, scatter_updates(self, dim, index, &src, 0.0), Reduce::Assign, true);
}

void scatter_value(Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, double value) {
  check_out(out, self);
  dim = wrap_dim(dim, self.dim(), "dim");
  apply(out, self, scatter_updates(self, dim, index, nullptr, value), Reduce::Assign, true);
}

void scatter_reduce(Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                    const std::string& reduce, bool include_self) {
  check_out(out, self);
  check_dtype(src, self.dtype(), "src");
  dim = wrap_dim(dim, self.dim(), "dim");
  const Reduce op = parse_reduce(reduce, true);
  apply(out, self, scatter_updates(self, dim, index, &src, 0.0), op, include_self);
}

Tensor* index_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                     const std::string& reduce, bool include_self) {
  check_cpu(self, "self");
  check_compute_dtype(self.dtype(), "self");
  check_cpu(source, "source");
  check_dtype(source, self.dtype(), "source");
  check_index(index, "index");
  dim = wrap_dim(dim, self.dim(), "dim");
  const Reduce op = parse_reduce(reduce, false);
  if (index.dim() > 1) throw Error("index has sizes " + str(index.sizes()) + "; expected a 1-d tensor");
  const int64_t nidx = index.numel();
  const Shape ssz = self.dim() == 0 ? Shape{1} : self.sizes();
  Shape want = ssz;
  want[static_cast<size_t>(dim)] = nidx;
  const Shape srcsz = source.dim() == 0 ? Shape{1} : source.sizes();
  const Shape srcst = source.dim() == 0 ? Shape{1} : source.strides();
  if (srcsz != want) {
    throw Error("source has sizes " + str(source.sizes()) + "; expected " + str(want) +
                " (self's sizes with dimension " + std::to_string(dim) + " the index length)");
  }
  std::vector<Update> ups;
  const int64_t total = numel_of(srcsz);
  const bool fl = is_floating(self.dtype());
  const int64_t istride = index.dim() == 0 ? 1 : index.strides()[0];
  Shape pos(ssz.size());
  for (int64_t i = 0; i < total; ++i) {
    const int64_t soff = unravel(i, srcsz, srcst, pos);
    const int64_t idx = load_i(index.data_ptr(), index.dtype(), pos[static_cast<size_t>(dim)] * istride);
    if (idx < 0 || idx >= ssz[static_cast<size_t>(dim)]) {
      throw Error("index " + std::to_string(idx) + " is out of bounds for dimension " + std::to_string(dim) +
                  " with size " + std::to_string(ssz[static_cast<size_t>(dim)]));
    }
    Shape tgt = pos;
    tgt[static_cast<size_t>(dim)] = idx;
    Update u{linear_of(tgt, ssz), 0.0, 0};
    if (fl) {
      u.fval = load_f(source.data_ptr(), source.dtype(), soff);
    } else {
      u.ival = load_i(source.data_ptr(), source.dtype(), soff);
    }
    ups.push_back(u);
  }
  // ATen's index_reduce (structured): a contiguous result.
  std::unique_ptr<Tensor> out(new_contiguous(self.dtype(), self.sizes()));
  apply(*out, self, ups, op, include_self);
  return out.release();
}

Shape broadcast_indices(std::vector<const Tensor*>& idx, int64_t nd, int64_t& first, int64_t& last) {
  if (static_cast<int64_t>(idx.size()) > nd) {
    throw Error("too many indices (" + std::to_string(idx.size()) + ") for a tensor of " + std::to_string(nd) +
                " dimension(s)");
  }
  idx.resize(static_cast<size_t>(nd), nullptr);
  Shape bshape;
  first = last = -1;
  for (int64_t d = 0; d < nd; ++d) {
    const Tensor* t = idx[static_cast<size_t>(d)];
    if (t == nullptr) continue;
    if (first < 0) first = d;
    last = d;
    const Shape before = bshape;
    if (!broadcast_into(bshape, t->sizes())) {
      throw Error("index shapes " + str(t->sizes()) + " and " + str(before) + " do not broadcast");
    }
  }
  return bshape;
}

Tensor* index_put(const Tensor& self, const std::vector<const Tensor*>& indices_in, const Tensor& values,
                  bool accumulate) {
  check_cpu(self, "self");
  check_compute_dtype(self.dtype(), "self");
  check_cpu(values, "values");
  check_dtype(values, self.dtype(), "values");
  // Boolean masks become one long index per dimension they cover (their nonzero coordinates).
  std::vector<std::unique_ptr<Tensor>> owned;
  std::vector<const Tensor*> idx;
  for (const Tensor* t : indices_in) {
    if (t == nullptr) {
      idx.push_back(nullptr);
      continue;
    }
    check_cpu(*t, "indices");
    if (t->dtype() == kBool || t->dtype() == kUInt8) {
      std::unique_ptr<Tensor> nz(nonzero(*t));
      const int64_t k = nz->sizes()[0];
      for (int64_t d = 0; d < t->dim(); ++d) {
        owned.emplace_back(nz->alias({k}, {nz->strides()[0]}, nz->storage_offset() + d * nz->strides()[1]));
        idx.push_back(owned.back().get());
      }
      owned.push_back(std::move(nz));
    } else if (t->dtype() == kInt64 || t->dtype() == kInt32) {
      idx.push_back(t);
    } else {
      throw Error(std::string("an index has dtype ") + dtype_name(t->dtype()) + "; expected int64, int32, bool or uint8");
    }
  }
  const int64_t nd = self.dim();
  // Broadcast shape of the index tensors; are the indexed dimensions adjacent?
  int64_t first = -1, last = -1;
  const Shape bshape = broadcast_indices(idx, nd, first, last);
  std::unique_ptr<Tensor> out(new_strided(self.dtype(), self.sizes(), empty_like_strides(self)));
  if (first < 0) {  // no index: values broadcast over all of self
    first = last = nd;
  }
  bool adjacent = true;
  for (int64_t d = first; d <= last && d < nd; ++d) adjacent = adjacent && idx[static_cast<size_t>(d)] != nullptr;
  // Result shape: [before..., B..., after...] when adjacent, else [B..., the un-indexed dims...].
  Shape rshape;
  std::vector<int64_t> rdim_of_self(static_cast<size_t>(nd), -1);  // result dim of each un-indexed self dim
  int64_t bpos = 0;
  if (adjacent) {
    for (int64_t d = 0; d < first; ++d) {
      rdim_of_self[static_cast<size_t>(d)] = static_cast<int64_t>(rshape.size());
      rshape.push_back(self.sizes()[d]);
    }
    bpos = static_cast<int64_t>(rshape.size());
    rshape.insert(rshape.end(), bshape.begin(), bshape.end());
    for (int64_t d = last + 1; d < nd; ++d) {
      rdim_of_self[static_cast<size_t>(d)] = static_cast<int64_t>(rshape.size());
      rshape.push_back(self.sizes()[d]);
    }
  } else {
    rshape = bshape;
    for (int64_t d = 0; d < nd; ++d) {
      if (idx[static_cast<size_t>(d)] != nullptr) continue;
      rdim_of_self[static_cast<size_t>(d)] = static_cast<int64_t>(rshape.size());
      rshape.push_back(self.sizes()[d]);
    }
  }
  // values broadcast to the result shape.
  const Shape& vs = values.sizes();
  if (vs.size() > rshape.size()) {
    throw Error("values with sizes " + str(vs) + " cannot be broadcast to the indexed shape " + str(rshape));
  }
  Shape vst(rshape.size(), 0);
  for (size_t k = 0; k < vs.size(); ++k) {
    const size_t r = rshape.size() - vs.size() + k;
    if (vs[k] != 1 && vs[k] != rshape[r]) {
      throw Error("values with sizes " + str(vs) + " cannot be broadcast to the indexed shape " + str(rshape));
    }
    vst[r] = vs[k] == 1 ? 0 : values.strides()[k];
  }
  const int64_t total = numel_of(rshape);
  const bool fl = is_floating(self.dtype());
  std::vector<Update> ups;
  ups.reserve(static_cast<size_t>(total));
  Shape rpos(rshape.size()), tgt(static_cast<size_t>(nd));
  for (int64_t i = 0; i < total; ++i) {
    const int64_t voff = unravel(i, rshape, vst, rpos);
    for (int64_t d = 0; d < nd; ++d) {
      const Tensor* t = idx[static_cast<size_t>(d)];
      if (t == nullptr) {
        tgt[static_cast<size_t>(d)] = rpos[static_cast<size_t>(rdim_of_self[static_cast<size_t>(d)])];
        continue;
      }
      // The index tensor's element at the broadcast position.
      const size_t off = bshape.size() - t->sizes().size();
      const int64_t b0 = adjacent ? bpos : 0;
      int64_t ioff = 0;
      for (size_t k = 0; k < t->sizes().size(); ++k) {
        if (t->sizes()[k] != 1) ioff += rpos[static_cast<size_t>(b0) + off + k] * t->strides()[k];
      }
      int64_t v = load_i(t->data_ptr(), t->dtype(), ioff);
      const int64_t size = self.sizes()[d];
      if (v < -size || v >= size) {
        throw Error("index " + std::to_string(v) + " is out of bounds for dimension " + std::to_string(d) +
                    " with size " + std::to_string(size));
      }
      tgt[static_cast<size_t>(d)] = v < 0 ? v + size : v;
    }
    Update u{linear_of(tgt, self.sizes()), 0.0, 0};
    if (fl) {
      u.fval = load_f(values.data_ptr(), values.dtype(), voff);
    } else {
      u.ival = load_i(values.data_ptr(), values.dtype(), voff);
    }
    ups.push_back(u);
  }
  apply(*out, self, ups, accumulate ? Reduce::Sum : Reduce::Assign, true);
  return out.release();
}

}  // namespace ops
}  // namespace aoti_host
