#include "base/sha256.h"

#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace aoti_host {
namespace {

constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void blocks_portable(uint32_t state[8], const unsigned char* p, size_t n) {
  for (; n > 0; --n, p += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5], g = state[6],
             h = state[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    state[0] += a, state[1] += b, state[2] += c, state[3] += d;
    state[4] += e, state[5] += f, state[6] += g, state[7] += h;
  }
}

#if defined(__x86_64__)
// The SHA-NI round structure (Intel's reference sequence): state kept as ABEF/CDGH, four rounds per
// sha256rnds2 pair, the message schedule with sha256msg1/msg2.
__attribute__((target("sha,sse4.1"))) void blocks_shani(uint32_t state[8], const unsigned char* p, size_t n) {
  const __m128i kShuffle = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[0]));  // DCBA
  __m128i s1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[4]));   // HGFE
  tmp = _mm_shuffle_epi32(tmp, 0xB1);                                          // CDAB
  s1 = _mm_shuffle_epi32(s1, 0x1B);                                            // EFGH
  __m128i s0 = _mm_alignr_epi8(tmp, s1, 8);                                    // ABEF
  s1 = _mm_blend_epi16(s1, tmp, 0xF0);                                         // CDGH
  for (; n > 0; --n, p += 64) {
    const __m128i save0 = s0, save1 = s1;
    __m128i m[4];
    for (int i = 0; i < 4; ++i)
      m[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)), kShuffle);
    for (int r = 0; r < 16; ++r) {
      __m128i k = _mm_add_epi32(m[r & 3], _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kK[4 * r])));
      s1 = _mm_sha256rnds2_epu32(s1, s0, k);
      if (r >= 3 && r <= 14) {
        // W[r+1] = msg2(msg1(W[r-3], W[r-2]) + alignr(W[r], W[r-1]), W[r]); msg1 was applied at group r-2
        __m128i& next = m[(r + 1) & 3];
        next = _mm_add_epi32(next, _mm_alignr_epi8(m[r & 3], m[(r - 1) & 3], 4));
        next = _mm_sha256msg2_epu32(next, m[r & 3]);
      }
      k = _mm_shuffle_epi32(k, 0x0E);
      s0 = _mm_sha256rnds2_epu32(s0, s1, k);
      if (r >= 1 && r <= 12) m[(r - 1) & 3] = _mm_sha256msg1_epu32(m[(r - 1) & 3], m[r & 3]);
    }
    s0 = _mm_add_epi32(s0, save0);
    s1 = _mm_add_epi32(s1, save1);
  }
  tmp = _mm_shuffle_epi32(s0, 0x1B);                   // FEBA
  s1 = _mm_shuffle_epi32(s1, 0xB1);                    // DCHG
  s0 = _mm_blend_epi16(tmp, s1, 0xF0);                 // DCBA
  s1 = _mm_alignr_epi8(s1, tmp, 8);                    // ABEF -> HGFE
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[0]), s0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[4]), s1);
}

bool cpu_has_shani() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & (1u << 29)) != 0;  // CPUID.(EAX=7,ECX=0):EBX.SHA
}
#endif

}  // namespace

bool Sha256::hardware() {
#if defined(__x86_64__)
  static const bool yes = cpu_has_shani();
  return yes;
#else
  return false;
#endif
}

void Sha256::blocks(const unsigned char* p, size_t n) {
#if defined(__x86_64__)
  if (hw_) return blocks_shani(state_, p, n);
#endif
  blocks_portable(state_, p, n);
}

Sha256::Sha256(bool use_hardware)
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}, hw_(use_hardware && hardware()) {}

void Sha256::update(const void* data, size_t size) {
  auto* p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (buffered_ > 0) {
    const size_t take = size < 64 - buffered_ ? size : 64 - buffered_;
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take, p += take, size -= take;
    if (buffered_ < 64) return;
    blocks(buffer_, 1);
    buffered_ = 0;
  }
  blocks(p, size / 64);
  p += size / 64 * 64;
  buffered_ = size % 64;
  std::memcpy(buffer_, p, buffered_);
}

void Sha256::finish(unsigned char out[32]) {
  const uint64_t bits = total_ * 8;
  unsigned char pad[72] = {0x80};
  const size_t len = (buffered_ < 56 ? 56 : 120) - buffered_;
  update(pad, len);
  for (int i = 0; i < 8; ++i) pad[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  update(pad, 8);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<unsigned char>(state_[i] >> (24 - 8 * j));
}

std::string Sha256::hex() {
  unsigned char d[32];
  finish(d);
  static const char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (int i = 0; i < 32; ++i) out[2 * i] = kHex[d[i] >> 4], out[2 * i + 1] = kHex[d[i] & 15];
  return out;
}

std::string sha256_hex(const void* data, size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.hex();
}

}  // namespace aoti_host
