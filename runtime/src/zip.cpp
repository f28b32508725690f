#include "zip.h"

#include <cstring>

#include "aoti_host/error.h"

namespace aoti_host {
namespace {

uint16_t u16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t u64(const unsigned char* p) { return u32(p) | (static_cast<uint64_t>(u32(p + 4)) << 32); }

constexpr uint32_t kEocd = 0x06054b50, kEocd64 = 0x06064b50, kEocd64Locator = 0x07064b50;
constexpr uint32_t kCentral = 0x02014b50, kLocal = 0x04034b50;

}  // namespace

ZipArchive::ZipArchive(const std::string& path) : file_(std::make_shared<MappedFile>(path)) {
  const unsigned char* d = file_->data();
  const uint64_t n = file_->size();
  auto bad = [&](const std::string& why) {
    return Error(path + ": not a valid .pt2 (zip) archive: " + why +
                 "; re-create it with torch._inductor.aoti_compile_and_package or aoti-toolchain export");
  };
  if (n < 22) throw bad("file is too short");
  // The end-of-central-directory record is in the last 64 KiB + 22 bytes.
  uint64_t eocd = UINT64_MAX;
  uint64_t lowest = n > 65557 ? n - 65557 : 0;
  for (uint64_t i = n - 22 + 1; i-- > lowest;) {
    if (u32(d + i) == kEocd) {
      eocd = i;
      break;
    }
  }
  if (eocd == UINT64_MAX) throw bad("no end-of-central-directory record (truncated?)");
  uint64_t count = u16(d + eocd + 10);
  uint64_t cd_size = u32(d + eocd + 12);
  uint64_t cd_offset = u32(d + eocd + 16);
  if (eocd >= 20 && u32(d + eocd - 20) == kEocd64Locator) {
    uint64_t off64 = u64(d + eocd - 20 + 8);
    if (off64 + 56 > n || u32(d + off64) != kEocd64) throw bad("broken zip64 end record");
    count = u64(d + off64 + 32);
    cd_size = u64(d + off64 + 40);
    cd_offset = u64(d + off64 + 48);
  }
  if (cd_offset > n || cd_size > n - cd_offset) throw bad("central directory out of bounds");
  uint64_t p = cd_offset;
  const uint64_t end = cd_offset + cd_size;
  entries_.reserve(static_cast<size_t>(count));
  for (uint64_t k = 0; k < count; ++k) {
    if (p + 46 > end || u32(d + p) != kCentral) throw bad("central directory entry " + std::to_string(k));
    ZipEntry e;
    e.method = u16(d + p + 10);
    e.crc32 = u32(d + p + 16);
    uint64_t csize = u32(d + p + 20);
    uint64_t usize = u32(d + p + 24);
    uint16_t name_len = u16(d + p + 28), extra_len = u16(d + p + 30), comment_len = u16(d + p + 32);
    uint64_t local = u32(d + p + 42);
    if (p + 46 + name_len + extra_len + comment_len > end) throw bad("central directory entry " + std::to_string(k));
    e.name.assign(reinterpret_cast<const char*>(d + p + 46), name_len);
    // Zip64 extra field: the 0xffffffff fields follow in order usize, csize, local offset.
    const unsigned char* x = d + p + 46 + name_len;
    for (uint16_t i = 0; i + 4 <= extra_len;) {
      uint16_t id = u16(x + i), len = u16(x + i + 2);
      if (i + 4 + len > extra_len) break;
      if (id == 0x0001) {
        const unsigned char* f = x + i + 4;
        uint16_t used = 0;
        if (usize == 0xffffffffu && used + 8 <= len) usize = u64(f + used), used += 8;
        if (csize == 0xffffffffu && used + 8 <= len) csize = u64(f + used), used += 8;
        if (local == 0xffffffffu && used + 8 <= len) local = u64(f + used), used += 8;
      }
      i = static_cast<uint16_t>(i + 4 + len);
    }
    if (local + 30 > n || u32(d + local) != kLocal) throw bad("local header of " + e.name);
    e.data_offset = local + 30 + u16(d + local + 26) + u16(d + local + 28);
    e.size = e.method == 0 ? usize : csize;
    if (e.data_offset > n || e.size > n - e.data_offset) throw bad("data of " + e.name + " is truncated");
    entries_.push_back(std::move(e));
    p += 46 + name_len + extra_len + comment_len;
  }
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

const unsigned char* ZipArchive::data(const ZipEntry& entry) const {
  if (entry.method != 0) {
    throw Error(path() + ": entry " + entry.name + " is compressed (method " + std::to_string(entry.method) +
                "); torch writes .pt2 entries stored: re-save the archive without compression (zip -0)");
  }
  return file_->data() + entry.data_offset;
}

}  // namespace aoti_host
