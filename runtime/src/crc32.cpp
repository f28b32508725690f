#include "crc32.h"

#include <cstring>

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

}  // namespace

uint32_t crc32(uint32_t crc, const unsigned char* data, size_t size) {
  return ~crc32_tables(~crc, data, size);
}

}  // namespace aoti_host
