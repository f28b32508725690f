#include "base/zip.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <unordered_set>

#include "aoti_host/error.h"
#include "aoti_host/status.h"
#include "base/crc32.h"
#include "base/utf8.h"

// The rules below are mirrored, decision for decision, by toolchain/pt2.py; a differential test
// (tests/integration/test_package_reader.py) runs both readers over a corpus of crafted archives.

namespace aoti_host {
namespace {

uint16_t u16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t u64(const unsigned char* p) { return u32(p) | (static_cast<uint64_t>(u32(p + 4)) << 32); }

constexpr uint32_t kEocd = 0x06054b50, kEocd64 = 0x06064b50, kEocd64Locator = 0x07064b50;
constexpr uint32_t kCentral = 0x02014b50, kLocal = 0x04034b50, kDescriptor = 0x08074b50;
constexpr uint64_t kEocdSize = 22, kLocatorSize = 20, kEocd64Size = 56, kCentralSize = 46, kLocalSize = 30;
constexpr uint32_t kSat32 = 0xffffffffu;
constexpr uint16_t kSat16 = 0xffffu;
// General-purpose flag bits that mean the bytes are not plain: encrypted, strong encryption, masked headers.
constexpr uint16_t kEncryptedFlags = 0x0001 | 0x0040 | 0x2000;
constexpr uint16_t kDescriptorFlag = 0x0008;

const char kFix[] = "re-create the package with aoti-toolchain export or torch._inductor.aoti_compile_and_package";

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// The checked end of the range [offset, offset + length): false when it overflows or passes `limit`.
bool end_of(uint64_t offset, uint64_t length, uint64_t limit, uint64_t* end) {
  return !__builtin_add_overflow(offset, length, end) && *end <= limit;
}

// Why a member name is refused, or "" when it is a plain relative '/'-separated path.
std::string name_defect(const std::string& name) {
  if (name.empty()) return "an empty member name";
  if (name.find('\0') != std::string::npos) return "a member name with a NUL byte";
  if (name.find('\\') != std::string::npos) return "a member name with a backslash";
  if (utf8_error(name) != name.size()) return "a member name that is not UTF-8";
  if (name[0] == '/') return "an absolute member name";
  size_t start = 0;
  while (true) {
    size_t slash = name.find('/', start);
    std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty()) return "a member name with an empty path component";
    if (part == "." || part == "..") return "a member name with a '" + part + "' component";
    if (slash == std::string::npos) return "";
    start = slash + 1;
  }
}

// The zip64 extended-information field (id 1) of an extra area, after checking that the area is a
// well-formed sequence of (id, length, data) records with at most one zip64 field.
struct Zip64Extra {
  bool present = false;
  const unsigned char* data = nullptr;
  uint16_t size = 0;
};

bool parse_extra(const unsigned char* x, uint16_t len, Zip64Extra* z64) {
  uint32_t i = 0;
  while (i < len) {
    if (len - i < 4) return false;
    uint16_t id = u16(x + i), size = u16(x + i + 2);
    if (len - i - 4 < size) return false;
    if (id == 0x0001) {
      if (z64->present) return false;
      z64->present = true;
      z64->data = x + i + 4;
      z64->size = size;
    }
    i += 4u + size;
  }
  return true;
}

// A zip64 field holds exactly the header fields that are saturated (0xffffffff), 8 bytes each in the order
// given, and replaces them; false when it holds more, fewer or none where one is needed.
bool apply_zip64(const Zip64Extra& z64, std::initializer_list<uint64_t*> fields) {
  uint16_t want = 0;
  for (const uint64_t* f : fields) want = static_cast<uint16_t>(want + (*f == kSat32 ? 8 : 0));
  if (z64.present != (want != 0) || (z64.present && z64.size != want)) return false;
  uint16_t used = 0;
  for (uint64_t* f : fields) {
    if (*f == kSat32) *f = u64(z64.data + used), used += 8;
  }
  return true;
}

// Where the central directory is, from the end record (and the zip64 end record when there is one).
struct Directory {
  uint64_t count = 0;   // entries
  uint64_t offset = 0;  // of its first entry: where the members end
  uint64_t end = 0;     // one past its last entry: where the end records begin
};

// What a central-directory entry says about its member, zip64 extensions applied.
struct Central {
  ZipEntry entry;
  uint64_t local = 0;      // offset of the local header
  uint64_t entry_end = 0;  // one past this central entry
  uint64_t csize = 0;
  uint16_t flags = 0;
};

// A member's byte range in the file, for the tiling check.
struct Span {
  size_t index;      // in central-directory order
  uint64_t local;    // offset of the local header
  uint64_t end = 0;  // one past its data (and data descriptor)
};

// The checks of one archive, in the order parse() runs them; each throws Error naming the archive, the
// defect and the fix. toolchain/pt2.py's _Reader has the same steps under the same names.
class Reader {
 public:
  Reader(const unsigned char* d, uint64_t n, const std::string& label) : d_(d), n_(n), label_(label) {}

  Directory directory() const;
  // `names`: the names of the entries before this one (a second member of one name is refused).
  Central central_entry(uint64_t k, uint64_t p, const Directory& dir, std::unordered_set<std::string>* names) const;
  uint64_t local_header(const Central& c, const Directory& dir, uint64_t* member_end) const;
  void check_tiling(std::vector<Span> spans, const std::vector<ZipEntry>& entries, const Directory& dir) const;
  Error bad(const std::string& why, const char* fix = kFix) const {
    return Error(label_ + ": not a valid .pt2 (zip) package: " + why + "; " + fix, AOTI_HOST_INVALID_PROGRAM);
  }

 private:
  // A file that does not even start like a zip (no "PK") is refused as that, not by the first record it lacks.
  bool starts_like_zip() const { return n_ >= 2 && d_ != nullptr && d_[0] == 'P' && d_[1] == 'K'; }
  Error not_zip() const {
    return Error(label_ + ": not a .pt2 package (not a zip archive" + (n_ == 0 ? ": the file is empty" : "") +
                     "); pass the .pt2 written by aoti-toolchain export or torch._inductor.aoti_compile_and_package "
                     "(re-export it, or copy it again if this one was damaged)",
                 AOTI_HOST_INVALID_PROGRAM);
  }
  uint64_t end_record() const;
  void zip64_end_record(uint64_t eocd, Directory* dir, uint64_t* cd_size) const;
  void check_data_descriptor(const Central& c, const std::string& member, uint64_t data_end, bool wide,
                             uint64_t limit, uint64_t* member_end) const;

  const unsigned char* d_;
  uint64_t n_;
  const std::string& label_;
};

// The end record: its comment must run exactly to the end of the file, and only one position may satisfy
// that (a comment that holds a second end record is ambiguous).
uint64_t Reader::end_record() const {
  if (d_ == nullptr && n_ != 0) throw bad("no bytes");
  if (n_ < kEocdSize)
    throw starts_like_zip() ? bad("the file is too short to be a zip archive (truncated?)") : not_zip();
  uint64_t eocd = UINT64_MAX;
  const uint64_t lowest = n_ - kEocdSize > 0xffff ? n_ - kEocdSize - 0xffff : 0;
  for (uint64_t i = n_ - kEocdSize + 1; i-- > lowest;) {
    if (u32(d_ + i) == kEocd && u16(d_ + i + 20) == n_ - i - kEocdSize) {
      if (eocd != UINT64_MAX) throw bad("the archive comment holds a second end-of-central-directory record");
      eocd = i;
    }
  }
  if (eocd == UINT64_MAX) {
    if (!starts_like_zip()) throw not_zip();
    throw bad("no end-of-central-directory record ending at the end of the file (truncated, or bytes appended)");
  }
  if (u16(d_ + eocd + 4) != 0 || u16(d_ + eocd + 6) != 0 || u16(d_ + eocd + 8) != u16(d_ + eocd + 10))
    throw bad("a multi-disk archive");
  return eocd;
}

// The zip64 end record, when a locator sits right before the end record: its 64-bit values replace the
// saturated 16/32-bit ones they must agree with.
void Reader::zip64_end_record(uint64_t eocd, Directory* dir, uint64_t* cd_size) const {
  if (eocd < kLocatorSize || u32(d_ + eocd - kLocatorSize) != kEocd64Locator) return;
  const unsigned char* loc = d_ + eocd - kLocatorSize;
  if (u32(loc + 4) != 0 || u32(loc + 16) > 1) throw bad("a multi-disk zip64 archive");
  const uint64_t at = u64(loc + 8);
  if (eocd - kLocatorSize < kEocd64Size || at != eocd - kLocatorSize - kEocd64Size)
    throw bad("the zip64 locator does not point at a zip64 end record right before it");
  const unsigned char* r = d_ + at;
  if (u32(r) != kEocd64 || u64(r + 4) != kEocd64Size - 12) throw bad("a malformed zip64 end record");
  if (u32(r + 16) != 0 || u32(r + 20) != 0 || u64(r + 24) != u64(r + 32)) throw bad("a multi-disk zip64 archive");
  const uint64_t count64 = u64(r + 32), size64 = u64(r + 40), offset64 = u64(r + 48);
  if ((dir->count != kSat16 && dir->count != count64) || (*cd_size != kSat32 && *cd_size != size64) ||
      (dir->offset != kSat32 && dir->offset != offset64))
    throw bad("the end record and the zip64 end record disagree");
  dir->count = count64;
  *cd_size = size64;
  dir->offset = offset64;
  dir->end = at;
}

Directory Reader::directory() const {
  const uint64_t eocd = end_record();
  Directory dir;
  dir.count = u16(d_ + eocd + 10);
  uint64_t cd_size = u32(d_ + eocd + 12);
  dir.offset = u32(d_ + eocd + 16);
  dir.end = eocd;  // where the central directory must end
  zip64_end_record(eocd, &dir, &cd_size);
  uint64_t cd_end = 0;
  if (!end_of(dir.offset, cd_size, dir.end, &cd_end) || cd_end != dir.end)
    throw bad("the central directory does not end where the end record begins (bytes between or missing)");
  // Each central entry takes at least 46 bytes: bound the count before allocating for it.
  if (dir.count > cd_size / kCentralSize)
    throw bad("the end record claims " + std::to_string(dir.count) + " members in a " + std::to_string(cd_size) +
              "-byte central directory");
  return dir;
}

// Central entry k at offset p: its name, a stored and unencrypted member on this disk, and its zip64 field
// holding exactly the saturated fields, in the order usize, csize, offset.
Central Reader::central_entry(uint64_t k, uint64_t p, const Directory& dir,
                              std::unordered_set<std::string>* names) const {
  const std::string which = "central directory entry " + std::to_string(k);
  uint64_t fixed_end = 0;
  if (!end_of(p, kCentralSize, dir.end, &fixed_end) || u32(d_ + p) != kCentral)
    throw bad(which + " is missing or truncated");
  const unsigned char* c = d_ + p;
  Central out;
  out.flags = u16(c + 8);
  const uint16_t method = u16(c + 10);
  const uint32_t crc = u32(c + 16);
  uint64_t csize = u32(c + 20), usize = u32(c + 24);
  const uint16_t name_len = u16(c + 28), extra_len = u16(c + 30), comment_len = u16(c + 32);
  uint64_t local = u32(c + 42);
  if (!end_of(fixed_end, uint64_t{name_len} + extra_len + comment_len, dir.end, &out.entry_end))
    throw bad(which + " runs past the central directory");
  ZipEntry& e = out.entry;
  e.name.assign(reinterpret_cast<const char*>(c + 46), name_len);
  const std::string member = "member '" + e.name + "'";
  std::string defect = name_defect(e.name);
  if (!defect.empty()) throw bad(which + " has " + defect);
  if (!names->insert(e.name).second) throw bad("two members are named '" + e.name + "'");
  if (out.flags & kEncryptedFlags)
    throw bad(member + " is encrypted", "re-export the package unencrypted with aoti-toolchain export");
  if (method != 0)
    throw bad(member + " is compressed (method " + std::to_string(method) + ")",
              "torch stores .pt2 members uncompressed: re-save it with zip -0 or re-export it with "
              "aoti-toolchain export");
  if (u16(c + 34) != 0) throw bad(member + " starts on another disk (a multi-disk archive)");
  Zip64Extra z64;
  if (!parse_extra(c + 46 + name_len, extra_len, &z64)) throw bad(member + " has a malformed central extra field");
  if (!apply_zip64(z64, {&usize, &csize, &local}))
    throw bad(member + ": its central zip64 field does not match the saturated header fields");
  if (csize != usize) throw bad(member + " is stored but its compressed and uncompressed sizes differ");
  e.size = usize;
  e.crc32 = crc;
  e.method = method;
  out.csize = csize;
  out.local = local;
  return out;
}

// The local header must repeat what the central one says; returns the offset of the member's data and sets
// *member_end past its data (and data descriptor).
uint64_t Reader::local_header(const Central& c, const Directory& dir, uint64_t* member_end) const {
  const ZipEntry& e = c.entry;
  const std::string member = "member '" + e.name + "'";
  uint64_t local_fixed_end = 0;
  if (!end_of(c.local, kLocalSize, dir.offset, &local_fixed_end) || u32(d_ + c.local) != kLocal)
    throw bad(member + ": no local header at offset " + std::to_string(c.local));
  const unsigned char* l = d_ + c.local;
  const uint16_t lname_len = u16(l + 26), lextra_len = u16(l + 28);
  uint64_t data_offset = 0;
  if (!end_of(local_fixed_end, uint64_t{lname_len} + lextra_len, dir.offset, &data_offset))
    throw bad(member + ": its local header runs past the members");
  if (lname_len != e.name.size() || std::memcmp(l + 30, e.name.data(), lname_len) != 0)
    throw bad(member + ": the local header names another member");
  if (u16(l + 6) != c.flags || u16(l + 8) != e.method)
    throw bad(member + ": local and central headers disagree on flags or method");
  Zip64Extra lz64;
  if (!parse_extra(l + 30 + lname_len, lextra_len, &lz64)) throw bad(member + " has a malformed local extra field");
  uint32_t lcrc = u32(l + 14);
  uint64_t lcsize = u32(l + 18), lusize = u32(l + 22);
  if (!apply_zip64(lz64, {&lusize, &lcsize}))
    throw bad(member + ": its local zip64 field does not match the saturated header fields");
  uint64_t data_end = 0;
  if (!end_of(data_offset, e.size, dir.offset, &data_end)) throw bad(member + ": its data runs past the members");
  *member_end = data_end;
  if (c.flags & kDescriptorFlag) {
    // The local header holds zeros or the same values as the central one.
    if (!((lcrc == 0 && lcsize == 0 && lusize == 0) || (lcrc == e.crc32 && lcsize == c.csize && lusize == e.size)))
      throw bad(member + ": local and central headers disagree on CRC-32 or sizes");
    check_data_descriptor(c, member, data_end, lz64.present, dir.offset, member_end);
  } else if (lcrc != e.crc32 || lcsize != c.csize || lusize != e.size) {
    throw bad(member + ": local and central headers disagree on CRC-32 or sizes");
  }
  return data_offset;
}

// Sizes and CRC follow the data (optionally after a signature), 8-byte sizes when the local header carries a
// zip64 field (`wide`).
void Reader::check_data_descriptor(const Central& c, const std::string& member, uint64_t data_end, bool wide,
                                   uint64_t limit, uint64_t* member_end) const {
  const uint64_t width = wide ? 8 : 4;
  uint64_t q = data_end, desc_end = 0;
  if (end_of(q, 4, limit, &desc_end) && u32(d_ + q) == kDescriptor) q = desc_end;
  if (!end_of(q, 4 + 2 * width, limit, &desc_end)) throw bad(member + ": its data descriptor is truncated");
  const unsigned char* x = d_ + q;
  uint64_t dcsize = wide ? u64(x + 4) : u32(x + 4), dusize = wide ? u64(x + 12) : u32(x + 8);
  if (u32(x) != c.entry.crc32 || dcsize != c.csize || dusize != c.entry.size)
    throw bad(member + ": its data descriptor and central header disagree");
  *member_end = desc_end;
}

// The members and the central directory tile the file: no bytes before the first member, between two members
// or before the central directory (prepended data, hidden or overlapping members).
void Reader::check_tiling(std::vector<Span> spans, const std::vector<ZipEntry>& entries, const Directory& dir) const {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.local < b.local; });
  uint64_t expect = 0;
  for (const Span& m : spans) {
    const std::string& name = entries[m.index].name;
    if (m.local < expect) throw bad("member '" + name + "' overlaps the member before it");
    if (m.local > expect)
      throw bad(std::to_string(m.local - expect) + " unlisted bytes at offset " + std::to_string(expect) +
                (expect == 0 ? " (data before the first member)" : " (between members)"));
    expect = m.end;
  }
  if (expect != dir.offset)
    throw bad(std::to_string(dir.offset - expect) + " unlisted bytes at offset " + std::to_string(expect) +
              " (before the central directory)");
}

}  // namespace

ZipArchive::ZipArchive(const std::string& path) : file_(std::make_shared<MappedFile>(path)), label_(path) {
  base_ = file_->data();
  size_ = file_->size();
  parse();
}

ZipArchive::ZipArchive(const unsigned char* data, size_t size, std::string label)
    : base_(data), size_(size), label_(std::move(label)) {
  parse();
}

void ZipArchive::parse() {
  const Reader reader(base_, size_, label_);
  const Directory dir = reader.directory();
  std::vector<ZipEntry> entries;
  std::vector<Span> spans;
  entries.reserve(static_cast<size_t>(dir.count));
  spans.reserve(static_cast<size_t>(dir.count));
  std::unordered_set<std::string> names;
  names.reserve(static_cast<size_t>(dir.count));
  uint64_t p = dir.offset;
  for (uint64_t k = 0; k < dir.count; ++k) {
    Central c = reader.central_entry(k, p, dir, &names);
    uint64_t member_end = 0;
    c.entry.data_offset = reader.local_header(c, dir, &member_end);
    spans.push_back(Span{entries.size(), c.local, member_end});
    entries.push_back(std::move(c.entry));
    p = c.entry_end;
  }
  if (p != dir.end) throw reader.bad("the central directory has bytes after its last entry");
  reader.check_tiling(std::move(spans), entries, dir);
  entries_ = std::move(entries);
  crc_ok_.reset(new std::atomic<bool>[entries_.size()]);
  for (size_t i = 0; i < entries_.size(); ++i) crc_ok_[i].store(false, std::memory_order_relaxed);
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

size_t ZipArchive::index_of(const ZipEntry& entry) const {
  if (entries_.empty() || &entry < entries_.data() || &entry >= entries_.data() + entries_.size())
    throw Error(label_ + ": member '" + entry.name + "' is not a member of this archive (internal error)");
  return static_cast<size_t>(&entry - entries_.data());
}

const unsigned char* ZipArchive::unchecked_data(const ZipEntry& entry) const {
  return base_ + entries_[index_of(entry)].data_offset;
}

bool ZipArchive::verified(const ZipEntry& entry) const {
  return crc_ok_[index_of(entry)].load(std::memory_order_acquire);
}

void ZipArchive::verify(const ZipEntry& entry, uint32_t actual) const {
  const size_t index = index_of(entry);
  if (actual != entry.crc32)
    throw Error(label_ + ": member '" + entry.name + "' is corrupt: the CRC-32 of its bytes is " + hex32(actual) +
                    ", the archive declares " + hex32(entry.crc32) +
                    "; the package was damaged or tampered with: re-export it or fetch it again",
                AOTI_HOST_INVALID_PROGRAM);
  crc_ok_[index].store(true, std::memory_order_release);
}

const unsigned char* ZipArchive::data(const ZipEntry& entry) const {
  const size_t index = index_of(entry);
  const unsigned char* bytes = base_ + entry.data_offset;
  if (!crc_ok_[index].load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(crc_mutex_);
    if (!crc_ok_[index].load(std::memory_order_relaxed)) verify(entry, crc32(0, bytes, static_cast<size_t>(entry.size)));
  }
  return bytes;
}

}  // namespace aoti_host
