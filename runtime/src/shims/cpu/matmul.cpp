// addmm, bmm and baddbmm: float32 through the packed AVX-512 GEMM (cached packed constants, bias in the epilogue)
// or the BLAS, float64 through the BLAS, every other dtype through a reference loop in its accumulator.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "shims/cpu/strided.h"
#include "shims/cpu_gemm.h"
#include "shims/cpu_kernels.h"
#include "shims/packed_gemm.h"

namespace aoti_host {
namespace cpu {

using namespace detail;

namespace {

template <typename Acc>
void addmm_impl(Tensor& out, const Tensor* self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha,
                int64_t batch) {
  const int64_t n = mat1.sizes()[mat1.dim() - 2], m = mat1.sizes()[mat1.dim() - 1];
  const int64_t p = mat2.sizes()[mat2.dim() - 1];
  const std::vector<Acc> a = gather<Acc>(mat1);
  const std::vector<Acc> b = gather<Acc>(mat2);
  std::vector<Acc> c;
  const bool use_self = self != nullptr && beta != 0.0;
  if (use_self) c = gather<Acc>(*self, out.sizes(), broadcast_strides(*self, out.sizes(), "self"));
  const Acc abeta = static_cast<Acc>(beta), aalpha = static_cast<Acc>(alpha);
  std::vector<Acc> r(static_cast<size_t>(batch * n * p));
  for (int64_t bi = 0; bi < batch; ++bi) {
    const Acc* A = a.data() + bi * n * m;
    const Acc* B = b.data() + bi * m * p;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < p; ++j) {
        Acc sum = 0;
        for (int64_t k = 0; k < m; ++k) sum += A[i * m + k] * B[k * p + j];
        const size_t o = static_cast<size_t>(bi * n * p + i * p + j);
        Acc v = (aalpha == Acc(1)) ? sum : static_cast<Acc>(aalpha * sum);
        if (use_self) v = static_cast<Acc>(v + abeta * c[o]);
        r[o] = v;
      }
    }
  }
  scatter<Acc>(out, r);
}

template <typename T>
void addmm_blas(Tensor& out, const Tensor* self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha,
                int64_t batch) {
  const bool use_self = self != nullptr && beta != 0.0;
  const auto& os = out.sizes();
  const int64_t M = os[os.size() - 2], N = os[os.size() - 1];
  if constexpr (std::is_same<T, float>::value) {
    // A bias broadcast over rows (a Linear's) goes into the kernel's epilogue instead of a copy into out.
    if (batch == 1 && os.size() == 2 && (!use_self || self->dtype() == out.dtype())) {
      const std::vector<int64_t> sst = use_self ? broadcast_strides(*self, os, "self") : std::vector<int64_t>{0, 0};
      if (sst[0] == 0 || M == 1) {
        const MatView<const T> co = mat_of<T>(out, 0);
        const MatView<T> c{const_cast<T*>(co.p), co.rows, co.cols, co.rs, co.cs};
        if (try_fast_gemm(mat_of<T>(mat1, 0), mat_of<T>(mat2, 0), c, static_cast<T>(alpha),
                          use_self ? static_cast<T>(beta) : T(0),
                          use_self ? static_cast<const T*>(self->data_ptr()) : nullptr, sst[1]))
          return;
      }
    }
  }
  if (use_self) {  // out <- self (broadcast), then out <- alpha * A @ B + beta * out
    const std::vector<int64_t> sst = broadcast_strides(*self, os, "self");
    if (self->dtype() != out.dtype()) throw Error("self and out dtypes differ");
    const T* sp = static_cast<const T*>(self->data_ptr());
    if (os.size() == 2) {  // straight into out's own strides: no packed copy (it was 40% of a small Linear)
      T* op = static_cast<T*>(out.data_ptr());
      const int64_t o0 = out.strides()[0], o1 = out.strides()[1], s0 = sst[0], s1 = sst[1];
      for (int64_t i = 0; i < M; ++i) {
        T* orow = op + i * o0;
        const T* srow = sp + i * s0;
        if (o1 == 1 && s1 == 1) {
          if (srow != orow) std::copy_n(srow, N, orow);
        } else {
          for (int64_t j = 0; j < N; ++j) orow[j * o1] = srow[j * s1];
        }
      }
    } else {
      std::vector<T> tmp(static_cast<size_t>(out.numel()));  // every batch entry
      for_each_offset(os, sst, [&](int64_t i, int64_t off) { tmp[static_cast<size_t>(i)] = sp[off]; });
      store_packed<T>(out, tmp.data());
    }
  }
  // One GEMM per batch entry; several at once on the OpenMP pool (each single-threaded inside the region),
  // a single one outside any region, where gemm splits a large one over the pool itself.
  for_blocks(batch * mat1.sizes()[mat1.dim() - 1] * M * N > (1 << 17), batch, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const MatView<const T> co = mat_of<T>(out, b);
      const MatView<T> c{const_cast<T*>(co.p), co.rows, co.cols, co.rs, co.cs};
      gemm<T>(mat_of<T>(mat1, b), mat_of<T>(mat2, b), c, static_cast<T>(alpha),
              use_self ? static_cast<T>(beta) : T(0));
    }
  });
}

}  // namespace

void addmm(Tensor& out, const Tensor* self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha) {
  require_supported(mat1, "mat1");
  require_supported(mat2, "mat2");
  require_supported(out, "out");
  if (mat1.dim() != 2) throw Error("mat1 must be a matrix, got " + std::to_string(mat1.dim()) + "-d tensor of shape " + list_str(mat1.sizes()));
  if (mat2.dim() != 2) throw Error("mat2 must be a matrix, got " + std::to_string(mat2.dim()) + "-d tensor of shape " + list_str(mat2.sizes()));
  if (mat1.sizes()[1] != mat2.sizes()[0]) {
    throw Error("mat1 is " + dims_str(mat1.sizes()) + ", mat2 is " + dims_str(mat2.sizes()) + ": inner dimensions differ");
  }
  require_same_dtype(mat2, "mat2", mat1, "mat1");
  require_same_dtype(out, "out", mat1, "mat1");
  const std::vector<int64_t> want = {mat1.sizes()[0], mat2.sizes()[1]};
  if (out.sizes() != want) {
    throw Error("out is " + dims_str(out.sizes()) + ", expected " + dims_str(want) + " (mat1 is " + dims_str(mat1.sizes()) +
                ", mat2 is " + dims_str(mat2.sizes()) + ")");
  }
  if (self != nullptr) {
    require_supported(*self, "self");
    require_same_dtype(*self, "self", mat1, "mat1");
    broadcast_strides(*self, want, "self");
  }
  if (out.dtype() == kFloat32) return addmm_blas<float>(out, self, mat1, mat2, beta, alpha, 1);
  if (out.dtype() == kFloat64) return addmm_blas<double>(out, self, mat1, mat2, beta, alpha, 1);
  dispatch_acc(out.dtype(), [&](auto acc) { addmm_impl<decltype(acc)>(out, self, mat1, mat2, beta, alpha, 1); });
}

namespace {

// baddbmm and bmm, with the operands named as the calling op names them.
void batched(Tensor& out, const Tensor* self, const Tensor& batch1, const Tensor& batch2, double beta, double alpha,
             const char* n1, const char* n2) {
  const std::string a = n1, b = n2;
  require_supported(batch1, n1);
  require_supported(batch2, n2);
  require_supported(out, "out");
  if (batch1.dim() != 3) throw Error(a + " must be a 3-d tensor, got shape " + list_str(batch1.sizes()));
  if (batch2.dim() != 3) throw Error(b + " must be a 3-d tensor, got shape " + list_str(batch2.sizes()));
  if (batch1.sizes()[0] != batch2.sizes()[0]) {
    throw Error(a + " is " + dims_str(batch1.sizes()) + ", " + b + " is " + dims_str(batch2.sizes()) +
                ": batch sizes differ");
  }
  if (batch1.sizes()[2] != batch2.sizes()[1]) {
    throw Error(a + " is " + dims_str(batch1.sizes()) + ", " + b + " is " + dims_str(batch2.sizes()) +
                ": inner dimensions differ");
  }
  require_same_dtype(batch2, n2, batch1, n1);
  require_same_dtype(out, "out", batch1, n1);
  const std::vector<int64_t> want = {batch1.sizes()[0], batch1.sizes()[1], batch2.sizes()[2]};
  if (out.sizes() != want) {
    throw Error("out is " + dims_str(out.sizes()) + ", expected " + dims_str(want) + " (" + a + " is " +
                dims_str(batch1.sizes()) + ", " + b + " is " + dims_str(batch2.sizes()) + ")");
  }
  if (self != nullptr) {
    require_supported(*self, "self");
    require_same_dtype(*self, "self", batch1, n1);
    broadcast_strides(*self, want, "self");
  }
  if (out.dtype() == kFloat32) return addmm_blas<float>(out, self, batch1, batch2, beta, alpha, want[0]);
  if (out.dtype() == kFloat64) return addmm_blas<double>(out, self, batch1, batch2, beta, alpha, want[0]);
  dispatch_acc(out.dtype(),
               [&](auto acc) { addmm_impl<decltype(acc)>(out, self, batch1, batch2, beta, alpha, want[0]); });
}

}  // namespace

void baddbmm(Tensor& out, const Tensor* self, const Tensor& batch1, const Tensor& batch2, double beta, double alpha) {
  batched(out, self, batch1, batch2, beta, alpha, "batch1", "batch2");
}

void bmm(Tensor& out, const Tensor& self, const Tensor& mat2) { batched(out, nullptr, self, mat2, 0.0, 1.0, "self", "mat2"); }

}  // namespace cpu
}  // namespace aoti_host
