// Native test of sha256.cpp: the FIPS 180-4 example digests on both the SHA-NI and the portable path, the two
// paths agreeing on every length 0..300 and on split updates. With arguments it is a tool for the Python
// test that compares it with hashlib: `test_sha256 FILE...` prints "<hardware hex> <portable hex>" per file,
// `test_sha256 --speed MB` prints the MB/s of each path.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "check.h"

namespace {

using aoti_host::Sha256;

std::string digest(const std::string& s, bool hw, size_t split = 0) {
  Sha256 h(hw);
  if (split > s.size()) split = s.size();
  h.update(s.data(), split);
  h.update(s.data() + split, s.size() - split);
  return h.hex();
}

double speed(bool hw, size_t mb) {
  std::vector<unsigned char> buf(mb << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 131 + (i >> 9));
  const auto t0 = std::chrono::steady_clock::now();
  Sha256 h(hw);
  h.update(buf.data(), buf.size());
  volatile char sink = h.hex()[0];
  (void)sink;
  return static_cast<double>(mb) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() *
         1.048576;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--speed") {
    const size_t mb = std::strtoul(argv[2], nullptr, 10);
    std::printf("sha-ni=%d hardware_mb_s=%.0f portable_mb_s=%.0f\n", Sha256::hardware() ? 1 : 0, speed(true, mb),
                speed(false, mb));
    return 0;
  }
  if (argc > 1) {
    for (int i = 1; i < argc; ++i) {
      std::ifstream f(argv[i], std::ios::binary);
      if (!f) return std::fprintf(stderr, "%s: cannot open\n", argv[i]), 2;
      const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      std::printf("%s %s\n", digest(s, true, s.size() / 3).c_str(), digest(s, false, s.size() / 7).c_str());
    }
    return 0;
  }
  for (bool hw : {true, false}) {
    EXPECT(digest("", hw) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT(digest("abc", hw) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", hw) ==
           "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT(digest(std::string(1000000, 'a'), hw, 333333) ==
           "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
  std::string s;
  for (size_t n = 0; n <= 300; ++n) {
    for (size_t split : {size_t(0), n / 2, size_t(63), size_t(64)}) EXPECT(digest(s, true, split) == digest(s, false));
    s += static_cast<char>(n * 37 + 11);
  }
  std::printf("sha-ni: %s\n", Sha256::hardware() ? "yes" : "no");
  return test_result("test_sha256");
}
