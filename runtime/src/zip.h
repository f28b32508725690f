// A reader for the zip archives torch writes (.pt2): entries are stored uncompressed, so each
// entry is a byte range of the mapped file. Zip64 is understood; compressed entries are refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mapped_file.h"

namespace aoti_host {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // of the entry's bytes in the file
  uint64_t size = 0;
  uint32_t crc32 = 0;
  uint16_t method = 0;  // 0 = stored
};

class ZipArchive {
 public:
  explicit ZipArchive(const std::string& path);  // throws Error naming the file and the defect
  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;
  // The bytes of a stored entry, inside the mapping (valid while this archive lives).
  const unsigned char* data(const ZipEntry& entry) const;
  const std::string& path() const { return file_->path(); }

 private:
  std::shared_ptr<MappedFile> file_;
  std::vector<ZipEntry> entries_;
};

}  // namespace aoti_host
