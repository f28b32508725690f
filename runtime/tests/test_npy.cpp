// Native test of npy.cpp: hand-written .npy bytes (no numpy at test time) and write/read round trips.
// Exit 0 when every check passes; otherwise prints "FAIL: ..." per failed check and exits 1.
#include "aoti_host/error.h"
#include "../tools/npy.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace {

using aoti_host::NpyArray;
using Bytes = std::vector<unsigned char>;

int g_failures = 0;
std::string g_dir;

#define CHECK(cond, what)                                                             \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::printf("FAIL: %s (%s, line %d)\n", std::string(what).c_str(), #cond, __LINE__); \
      ++g_failures;                                                                   \
    }                                                                                 \
  } while (0)

std::string path_of(const std::string& name) { return g_dir + "/" + name; }

void write_file(const std::string& path, const Bytes& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::printf("FAIL: cannot create fixture %s\n", path.c_str());
    std::exit(1);
  }
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

Bytes read_file(const std::string& path) {
  Bytes out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  int c;
  while ((c = std::fgetc(f)) != EOF) out.push_back(static_cast<unsigned char>(c));
  std::fclose(f);
  return out;
}

// A .npy file as numpy lays it out: magic, version, little-endian header length, padded dict, data.
Bytes make_npy(const std::string& dict_body, const Bytes& data, int major = 1) {
  std::string dict = "{" + dict_body + "}";
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t prefix = 8 + len_bytes;
  size_t total = ((prefix + dict.size() + 1 + 63) / 64) * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  for (size_t k = 0; k < len_bytes; ++k) out.push_back(static_cast<unsigned char>((dict.size() >> (8 * k)) & 0xff));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string header(const std::string& descr, bool fortran, const std::string& shape) {
  return "'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape + ", ";
}

Bytes iota_bytes(size_t n) {
  Bytes b(n);
  for (size_t k = 0; k < n; ++k) b[k] = static_cast<unsigned char>(k * 7 + 1);
  return b;
}

// Runs fn, expecting aoti_host::Error whose message contains every one of `needles`.
void expect_error(const std::string& what, const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
  } catch (const aoti_host::Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) CHECK(msg.find(n) != std::string::npos, what + ": message '" + msg + "' lacks '" + n + "'");
    return;
  } catch (const std::exception& e) {
    CHECK(false, what + ": threw a non-aoti_host::Error: " + e.what());
    return;
  }
  CHECK(false, what + ": no error thrown");
}

struct DtypeCase {
  const char* descr;
  int32_t code;
  size_t itemsize;
};

void test_read_each_descr() {
  const DtypeCase cases[] = {
      {"<f2", 5, 2}, {"<f4", 6, 4}, {"<f8", 7, 8}, {"|i1", 1, 1}, {"<i1", 1, 1}, {"<i2", 2, 2},
      {"<i4", 3, 4}, {"<i8", 4, 8}, {"|u1", 0, 1}, {"<u1", 0, 1}, {"|b1", 11, 1}, {"=f4", 6, 4},
      {"=i8", 4, 8}, {">u1", 0, 1}, {">b1", 11, 1},
      {"<V2", 15, 2},  // ml_dtypes.bfloat16 as numpy.save writes it
  };
  for (const auto& c : cases) {
    const Bytes data = iota_bytes(2 * 3 * c.itemsize);
    const std::string p = path_of(std::string("read_") + std::to_string(&c - cases) + ".npy");
    write_file(p, make_npy(header(c.descr, false, "(2, 3)"), data));
    try {
      NpyArray a = aoti_host::read_npy(p);
      CHECK(a.dtype == c.code, std::string("dtype of ") + c.descr);
      CHECK((a.sizes == std::vector<int64_t>{2, 3}), std::string("sizes of ") + c.descr);
      CHECK((a.strides == std::vector<int64_t>{3, 1}), std::string("strides of ") + c.descr);
      CHECK(a.data == data, std::string("data of ") + c.descr);
    } catch (const std::exception& e) {
      CHECK(false, std::string("reading ") + c.descr + ": " + e.what());
    }
  }
}

void test_versions() {
  const Bytes data = iota_bytes(4 * 4);
  for (int major : {1, 2, 3}) {
    const std::string p = path_of("version" + std::to_string(major) + ".npy");
    // Double quotes and no trailing comma: numpy doesn't write them, but they are valid literals.
    write_file(p, make_npy("\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (4,)", data, major));
    try {
      NpyArray a = aoti_host::read_npy(p);
      CHECK(a.dtype == 6 && a.sizes == std::vector<int64_t>{4} && a.data == data, "version " + std::to_string(major));
    } catch (const std::exception& e) {
      CHECK(false, "version " + std::to_string(major) + ": " + e.what());
    }
  }
  Bytes bad = make_npy(header("<f4", false, "(4,)"), data);
  bad[6] = 4;
  write_file(path_of("version4.npy"), bad);
  expect_error("version 4.0", [] { aoti_host::read_npy(path_of("version4.npy")); }, {"version4.npy", "version 4.0"});
}

void test_round_trip_each_dtype() {
  const DtypeCase cases[] = {{"", 5, 2}, {"", 6, 4}, {"", 7, 8}, {"", 1, 1}, {"", 2, 2},
                             {"", 3, 4}, {"", 4, 8}, {"", 0, 1}, {"", 11, 1}, {"<V2", 15, 2}};
  for (const auto& c : cases) {
    Bytes data = iota_bytes(2 * 3 * 4 * c.itemsize);
    if (c.code == 11)
      for (auto& b : data) b &= 1;
    const std::string name = "rt_" + std::to_string(c.code) + ".npy";
    const std::string p = path_of(name);
    try {
      aoti_host::write_npy(p, c.code, {2, 3, 4}, {12, 4, 1}, data.data());
      const Bytes file = read_file(p);
      CHECK(file.size() > 10 && file[6] == 1 && file[7] == 0, name + ": written as version 1.0");
      const size_t hl = file.size() > 10 ? file[8] | (file[9] << 8) : 0;
      CHECK((10 + hl) % 64 == 0, name + ": data offset is 64-byte aligned");
      CHECK(file.size() > 10 + hl && file[10 + hl - 1] == '\n', name + ": header ends with a newline");
      if (*c.descr != '\0') {
        const std::string head(file.begin() + 10, file.begin() + static_cast<std::ptrdiff_t>(std::min(file.size(), 10 + hl)));
        CHECK(head.find(std::string("'descr': '") + c.descr + "'") != std::string::npos, name + ": descr " + c.descr);
      }
      NpyArray a = aoti_host::read_npy(p);
      CHECK(a.dtype == c.code, name + ": dtype");
      CHECK((a.sizes == std::vector<int64_t>{2, 3, 4}), name + ": sizes");
      CHECK((a.strides == std::vector<int64_t>{12, 4, 1}), name + ": strides");
      CHECK(a.data == data, name + ": data");
    } catch (const std::exception& e) {
      CHECK(false, name + ": " + e.what());
    }
  }
  expect_error("write of a dtype numpy lacks", [] {
    const float x = 0;
    aoti_host::write_npy(path_of("complex32.npy"), 8, {1}, {1}, &x);
  }, {"complex32.npy", "8"});
}

void test_fortran_order() {
  const Bytes data = iota_bytes(2 * 3 * 4 * 4);
  const std::string p = path_of("fortran.npy");
  write_file(p, make_npy(header("<f4", true, "(2, 3, 4)"), data));
  try {
    NpyArray a = aoti_host::read_npy(p);
    CHECK((a.sizes == std::vector<int64_t>{2, 3, 4}), "fortran: sizes");
    CHECK((a.strides == std::vector<int64_t>{1, 2, 6}), "fortran: column-major strides");
    CHECK(a.data == data, "fortran: data kept as stored");
    // Written back, it comes out in C order: element (i,j,k) at i*12+j*4+k.
    aoti_host::write_npy(path_of("fortran_c.npy"), a.dtype, a.sizes, a.strides, a.data.data());
    NpyArray c = aoti_host::read_npy(path_of("fortran_c.npy"));
    CHECK((c.strides == std::vector<int64_t>{12, 4, 1}), "fortran rewritten: C strides");
    bool same = c.data.size() == a.data.size();
    for (int i = 0; same && i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k)
          same = same && std::memcmp(&c.data[(i * 12 + j * 4 + k) * 4], &a.data[(i + j * 2 + k * 6) * 4], 4) == 0;
    CHECK(same, "fortran rewritten: logical order");
  } catch (const std::exception& e) {
    CHECK(false, std::string("fortran: ") + e.what());
  }
}

void test_zero_d_and_empty() {
  const double v = 3.25;
  const std::string p = path_of("scalar.npy");
  try {
    aoti_host::write_npy(p, 7, {}, {}, &v);
    NpyArray a = aoti_host::read_npy(p);
    CHECK(a.dtype == 7 && a.sizes.empty() && a.strides.empty(), "0-d: metadata");
    double back = 0;
    CHECK(a.data.size() == sizeof back, "0-d: one element");
    if (a.data.size() == sizeof back) std::memcpy(&back, a.data.data(), sizeof back);
    CHECK(back == v, "0-d: value");
    const std::string text(reinterpret_cast<const char*>(read_file(p).data()), read_file(p).size());
    CHECK(text.find("'shape': ()") != std::string::npos, "0-d: shape written as ()");
  } catch (const std::exception& e) {
    CHECK(false, std::string("0-d: ") + e.what());
  }
  write_file(path_of("scalar_hand.npy"), make_npy(header("<i8", false, "()"), iota_bytes(8)));
  try {
    NpyArray a = aoti_host::read_npy(path_of("scalar_hand.npy"));
    CHECK(a.dtype == 4 && a.sizes.empty() && a.data == iota_bytes(8), "0-d by hand");
  } catch (const std::exception& e) {
    CHECK(false, std::string("0-d by hand: ") + e.what());
  }
  try {
    aoti_host::write_npy(path_of("empty.npy"), 6, {0, 3}, {3, 1}, nullptr);
    NpyArray a = aoti_host::read_npy(path_of("empty.npy"));
    CHECK((a.sizes == std::vector<int64_t>{0, 3}) && a.data.empty(), "empty (0, 3)");
  } catch (const std::exception& e) {
    CHECK(false, std::string("empty: ") + e.what());
  }
}

void test_bad_files() {
  write_file(path_of("truncated.npy"), make_npy(header("<f4", false, "(2, 3)"), iota_bytes(23)));
  expect_error("truncated data", [] { aoti_host::read_npy(path_of("truncated.npy")); },
               {"truncated.npy", "truncated", "24", "23"});

  Bytes cut = make_npy(header("<f4", false, "(2, 3)"), {});
  cut.resize(40);
  write_file(path_of("cut_header.npy"), cut);
  expect_error("truncated header", [] { aoti_host::read_npy(path_of("cut_header.npy")); }, {"cut_header.npy", "truncated"});

  write_file(path_of("extra.npy"), make_npy(header("<f4", false, "(2,)"), iota_bytes(12)));
  expect_error("trailing bytes", [] { aoti_host::read_npy(path_of("extra.npy")); }, {"extra.npy", "4 bytes after"});

  Bytes magic = make_npy(header("<f4", false, "(1,)"), iota_bytes(4));
  magic[1] = 'X';
  write_file(path_of("magic.npy"), magic);
  expect_error("bad magic", [] { aoti_host::read_npy(path_of("magic.npy")); }, {"magic.npy", "not a .npy file", "numpy.save"});

  write_file(path_of("tiny.npy"), {0x93, 'N'});
  expect_error("tiny file", [] { aoti_host::read_npy(path_of("tiny.npy")); }, {"tiny.npy", "not a .npy file"});

  write_file(path_of("big.npy"), make_npy(header(">f4", false, "(2,)"), iota_bytes(8)));
  expect_error("big-endian", [] { aoti_host::read_npy(path_of("big.npy")); },
               {"big.npy", "'>f4' is big-endian", "astype('<f4')"});

  write_file(path_of("object.npy"), make_npy(header("|O", false, "(2,)"), iota_bytes(16)));
  expect_error("object array", [] { aoti_host::read_npy(path_of("object.npy")); }, {"object.npy", "object"});

  write_file(path_of("struct.npy"),
             make_npy("'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (2,), ", iota_bytes(16)));
  expect_error("structured", [] { aoti_host::read_npy(path_of("struct.npy")); }, {"struct.npy", "structured"});

  // Void that is not ml_dtypes' bfloat16: raw bytes, refused with the fix (view as bfloat16, or convert).
  write_file(path_of("void2.npy"), make_npy(header("|V2", false, "(2,)"), iota_bytes(4)));
  expect_error("plain 2-byte void", [] { aoti_host::read_npy(path_of("void2.npy")); },
               {"void2.npy", "'|V2'", "raw 2-byte void", "arr.view(ml_dtypes.bfloat16)"});
  write_file(path_of("void2be.npy"), make_npy(header(">V2", false, "(2,)"), iota_bytes(4)));
  expect_error("big-endian 2-byte void", [] { aoti_host::read_npy(path_of("void2be.npy")); },
               {"void2be.npy", "'>V2'", "ml_dtypes"});
  write_file(path_of("void4.npy"), make_npy(header("<V4", false, "(2,)"), iota_bytes(8)));
  expect_error("4-byte void", [] { aoti_host::read_npy(path_of("void4.npy")); }, {"void4.npy", "'<V4'", "raw bytes"});
  write_file(path_of("void_long.npy"), make_npy(header("<V2x", false, "(2,)"), iota_bytes(4)));
  expect_error("void with a tail", [] { aoti_host::read_npy(path_of("void_long.npy")); },
               {"void_long.npy", "'<V2x'", "raw bytes"});
  write_file(path_of("bf16_short.npy"), make_npy(header("<V2", false, "(2, 3)"), iota_bytes(11)));
  expect_error("truncated bfloat16", [] { aoti_host::read_npy(path_of("bf16_short.npy")); },
               {"bf16_short.npy", "truncated", "'<V2'", "12", "11"});

  write_file(path_of("complex.npy"), make_npy(header("<c8", false, "(2,)"), iota_bytes(16)));
  expect_error("unknown descr", [] { aoti_host::read_npy(path_of("complex.npy")); }, {"complex.npy", "'<c8'", "not supported"});

  write_file(path_of("nokey.npy"), make_npy("'descr': '<f4', 'shape': (2,), ", iota_bytes(8)));
  expect_error("missing key", [] { aoti_host::read_npy(path_of("nokey.npy")); }, {"nokey.npy", "fortran_order"});

  write_file(path_of("garbage.npy"), make_npy("'descr': '<f4', 'fortran_order': maybe, 'shape': (2,)", iota_bytes(8)));
  expect_error("garbage header", [] { aoti_host::read_npy(path_of("garbage.npy")); }, {"garbage.npy", "malformed"});

  expect_error("missing file", [] { aoti_host::read_npy(path_of("absent.npy")); }, {"absent.npy: no such file"});
  expect_error("directory", [] { aoti_host::read_npy(g_dir); }, {g_dir, "directory"});
}

void test_strided_write() {
  // A 2x3 row-major buffer viewed transposed (3x2, strides {1, 3}) must be written in logical order.
  const int32_t base[6] = {0, 1, 2, 3, 4, 5};
  const std::string p = path_of("transposed.npy");
  try {
    aoti_host::write_npy(p, 3, {3, 2}, {1, 3}, base);
    NpyArray a = aoti_host::read_npy(p);
    CHECK((a.sizes == std::vector<int64_t>{3, 2}) && (a.strides == std::vector<int64_t>{2, 1}), "transposed: metadata");
    std::vector<int32_t> got(6, -1);
    if (a.data.size() == sizeof(int32_t) * 6) std::memcpy(got.data(), a.data.data(), a.data.size());
    CHECK((got == std::vector<int32_t>{0, 3, 1, 4, 2, 5}), "transposed: logical order");
  } catch (const std::exception& e) {
    CHECK(false, std::string("transposed: ") + e.what());
  }
  // A step-2 slice of the innermost dim and a broadcast (stride 0) dim.
  const int16_t src[8] = {10, 11, 12, 13, 14, 15, 16, 17};
  try {
    aoti_host::write_npy(path_of("sliced.npy"), 2, {2, 2, 2}, {0, 4, 2}, src);
    NpyArray a = aoti_host::read_npy(path_of("sliced.npy"));
    std::vector<int16_t> got(8, -1);
    if (a.data.size() == sizeof(int16_t) * 8) std::memcpy(got.data(), a.data.data(), a.data.size());
    CHECK((got == std::vector<int16_t>{10, 12, 14, 16, 10, 12, 14, 16}), "sliced/broadcast: logical order");
  } catch (const std::exception& e) {
    CHECK(false, std::string("sliced: ") + e.what());
  }
}

void test_large_header_and_atomicity() {
  // 25000 dims of 1 make a header over 65535 bytes: the writer must switch to version 2.0.
  const std::vector<int64_t> sizes(25000, 1);
  const std::vector<int64_t> strides(25000, 1);
  const uint8_t one = 7;
  try {
    aoti_host::write_npy(path_of("wide.npy"), 0, sizes, strides, &one);
    const Bytes file = read_file(path_of("wide.npy"));
    CHECK(file.size() > 12 && file[6] == 2, "large header: version 2.0");
    NpyArray a = aoti_host::read_npy(path_of("wide.npy"));
    CHECK(a.sizes == sizes && a.data == Bytes{7}, "large header: round trip");
  } catch (const std::exception& e) {
    CHECK(false, std::string("large header: ") + e.what());
  }
  const float x = 1.0f;
  expect_error("write into a missing directory",
               [] {
                 const float y = 1.0f;
                 aoti_host::write_npy(path_of("no/such/dir/out.npy"), 6, {1}, {1}, &y);
               },
               {"out.npy", "cannot create"});
  // An existing file is replaced only by a complete one, and no temp file stays behind.
  try {
    aoti_host::write_npy(path_of("replace.npy"), 6, {1}, {1}, &x);
    aoti_host::write_npy(path_of("replace.npy"), 6, {1}, {1}, &x);
  } catch (const std::exception& e) {
    CHECK(false, std::string("replace: ") + e.what());
  }
  for (const auto& entry : std::filesystem::directory_iterator(g_dir)) {
    CHECK(entry.path().string().find(".tmp.") == std::string::npos, "temp file left behind: " + entry.path().string());
  }
}

}  // namespace

int main() {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string tmpl_s = std::string(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp") + "/test_npy.XXXXXX";
  std::vector<char> tmpl(tmpl_s.begin(), tmpl_s.end());
  tmpl.push_back('\0');
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::printf("FAIL: mkdtemp: %s\n", std::strerror(errno));
    return 1;
  }
  g_dir = tmpl.data();
  try {
    test_read_each_descr();
    test_versions();
    test_round_trip_each_dtype();
    test_fortran_order();
    test_zero_d_and_empty();
    test_bad_files();
    test_strided_write();
    test_large_header_and_atomicity();
  } catch (const std::exception& e) {
    std::printf("FAIL: unexpected exception: %s\n", e.what());
    ++g_failures;
  }
  std::error_code ec;
  if (g_failures == 0) {
    std::filesystem::remove_all(g_dir, ec);
    std::printf("test_npy: all checks passed\n");
    return 0;
  }
  std::printf("test_npy: %d check(s) failed; files kept in %s\n", g_failures, g_dir.c_str());
  return 1;
}
