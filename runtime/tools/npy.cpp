// NumPy .npy reading and writing (format 1.0/2.0/3.0, https://numpy.org/neps/nep-0001-npy-format.html).
// Only little-endian numeric dtypes that have a torch ScalarType; everything else is refused with the
// file name and the numpy call that fixes it, because a silently reinterpreted input is worse than none.
// bfloat16 is ml_dtypes.bfloat16 (the JAX project's numpy dtypes), which numpy.save writes with descr '<V2'
// (the spec's numpy string): that exact string is bfloat16; plain void ('|V2', raw bytes) is refused.
#include "npy.h"

#include "aoti_host/dtypes.h"
#include "aoti_host/error.h"
#include "aoti_host/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace aoti_host {
namespace {

const char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;  // numpy pads the header so the data starts 64-byte aligned
// Largest header read. numpy writes a few hundred bytes (its own reader stops at 10000 by default); the
// bound leaves room for very high-rank arrays (write_npy switches to format 2.0 past 65535 bytes) while a
// crafted 4 GiB length is refused before it is allocated.
constexpr size_t kMaxHeader = size_t{1} << 20;

struct DtypeInfo {
  int32_t code;
  char kind;  // numpy kind: 'f', 'i', 'u', 'b'; 'V' for an ml_dtypes type (bfloat16)
  int size;
  const char* descr;  // what numpy.save writes: "<f4", "|u1", "<V2"
};

// The dtypes a .npy file may hold: the runtime's dtypes that numpy has (aoti_host/dtypes.h, generated
// from toolchain/spec/abi.toml).
const std::vector<DtypeInfo>& npy_dtypes() {
  static const std::vector<DtypeInfo> table = [] {
    std::vector<DtypeInfo> out;
    for (const auto& d : dtypes::kTable)
      if (d.runtime && d.numpy_kind != 0)
        out.push_back({d.code, d.numpy_kind, static_cast<int>(d.itemsize), d.numpy});
    return out;
  }();
  return table;
}

const DtypeInfo* find_by_code(int32_t code) {
  for (const auto& d : npy_dtypes())
    if (d.code == code) return &d;
  return nullptr;
}

const DtypeInfo* find_by_kind(char kind, int size) {
  for (const auto& d : npy_dtypes())
    if (d.kind == kind && d.size == size) return &d;
  return nullptr;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw Error(path + ": " + what); }

std::string errno_text(int err) { return std::strerror(err); }

// The process umask, so outputs get the mode fopen would have given them. Read from /proc (umask(2) can
// only read it by changing it, which races with other threads creating files); 022 where /proc is absent.
mode_t current_umask() {
  mode_t m = 022;
  if (std::FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    unsigned value = 0;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::sscanf(line, "Umask: %o", &value) == 1) {
        m = static_cast<mode_t>(value & 0777);
        break;
      }
    }
    std::fclose(f);
  }
  return m;
}

// A minimal reader for the one Python literal numpy writes: {'key': value, ...} with string,
// True/False and tuple-of-int values. Anything else is a malformed header.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& text) : path_(path), s_(text) {}

  void parse(std::string& descr, bool& fortran, std::vector<int64_t>& shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') {
        ++i_;
        break;
      }
      std::string key = parse_string("a quoted key");
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() == '[') {
          bad_header_fix("structured dtypes are not supported",
                         "save a plain numeric array (one field per file)");
        }
        descr = parse_string("a dtype string for 'descr'");
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = parse_bool();
        have_fortran = true;
      } else if (key == "shape") {
        shape = parse_shape();
        have_shape = true;
      } else {
        bad_header("unexpected key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_ws();
      if (peek() == '}') {
        ++i_;
        break;
      }
      bad_header("expected ',' or '}' at offset " + std::to_string(i_));
    }
    if (!have_descr) bad_header("no 'descr' key");
    if (!have_fortran) bad_header("no 'fortran_order' key");
    if (!have_shape) bad_header("no 'shape' key");
  }

 private:
  [[noreturn]] void bad_header(const std::string& what) {
    bad_header_fix("malformed .npy header: " + what, "re-save the array with numpy.save");
  }
  [[noreturn]] void bad_header_fix(const std::string& what, const std::string& fix) {
    fail(path_, what + "; " + fix);
  }

  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad_header(std::string("expected '") + c + "' at offset " + std::to_string(i_));
    ++i_;
  }

  std::string parse_string(const char* what) {
    char q = peek();
    if (q != '\'' && q != '"') bad_header(std::string("expected ") + what + " at offset " + std::to_string(i_));
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') bad_header("escapes in strings are not supported");
      out += s_[i_++];
    }
    if (i_ >= s_.size()) bad_header("unterminated string");
    ++i_;
    return out;
  }

  bool parse_bool() {
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    bad_header("'fortran_order' is neither True nor False");
  }

  std::vector<int64_t> parse_shape() {
    std::vector<int64_t> shape;
    expect('(');
    for (;;) {
      skip_ws();
      if (peek() == ')') {
        ++i_;
        return shape;
      }
      if (peek() < '0' || peek() > '9') bad_header("'shape' holds something other than non-negative integers");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        int64_t digit = peek() - '0';
        if (v > (INT64_MAX - digit) / 10) bad_header("a dimension in 'shape' overflows int64");
        v = v * 10 + digit;
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2 longs, as written by old numpy
      shape.push_back(v);
      skip_ws();
      if (peek() == ',') {
        ++i_;
      } else if (peek() != ')') {
        bad_header("expected ',' or ')' in 'shape'");
      }
    }
  }

  const std::string& path_;
  const std::string& s_;
  size_t i_ = 0;
};

const DtypeInfo& dtype_from_descr(const std::string& path, const std::string& descr) {
  if (descr.empty()) fail(path, "empty dtype in 'descr'; re-save the array with numpy.save");
  char order = descr[0];
  std::string body = descr;
  if (order == '<' || order == '>' || order == '|' || order == '=') {
    body = descr.substr(1);
  } else {
    order = '=';
  }
  if (body == "O") {
    fail(path, "dtype 'O' is an object array, which holds Python objects, not numbers; "
               "save a numeric array (arr.astype(np.float32))");
  }
  char kind = body.empty() ? '\0' : body[0];
  if (kind == 'V') {
    // Void: raw bytes to numpy. Only an ml_dtypes type's exact descr ('<V2' for bfloat16) names numbers.
    for (const auto& d : npy_dtypes())
      if (d.kind == 'V' && descr == d.descr) return d;
    if (body == "V2") {
      fail(path, "dtype '" + descr + "' is raw 2-byte void, not numbers; a bfloat16 array saved with ml_dtypes has "
                 "descr '<V2': save arr.view(ml_dtypes.bfloat16) (or convert it, arr.astype('<f4'))");
    }
    fail(path, "dtype '" + descr + "' is raw bytes (numpy void), not numbers; save a numeric array "
               "(e.g. arr.astype('<f4'))");
  }
  if (kind == '?') {  // numpy's character code for bool
    kind = 'b';
    body = "b1";
  }
  int size = 0;
  bool digits = body.size() >= 2;
  for (size_t k = 1; k < body.size(); ++k) {
    if (body[k] < '0' || body[k] > '9' || size > 1000) {
      digits = false;
      break;
    }
    size = size * 10 + (body[k] - '0');
  }
  const DtypeInfo* info = digits ? find_by_kind(kind, size) : nullptr;
  if (info == nullptr) {
    fail(path, "dtype '" + descr +
                   "' is not supported (float16/32/64, bfloat16 via ml_dtypes, int8/16/32/64, uint8, bool are); "
                   "convert it (e.g. arr.astype('<f4') or arr.astype('<i8'))");
  }
  if (order == '>' && info->size > 1) {
    fail(path, "dtype '" + descr + "' is big-endian; save it little-endian (arr.astype('<" + body + "'))");
  }
  return *info;
}

bool mul_overflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

uint32_t read_le(const unsigned char* p, int n) {
  uint32_t v = 0;
  for (int k = n - 1; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

std::string shape_repr(const std::vector<int64_t>& sizes) {
  std::string s = "(";
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (k > 0) s += ", ";
    s += std::to_string(sizes[k]);
  }
  if (sizes.size() == 1) s += ",";
  return s + ")";
}

// Buffers the bytes of the array in logical order into the file, so a strided source costs one
// pass and constant extra memory.
class Writer {
 public:
  Writer(std::FILE* f, const std::string& tmp) : f_(f), tmp_(tmp) { buf_.reserve(kCap); }
  void put(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    while (n > 0) {
      size_t take = std::min(n, kCap - buf_.size());
      buf_.insert(buf_.end(), c, c + take);
      c += take;
      n -= take;
      if (buf_.size() == kCap) flush();
    }
  }
  void flush() {
    if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) {
      throw Error(tmp_ + ": write failed: " + errno_text(errno) + "; check free space and permissions");
    }
    buf_.clear();
  }

 private:
  static constexpr size_t kCap = 1 << 20;
  std::FILE* f_;
  const std::string& tmp_;
  std::vector<unsigned char> buf_;
};

}  // namespace

NpyArray read_npy(const std::string& path) {
  // A regular file only, its size from fstat: every length below is checked against that size before
  // anything is allocated or read, so a FIFO or /dev/zero is refused instead of read forever.
  const InputFile file(path, ".npy input");
  const uint64_t file_size = file.size();
  unsigned char pre[kMagicLen + 2 + 4] = {};
  file.read_at(0, pre, static_cast<size_t>(std::min<uint64_t>(file_size, sizeof pre)));

  if (file_size < kMagicLen + 2 || std::memcmp(pre, kMagic, kMagicLen) != 0) {
    fail(path, "not a .npy file (no \\x93NUMPY magic); save the array with numpy.save(path, arr)");
  }
  const int major = pre[6], minor = pre[7];
  int len_bytes;
  if (major == 1) {
    len_bytes = 2;
  } else if (major == 2 || major == 3) {
    len_bytes = 4;
  } else {
    fail(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " (1.0, 2.0 and 3.0 are read); re-save it with numpy.save");
  }
  const size_t prefix = kMagicLen + 2 + static_cast<size_t>(len_bytes);
  if (file_size < prefix) fail(path, "truncated .npy header; the file is incomplete, save it again");
  const size_t header_len = read_le(pre + kMagicLen + 2, len_bytes);
  if (header_len > kMaxHeader) {
    fail(path, ".npy header of " + std::to_string(header_len) + " bytes is larger than the " +
                   std::to_string(kMaxHeader) + " this reader accepts (numpy.save writes a few hundred bytes); "
                   "the file is not a plain array, save it again with numpy.save");
  }
  if (file_size - prefix < header_len) {
    fail(path, "truncated .npy header (" + std::to_string(header_len) + " bytes announced, " +
                   std::to_string(file_size - prefix) + " present); the file is incomplete, save it again");
  }
  std::string header(header_len, '\0');
  file.read_at(prefix, header.data(), header_len);

  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
  HeaderParser(path, header).parse(descr, fortran, shape);
  const DtypeInfo& info = dtype_from_descr(path, descr);

  // The strides below are products of the non-zero dims: bound those too, not only the element count (which
  // a 0 dim keeps at 0 however large the others are).
  int64_t numel = 1, span = 1;
  for (int64_t d : shape) {
    if (mul_overflows(numel, d, &numel) || mul_overflows(span, std::max<int64_t>(d, 1), &span))
      fail(path, "shape " + shape_repr(shape) + " overflows int64; re-save the array with numpy.save");
  }
  int64_t nbytes = 0;
  if (mul_overflows(numel, info.size, &nbytes)) fail(path, "shape " + shape_repr(shape) + " overflows int64");

  // The declared shape bounds the read: the bytes after the header must be exactly shape * itemsize.
  const uint64_t data_off = prefix + header_len;
  const uint64_t have = file_size - data_off;
  if (have < static_cast<uint64_t>(nbytes)) {
    fail(path, "truncated data: shape " + shape_repr(shape) + " of '" + descr + "' needs " +
                   std::to_string(nbytes) + " bytes, the file has " + std::to_string(have) +
                   "; the file is incomplete, save it again");
  }
  if (have > static_cast<uint64_t>(nbytes)) {
    fail(path, std::to_string(have - static_cast<uint64_t>(nbytes)) + " bytes after the data of shape " +
                   shape_repr(shape) + " of '" + descr +
                   "'; the file is not a single array (np.savez writes .npz, not .npy); save it with numpy.save");
  }

  NpyArray out;
  out.dtype = info.code;
  out.sizes = shape;
  out.strides.assign(shape.size(), 1);
  // Strides of size-0/1 dims don't matter; plain products keep them non-negative and small.
  if (fortran) {
    for (size_t k = 1; k < shape.size(); ++k) out.strides[k] = out.strides[k - 1] * std::max<int64_t>(shape[k - 1], 1);
  } else {
    for (size_t k = shape.size(); k-- > 1;) out.strides[k - 1] = out.strides[k] * std::max<int64_t>(shape[k], 1);
  }
  out.data.resize(static_cast<size_t>(nbytes));
  file.read_at(data_off, out.data.data(), out.data.size());
  return out;
}

namespace {

// The .npy header (magic, version, length, the padded dict): version 1.0 unless the padded header can't fit its
// 2-byte length.
std::string npy_header(const DtypeInfo& info, const std::vector<int64_t>& sizes) {
  const std::string descr = info.descr;  // bfloat16: '<V2', which numpy.load + ml_dtypes read back
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_repr(sizes) + ", }";
  int major = 1;
  size_t prefix = kMagicLen + 2 + 2;
  size_t total = ((prefix + dict.size() + 1 + kAlign - 1) / kAlign) * kAlign;
  if (total - prefix > 65535) {
    major = 2;
    prefix = kMagicLen + 2 + 4;
    total = ((prefix + dict.size() + 1 + kAlign - 1) / kAlign) * kAlign;
  }
  const size_t header_len = total - prefix;
  dict.append(header_len - dict.size() - 1, ' ');
  dict += '\n';
  std::string head(kMagic, kMagicLen);
  head += static_cast<char>(major);
  head += '\0';
  for (size_t k = 0; k < (major == 1 ? 2u : 4u); ++k) head += static_cast<char>((header_len >> (8 * k)) & 0xff);
  return head + dict;
}

// The elements in row-major order from any strides: the outer dims walked with an odometer, the innermost dim
// copied as one run when it is dense.
void write_elements(Writer& w, const unsigned char* base, size_t item, const std::vector<int64_t>& sizes,
                    const std::vector<int64_t>& st) {
  const size_t nd = sizes.size();
  if (nd == 0) {
    w.put(base, item);
    return;
  }
  const int64_t inner = sizes[nd - 1];
  const int64_t inner_stride = st[nd - 1];
  std::vector<int64_t> idx(nd - 1, 0);
  bool more = true;
  while (more) {
    int64_t off = 0;
    for (size_t k = 0; k + 1 < nd; ++k) off += idx[k] * st[k];
    const unsigned char* row = base + off * static_cast<int64_t>(item);
    if (inner_stride == 1) {
      w.put(row, static_cast<size_t>(inner) * item);
    } else {
      for (int64_t j = 0; j < inner; ++j) w.put(row + j * inner_stride * static_cast<int64_t>(item), item);
    }
    more = false;
    for (size_t k = nd - 1; k-- > 0;) {
      if (++idx[k] < sizes[k]) {
        more = true;
        break;
      }
      idx[k] = 0;
    }
  }
}

}  // namespace

void write_npy(const std::string& path, int32_t dtype, const std::vector<int64_t>& sizes,
               const std::vector<int64_t>& strides, const void* data) {
  const DtypeInfo* info = find_by_code(dtype);
  if (info == nullptr) {
    fail(path, "dtype code " + std::to_string(dtype) +
                   " has no .npy equivalent here (float16/32/64, bfloat16, int8/16/32/64, uint8, bool); "
                   "convert the tensor before writing it");
  }
  if (!strides.empty() && strides.size() != sizes.size()) {
    fail(path, "internal: " + std::to_string(sizes.size()) + " sizes but " + std::to_string(strides.size()) +
                   " strides");
  }
  int64_t numel = 1;
  for (int64_t d : sizes) {
    if (d < 0) fail(path, "internal: negative size in " + shape_repr(sizes));
    if (mul_overflows(numel, d, &numel)) fail(path, "shape " + shape_repr(sizes) + " overflows int64");
  }
  if (numel > 0 && data == nullptr) fail(path, "internal: null data for a non-empty array");
  // Empty strides mean contiguous (row-major).
  std::vector<int64_t> st = strides;
  if (st.empty()) {
    st.assign(sizes.size(), 1);
    for (size_t k = sizes.size(); k-- > 1;) st[k - 1] = st[k] * sizes[k];
  }
  const std::string head = npy_header(*info, sizes);

  // An existing target is replaced by rename; one that is not a file (a directory, a FIFO, a device) is
  // the wrong path, not something to replace.
  struct stat target {};
  if (::lstat(path.c_str(), &target) == 0 && !S_ISREG(target.st_mode) && !S_ISLNK(target.st_mode)) {
    fail(path, "exists and is " + file_type_name(target.st_mode) +
                   ", not a file this writer may replace; remove it or choose another output directory");
  }
  // A fresh temp file beside the target: a random name created with O_EXCL (mkostemp), so nothing planted
  // under a predictable name (a symlink) is followed or overwritten.
  std::string tmp = path + ".tmp.XXXXXX";
  // Removes the temp file on every failure path; disarmed once renamed.
  struct TempGuard {
    const std::string& tmp;
    std::FILE* f = nullptr;
    bool armed = false;
    ~TempGuard() {
      if (f != nullptr) std::fclose(f);
      if (armed) std::remove(tmp.c_str());
    }
  } guard{tmp};

  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    fail(path, "cannot create a file in its directory: " + errno_text(errno) +
                   "; check the directory exists and is writable");
  }
  guard.armed = true;
  ::fchmod(fd, 0644 & ~current_umask());
  guard.f = ::fdopen(fd, "wb");
  if (guard.f == nullptr) {
    ::close(fd);
    fail(path, "cannot write " + tmp + ": " + errno_text(errno));
  }
  Writer w(guard.f, tmp);
  w.put(head.data(), head.size());
  if (numel > 0) write_elements(w, static_cast<const unsigned char*>(data), static_cast<size_t>(info->size), sizes, st);
  w.flush();
  if (std::fflush(guard.f) != 0 || ::fsync(::fileno(guard.f)) != 0) {
    fail(path, "cannot write " + tmp + ": " + errno_text(errno) + "; check free space");
  }
  std::FILE* f = guard.f;
  guard.f = nullptr;
  if (std::fclose(f) != 0) fail(path, "cannot write " + tmp + ": " + errno_text(errno) + "; check free space");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    fail(path, "cannot rename " + tmp + " onto it: " + errno_text(errno) + "; check the directory is writable");
  }
  guard.armed = false;
}

}  // namespace aoti_host
