#include "shims/packed_gemm.h"

#include "aoti_host/log.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "shims/cpu/simd.h"

namespace aoti_host {
namespace cpu {
namespace {

bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] == '0' && v[1] == '\0';
}

// The packed copies are extra memory (one more copy of each GEMM/conv weight): the cache stops growing
// once it holds AOTI_HOST_PACK_WEIGHTS_MAX_MB (default 1024 MiB), so that a large model's weights are not
// doubled; weights beyond it are packed per call (or run on OpenBLAS), as without the cache.
size_t pack_cache_limit() {
  static const size_t limit = [] {
    const char* v = std::getenv("AOTI_HOST_PACK_WEIGHTS_MAX_MB");
    if (v == nullptr || *v == '\0') return size_t{1024} << 20;
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0') {
      log(LogLevel::Warning, "AOTI_HOST_PACK_WEIGHTS_MAX_MB=%s: not a number of MiB; using 1024", v);
      return size_t{1024} << 20;
    }
    return static_cast<size_t>(mb) << 20;
  }();
  return limit;
}

// ---- the packed-copy cache of one owner ----

struct Range {
  uintptr_t lo, hi;
};

struct Entry {
  std::shared_ptr<const PackedB> packed;
  uintptr_t lo, hi;
};

// Bytes held by the packed copies of every cache in the process, against pack_cache_limit().
std::atomic<size_t> g_packed_bytes{0};
std::atomic<bool> g_full_logged{false};
// GEMMs and convolution GEMMs run by the AVX-512 kernel in this process (PackStats::fast_calls).
std::atomic<uint64_t> g_fast_calls{0};

// The cache the kernels on this thread consult: set around a method's Run by a PackScope.
thread_local PackCache* t_current = nullptr;

std::string key_bytes(const std::vector<int64_t>& key) {
  return std::string(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(int64_t));
}

// ---- the AVX-512 kernel ----

constexpr int kMR = 8;  // rows per micro-tile: 8 x 32 uses 16 zmm accumulators

#if AOTI_X86_SIMD
struct Tile {
  int64_t K;
  const float* a;  // row r, column k at a[r * lda + k]
  int64_t lda;
  const float* b;  // the panel: k-th row of nr floats at b[k * nr]
  float* c;        // row r at c[r * ldc], unit column stride
  int64_t ldc;
  __mmask16 m0, m1;  // valid columns of the two halves
  float alpha, beta;
  const float* bias;  // beta * bias for the panel's nr columns (zero-padded), or null
  // micro_ind only: per row, taps offsets from a (negative: zeros), cin floats each; `zero` holds cin zeros
  const int64_t* offs;
  int64_t taps, cin;
  const float* zero;
};

template <int MR, int NV>
__attribute__((target("avx512f"))) inline void store_tile(__m512 (&acc)[MR][NV], const Tile& t);

template <int MR, int NV>
__attribute__((target("avx512f"), always_inline)) inline void zero_tile(__m512 (&acc)[MR][NV]) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
}

// acc[r] += ap[r][k] * (row k of the panel b) for k < n; returns b past those n rows.
template <int MR, int NV>
__attribute__((target("avx512f"), always_inline)) inline const float* accumulate(__m512 (&acc)[MR][NV],
                                                                                const float* const (&ap)[MR],
                                                                                const float* b, int64_t n) {
  constexpr int NR = 16 * NV;
  for (int64_t k = 0; k < n; ++k, b += NR) {
    __m512 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r][k]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  return b;
}

template <int MR, int NV>
__attribute__((target("avx512f"))) void micro(const Tile& t) {
  __m512 acc[MR][NV];
  zero_tile<MR, NV>(acc);
  const float* ap[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) ap[r] = t.a + r * t.lda;
  accumulate<MR, NV>(acc, ap, t.b, t.K);
  store_tile<MR, NV>(acc, t);
}

// Convolution rows without im2col: row r of A is, tap after tap, the cin floats at t.a + offs[r * taps + tap]
// (offs < 0: a padding position, zeros), matching B's (tap, channel) row order.
template <int MR, int NV>
__attribute__((target("avx512f"))) void micro_ind(const Tile& t) {
  __m512 acc[MR][NV];
  zero_tile<MR, NV>(acc);
  const float* b = t.b;
  for (int64_t tap = 0; tap < t.taps; ++tap) {
    const float* ap[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const int64_t off = t.offs[r * t.taps + tap];
      ap[r] = off >= 0 ? t.a + off : t.zero;
    }
    b = accumulate<MR, NV>(acc, ap, b, t.cin);
  }
  store_tile<MR, NV>(acc, t);
}

template <int MR, int NV>
__attribute__((target("avx512f"))) inline void store_tile(__m512 (&acc)[MR][NV], const Tile& t) {
  const __m512 alpha = _mm512_set1_ps(t.alpha), beta = _mm512_set1_ps(t.beta);
  __m512 bias[NV];
#pragma GCC unroll 2
  for (int v = 0; v < NV; ++v) bias[v] = t.bias != nullptr ? _mm512_loadu_ps(t.bias + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* c = t.c + r * t.ldc;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == 0 ? t.m0 : t.m1;
      __m512 x = acc[r][v];
      if (t.alpha != 1.0f) x = _mm512_mul_ps(x, alpha);
      if (t.bias != nullptr) x = _mm512_add_ps(x, bias[v]);
      else if (t.beta != 0.0f) x = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, c + 16 * v), x);
      _mm512_mask_storeu_ps(c + 16 * v, m, x);
    }
  }
}

using MicroFn = void (*)(const Tile&);
template <int NV>
constexpr MicroFn kMicro[kMR] = {micro<1, NV>, micro<2, NV>, micro<3, NV>, micro<4, NV>,
                                 micro<5, NV>, micro<6, NV>, micro<7, NV>, micro<8, NV>};
template <int NV>
constexpr MicroFn kMicroInd[kMR] = {micro_ind<1, NV>, micro_ind<2, NV>, micro_ind<3, NV>, micro_ind<4, NV>,
                                    micro_ind<5, NV>, micro_ind<6, NV>, micro_ind<7, NV>, micro_ind<8, NV>};
#endif

#if AOTI_X86_SIMD
__attribute__((target("avx512f"))) void copy_floats_avx512(float* dst, const float* src, int64_t n) {
  for (; n >= 16; n -= 16, dst += 16, src += 16) _mm512_storeu_ps(dst, _mm512_loadu_ps(src));
  if (n > 0) {
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
    _mm512_mask_storeu_ps(dst, m, _mm512_maskz_loadu_ps(m, src));
  }
}
#endif

thread_local std::vector<float> tl_a, tl_b, tl_c;

float* aligned_buffer(std::vector<float>& v, size_t n) {
  if (v.size() < n + 16) v.resize(n + 16);
  const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + ((64 - p % 64) % 64) / sizeof(float);
}

}  // namespace

PackedB::PackedB(int64_t K, int64_t N) { reset(K, N); }

void PackedB::reset(int64_t K, int64_t N) {
  K_ = K, N_ = N, nr_ = N <= 16 ? 16 : 32;
  const size_t need = static_cast<size_t>(panels() * K * nr_ + 16);
  if (store_.size() < need) store_.resize(need);
  const uintptr_t p = reinterpret_cast<uintptr_t>(store_.data());
  data_ = store_.data() + ((64 - p % 64) % 64) / sizeof(float);
}

void PackedB::fill(const MatView<const float>& B) {
  for (int64_t p = 0; p < panels(); ++p) {
    float* dst = panel(p);
    const int64_t j0 = p * nr_, nj = std::min<int64_t>(nr_, N_ - j0);
    for (int64_t k = 0; k < K_; ++k, dst += nr_) {
      const float* src = B.p + k * B.rs + j0 * B.cs;
      if (B.cs == 1) {
        std::memcpy(dst, src, static_cast<size_t>(nj) * sizeof(float));
      } else {
        for (int64_t j = 0; j < nj; ++j) dst[j] = src[j * B.cs];
      }
      std::fill(dst + nj, dst + nr_, 0.0f);
    }
  }
}

struct PackCache::Impl {
  // [lo, hi) inside the union of the registered ranges (merged: sorted, disjoint, adjacent ones joined).
  bool contains(uintptr_t lo, uintptr_t hi) const {
    auto it = std::upper_bound(merged.begin(), merged.end(), lo, [](uintptr_t v, const Range& r) { return v < r.lo; });
    if (it == merged.begin()) return false;
    --it;
    return lo >= it->lo && hi <= it->hi;
  }
  void drop_overlapping(const std::vector<Range>& ranges) {
    for (auto it = cache.begin(); it != cache.end();) {
      bool hit = false;
      for (const Range& r : ranges) hit |= it->second.lo < r.hi && r.lo < it->second.hi;
      if (hit) {
        drop_bytes(it->second.packed->bytes());
        it = cache.erase(it);
      } else {
        ++it;
      }
    }
  }
  void drop_bytes(size_t n) {
    bytes -= n;
    g_packed_bytes.fetch_sub(n, std::memory_order_relaxed);
  }
  void rebuild() {
    merged.clear();
    for (const auto& o : owners) merged.insert(merged.end(), o.second.begin(), o.second.end());
    std::sort(merged.begin(), merged.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
    std::vector<Range> out;
    for (const Range& r : merged) {
      if (!out.empty() && r.lo <= out.back().hi) out.back().hi = std::max(out.back().hi, r.hi);
      else out.push_back(r);
    }
    merged = std::move(out);
  }

  mutable std::shared_mutex mu;
  std::map<const void*, std::vector<Range>> owners;
  std::vector<Range> merged;
  std::unordered_map<std::string, Entry> cache;
  std::atomic<uint64_t> packs{0}, hits{0};
  size_t bytes = 0;
};

PackCache::PackCache() : impl_(new Impl()) {}

PackCache::~PackCache() { impl_->drop_bytes(impl_->bytes); }

void PackCache::set_ranges(const void* owner, const std::vector<std::pair<const void*, size_t>>& ranges) {
  std::vector<Range> rs;
  rs.reserve(ranges.size());
  for (const auto& r : ranges) {
    if (r.second == 0) continue;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(r.first);
    rs.push_back({lo, lo + r.second});
  }
  Impl& d = *impl_;
  std::unique_lock<std::shared_mutex> lock(d.mu);
  auto it = d.owners.find(owner);
  if (it != d.owners.end()) {
    d.drop_overlapping(it->second);
    d.owners.erase(it);
  }
  if (!rs.empty()) {
    d.drop_overlapping(rs);
    d.owners[owner] = std::move(rs);
  }
  d.rebuild();
}

std::shared_ptr<const PackedB> PackCache::get(const std::vector<int64_t>& key_, const void* lo_, const void* hi_,
                                              const std::function<std::shared_ptr<PackedB>()>& build) {
  Impl& d = *impl_;
  const std::string key = key_bytes(key_);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(lo_), hi = reinterpret_cast<uintptr_t>(hi_);
  {
    std::shared_lock<std::shared_mutex> lock(d.mu);
    if (d.merged.empty()) return nullptr;
    auto it = d.cache.find(key);
    if (it != d.cache.end()) {
      d.hits.fetch_add(1, std::memory_order_relaxed);
      return it->second.packed;
    }
    if (!d.contains(lo, hi)) return nullptr;
    if (g_packed_bytes.load(std::memory_order_relaxed) >= pack_cache_limit()) {
      if (!g_full_logged.exchange(true))
        log(LogLevel::Info, "packed weights: the caches hold %zu MiB (AOTI_HOST_PACK_WEIGHTS_MAX_MB); further "
            "constant weights are packed per call", g_packed_bytes.load() >> 20);
      return nullptr;
    }
  }
  std::shared_ptr<const PackedB> packed = build();  // outside the lock: packing takes a while
  std::unique_lock<std::shared_mutex> lock(d.mu);
  if (!d.contains(lo, hi)) return nullptr;  // unregistered meanwhile
  auto [it, fresh] = d.cache.emplace(key, Entry{packed, lo, hi});
  if (fresh) {
    d.packs.fetch_add(1, std::memory_order_relaxed);
    d.bytes += packed->bytes();
    g_packed_bytes.fetch_add(packed->bytes(), std::memory_order_relaxed);
  }
  return it->second.packed;
}

PackStats PackCache::stats() const {
  const Impl& d = *impl_;
  std::shared_lock<std::shared_mutex> lock(d.mu);
  PackStats s;
  s.packs = d.packs.load();
  s.hits = d.hits.load();
  s.entries = d.cache.size();
  s.bytes = d.bytes;
  for (const auto& o : d.owners) s.ranges += o.second.size();
  s.fast_calls = g_fast_calls.load();
  return s;
}

PackScope::PackScope(PackCache* cache) : previous_(t_current) { t_current = cache; }
PackScope::~PackScope() { t_current = previous_; }

PackCache* current_pack_cache() { return t_current; }

bool fast_gemm_available() {
  static const bool on = cpu_has_avx512f() && !env_off("AOTI_HOST_FAST_GEMM");
  return on;
}

bool pack_weights_enabled() {
  static const bool on = fast_gemm_available() && !env_off("AOTI_HOST_PACK_WEIGHTS");
  return on;
}

std::shared_ptr<const PackedB> constant_packed(const void* lo, const void* hi, const std::vector<int64_t>& key,
                                               const std::function<std::shared_ptr<PackedB>()>& build) {
  PackCache* cache = t_current;
  if (cache == nullptr || !pack_weights_enabled()) return nullptr;
  return cache->get(key, lo, hi, build);
}

std::shared_ptr<const PackedB> constant_packed(const MatView<const float>& B) {
  if (t_current == nullptr || !pack_weights_enabled() || B.rows <= 0 || B.cols <= 0) return nullptr;
  // The view's extent in memory (strides may be zero or negative).
  int64_t lo = 0, hi = 0;
  for (auto [n, s] : {std::pair<int64_t, int64_t>{B.rows, B.rs}, {B.cols, B.cs}}) {
    const int64_t span = (n - 1) * s;
    (span < 0 ? lo : hi) += span;
  }
  const std::vector<int64_t> key = {0, reinterpret_cast<int64_t>(B.p), B.rows, B.cols, B.rs, B.cs};
  return constant_packed(B.p + lo, B.p + hi + 1, key, [&] {
    auto p = std::make_shared<PackedB>(B.rows, B.cols);
    p->fill(B);
    return p;
  });
}

bool fast_conv_rows(const float* x, const int64_t* offs, int64_t taps, int64_t cin, const PackedB& packed,
                    const MatView<float>& C, float beta, const float* bias) {
#if AOTI_X86_SIMD
  const int64_t M = C.rows, N = C.cols;
  if (!fast_gemm_available() || packed.K() != taps * cin || packed.N() != N || cin == 0) return false;
  if (!(N == 1 || C.cs == 1) || !(M == 1 || C.rs >= N)) return false;
  if (M == 0 || N == 0) return true;
  g_fast_calls.fetch_add(1, std::memory_order_relaxed);
  const int nr = packed.nr();
  const int64_t np = packed.panels();
  const float* bb = nullptr;
  if (bias != nullptr && beta != 0.0f) {
    float* buf = aligned_buffer(tl_b, static_cast<size_t>(np * nr));
    for (int64_t j = 0; j < np * nr; ++j) buf[j] = j < N ? beta * bias[j] : 0.0f;
    bb = buf;
  }
  static thread_local std::vector<float> zeros;
  if (zeros.size() < static_cast<size_t>(cin)) zeros.assign(static_cast<size_t>(cin), 0.0f);
  const float* zero = zeros.data();
  const int64_t mb = (M + kMR - 1) / kMR, tiles = np * mb;
  auto run_tile = [&](int64_t t) {
    const int64_t p = t / mb, i0 = (t % mb) * kMR;
    const int64_t j0 = p * nr, nj = std::min<int64_t>(nr, N - j0);
    const int mr = static_cast<int>(std::min<int64_t>(kMR, M - i0));
    Tile tile{};
    tile.a = x;
    tile.b = packed.panel(p);
    tile.c = C.p + i0 * C.rs + j0;
    tile.ldc = C.rs;
    tile.m0 = static_cast<__mmask16>(nj >= 16 ? 0xffff : (1u << nj) - 1);
    tile.m1 = static_cast<__mmask16>(nj >= 32 ? 0xffff : nj <= 16 ? 0 : (1u << (nj - 16)) - 1);
    tile.alpha = 1.0f;
    tile.beta = bias != nullptr ? 0.0f : beta;
    tile.bias = bb != nullptr ? bb + j0 : nullptr;
    tile.offs = offs + i0 * taps;
    tile.taps = taps;
    tile.cin = cin;
    tile.zero = zero;
    (nr == 16 ? kMicroInd<1> : kMicroInd<2>)[mr - 1](tile);
  };
#ifdef _OPENMP
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(taps * cin);
  if (tiles > 1 && work >= 256.0 * 1024 && omp_get_level() == 0 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) run_tile(t);
    return true;
  }
#endif
  for (int64_t t = 0; t < tiles; ++t) run_tile(t);
  return true;
#else
  (void)x, (void)offs, (void)taps, (void)cin, (void)packed, (void)C, (void)beta, (void)bias;
  return false;
#endif
}

void copy_floats(float* dst, const float* src, int64_t n) {
#if AOTI_X86_SIMD
  if (cpu_has_avx512f()) return copy_floats_avx512(dst, src, n);
#endif
  std::copy_n(src, n, dst);
}

bool prefer_fast_unpacked(int64_t M, int64_t N, int64_t K) {
  // Packing B costs K*N against M*N*K of work; below a few M multiply-adds OpenBLAS's fixed cost per
  // call (argument checks, thread setup, packing both operands) is what we save.
  return fast_gemm_available() && M >= 4 && static_cast<double>(M) * N * K <= 4.0 * 1024 * 1024;
}

bool try_fast_gemm(const MatView<const float>& A, const MatView<const float>& B, const MatView<float>& C, float alpha,
                   float beta, const float* bias, int64_t bias_stride) {
  if (!fast_gemm_available() || A.cols == 0) return false;
  const std::shared_ptr<const PackedB> packed = constant_packed(B);
  if (packed == nullptr && !prefer_fast_unpacked(C.rows, C.cols, A.cols)) return false;
  return fast_gemm(A, B, packed.get(), C, alpha, beta, bias, bias_stride);
}

bool fast_gemm(const MatView<const float>& A, const MatView<const float>& B, const PackedB* packed,
               const MatView<float>& C, float alpha, float beta, const float* bias, int64_t bias_stride) {
#if AOTI_X86_SIMD
  const int64_t M = C.rows, N = C.cols, K = A.cols;
  if (!fast_gemm_available() || K == 0) return false;
  if (M == 0 || N == 0) return true;
  if (packed != nullptr && (packed->K() != K || packed->N() != N)) return false;
  g_fast_calls.fetch_add(1, std::memory_order_relaxed);
  // B, packed per call when it is not a cached constant.
  if (packed == nullptr) {
    static thread_local PackedB own(0, 0);  // reused: no allocation per call
    own.reset(K, N);
    own.fill(B);
    packed = &own;
  }
  // A with unit stride along k.
  const float* a = A.p;
  int64_t lda = A.rs;
  if (K > 1 && A.cs != 1) {
    float* buf = aligned_buffer(tl_a, static_cast<size_t>(M * K));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) buf[i * K + k] = A.p[i * A.rs + k * A.cs];
    a = buf, lda = K;
  }
  // C with unit column stride and rows that don't overlap; otherwise a packed temporary.
  const bool direct = (N == 1 || C.cs == 1) && (M == 1 || C.rs >= N || C.rs <= -N);
  float* c = C.p;
  int64_t ldc = C.rs;
  if (!direct) {
    c = aligned_buffer(tl_c, static_cast<size_t>(M * N)), ldc = N;
    if (beta != 0.0f && bias == nullptr)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) c[i * N + j] = C.p[i * C.rs + j * C.cs];
  }
  // beta * bias, zero-padded to whole panels.
  const int nr = packed->nr();
  const int64_t np = packed->panels();
  const float* bb = nullptr;
  if (bias != nullptr && beta != 0.0f) {
    float* buf = aligned_buffer(tl_b, static_cast<size_t>(np * nr));
    for (int64_t j = 0; j < np * nr; ++j) buf[j] = j < N ? beta * bias[j * bias_stride] : 0.0f;
    bb = buf;
  }
  const float tile_beta = bias != nullptr ? 0.0f : beta;
  const int64_t mb = (M + kMR - 1) / kMR;
  const int64_t tiles = np * mb;
  auto run_tile = [&](int64_t t) {
    const int64_t p = t / mb, i0 = (t % mb) * kMR;
    const int64_t j0 = p * nr, nj = std::min<int64_t>(nr, N - j0);
    const int mr = static_cast<int>(std::min<int64_t>(kMR, M - i0));
    Tile tile;
    tile.K = K;
    tile.a = a + i0 * lda;
    tile.lda = lda;
    tile.b = packed->panel(p);
    tile.c = c + i0 * ldc + j0;
    tile.ldc = ldc;
    tile.m0 = static_cast<__mmask16>(nj >= 16 ? 0xffff : (1u << nj) - 1);
    tile.m1 = static_cast<__mmask16>(nj >= 32 ? 0xffff : nj <= 16 ? 0 : (1u << (nj - 16)) - 1);
    tile.alpha = alpha;
    tile.beta = tile_beta;
    tile.bias = bb != nullptr ? bb + j0 : nullptr;
    (nr == 16 ? kMicro<1> : kMicro<2>)[mr - 1](tile);
  };
#ifdef _OPENMP
  // Large enough GEMMs outside a parallel region use the plugins' OpenMP pool (tiles split statically).
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (tiles > 1 && work >= 256.0 * 1024 && omp_get_level() == 0 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) run_tile(t);
  } else {
    for (int64_t t = 0; t < tiles; ++t) run_tile(t);
  }
#else
  for (int64_t t = 0; t < tiles; ++t) run_tile(t);
#endif
  if (!direct)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C.p[i * C.rs + j * C.cs] = c[i * N + j];
  return true;
#else
  (void)A, (void)B, (void)packed, (void)C, (void)alpha, (void)beta, (void)bias, (void)bias_stride;
  return false;
#endif
}

}  // namespace cpu
}  // namespace aoti_host

// ---- gemm_nt_avx2: an AVX2 outer-product kernel, B packed per call ----

namespace aoti_host {
namespace cpu {
namespace {

constexpr int kNtMR = 6;  // 6 rows x 16 columns: 12 accumulators, 2 B vectors, 1 broadcast

#if AOTI_X86_SIMD
struct NtTile {
  const float* a;  // row r, column k at a[r * lda + k]
  int64_t lda, K;
  const float* b;  // the panel: 16 columns for k at b[k * 16]
  float* c;  // row r at c[r * ldc], unit column stride
  int64_t ldc;
  int nj;  // valid columns (1-16)
  float alpha, beta;
  const float* bias;  // 16 values (zero-padded past nj), or null
};

// acc[r] += a(r, k) * (the panel's row k at b); rows 0-2 at a0 + r * lda, 3-5 at a3 + (r - 3) * lda.
template <int MR>
__attribute__((target("avx2,fma"), always_inline)) inline void nt_step(__m256 (&acc)[MR][2], const float* a0,
                                                                       const float* a3, int64_t lda, const float* b) {
  const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    const __m256 av = _mm256_broadcast_ss(r < 3 ? a0 + r * lda : a3 + (r - 3) * lda);
    acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
    acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
  }
}

template <int MR>
__attribute__((target("avx2,fma"))) void nt_micro(const NtTile& t) {
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  // Rows 0-2 and 3-5 from two pointers (base + lda * {0, 1, 2} addressing), k unrolled by 4.
  const int64_t lda = t.lda;
  const float* a0 = t.a;
  const float* a3 = t.a + 3 * lda;
  const float* b = t.b;
  int64_t k = t.K;
  for (; k >= 4; k -= 4, a0 += 4, a3 += 4, b += 64) {
    nt_step<MR>(acc, a0, a3, lda, b);
    nt_step<MR>(acc, a0 + 1, a3 + 1, lda, b + 16);
    nt_step<MR>(acc, a0 + 2, a3 + 2, lda, b + 32);
    nt_step<MR>(acc, a0 + 3, a3 + 3, lda, b + 48);
  }
  for (; k > 0; --k, ++a0, ++a3, b += 16) nt_step<MR>(acc, a0, a3, lda, b);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(t.nj), lane),
                m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(t.nj - 8), lane);
  const bool full = t.nj == 16;
  const __m256 alpha = _mm256_set1_ps(t.alpha), beta = _mm256_set1_ps(t.beta);
  __m256 bias0 = _mm256_setzero_ps(), bias1 = _mm256_setzero_ps();
  if (t.bias != nullptr) bias0 = _mm256_loadu_ps(t.bias), bias1 = _mm256_loadu_ps(t.bias + 8);
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    float* c = t.c + r * t.ldc;
    __m256 x0 = acc[r][0], x1 = acc[r][1];
    if (t.alpha != 1.0f) x0 = _mm256_mul_ps(x0, alpha), x1 = _mm256_mul_ps(x1, alpha);
    if (t.bias != nullptr) {
      x0 = _mm256_add_ps(x0, bias0), x1 = _mm256_add_ps(x1, bias1);
    } else if (t.beta != 0.0f) {
      x0 = _mm256_fmadd_ps(beta, _mm256_maskload_ps(c, m0), x0);
      x1 = _mm256_fmadd_ps(beta, _mm256_maskload_ps(c + 8, m1), x1);
    }
    if (full) {
      _mm256_storeu_ps(c, x0);
      _mm256_storeu_ps(c + 8, x1);
    } else {
      _mm256_maskstore_ps(c, m0, x0);
      _mm256_maskstore_ps(c + 8, m1, x1);
    }
  }
}

// 8 rows of B (k-contiguous), 8 k from k0, transposed into the panel's 8 columns at dst (k-major, 16 wide).
__attribute__((target("avx2,fma"), always_inline)) inline void nt_transpose8(const float* const (&src)[8], int64_t k0,
                                                                             float* dst) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src[i] + k0);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const int i = 4 * h;
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r[0..3]: k0+{0,1,2,3} (lanes 0-3) and k0+{4,5,6,7} (lanes 4-7) of rows 0-3; r[4..7] the same of rows 4-7
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * 16, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * 16, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// Columns [j0, j0 + 16) of B^T (rows j0.. of B) into one panel at dst: K rows of 16, zero past N.
__attribute__((target("avx2,fma"))) void nt_pack_panel(const MatView<const float>& B, int64_t j0, float* dst) {
  const int64_t K = B.cols, nj = std::min<int64_t>(16, B.rows - j0);
  for (int64_t h = 0; h < 16; h += 8) {
    if (h + 8 <= nj) {
      const float* src[8];
      for (int i = 0; i < 8; ++i) src[i] = B.p + (j0 + h + i) * B.rs;
      int64_t k = 0;
      for (; k + 8 <= K; k += 8) nt_transpose8(src, k, dst + k * 16 + h);
      for (; k < K; ++k)
        for (int i = 0; i < 8; ++i) dst[k * 16 + h + i] = src[i][k];
    } else {
      for (int64_t j = h; j < h + 8; ++j) {
        float* d = dst + j;
        if (j >= nj) {
          for (int64_t k = 0; k < K; ++k) d[k * 16] = 0.0f;
        } else {
          const float* src = B.p + (j0 + j) * B.rs;
          for (int64_t k = 0; k < K; ++k) d[k * 16] = src[k];
        }
      }
    }
  }
}

using NtFn = void (*)(const NtTile&);
constexpr NtFn kNtMicro[kNtMR] = {nt_micro<1>, nt_micro<2>, nt_micro<3>, nt_micro<4>, nt_micro<5>, nt_micro<6>};
#endif

}  // namespace

bool gemm_nt_avx2_available() {
  static const bool on = cpu_has_avx2_fma() && !env_off("AOTI_HOST_FAST_GEMM");
  return on;
}

bool gemm_nt_avx2(const MatView<const float>& A, const MatView<const float>& B, const MatView<float>& C,
                  float alpha, float beta, const float* bias) {
#if AOTI_X86_SIMD
  const int64_t M = C.rows, N = C.cols, K = A.cols;
  if (!gemm_nt_avx2_available() || K == 0 || B.cols != K || A.rows != M || B.rows != N) return false;
  if ((K > 1 && (A.cs != 1 || B.cs != 1)) || !(N == 1 || C.cs == 1) || !(M == 1 || C.rs >= N)) return false;
  if (M == 0 || N == 0) return true;
  // B^T in panels of 16 columns (k-major, zero-padded past N), per call: K x N copies against M x N x K
  // multiply-adds. B's rows are read in order.
  static thread_local std::vector<float> pack_store;
  const int64_t np = (N + 15) / 16;
  float* pb = aligned_buffer(pack_store, static_cast<size_t>(np * K * 16));
  for (int64_t p = 0; p < np; ++p) nt_pack_panel(B, p * 16, pb + p * K * 16);
  std::vector<float> bb;
  if (bias != nullptr) {
    bb.assign(static_cast<size_t>(np * 16), 0.0f);
    std::copy_n(bias, N, bb.begin());
  }
  // Blocks of rows of A that stay in L2 (about 128 KiB) while the panels pass over them; one block per
  // thread at least.
  int64_t rows = std::max<int64_t>(kNtMR, (32768 / K) / kNtMR * kNtMR);
  int nt = 1;
#ifdef _OPENMP
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (work >= 256.0 * 1024 && omp_get_level() == 0) nt = omp_get_max_threads();
#endif
  if (nt > 1) rows = std::min<int64_t>(rows, ((M + nt - 1) / nt + kNtMR - 1) / kNtMR * kNtMR);
  const int64_t blocks = (M + rows - 1) / rows;
  auto run_block = [&](int64_t blk) {
    const int64_t i_lo = blk * rows, i_hi = std::min(M, i_lo + rows);
    NtTile t;
    t.lda = A.rs, t.K = K, t.ldc = C.rs, t.alpha = alpha;
    t.beta = bias != nullptr ? 0.0f : beta;
    for (int64_t p = 0; p < np; ++p) {
      t.b = pb + p * K * 16;
      t.nj = static_cast<int>(std::min<int64_t>(16, N - p * 16));
      t.bias = bias != nullptr ? bb.data() + p * 16 : nullptr;
      for (int64_t i0 = i_lo; i0 < i_hi; i0 += kNtMR) {
        const int mr = static_cast<int>(std::min<int64_t>(kNtMR, i_hi - i0));
        t.a = A.p + i0 * A.rs;
        t.c = C.p + i0 * C.rs + p * 16;
        kNtMicro[mr - 1](t);
      }
    }
  };
#ifdef _OPENMP
  if (nt > 1 && blocks > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) run_block(blk);
    return true;
  }
#endif
  for (int64_t blk = 0; blk < blocks; ++blk) run_block(blk);
  return true;
#else
  (void)A, (void)B, (void)C, (void)alpha, (void)beta, (void)bias;
  return false;
#endif
}

}  // namespace cpu
}  // namespace aoti_host
