// Native test of crc32.cpp and of ZipArchive's CRC check: the fast CRC-32 (carry-less multiplication
// where the CPU has it, tables for the tail) against a bit-at-a-time reference for every length up to
// 1 KiB at several alignments and seeds; then a member's CRC check from many threads at once.
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "aoti_host/error.h"
#include "base/crc32.h"
#include "base/zip.h"
#include "check.h"

namespace {

uint32_t reference_crc32(uint32_t crc, const unsigned char* p, size_t n) {
  crc = ~crc;
  while (n--) {
    crc ^= *p++;
    for (int i = 0; i < 8; ++i) crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return ~crc;
}

void put16(std::vector<unsigned char>& v, uint32_t x) {
  v.push_back(static_cast<unsigned char>(x));
  v.push_back(static_cast<unsigned char>(x >> 8));
}
void put32(std::vector<unsigned char>& v, uint32_t x) {
  put16(v, x & 0xffff);
  put16(v, x >> 16);
}

// A one-member stored archive; `declared` is the CRC-32 both headers claim.
std::vector<unsigned char> archive(const std::string& name, const std::vector<unsigned char>& data, uint32_t declared) {
  std::vector<unsigned char> v;
  const auto size = static_cast<uint32_t>(data.size()), name_len = static_cast<uint32_t>(name.size());
  for (uint32_t x : {0x04034b50u}) put32(v, x);
  put16(v, 20), put16(v, 0), put16(v, 0), put16(v, 0), put16(v, 0);
  put32(v, declared), put32(v, size), put32(v, size), put16(v, name_len), put16(v, 0);
  v.insert(v.end(), name.begin(), name.end());
  v.insert(v.end(), data.begin(), data.end());
  const auto cd = static_cast<uint32_t>(v.size());
  put32(v, 0x02014b50u), put16(v, 20), put16(v, 20), put16(v, 0), put16(v, 0), put16(v, 0), put16(v, 0);
  put32(v, declared), put32(v, size), put32(v, size), put16(v, name_len), put16(v, 0), put16(v, 0);
  put16(v, 0), put16(v, 0), put32(v, 0), put32(v, 0);
  v.insert(v.end(), name.begin(), name.end());
  const auto cd_size = static_cast<uint32_t>(v.size()) - cd;
  put32(v, 0x06054b50u), put16(v, 0), put16(v, 0), put16(v, 1), put16(v, 1), put32(v, cd_size), put32(v, cd), put16(v, 0);
  return v;
}

void test_crc_values() {
  const unsigned char check[] = "123456789";
  EXPECT(aoti_host::crc32(0, check, 9) == 0xCBF43926u);  // the CRC-32 check value
  EXPECT(aoti_host::crc32(0, nullptr, 0) == 0);
  std::vector<unsigned char> buf(1024 + 64);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  for (uint32_t seed : {0u, 0xdeadbeefu})
    for (size_t offset : {size_t{0}, size_t{1}, size_t{7}, size_t{13}})
      for (size_t n = 0; n <= 1024; ++n) {
        uint32_t got = aoti_host::crc32(seed, buf.data() + offset, n);
        if (got != reference_crc32(seed, buf.data() + offset, n)) {
          std::printf("FAIL: crc32 of %zu bytes at offset %zu, seed %08x\n", n, offset, seed);
          ++g_failures;
          return;
        }
      }
  // Chaining: the CRC of a then b continues from the CRC of a.
  EXPECT(aoti_host::crc32(aoti_host::crc32(0, buf.data(), 100), buf.data() + 100, 900) ==
         aoti_host::crc32(0, buf.data(), 1000));
}

void test_member_crc_from_threads() {
  std::vector<unsigned char> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 31 + (i >> 9));
  const uint32_t crc = aoti_host::crc32(0, data.data(), data.size());
  for (bool forged : {false, true}) {
    std::vector<unsigned char> zip = archive("pkg/data.bin", data, forged ? crc ^ 1 : crc);
    aoti_host::ZipArchive a(zip.data(), zip.size(), "memory.pt2");
    EXPECT(a.entries().size() == 1 && a.path() == "memory.pt2");
    const aoti_host::ZipEntry* e = a.find("pkg/data.bin");
    EXPECT(e != nullptr && e->size == data.size());
    if (e == nullptr) return;
    std::vector<int> outcome(8, -1);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < outcome.size(); ++t)
      threads.emplace_back([&, t] {
        try {
          const unsigned char* bytes = a.data(*e);
          outcome[t] = std::memcmp(bytes, data.data(), data.size()) == 0 ? 1 : 2;
        } catch (const aoti_host::Error& err) {
          const std::string what = err.what();
          outcome[t] = what.find("memory.pt2") != std::string::npos && what.find("pkg/data.bin") != std::string::npos &&
                               what.find("CRC-32") != std::string::npos
                           ? 0
                           : 3;
        }
      });
    for (auto& th : threads) th.join();
    for (int o : outcome) EXPECT(o == (forged ? 0 : 1));
  }
}

}  // namespace

int main() {
  test_crc_values();
  test_member_crc_from_threads();
  return test_result("test_crc32");
}
