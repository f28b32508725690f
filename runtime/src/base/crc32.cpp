#include "base/crc32.h"

#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AOTI_CRC32_CLMUL 1
#endif

namespace aoti_host {
namespace {

constexpr uint32_t kPoly = 0xEDB88320u;  // reflected CRC-32 polynomial (zip, zlib, PNG)

// kTables[k][b]: the CRC of byte b followed by k zero bytes. Slicing-by-16 consumes 16 bytes per step
// with 16 independent table lookups (about 1 byte per cycle on current x86 cores).
struct Tables {
  uint32_t t[16][256];
  constexpr Tables() : t() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 16; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
};
constexpr Tables kTables;

inline uint32_t load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

uint32_t crc32_tables(uint32_t c, const unsigned char* p, size_t n) {
  const auto& t = kTables.t;
  while (n >= 16) {
    uint32_t a = load32(p) ^ c, b = load32(p + 4), d = load32(p + 8), e = load32(p + 12);
    c = t[15][a & 0xff] ^ t[14][(a >> 8) & 0xff] ^ t[13][(a >> 16) & 0xff] ^ t[12][a >> 24] ^
        t[11][b & 0xff] ^ t[10][(b >> 8) & 0xff] ^ t[9][(b >> 16) & 0xff] ^ t[8][b >> 24] ^
        t[7][d & 0xff] ^ t[6][(d >> 8) & 0xff] ^ t[5][(d >> 16) & 0xff] ^ t[4][d >> 24] ^
        t[3][e & 0xff] ^ t[2][(e >> 8) & 0xff] ^ t[1][(e >> 16) & 0xff] ^ t[0][e >> 24];
    p += 16;
    n -= 16;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return c;
}

#if AOTI_CRC32_CLMUL
// Carry-less multiplication folding (Intel, "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ";
// the constants are those of the Linux kernel's crc32-pclmul and zlib's): four 128-bit lanes fold 64
// bytes per step, then one lane folds 16 bytes per step, then a Barrett reduction gives 32 bits.
// `c` is the running (inverted) CRC state; n >= 64 and a multiple of 16.
#define AOTI_CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))
AOTI_CLMUL_TARGET inline __m128i load(const unsigned char* q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}
// acc * x^(128 or 512) mod P, folded onto the next 16 bytes.
AOTI_CLMUL_TARGET inline __m128i fold(__m128i acc, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(acc, k, 0x11), _mm_clmulepi64_si128(acc, k, 0x00)), next);
}

AOTI_CLMUL_TARGET uint32_t crc32_clmul(uint32_t c, const unsigned char* p, size_t n) {
  alignas(16) static const uint64_t k1k2[2] = {0x0154442bd4, 0x01c6e41596};
  alignas(16) static const uint64_t k3k4[2] = {0x01751997d0, 0x00ccaa009e};
  alignas(16) static const uint64_t k5k0[2] = {0x0163cd6124, 0x0000000000};
  alignas(16) static const uint64_t poly[2] = {0x01db710641, 0x01f7011641};
  __m128i x1 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(c)));
  __m128i x2 = load(p + 16), x3 = load(p + 32), x4 = load(p + 48);
  p += 64;
  n -= 64;
  __m128i k = _mm_load_si128(reinterpret_cast<const __m128i*>(k1k2));
  while (n >= 64) {
    x1 = fold(x1, k, load(p));
    x2 = fold(x2, k, load(p + 16));
    x3 = fold(x3, k, load(p + 32));
    x4 = fold(x4, k, load(p + 48));
    p += 64;
    n -= 64;
  }
  k = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));
  x1 = fold(x1, k, x2);
  x1 = fold(x1, k, x3);
  x1 = fold(x1, k, x4);
  while (n >= 16) {
    x1 = fold(x1, k, load(p));
    p += 16;
    n -= 16;
  }
  // 128 -> 64 bits.
  __m128i x0 = _mm_clmulepi64_si128(x1, k, 0x10);
  const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x0);
  k = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k5k0));
  x0 = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k, 0x00), x0);
  // Barrett reduction to 32 bits.
  k = _mm_load_si128(reinterpret_cast<const __m128i*>(poly));
  x0 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), k, 0x10);
  x0 = _mm_clmulepi64_si128(_mm_and_si128(x0, low32), k, 0x00);
  return static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, x0), 1));
}

bool have_clmul() {
  static const bool yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return yes;
}
#endif

}  // namespace

uint32_t crc32(uint32_t crc, const unsigned char* data, size_t size) {
  uint32_t c = ~crc;
#if AOTI_CRC32_CLMUL
  if (size >= 64 && have_clmul()) {
    const size_t bulk = size & ~size_t{15};
    c = crc32_clmul(c, data, bulk);
    data += bulk;
    size -= bulk;
  }
#endif
  return ~crc32_tables(c, data, size);
}

}  // namespace aoti_host
