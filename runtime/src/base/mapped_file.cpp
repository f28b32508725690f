#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "aoti_host/status.h"
#include "aoti_host/error.h"
#include "aoti_host/input_file.h"

namespace aoti_host {

std::string file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
  }
}

InputFile::InputFile(const std::string& path, const std::string& what) : path_(path) {
  // O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting for one; it does not
  // change how a regular file reads. O_NOCTTY: a terminal named as an input never becomes ours.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      throw Error(path + ": no such file; check the path of the " + what, AOTI_HOST_NOT_FOUND);
    }
    if (err == ENXIO) {  // what open() says for a socket
      throw Error(path + ": is a socket, not a regular file; give the path of the " + what + " file",
                  AOTI_HOST_INVALID_ARGUMENT);
    }
    throw Error(path + ": cannot open the " + what + ": " + std::strerror(err) +
                    (err == EACCES ? "; check its permissions" : ""),
                AOTI_HOST_INVALID_ARGUMENT);
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw Error(path + ": cannot stat the " + what + ": " + std::strerror(err), AOTI_HOST_INVALID_ARGUMENT);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw Error(path + ": is " + file_type_name(st.st_mode) + ", not a regular file; give the path of the " + what +
                    " file (only regular files are read: a pipe or device has no size to check)",
                AOTI_HOST_INVALID_ARGUMENT);
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(uint64_t offset, void* out, size_t n) const {
  auto* dst = static_cast<unsigned char*>(out);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(path_ + ": read failed: " + std::strerror(errno), AOTI_HOST_INVALID_ARGUMENT);
    }
    if (got == 0) {
      throw Error(path_ + ": the file ended after " + std::to_string(offset + done) + " of " +
                      std::to_string(offset + n) + " bytes; it changed while being read, give a complete file",
                  AOTI_HOST_INVALID_ARGUMENT);
    }
    done += static_cast<size_t>(got);
  }
}

MappedFile::MappedFile(const std::string& path, const std::string& what) : path_(path) {
  InputFile file(path, what);
  size_ = static_cast<size_t>(file.size());
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (p == MAP_FAILED) throw Error(path + ": cannot map: " + std::strerror(errno));
    data_ = static_cast<const unsigned char*>(p);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace aoti_host
