#include "shims/cpu_gemm.h"

#include "shims/packed_gemm.h"

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

namespace aoti_host {
namespace cpu {
namespace {

// OpenBLAS's pthread build (where Debian's alternatives pick it over the OpenMP build, see
// toolchain/scons/cpu_libs.py) keeps its own spinning thread pool, which fights the plugins' OpenMP
// threads: keep it to one thread. The OpenMP build shares libgomp's pool with the plugins.
void blas_threads_once() {
  static const bool done = [] {
    if (openblas_get_parallel() == 1) openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

// How the BLAS can read a strided matrix without a copy: row-major (unit column stride) or its
// transpose (unit row stride), with a leading dimension that fits the BLAS's int. Strides of size-1
// dimensions don't matter.
bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, CBLAS_TRANSPOSE* trans, int64_t* ld) {
  if (rows > INT_MAX || cols > INT_MAX) return false;
  int64_t r = rows <= 1 ? std::max<int64_t>(cols, 1) : rs;
  int64_t c = cols <= 1 ? 1 : cs;
  if (c == 1 && r >= std::max<int64_t>(cols, 1) && r <= INT_MAX) {
    *trans = CblasNoTrans, *ld = r;
    return true;
  }
  r = rows <= 1 ? 1 : rs;
  c = cols <= 1 ? std::max<int64_t>(rows, 1) : cs;
  if (r == 1 && c >= std::max<int64_t>(rows, 1) && c <= INT_MAX) {
    *trans = CblasTrans, *ld = c;
    return true;
  }
  return false;
}

// OpenBLAS's OpenMP build threads a GEMM called outside a parallel region over omp_get_max_threads();
// for the small GEMMs of inference that sync costs more than it gains, and on a loaded machine its
// spinning waits cost milliseconds per call (measured: 2 threads 60x slower than 1 on a 2-core VM).
// The BLAS always runs on the calling thread: above kSplitGemmWork split_call splits the GEMM over the
// pool itself, below it our callers parallelise over batch. Inside any OpenMP region, even an inactive
// one, a region the BLAS opened would be nested: a team of fresh threads per call.
class BlasThreads {
 public:
  explicit BlasThreads(double work) {
#ifdef _OPENMP
    if ((work < kSplitGemmWork || omp_get_level() > 0) && (saved_ = omp_get_max_threads()) > 1) {
      omp_set_num_threads(1);
    }
#else
    (void)work;
#endif
  }
  ~BlasThreads() {
#ifdef _OPENMP
    if (saved_ > 1) omp_set_num_threads(saved_);
#endif
  }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  [[maybe_unused]] int saved_ = 0;
};

template <typename T>
std::vector<T> pack(const MatView<const T>& m) {
  std::vector<T> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) out[static_cast<size_t>(i * m.cols + j)] = m.p[i * m.rs + j * m.cs];
  return out;
}

void call(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}
void call(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void call_gemv(CBLAS_TRANSPOSE t, int64_t m, int64_t n, float alpha, const float* a, int64_t lda, const float* x,
               int64_t incx, float beta, float* y, int64_t incy) {
  cblas_sgemv(CblasRowMajor, t, static_cast<int>(m), static_cast<int>(n), alpha, a, static_cast<int>(lda), x,
              static_cast<int>(incx), beta, y, static_cast<int>(incy));
}
void call_gemv(CBLAS_TRANSPOSE t, int64_t m, int64_t n, double alpha, const double* a, int64_t lda, const double* x,
               int64_t incx, double beta, double* y, int64_t incy) {
  cblas_dgemv(CblasRowMajor, t, static_cast<int>(m), static_cast<int>(n), alpha, a, static_cast<int>(lda), x,
              static_cast<int>(incx), beta, y, static_cast<int>(incy));
}

// y (length N, stride incy) <- alpha * x (length K, stride incx) @ B (K x N) + beta * y as a GEMV: a
// one-row GEMM through sgemm packs all of B on every call (an LSTM step, a batch-1 Linear), while GEMV
// streams B once. False when the strides don't suit the BLAS (the caller then takes the GEMM).
template <typename T>
bool gemv_row(const T* x, int64_t incx, const MatView<const T>& B, T* y, int64_t incy, T alpha, T beta) {
  const int64_t K = B.rows, N = B.cols;
  if (incx <= 0 || incy <= 0 || incx > INT_MAX || incy > INT_MAX) return false;
  CBLAS_TRANSPOSE tb;
  int64_t ldb;
  if (!blas_layout(K, N, B.rs, B.cs, &tb, &ldb)) return false;
  if (beta == T(0))  // BLAS may scale y by 0 (NaN * 0 stays NaN); ATen's beta == 0 ignores y
    for (int64_t j = 0; j < N; ++j) y[j * incy] = T(0);
  BlasThreads threads(static_cast<double>(N) * static_cast<double>(K));
  // B row-major (K x N): y = B^T x; B with unit row stride is W (N x K) row-major: y = W x
  if (tb == CblasNoTrans) {
    call_gemv(CblasTrans, K, N, alpha, B.p, ldb, x, incx, beta, y, incy);
  } else {
    call_gemv(CblasNoTrans, N, K, alpha, B.p, ldb, x, incx, beta, y, incy);
  }
  return true;
}

// A large GEMM on the plugins' OpenMP pool: C's rows (or, for few rows, its columns) split into one block
// per thread, each block a single-threaded BLAS call. The pthread build of OpenBLAS is kept to one thread
// (blas_threads_once), so without this a GEMM ran on one core at any OMP_NUM_THREADS (ResNet-18 at 2
// threads was slower than at 1); the OpenMP build would sync its threads several times per call where
// this takes one region. False (nothing done) when the GEMM is small, inside an OpenMP region (even an
// inactive one), or one thread is allowed.
template <typename T>
bool split_call(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, T alpha, const T* a,
                int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc, double work) {
#ifdef _OPENMP
  const int64_t nt = omp_get_max_threads();
  // Not inside any region, active or not: a region opened there would be a nested team of fresh threads.
  if (work < kSplitGemmWork || omp_get_level() > 0 || nt < 2) return false;
  const bool by_rows = M >= 8 * nt || M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t block = (extent + nt - 1) / nt;
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(nt))
  for (int64_t t = 0; t < nt; ++t) {
    const int64_t lo = t * block, n = std::min(block, extent - lo);
    if (n <= 0) continue;
    if (by_rows) {  // rows lo.. of A (row lo of a row-major A, column lo of a transposed one) and of C
      call(ta, tb, n, N, K, alpha, ta == CblasNoTrans ? a + lo * lda : a + lo, lda, b, ldb, beta, c + lo * ldc, ldc);
    } else {  // columns lo.. of B and of C
      call(ta, tb, M, n, K, alpha, a, lda, tb == CblasNoTrans ? b + lo : b + lo * ldb, ldb, beta, c + lo, ldc);
    }
  }
  return true;
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta,
      (void)c, (void)ldc, (void)work;
  return false;
#endif
}

}  // namespace

template <typename T>
void gemm(const MatView<const T>& A, const MatView<const T>& B, const MatView<T>& C, T alpha, T beta) {
  const int64_t M = C.rows, N = C.cols, K = A.cols;
  if (M == 0 || N == 0) return;
  blas_threads_once();
  if (K == 0 || K > INT_MAX) {
    if (K == 0) {  // an empty sum: C <- beta * C
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          T& c = C.p[i * C.rs + j * C.cs];
          c = beta == T(0) ? T(0) : beta * c;
        }
      return;
    }
  }
  if constexpr (std::is_same<T, float>::value) {
    if (try_fast_gemm(A, B, C, alpha, beta)) return;  // packed constant B, or a small GEMM
  }
  if (M == 1 && K <= INT_MAX && gemv_row(A.p, K == 1 ? 1 : A.cs, B, C.p, N == 1 ? 1 : C.cs, alpha, beta)) return;
  if (N == 1 && K <= INT_MAX && gemv_row(B.p, K == 1 ? 1 : B.rs, A.t(), C.p, M == 1 ? 1 : C.rs, alpha, beta)) return;
  CBLAS_TRANSPOSE tc;
  int64_t ldc;
  if (!blas_layout(M, N, C.rs, C.cs, &tc, &ldc) || K > INT_MAX) {
    // An output the BLAS can't write (strided both ways, broadcast, huge): compute into a packed copy.
    std::vector<T> tmp(static_cast<size_t>(M * N), T(0));
    MatView<T> packed{tmp.data(), M, N, N, 1};
    if (beta != T(0))
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) tmp[static_cast<size_t>(i * N + j)] = C.p[i * C.rs + j * C.cs];
    if (K > INT_MAX) {  // beyond the BLAS's int: plain loops
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          T s = 0;
          for (int64_t q = 0; q < K; ++q) s += A.p[i * A.rs + q * A.cs] * B.p[q * B.rs + j * B.cs];
          T& c = tmp[static_cast<size_t>(i * N + j)];
          c = alpha * s + (beta == T(0) ? T(0) : beta * c);
        }
    } else {
      gemm<T>(A, B, packed, alpha, beta);
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C.p[i * C.rs + j * C.cs] = tmp[static_cast<size_t>(i * N + j)];
    return;
  }
  if (tc == CblasTrans) {  // column-major output: C^T = B^T @ A^T is row-major
    gemm<T>(B.t(), A.t(), C.t(), alpha, beta);
    return;
  }
  CBLAS_TRANSPOSE ta, tb;
  int64_t lda, ldb;
  std::vector<T> pa, pb;
  const T* a = A.p;
  const T* b = B.p;
  if (!blas_layout(M, K, A.rs, A.cs, &ta, &lda)) {
    pa = pack(A), a = pa.data(), ta = CblasNoTrans, lda = K;
  }
  if (!blas_layout(K, N, B.rs, B.cs, &tb, &ldb)) {
    pb = pack(B), b = pb.data(), tb = CblasNoTrans, ldb = N;
  }
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (split_call(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C.p, ldc, work)) return;
  BlasThreads threads(work);
  call(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C.p, ldc);
}

template void gemm<float>(const MatView<const float>&, const MatView<const float>&, const MatView<float>&, float,
                          float);
template void gemm<double>(const MatView<const double>&, const MatView<const double>&, const MatView<double>&,
                           double, double);

}  // namespace cpu
}  // namespace aoti_host
