// pt2_probe PACKAGE OUTDIR: opens PACKAGE with the runtime's ZipArchive and reads every member through
// data() (which checks its CRC-32). On success writes OUTDIR/NNNNNN.name (the member name) and
// OUTDIR/NNNNNN.data (its bytes), one pair per member in central-directory order, and exits 0; on a
// refusal prints the message and exits 3; a usage or output error exits 2. The differential test
// (tests/integration/test_package_reader.py) compares this with toolchain/pt2.py.
#include <cstdio>
#include <string>

#include "aoti_host/error.h"
#include "../../src/zip.h"

namespace {

bool write_file(const std::string& path, const unsigned char* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: pt2_probe PACKAGE OUTDIR\n");
    return 2;
  }
  const std::string out = argv[2];
  try {
    aoti_host::ZipArchive zip(argv[1]);
    size_t index = 0;
    for (const aoti_host::ZipEntry& e : zip.entries()) {
      const unsigned char* bytes = zip.data(e);
      char stem[32];
      std::snprintf(stem, sizeof stem, "/%06zu", index++);
      if (!write_file(out + stem + ".name", reinterpret_cast<const unsigned char*>(e.name.data()), e.name.size()) ||
          !write_file(out + stem + ".data", bytes, static_cast<size_t>(e.size))) {
        std::fprintf(stderr, "pt2_probe: cannot write into %s\n", out.c_str());
        return 2;
      }
    }
  } catch (const aoti_host::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 3;
  }
  return 0;
}
