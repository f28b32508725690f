// float32 GEMM with B packed into column panels, an AVX-512 micro-kernel (chosen at run time), and a
// cache of packed copies of constant (weight) operands.
//
// Why: OpenBLAS repacks both operands on every call; for inference's small-M GEMMs against constant
// weights that packing was a quarter of a Linear's time. The runtime knows every constant's memory: a
// Method (host/method.h) owns a PackCache (shared by the methods of one program) holding its containers'
// constant ranges, and sets it as the current cache (PackScope) around the plugin's Run. A B operand lying
// inside those ranges is packed once and reused until the method's constants change or it is freed
// (both replace the ranges and drop the packed copies). Outside a run no cache is current and every B
// is packed per call. Packed copies are extra memory, kept for constants only;
// AOTI_HOST_PACK_WEIGHTS=0 turns the cache off, AOTI_HOST_FAST_GEMM=0 the kernel too (everything then
// goes to OpenBLAS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "shims/cpu/mat_view.h"

namespace aoti_host {
namespace cpu {

// B (K x N) in panels of nr (16 or 32) columns: panel p holds, for each k, columns [p*nr, p*nr+nr)
// contiguously, zero-padded past N.
class PackedB {
 public:
  PackedB(int64_t K, int64_t N);
  int64_t K() const { return K_; }
  int64_t N() const { return N_; }
  int nr() const { return nr_; }
  int64_t panels() const { return (N_ + nr_ - 1) / nr_; }
  const float* panel(int64_t p) const { return data_ + p * K_ * nr_; }
  float* panel(int64_t p) { return data_ + p * K_ * nr_; }
  size_t bytes() const { return store_.size() * sizeof(float); }
  void fill(const MatView<const float>& B);  // packs a strided K x N view (every element, padding included)
  // A new shape, reusing the storage (growing it when needed) for per-call packing: nothing zeroed.
  void reset(int64_t K, int64_t N);

 private:
  int64_t K_, N_;
  int nr_;
  std::vector<float> store_;
  float* data_;  // store_, aligned to 64 bytes
};

struct PackStats {
  uint64_t packs = 0;       // packed copies built by this cache
  uint64_t hits = 0;        // GEMMs that used one of its packed copies
  uint64_t fast_calls = 0;  // GEMMs run by the AVX-512 kernel in the process (packed on the fly or cached)
  size_t entries = 0, bytes = 0, ranges = 0;
};

// The packed copies of constant B operands lying in the registered constant ranges of its owners (the
// methods of one program). The copies of all caches together stop growing at
// AOTI_HOST_PACK_WEIGHTS_MAX_MB (default 1024 MiB per process). Thread-safe.
class PackCache {
 public:
  PackCache();
  ~PackCache();
  PackCache(const PackCache&) = delete;
  PackCache& operator=(const PackCache&) = delete;

  // Constant ranges of one owner (a Method): replaces what the owner registered before. Packed copies
  // overlapping the old or the new ranges are dropped. Empty ranges unregister the owner.
  void set_ranges(const void* owner, const std::vector<std::pair<const void*, size_t>>& ranges);
  // The packed copy for `key` when [lo, hi) lies inside the registered ranges (built by `build` on first
  // use); null otherwise or once the process's copies reached the limit.
  std::shared_ptr<const PackedB> get(const std::vector<int64_t>& key, const void* lo, const void* hi,
                                     const std::function<std::shared_ptr<PackedB>()>& build);
  PackStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Makes `cache` the one the kernels on this thread consult (null: none) until the scope ends; the
// previous one is restored then. Method::run holds one around the plugin's Run.
class PackScope {
 public:
  explicit PackScope(PackCache* cache);
  ~PackScope();
  PackScope(const PackScope&) = delete;
  PackScope& operator=(const PackScope&) = delete;

 private:
  PackCache* previous_;
};
PackCache* current_pack_cache();

bool fast_gemm_available();    // AVX-512F at run time and AOTI_HOST_FAST_GEMM != 0
bool pack_weights_enabled();   // fast_gemm_available() and AOTI_HOST_PACK_WEIGHTS != 0

// The current cache's packed copy for `key` when [lo, hi) lies inside its constants (built by `build` on
// first use); null otherwise, outside a PackScope or when packing is off.
std::shared_ptr<const PackedB> constant_packed(const void* lo, const void* hi, const std::vector<int64_t>& key,
                                               const std::function<std::shared_ptr<PackedB>()>& build);
// The same for a plain strided B view.
std::shared_ptr<const PackedB> constant_packed(const MatView<const float>& B);

// C <- alpha * A @ B + beta * (bias broadcast over rows when bias != null, else C). B is `packed` when
// given, else packed on the fly from B. beta == 0 never reads C or bias. Any strides of A and C.
// Returns false (nothing written) when the kernel is unavailable or K == 0: the caller falls back.
bool fast_gemm(const MatView<const float>& A, const MatView<const float>& B, const PackedB* packed,
               const MatView<float>& C, float alpha, float beta, const float* bias = nullptr,
               int64_t bias_stride = 1);

// The kernel for a constant B (cached packed copy) or a small GEMM (B packed per call); false when
// neither applies (or no AVX-512): the caller uses OpenBLAS.
bool try_fast_gemm(const MatView<const float>& A, const MatView<const float>& B, const MatView<float>& C, float alpha,
                   float beta, const float* bias = nullptr, int64_t bias_stride = 1);

// Whether a GEMM of this size whose B is not a constant should take the kernel (packing B per call)
// rather than OpenBLAS: small ones, where OpenBLAS's per-call overhead dominates.
bool prefer_fast_unpacked(int64_t M, int64_t N, int64_t K);

// A convolution's GEMM without im2col (an implicit GEMM): row i of A is, for each of `taps` kernel taps,
// the cin floats at x + offs[i * taps + tap] (a negative offset: padding, zeros); B packed with rows in
// (tap, channel) order. C <- A @ B + beta * bias (bias null: beta * C). C needs unit column stride and
// rows that don't overlap; false (nothing written) otherwise or without the kernel.
bool fast_conv_rows(const float* x, const int64_t* offs, int64_t taps, int64_t cin, const PackedB& packed,
                    const MatView<float>& C, float beta, const float* bias);

// C <- alpha * A @ B^T + (bias broadcast over rows when bias != null, else beta * C), A [M, K] and B
// [N, K] with unit stride along K (rows of positions and rows of weights: a channels-last or im2col
// convolution against its weight as it lies), C with unit column stride. For CPUs without AVX-512, where
// fast_gemm is unavailable: an AVX2 + FMA kernel of 6 x 16 tiles with B packed per call (K x N copies
// against M x N x K multiply-adds) and no zeroing pass (beta == 0 never reads C), where the BLAS would
// pack both operands and zero C first. False (nothing written) without AVX2/FMA, with
// AOTI_HOST_FAST_GEMM=0 or operands of other strides: the caller falls back.
bool gemm_nt_avx2(const MatView<const float>& A, const MatView<const float>& B, const MatView<float>& C,
                  float alpha, float beta, const float* bias);
bool gemm_nt_avx2_available();

// Short runs of floats (im2col's rows of channels): AVX-512 masked moves where available.
void copy_floats(float* dst, const float* src, int64_t n);

}  // namespace cpu
}  // namespace aoti_host
