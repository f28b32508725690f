// pt2_probe [--memory] PACKAGE OUTDIR: opens PACKAGE with the runtime's ZipArchive (mapping the file, or
// with --memory over a copy of its bytes in memory) and reads every member through data() (which checks
// its CRC-32). On success writes OUTDIR/NNNNNN.name (the member name) and
// OUTDIR/NNNNNN.data (its bytes), one pair per member in central-directory order, and exits 0; on a
// refusal prints the message and exits 3; a usage or output error exits 2. The differential test
// (tests/integration/test_package_reader.py) compares this with toolchain/pt2.py.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "aoti_host/error.h"
#include "base/zip.h"

namespace {

bool write_file(const std::string& path, const unsigned char* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  const bool memory = argc == 4 && std::strcmp(argv[1], "--memory") == 0;
  if (argc != 3 && !memory) {
    std::fprintf(stderr, "usage: pt2_probe [--memory] PACKAGE OUTDIR\n");
    return 2;
  }
  const std::string package = argv[argc - 2], out = argv[argc - 1];
  std::vector<unsigned char> bytes;
  if (memory) {
    std::ifstream in(package, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "pt2_probe: cannot read %s\n", package.c_str());
      return 2;
    }
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  try {
    std::unique_ptr<aoti_host::ZipArchive> archive =
        memory ? std::make_unique<aoti_host::ZipArchive>(bytes.data(), bytes.size(), package)
               : std::make_unique<aoti_host::ZipArchive>(package);
    const aoti_host::ZipArchive& zip = *archive;
    size_t index = 0;
    for (const aoti_host::ZipEntry& e : zip.entries()) {
      const unsigned char* data = zip.data(e);
      char stem[32];
      std::snprintf(stem, sizeof stem, "/%06zu", index++);
      if (!write_file(out + stem + ".name", reinterpret_cast<const unsigned char*>(e.name.data()), e.name.size()) ||
          !write_file(out + stem + ".data", data, static_cast<size_t>(e.size))) {
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
