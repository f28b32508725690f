// Native tests of the packed-weight GEMM (src/packed_gemm.cpp) through the shims a plugin calls: odd sizes
// (M, N, K not multiples of the 8x32 tile), strided and transposed A, B and C, alpha/beta 0, 1 and
// others, a broadcast bias, and the cache of packed constants: a constant changed and re-registered (what
// Method::constants_changed does after every constants update) gives the new results; unregistered
// memory is never taken from the cache; only the cache of the current run (PackScope, as Method::run
// sets around the plugin's Run) is consulted, and none outside a run.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/shims.h"
#include "check.h"
#include "shims/packed_gemm.h"

namespace {

using aoti_host::cpu::PackCache;
using aoti_host::cpu::PackScope;

// The cache of the tests' "program": current (a PackScope) while a test runs, as during a plugin's Run.
PackCache g_cache;

aoti_host::cpu::PackStats pack_stats() { return g_cache.stats(); }
void register_constant_ranges(const void* owner, const std::vector<std::pair<const void*, size_t>>& ranges) {
  g_cache.set_ranges(owner, ranges);
}
void unregister_constant_ranges(const void* owner) { g_cache.set_ranges(owner, {}); }

constexpr int32_t kF32 = 6;

AtenTensorHandle blob(float* data, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  AtenTensorHandle h = nullptr;
  if (aoti_torch_create_tensor_from_blob(data, static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(), 0,
                                         kF32, 0, 0, &h) != AOTI_TORCH_SUCCESS) {
    std::printf("FAIL: create_tensor_from_blob: %s\n", aoti_host::last_error().c_str());
    ++g_failures;
  }
  return h;
}

uint32_t g_seed = 12345;
bool g_expect_wrong = false;  // a check meant to see stale values: don't report its mismatches
float rnd() {
  g_seed = g_seed * 1664525u + 1013904223u;
  return static_cast<float>((g_seed >> 8) % 2001) / 1000.0f - 1.0f;
}

// A strided rows x cols matrix in its own storage: layout 0 row-major, 1 column-major, 2 row-major
// with padded rows (leading dimension cols + 3), 3 every other column (column stride 2).
struct Mat {
  int64_t rows, cols, rs, cs;
  std::vector<float> store;
  Mat(int64_t r, int64_t c, int layout) : rows(r), cols(c) {
    switch (layout) {
      case 1: rs = 1, cs = r; break;
      case 2: rs = c + 3, cs = 1; break;
      case 3: rs = 2 * c, cs = 2; break;
      default: rs = c, cs = 1; break;
    }
    store.assign(static_cast<size_t>((r - 1) * rs + (c - 1) * cs + 1 + 8), std::numeric_limits<float>::quiet_NaN());
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) at(i, j) = rnd();
  }
  float& at(int64_t i, int64_t j) { return store[static_cast<size_t>(i * rs + j * cs)]; }
  AtenTensorHandle handle() { return blob(store.data(), {rows, cols}, {rs, cs}); }
};

// |got - want| within float32 round-off of a K-term dot product.
bool close(double got, double want, int64_t K) {
  return std::fabs(got - want) <= 1e-5 * static_cast<double>(K + 1) * (1.0 + std::fabs(want));
}

// out <- beta * bias_or_out + alpha * A @ B through aoti_torch_cpu_addmm_out (self = out's old values,
// a [N] bias, or nothing with beta 0), compared with a double reference. Returns the number of mismatches.
int check_addmm(Mat& A, Mat& B, int out_layout, float alpha, float beta, bool bias_row) {
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  Mat C(M, N, out_layout);
  std::vector<float> bias(static_cast<size_t>(N));
  for (auto& b : bias) b = rnd();
  std::vector<double> want(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(A.at(i, k)) * B.at(k, j);
      const double base = bias_row ? bias[static_cast<size_t>(j)] : C.at(i, j);
      want[static_cast<size_t>(i * N + j)] = alpha * s + (beta == 0.0f ? 0.0 : beta * base);
    }
  if (beta == 0.0f && !bias_row)  // beta 0 must not read out: NaNs there must not propagate
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C.at(i, j) = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> self_copy(C.store);  // addmm's self: out's old values, in out's layout
  AtenTensorHandle a = A.handle(), b = B.handle(), c = C.handle();
  AtenTensorHandle self = bias_row ? blob(bias.data(), {N}, {1}) : blob(self_copy.data(), {M, N}, {C.rs, C.cs});
  if (aoti_torch_cpu_addmm_out(c, self, a, b, beta, alpha) != AOTI_TORCH_SUCCESS) {
    std::printf("FAIL: addmm_out: %s\n", aoti_host::last_error().c_str());
    ++g_failures;
  }
  int bad = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      if (!close(C.at(i, j), want[static_cast<size_t>(i * N + j)], K)) ++bad;
  for (auto h : {a, b, c, self}) aoti_torch_delete_tensor_object(h);
  if (bad && !g_expect_wrong)
    std::printf("FAIL: addmm M=%lld N=%lld K=%lld A(%lld,%lld) B(%lld,%lld) out layout %d alpha %g beta %g bias %d: %d wrong\n",
                static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
                static_cast<long long>(A.rs), static_cast<long long>(A.cs), static_cast<long long>(B.rs),
                static_cast<long long>(B.cs), out_layout, alpha, beta, bias_row, bad);
  return bad;
}

void register_mat(const void* owner, Mat& B) {
  register_constant_ranges(owner, {{B.store.data(), B.store.size() * sizeof(float)}});
}

void test_shapes_layouts_scalars() {
  const int64_t shapes[][3] = {{1, 1, 1},   {3, 5, 7},    {8, 32, 16},  {9, 33, 17}, {13, 47, 29},
                               {17, 16, 3}, {33, 70, 65}, {2, 100, 40}, {64, 48, 8}, {7, 1, 300}, {70, 300, 80}};
  int owner = 0;
  for (const auto& s : shapes) {
    for (int la = 0; la < 4; ++la)
      for (int lb = 0; lb < 4; ++lb) {
        Mat A(s[0], s[2], la), B(s[2], s[1], lb);
        for (bool constant : {false, true}) {
          if (constant) register_mat(&owner, B);
          for (int lc : {0, 1, 2})
            for (float beta : {0.0f, 1.0f, 0.5f})
              for (float alpha : {1.0f, -2.0f}) g_failures += check_addmm(A, B, lc, alpha, beta, false) ? 1 : 0;
          for (float beta : {1.0f, 0.25f}) g_failures += check_addmm(A, B, 0, 1.0f, beta, true) ? 1 : 0;
          if (constant) unregister_constant_ranges(&owner);
        }
      }
  }
}

void test_cache_follows_constants() {
  int owner = 0;
  Mat A(20, 40, 0), B(40, 50, 1);  // B as a Linear's weight.t(): column-major
  const auto before = pack_stats();
  register_mat(&owner, B);
  EXPECT(check_addmm(A, B, 0, 1.0f, 0.0f, false) == 0);
  EXPECT(check_addmm(A, B, 0, 1.0f, 1.0f, true) == 0);
  const auto after = pack_stats();
  const bool packing = aoti_host::cpu::pack_weights_enabled();
  if (packing) {
    EXPECT(after.packs == before.packs + 1);  // packed once, used twice
    EXPECT(after.hits >= before.hits + 1);
    EXPECT(after.entries >= 1 && after.bytes >= 40 * 64 * sizeof(float));
  }

  // The constant changes: without telling the cache the packed copy would be used (stale)...
  for (int64_t k = 0; k < B.rows; ++k)
    for (int64_t j = 0; j < B.cols; ++j) B.at(k, j) = rnd();
  if (packing) {
    g_expect_wrong = true;
    EXPECT(check_addmm(A, B, 0, 1.0f, 0.0f, false) > 0);
    g_expect_wrong = false;
  }
  // ...after the constants update path re-registers, the results follow the new values.
  register_mat(&owner, B);
  EXPECT(check_addmm(A, B, 0, 1.0f, 0.0f, false) == 0);
  if (packing) EXPECT(pack_stats().packs == after.packs + 1);

  // Freed (unregistered): nothing cached remains for that memory, and no new copies are made.
  unregister_constant_ranges(&owner);
  EXPECT(pack_stats().entries == before.entries);
  for (int64_t k = 0; k < B.rows; ++k)
    for (int64_t j = 0; j < B.cols; ++j) B.at(k, j) = rnd();
  const auto packs = pack_stats().packs;
  EXPECT(check_addmm(A, B, 2, 0.5f, 0.5f, false) == 0);
  EXPECT(pack_stats().packs == packs);

  // Two owners registering the same memory (shared weights): one unregistering drops the copy, the
  // other's next call packs again from the current values.
  int other = 0;
  register_mat(&owner, B);
  register_mat(&other, B);
  EXPECT(check_addmm(A, B, 0, 1.0f, 0.0f, false) == 0);
  unregister_constant_ranges(&owner);
  for (int64_t k = 0; k < B.rows; ++k)
    for (int64_t j = 0; j < B.cols; ++j) B.at(k, j) = rnd();
  EXPECT(check_addmm(A, B, 0, 1.0f, 0.0f, false) == 0);
  unregister_constant_ranges(&other);
}

void test_bmm_constant_batches() {
  // bmm whose mat2 is a registered constant: each batch entry's matrix is its own packed copy.
  const int64_t Bn = 3, M = 10, K = 19, N = 37;
  std::vector<float> a(static_cast<size_t>(Bn * M * K)), b(static_cast<size_t>(Bn * K * N)),
      c(static_cast<size_t>(Bn * M * N));
  for (auto& x : a) x = rnd();
  for (auto& x : b) x = rnd();
  int owner = 0;
  register_constant_ranges(&owner, {{b.data(), b.size() * sizeof(float)}});
  for (int round = 0; round < 2; ++round) {
    AtenTensorHandle ha = blob(a.data(), {Bn, M, K}, {M * K, K, 1});
    AtenTensorHandle hb = blob(b.data(), {Bn, K, N}, {K * N, 1, K});  // each batch entry column-major
    AtenTensorHandle hc = blob(c.data(), {Bn, M, N}, {M * N, N, 1});
    EXPECT(aoti_torch_cpu_bmm_out(hc, ha, hb) == AOTI_TORCH_SUCCESS);
    int bad = 0;
    for (int64_t e = 0; e < Bn; ++e)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += static_cast<double>(a[static_cast<size_t>(e * M * K + i * K + k)]) * b[static_cast<size_t>(e * K * N + j * K + k)];
          if (!close(c[static_cast<size_t>(e * M * N + i * N + j)], s, K)) ++bad;
        }
    EXPECT(bad == 0);
    for (auto h : {ha, hb, hc}) aoti_torch_delete_tensor_object(h);
  }
  unregister_constant_ranges(&owner);
}

void test_cache_is_the_runs() {
  // A registered constant is packed only while its cache is the current one: outside any scope, or with
  // another program's cache current, the same GEMM packs nothing and gives the same results.
  const bool packing = aoti_host::cpu::pack_weights_enabled();
  int owner = 0;
  Mat A(12, 30, 0), B(30, 40, 1);
  register_mat(&owner, B);
  {
    PackScope none(nullptr);
    EXPECT(aoti_host::cpu::current_pack_cache() == nullptr);
    const auto before = pack_stats();
    EXPECT(check_addmm(A, B, 0, 1.0f, 0.0f, false) == 0);
    EXPECT(pack_stats().packs == before.packs && pack_stats().hits == before.hits);
    PackCache other;
    {
      PackScope scope(&other);
      EXPECT(aoti_host::cpu::current_pack_cache() == &other);
      EXPECT(check_addmm(A, B, 0, 1.0f, 1.0f, true) == 0);
      EXPECT(other.stats().packs == 0 && other.stats().entries == 0);
      other.set_ranges(&owner, {{B.store.data(), B.store.size() * sizeof(float)}});
      EXPECT(check_addmm(A, B, 0, 1.0f, 0.0f, false) == 0);
      if (packing) EXPECT(other.stats().packs == 1);
    }
    EXPECT(aoti_host::cpu::current_pack_cache() == nullptr);  // the previous one is back
    EXPECT(pack_stats().packs == before.packs);
  }
  EXPECT(aoti_host::cpu::current_pack_cache() == &g_cache);
  EXPECT(check_addmm(A, B, 0, 1.0f, 0.0f, false) == 0);
  unregister_constant_ranges(&owner);
}

}  // namespace

int main() {
  const PackScope run(&g_cache);
  if (!aoti_host::cpu::fast_gemm_available()) {
    std::printf("the AVX-512 kernel is not available here (no avx512f, or AOTI_HOST_FAST_GEMM=0): checking the "
                "OpenBLAS path with the same cases\n");
  }
  test_shapes_layouts_scalars();
  test_cache_follows_constants();
  test_bmm_constant_batches();
  test_cache_is_the_runs();
  const auto s = pack_stats();
  std::printf("packed GEMM: %llu kernel calls, %llu packed copies built, %llu cache hits\n",
              static_cast<unsigned long long>(s.fast_calls), static_cast<unsigned long long>(s.packs),
              static_cast<unsigned long long>(s.hits));
  // The kernel is chosen at run time: every case above must have gone through it where the CPU has
  // AVX-512F (checked here independently of the runtime's own probe) unless AOTI_HOST_FAST_GEMM=0, and
  // never otherwise (all of them then went to OpenBLAS, nothing packed).
#if defined(__x86_64__) || defined(__i386__)
  const bool cpu_avx512f = __builtin_cpu_supports("avx512f");
#else
  const bool cpu_avx512f = false;
#endif
  const char* fast_env = std::getenv("AOTI_HOST_FAST_GEMM");
  const bool expect_fast = cpu_avx512f && !(fast_env != nullptr && std::strcmp(fast_env, "0") == 0);
  std::printf("expected the AVX-512 kernel: %s (CPU avx512f: %d, AOTI_HOST_FAST_GEMM=%s)\n", expect_fast ? "yes" : "no",
              cpu_avx512f ? 1 : 0, fast_env ? fast_env : "(unset)");
  EXPECT(aoti_host::cpu::fast_gemm_available() == expect_fast);
  if (expect_fast) {
    EXPECT(s.fast_calls > 0);
    EXPECT(s.packs > 0);
  } else {
    EXPECT(s.fast_calls == 0);
    EXPECT(s.packs == 0 && s.hits == 0);
  }
  return test_result("test_packed_gemm");
}
