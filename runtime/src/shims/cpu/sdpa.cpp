// Flash attention for the CPU (aten::_scaled_dot_product_flash_attention_for_cpu): per (batch, head), a GEMM
// for the scores, a softmax per row and a GEMM with the values; outputs in ATen's layouts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "shims/cpu/softmax.h"
#include "shims/cpu/strided.h"
#include "shims/cpu_gemm.h"
#include "shims/cpu_kernels.h"

namespace aoti_host {
namespace cpu {

using namespace detail;

namespace {

template <typename T>
void sdpa_impl(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* mask, T scale,
               Tensor& out, Tensor& lse) {
  const int64_t B = q.sizes()[0], Hq = q.sizes()[1], L = q.sizes()[2], E = q.sizes()[3];
  const int64_t Hk = k.sizes()[1], S = k.sizes()[2], Ev = v.sizes()[3];
  const int64_t group = Hq / Hk;
  std::vector<T> qb, kb, vb;
  std::vector<int64_t> qs, ks, vs;
  const T* qp = typed_data<T>(q, qb, qs);
  const T* kp = typed_data<T>(k, kb, ks);
  const T* vp = typed_data<T>(v, vb, vs);
  // The output in its own layout when it is T, else a T buffer with the same strides, stored at the end.
  const std::vector<int64_t>& os = out.strides();
  std::vector<T> ob;
  T* op = static_cast<T*>(out.data_ptr());
  if (out.dtype() != dtype_of<T>()) {
    ob.assign(static_cast<size_t>(out.numel()), T(0));
    op = ob.data();
  }
  std::vector<T> mb;
  std::vector<int64_t> ms;
  if (mask != nullptr) {
    const std::vector<int64_t> full = {B, Hq, L, S};
    ms = broadcast_strides(*mask, full, "attn_mask");
    if (mask->dtype() == kBool) {  // true: attend; false: masked out
      const char* base = static_cast<const char*>(mask->data_ptr());
      mb.resize(static_cast<size_t>(B * Hq * L * S));
      for_each_offset(full, ms, [&](int64_t i, int64_t off) {
        mb[static_cast<size_t>(i)] = base[off] != 0 ? T(0) : -std::numeric_limits<T>::infinity();
      });
    } else {
      mb = gather<T>(*mask, full, ms);
    }
  }
  float* lf = lse.dtype() == kFloat32 ? static_cast<float*>(lse.data_ptr()) : nullptr;
  double* ld = lse.dtype() == kFloat64 ? static_cast<double*>(lse.data_ptr()) : nullptr;
  const std::vector<int64_t>& ls = lse.strides();
  const T ninf = -std::numeric_limits<T>::infinity();
  // (batch, head) pairs in parallel on the OpenMP pool; nothing in the loop throws.
  for_blocks(B * Hq * L * S * (E + Ev) > (1 << 17), B * Hq, [&](int64_t bh0, int64_t bh1) {
  std::vector<T> scores(static_cast<size_t>(L * S));
  for (int64_t bh = bh0; bh < bh1; ++bh) {
    {
      const int64_t b = bh / Hq, h = bh % Hq;
      const int64_t hk = h / group;
      const MatView<const T> Q{qp + b * qs[0] + h * qs[1], L, E, qs[2], qs[3]};
      const MatView<const T> K{kp + b * ks[0] + hk * ks[1], S, E, ks[2], ks[3]};
      const MatView<const T> V{vp + b * vs[0] + hk * vs[1], S, Ev, vs[2], vs[3]};
      gemm<T>(Q, K.t(), MatView<T>{scores.data(), L, S, S, 1}, scale, T(0));
      const T* m = mb.empty() ? nullptr : mb.data() + (b * Hq + h) * L * S;
      for (int64_t i = 0; i < L; ++i) {
        T* row = scores.data() + i * S;
        if constexpr (std::is_same<T, float>::value) {
          if (m == nullptr) {  // no mask: one vectorised pass per row, over the keys causality leaves
            const int64_t keys = causal ? std::min(i + 1, S) : S;  // top-left aligned: keys 0..i
            const float lsev = softmax_row(row, keys);
            std::fill(row + keys, row + S, 0.0f);
            const int64_t lo = b * ls[0] + h * ls[1] + i * ls[2];
            if (lf != nullptr) lf[lo] = lsev;
            if (ld != nullptr) ld[lo] = static_cast<double>(lsev);
            continue;
          }
        }
        T mx = ninf;
        for (int64_t j = 0; j < S; ++j) {
          T x = row[j];
          if (m != nullptr) x += m[i * S + j];
          if (causal && j > i) x = ninf;
          row[j] = x;
          mx = std::max(mx, x);
        }
        T sum = 0, lsev;
        if (mx == ninf) {  // every key masked out: ATen's kernel gives zeros and logsumexp -inf
          std::fill_n(row, S, T(0));
          lsev = ninf;
        } else {
          for (int64_t j = 0; j < S; ++j) sum += (row[j] = std::exp(row[j] - mx));
          const T inv = T(1) / sum;
          for (int64_t j = 0; j < S; ++j) row[j] *= inv;
          lsev = mx + std::log(sum);
        }
        const int64_t lo = b * ls[0] + h * ls[1] + i * ls[2];
        if (lf != nullptr) lf[lo] = static_cast<float>(lsev);
        if (ld != nullptr) ld[lo] = static_cast<double>(lsev);
      }
      gemm<T>(MatView<const T>{scores.data(), L, S, S, 1}, V,
              MatView<T>{op + b * os[0] + h * os[1], L, Ev, os[2], os[3]}, T(1), T(0));
    }
  }
  });
  if (!ob.empty()) {
    char* base = static_cast<char*>(out.data_ptr());
    const int64_t isz = static_cast<int64_t>(out.itemsize());
    const int32_t dt = out.dtype();
    for_each_offset(out.sizes(), os, [&](int64_t, int64_t off) { store<T>(base + off * isz, dt, ob[static_cast<size_t>(off)]); });
  }
}

}  // namespace

void sdpa_flash(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p, bool is_causal,
                const Tensor* attn_mask, const double* scale, Tensor** out, Tensor** logsumexp) {
  for (const auto* t : {&q, &k, &v}) {
    const char* name = t == &q ? "query" : t == &k ? "key" : "value";
    require_supported(*t, name);
    if (t->dim() != 4)
      throw Error(std::string(name) + " must be 4-d [batch, heads, seq, head_dim], got shape " + list_str(t->sizes()));
  }
  const int32_t dt = q.dtype();
  if (dt != kFloat32 && dt != kFloat64 && dt != kFloat16 && dt != kBFloat16)
    throw Error(std::string("query has dtype ") + dtype_name(dt) + "; flash attention takes float32, float64, float16 or bfloat16");
  require_same_dtype(k, "key", q, "query");
  require_same_dtype(v, "value", q, "query");
  const auto& qs = q.sizes();
  const auto& ks = k.sizes();
  const auto& vs = v.sizes();
  if (ks[0] != qs[0] || vs[0] != qs[0])
    throw Error("batch sizes differ: query " + list_str(qs) + ", key " + list_str(ks) + ", value " + list_str(vs));
  if (ks[1] != vs[1] || ks[2] != vs[2])
    throw Error("key " + list_str(ks) + " and value " + list_str(vs) + " must have the same heads and sequence length");
  if (ks[3] != qs[3] || vs[3] != qs[3])
    throw Error("query " + list_str(qs) + ", key " + list_str(ks) + " and value " + list_str(vs) +
                " must have the same head size (as ATen's flash attention requires)");
  if (ks[1] == 0 || qs[1] % ks[1] != 0)
    throw Error("query has " + std::to_string(qs[1]) + " heads, key/value " + std::to_string(ks[1]) +
                ": the query heads must be a multiple of the key/value heads");
  if (dropout_p != 0.0)
    throw Error("dropout_p=" + std::to_string(dropout_p) + ": this runtime runs inference only; export the model in eval() mode");
  if (attn_mask != nullptr) {
    require_supported(*attn_mask, "attn_mask");
    if (attn_mask->dtype() != dt && attn_mask->dtype() != kBool)
      throw Error(std::string("attn_mask has dtype ") + dtype_name(attn_mask->dtype()) + ", expected " + dtype_name(dt) + " or bool");
    broadcast_strides(*attn_mask, {qs[0], qs[1], qs[2], ks[2]}, "attn_mask");
  }
  const int64_t B = qs[0], H = qs[1], L = qs[2];
  // ATen allocates the output with empty_like(query): plugins index it with the strides that gives.
  std::unique_ptr<Tensor> o(Tensor::empty_strided(dt, qs, empty_like_strides(q), q.device_type(), q.device_index()));
  std::unique_ptr<Tensor> l(Tensor::empty_strided(dt == kFloat64 ? kFloat64 : kFloat32, {B, H, L}, {L * H, 1, H},
                                                  q.device_type(), q.device_index()));
  const double sc = scale != nullptr ? *scale : 1.0 / std::sqrt(static_cast<double>(qs[3]));
  if (o->numel() > 0 || l->numel() > 0) {
    if (dt == kFloat64) {
      sdpa_impl<double>(q, k, v, is_causal, attn_mask, sc, *o, *l);
    } else {
      sdpa_impl<float>(q, k, v, is_causal, attn_mask, static_cast<float>(sc), *o, *l);
    }
  }
  *out = o.release();
  *logsumexp = l.release();
}

}  // namespace cpu
}  // namespace aoti_host
