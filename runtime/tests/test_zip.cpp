// Native tests of the package reader (src/zip.cpp) on archives built here byte by byte: a well-formed one
// reads back its members and bytes; each way an archive can be ambiguous or damaged is refused with an
// Error (AOTI_HOST_INVALID_PROGRAM) naming the archive and the defect; a member whose bytes do not match
// its CRC-32 is refused when its bytes are asked for, not before.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "aoti_host/c_api.h"
#include "aoti_host/error.h"
#include "base/crc32.h"
#include "base/zip.h"
#include "check.h"

namespace {

using aoti_host::Error;
using aoti_host::ZipArchive;
using aoti_host::ZipEntry;
using aoti_host::crc32;
using Bytes = std::vector<unsigned char>;

void put16(Bytes& b, uint32_t v) {
  b.push_back(static_cast<unsigned char>(v)), b.push_back(static_cast<unsigned char>(v >> 8));
}
void put32(Bytes& b, uint32_t v) { put16(b, v & 0xffff), put16(b, v >> 16); }
void put(Bytes& b, const std::string& s) { b.insert(b.end(), s.begin(), s.end()); }
void set32(Bytes& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + static_cast<size_t>(i)] = static_cast<unsigned char>(v >> (8 * i));
}

struct Member {
  Member(std::string n, std::string d, uint16_t m = 0, std::string c = "")
      : name(std::move(n)), data(std::move(d)), method(m), central_name(std::move(c)) {}
  std::string name;
  std::string data;
  uint16_t method;
  std::string central_name;  // empty: same as name
};

// A stored zip as torch writes it: local header + data per member, the central directory, the end record.
// offsets[i]: where member i's local header starts.
Bytes make_zip(const std::vector<Member>& members, std::vector<size_t>* offsets = nullptr) {
  Bytes out, cd;
  for (const auto& m : members) {
    const uint32_t crc = aoti_host::crc32(0, reinterpret_cast<const unsigned char*>(m.data.data()), m.data.size());
    const size_t local = out.size();
    if (offsets) offsets->push_back(local);
    put32(out, 0x04034b50), put16(out, 20), put16(out, 0), put16(out, m.method), put16(out, 0), put16(out, 0);
    put32(out, crc), put32(out, static_cast<uint32_t>(m.data.size())), put32(out, static_cast<uint32_t>(m.data.size()));
    put16(out, static_cast<uint32_t>(m.name.size())), put16(out, 0), put(out, m.name), put(out, m.data);
    const std::string& cname = m.central_name.empty() ? m.name : m.central_name;
    put32(cd, 0x02014b50), put16(cd, 20), put16(cd, 20), put16(cd, 0), put16(cd, m.method), put16(cd, 0),
        put16(cd, 0), put32(cd, crc), put32(cd, static_cast<uint32_t>(m.data.size())),
        put32(cd, static_cast<uint32_t>(m.data.size())), put16(cd, static_cast<uint32_t>(cname.size())), put16(cd, 0),
        put16(cd, 0), put16(cd, 0), put16(cd, 0), put32(cd, 0), put32(cd, static_cast<uint32_t>(local)), put(cd, cname);
  }
  const size_t cd_offset = out.size();
  out.insert(out.end(), cd.begin(), cd.end());
  put32(out, 0x06054b50), put16(out, 0), put16(out, 0), put16(out, static_cast<uint32_t>(members.size())),
      put16(out, static_cast<uint32_t>(members.size())), put32(out, static_cast<uint32_t>(cd.size())),
      put32(out, static_cast<uint32_t>(cd_offset)), put16(out, 0);
  return out;
}

const std::vector<Member> kModel = {{"m/data/aotinductor/model/m.so", "\x7f" "ELF plugin bytes"},
                                    {"m/data/aotinductor/model/m_weights.blob", std::string(1000, '\x01')},
                                    {"m/extra/aoti_toolchain_contract.json", "{\"inputs\": [], \"outputs\": []}"}};

// Opening `bytes` throws an Error with INVALID_PROGRAM whose message names the archive and contains `defect`.
void expect_refused(const Bytes& bytes, const std::string& defect, const char* what) {
  try {
    ZipArchive zip(bytes.data(), bytes.size(), "hostile.pt2");
    std::printf("FAIL: %s: accepted (%zu members), expected \"%s\"\n", what, zip.entries().size(), defect.c_str());
    ++g_failures;
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (e.status() != AOTI_HOST_INVALID_PROGRAM || msg.find("hostile.pt2") == std::string::npos ||
        msg.find(defect) == std::string::npos) {
      std::printf("FAIL: %s: status %d, message \"%s\", expected \"%s\"\n", what, static_cast<int>(e.status()),
                  msg.c_str(), defect.c_str());
      ++g_failures;
    }
  }
}

void test_reads_members_and_bytes() {
  const Bytes bytes = make_zip(kModel);
  ZipArchive zip(bytes.data(), bytes.size(), "model.pt2");
  EXPECT(zip.path() == "model.pt2");
  EXPECT(zip.entries().size() == kModel.size());
  for (size_t i = 0; i < kModel.size() && i < zip.entries().size(); ++i) {
    const auto& e = zip.entries()[i];
    EXPECT(e.name == kModel[i].name);
    EXPECT(e.size == kModel[i].data.size());
    EXPECT(e.method == 0);
    EXPECT(std::memcmp(zip.data(e), kModel[i].data.data(), kModel[i].data.size()) == 0);
    EXPECT(zip.data(e) == bytes.data() + e.data_offset);  // a view of the bytes, nothing copied
  }
  EXPECT(zip.find(kModel[1].name) == &zip.entries()[1]);
  EXPECT(zip.find("m/data/aotinductor/model/missing.so") == nullptr);
  EXPECT(zip.find("") == nullptr);
  // An archive without members is well formed (an end record only).
  const Bytes empty = make_zip({});
  ZipArchive none(empty.data(), empty.size(), "empty.pt2");
  EXPECT(none.entries().empty());
}

void test_crc_checked_on_first_use() {
  std::vector<size_t> offsets;
  Bytes bytes = make_zip(kModel, &offsets);
  // Flip one byte of the weights member: the archive still opens, the other members read, the damaged one
  // throws every time it is asked for.
  const size_t at = offsets[1] + 30 + kModel[1].name.size() + 500;
  bytes[at] ^= 0x40;
  ZipArchive zip(bytes.data(), bytes.size(), "damaged.pt2");
  EXPECT(std::memcmp(zip.data(zip.entries()[0]), kModel[0].data.data(), kModel[0].data.size()) == 0);
  for (int round = 0; round < 2; ++round) {
    bool threw = false;
    try {
      zip.data(zip.entries()[1]);
    } catch (const Error& e) {
      threw = true;
      const std::string msg = e.what();
      EXPECT(msg.find("damaged.pt2") != std::string::npos && msg.find("CRC-32") != std::string::npos);
      EXPECT(msg.find(kModel[1].name) != std::string::npos);
    }
    EXPECT(threw);
  }
}

// A reader that checks the CRC in its own pass (the device upload): unchecked_data() hands out the bytes,
// verify() with a wrong CRC throws data()'s error and caches nothing, with the right one it caches the match.
void test_crc_checked_in_the_readers_pass() {
  std::vector<size_t> offsets;
  Bytes bytes = make_zip(kModel, &offsets);
  {
    ZipArchive zip(bytes.data(), bytes.size(), "model.pt2");
    const ZipEntry& w = zip.entries()[1];
    const unsigned char* raw = zip.unchecked_data(w);
    EXPECT(!zip.verified(w));
    bool threw = false;
    try {
      zip.verify(w, crc32(0, raw, static_cast<size_t>(w.size)) ^ 1u);
    } catch (const Error& e) {
      threw = std::string(e.what()).find("CRC-32") != std::string::npos;
    }
    EXPECT(threw && !zip.verified(w));
    zip.verify(w, crc32(0, raw, static_cast<size_t>(w.size)));
    EXPECT(zip.verified(w) && zip.data(w) == raw);
  }
  bytes[offsets[1] + 30 + kModel[1].name.size() + 7] ^= 0x01;
  ZipArchive damaged(bytes.data(), bytes.size(), "damaged.pt2");
  const ZipEntry& w = damaged.entries()[1];
  bool threw = false;
  try {
    damaged.verify(w, crc32(0, damaged.unchecked_data(w), static_cast<size_t>(w.size)));
  } catch (const Error& e) {
    threw = std::string(e.what()).find(kModel[1].name) != std::string::npos;
  }
  EXPECT(threw && !damaged.verified(w));
}

void test_refusals() {
  const Bytes good = make_zip(kModel);
  std::vector<size_t> offsets;
  make_zip(kModel, &offsets);
  expect_refused(Bytes(good.begin(), good.begin() + 10), "too short", "10 bytes");
  expect_refused(Bytes(good.begin(), good.end() - 1), "end-of-central-directory", "the end record cut");
  {
    Bytes b = good;
    b.push_back(0);
    expect_refused(b, "end-of-central-directory", "a byte appended");
  }
  {
    Bytes b(good.size() + 7, 'x');  // bytes before the first member: a member could hide there
    std::copy(good.begin(), good.end(), b.begin() + 7);
    expect_refused(b, "central directory does not end where the end record begins", "bytes prepended");
  }
  expect_refused(make_zip({{"a.txt", "1"}, {"a.txt", "2"}}), "two members are named 'a.txt'", "duplicate names");
  for (const char* name : {"../evil.so", "/abs.so", "a//b", "a/./b", "a\\b"})
    expect_refused(make_zip({{name, "x"}}), "", name);
  expect_refused(make_zip({{"c.bin", "compressed?", 8}}), "compressed (method 8)", "a deflated member");
  expect_refused(make_zip({{"a.txt", "x", 0, "b.txt"}}), "another member", "local and central names differ");
  {
    // The central header declares one more byte than the local header: the members then overlap the
    // central directory, or the headers disagree.
    Bytes b = good;
    const size_t cd = good.size() - 22 - (3 * 46 + kModel[0].name.size() + kModel[1].name.size() + kModel[2].name.size());
    set32(b, cd + 20, static_cast<uint32_t>(kModel[0].data.size() + 1));
    set32(b, cd + 24, static_cast<uint32_t>(kModel[0].data.size() + 1));
    expect_refused(b, "", "sizes disagree");
  }
  {
    Bytes b = good;  // the end record claims one member more than the directory holds
    b[good.size() - 22 + 8] = 4, b[good.size() - 22 + 10] = 4;
    expect_refused(b, "", "member count");
  }
}

void test_every_truncation_is_refused() {
  // Every proper prefix of a valid archive is refused, none crashes (the ASan variant runs this too).
  const Bytes good = make_zip(kModel);
  int accepted = 0;
  for (size_t n = 0; n < good.size(); ++n) {
    try {
      ZipArchive zip(good.data(), n, "cut.pt2");
      ++accepted;
    } catch (const Error& e) {
      if (e.status() != AOTI_HOST_INVALID_PROGRAM) ++accepted;
    }
  }
  EXPECT(accepted == 0);
}

void test_reads_a_file() {
  // The path constructor maps the file; a missing file is an Error naming it.
  const Bytes bytes = make_zip(kModel);
  char path[] = "/tmp/test_zip_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT(fd >= 0);
  if (fd < 0) return;
  FILE* f = fdopen(fd, "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  {
    ZipArchive zip(path);
    EXPECT(zip.path() == path && zip.entries().size() == kModel.size());
    EXPECT(std::memcmp(zip.data(zip.entries()[2]), kModel[2].data.data(), kModel[2].data.size()) == 0);
  }
  std::remove(path);
  bool threw = false;
  try {
    ZipArchive zip(path);
  } catch (const Error& e) {
    threw = std::string(e.what()).find(path) != std::string::npos;
  }
  EXPECT(threw);
}

}  // namespace

int main() {
  test_reads_members_and_bytes();
  test_crc_checked_on_first_use();
  test_crc_checked_in_the_readers_pass();
  test_refusals();
  test_every_truncation_is_refused();
  test_reads_a_file();
  return test_result("test_zip");
}
