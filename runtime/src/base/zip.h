// A strict reader for the zip archives torch writes (.pt2). Members are stored uncompressed, so each
// member is a byte range of the file. The reader refuses anything ambiguous, so that every reader that
// applies the same rules (toolchain/pt2.py does) sees the same members with the same bytes:
//   - the members and the central directory tile the file exactly: the first local header at offset 0,
//     no gap or overlap between members, the end record (and its comment) ending exactly at end of file;
//   - local and central headers agree (name, method, flags, CRC-32, sizes); member names are unique,
//     relative, '/'-separated, without empty, "." or ".." components, NUL or backslash;
//   - members are stored (method 0) and not encrypted; single disk; zip64 records, where present,
//     agree with the 16/32-bit fields they extend;
//   - a member's CRC-32 is checked against its bytes the first time data() hands them out.
// All offset arithmetic is checked for overflow and counts are bounded by the file size before anything
// is allocated. Every refusal is an Error (status AOTI_HOST_INVALID_PROGRAM) naming the file, the defect
// and the fix.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/mapped_file.h"

namespace aoti_host {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // of the member's bytes in the file
  uint64_t size = 0;
  uint32_t crc32 = 0;        // as declared by the headers; data() checks it against the bytes
  uint16_t method = 0;       // always 0 (stored): anything else is refused when the archive is opened
};

class ZipArchive {
 public:
  explicit ZipArchive(const std::string& path);  // maps the file; throws Error naming it and the defect
  // A view of an archive held in memory (non-owning: the caller keeps the bytes alive while this
  // archive and any pointer data() returned are used). `label` names the archive in messages.
  ZipArchive(const unsigned char* data, size_t size, std::string label);
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;
  // The bytes of a member (entry must come from entries() or find() of this archive), valid while this
  // archive (and, for a memory view, the caller's buffer) lives. The first call per member checks its
  // CRC-32 against the bytes (thread-safe; the result is cached) and throws Error on a mismatch.
  const unsigned char* data(const ZipEntry& entry) const;
  // The same bytes before their CRC-32 is checked, for a reader that computes it in the pass that reads them
  // (a weight upload): it must hand the CRC of all entry.size bytes to verify() before it uses what it made
  // of them, or call data() first. verify() throws data()'s error on a mismatch and caches a match.
  const unsigned char* unchecked_data(const ZipEntry& entry) const;
  void verify(const ZipEntry& entry, uint32_t actual) const;
  bool verified(const ZipEntry& entry) const;
  // Whether the bytes are a read-only mapping of the file (not a caller's buffer): pages of it may be dropped
  // after use (madvise MADV_DONTNEED) and come back from the file, the same bytes, when read again.
  bool file_backed() const { return file_ != nullptr; }
  // The file's path, or the label of a memory view.
  const std::string& path() const { return label_; }

 private:
  void parse();
  size_t index_of(const ZipEntry& entry) const;  // throws for an entry of another archive

  std::shared_ptr<MappedFile> file_;  // null for a memory view
  const unsigned char* base_ = nullptr;
  size_t size_ = 0;
  std::string label_;
  std::vector<ZipEntry> entries_;
  std::unique_ptr<std::atomic<bool>[]> crc_ok_;  // per entry: its CRC-32 matched its bytes
  mutable std::mutex crc_mutex_;                 // one check per member even when loads race
};

}  // namespace aoti_host
