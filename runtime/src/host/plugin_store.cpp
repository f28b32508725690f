#include "host/plugin_store.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/status.h"
#include "base/sha256.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U  // linux >= 6.3: ask for an executable memfd explicitly (vm.memfd_noexec)
#endif

namespace aoti_host {
namespace {

// A file descriptor closed on scope exit unless released.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

std::string errno_text(int err) { return std::strerror(err); }

std::string leaf_of(const std::string& member) { return member.substr(member.rfind('/') + 1); }

// A member's leaf name reduced to characters that are safe in a file name and in /proc/self/maps.
std::string safe_leaf(const std::string& member) {
  std::string out;
  for (char c : leaf_of(member).substr(0, 120))
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  while (!out.empty() && out[0] == '.') out.erase(0, 1);
  return out.empty() ? "plugin" : out;
}

std::string random_hex(size_t bytes) {
  unsigned char buf[32];
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(buf + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(std::string("getrandom failed: ") + errno_text(errno), AOTI_HOST_LOAD_FAILED);
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) out += kHex[buf[i] >> 4], out += kHex[buf[i] & 15];
  return out;
}

bool write_all(int fd, const unsigned char* bytes, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size - done, 1u << 30));
    ssize_t w = ::write(fd, bytes + done, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    done += static_cast<uint64_t>(w);
  }
  return true;
}

// The SHA-256 of what `fd` holds, read through that descriptor (never by path again).
bool hash_fd(int fd, uint64_t size, std::string* hex) {
  Sha256 h;
  if (size > 0) {
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) return false;
    ::madvise(map, size, MADV_SEQUENTIAL);
    h.update(map, size);
    ::munmap(map, size);
  }
  *hex = h.hex();
  return true;
}

std::string owner_problem(const struct stat& st) {
  if (st.st_uid != ::geteuid())
    return "is owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " + std::to_string(::geteuid()) + ")";
  if ((st.st_mode & 022) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("is writable by ") + ((st.st_mode & 002) ? "every user" : "its group") + " (mode " + mode + ")";
  }
  return "";
}

const char* const kDirFix = ". fix: remove it (or chmod 700 it if it is yours), or set AOTI_HOST_CACHE_DIR to a "
                            "directory of your own with mode 0700";

// Opens (creating it 0700 when missing) the directory `name` in `parent` without following a symlink;
// refuses it loudly unless it is owned by this user and writable by no one else.
int open_private_child(int parent, const std::string& name, const std::string& shown, const std::string& what) {
  if (::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error(what + ": cannot create " + shown + ": " + errno_text(errno), AOTI_HOST_LOAD_FAILED);
  Fd sub(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (sub.fd < 0) {
    const int err = errno;
    struct stat lst {};
    std::string msg = what + " " + shown + ": " + errno_text(err) + kDirFix;
    if (::fstatat(parent, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
      msg = what + " " + shown + " is a symbolic link: refused, it must be a real directory" + kDirFix;
    log(LogLevel::Error, "%s", msg.c_str());
    throw Error(msg, AOTI_HOST_LOAD_FAILED);
  }
  struct stat st {};
  if (::fstat(sub.fd, &st) != 0) throw Error(what + " " + shown + ": " + errno_text(errno), AOTI_HOST_LOAD_FAILED);
  const std::string problem = owner_problem(st);
  if (!problem.empty()) {
    const std::string msg = what + " " + shown + " " + problem + ": refused, another user could plant code in it" + kDirFix;
    log(LogLevel::Error, "%s", msg.c_str());
    throw Error(msg, AOTI_HOST_LOAD_FAILED);
  }
  return sub.release();
}

// Opens `path` as a private directory of this user (open_private_child): missing components are created
// 0700 and checked the same way; existing components above the last are followed as the system set them
// up (e.g. /home -> /var/home). Everything after this goes through the returned descriptor.
int open_private_dir(const std::string& path, const std::string& what) {
  if (path.empty()) throw Error(what + ": empty path", AOTI_HOST_LOAD_FAILED);
  Fd dir(::open(path[0] == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.fd < 0) throw Error(what + " " + path + ": " + errno_text(errno), AOTI_HOST_LOAD_FAILED);
  std::vector<std::string> parts;
  for (size_t pos = 0; pos < path.size();) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    if (next > pos) parts.push_back(path.substr(pos, next - pos));
    pos = next + 1;
  }
  if (parts.empty()) {  // "/" itself
    struct stat st {};
    const std::string problem = ::fstat(dir.fd, &st) == 0 ? owner_problem(st) : errno_text(errno);
    if (!problem.empty()) throw Error(what + " " + path + " " + problem + ": refused" + kDirFix, AOTI_HOST_LOAD_FAILED);
  }
  std::string sofar = path[0] == '/' ? "" : ".";
  for (size_t i = 0; i < parts.size(); ++i) {
    sofar += "/" + parts[i];
    Fd sub(i + 1 < parts.size() ? ::openat(dir.fd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1);
    if (sub.fd < 0 && i + 1 < parts.size() && errno != ENOENT)
      throw Error(what + " " + path + ": " + sofar + ": " + errno_text(errno), AOTI_HOST_LOAD_FAILED);
    if (sub.fd < 0) sub.fd = open_private_child(dir.fd, parts[i], sofar, what);
    std::swap(dir.fd, sub.fd);
  }
  return dir.release();
}

// Why the open cache entry `fd` is not exactly `size` bytes hashing to `sha` in a file only this user can
// change; "" when it is.
std::string entry_problem(int fd, uint64_t size, const std::string& sha) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_text(errno);
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  std::string problem = owner_problem(st);
  if (!problem.empty()) return problem;
  if (static_cast<uint64_t>(st.st_size) != size)
    return "holds " + std::to_string(st.st_size) + " bytes, not " + std::to_string(size);
  std::string got;
  if (!hash_fd(fd, size, &got)) return "cannot be read: " + errno_text(errno);
  if (got != sha) return "does not hash to its name (SHA-256 " + got + ")";
  return "";
}

// Writes the bytes to a fresh random name in `dirfd` and renames it to `name` (replacing what is there
// when `replace`, else leaving an existing entry for the caller to verify). Returns the written inode.
struct stat write_entry(int dirfd, const std::string& shown_dir, const std::string& name, const unsigned char* bytes,
                        uint64_t size, mode_t mode, bool replace) {
  const std::string tmp = ".tmp-" + random_hex(16);
  const std::string shown = shown_dir + "/" + tmp;
  Fd fd(::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (fd.fd < 0)
    throw Error("cannot create " + shown + ": " + errno_text(errno) + "; set AOTI_HOST_CACHE_DIR to a writable "
                "directory of your own", AOTI_HOST_LOAD_FAILED);
  struct stat st {};
  auto fail = [&](const std::string& doing) {
    const int err = errno;
    ::unlinkat(dirfd, tmp.c_str(), 0);
    throw Error("cannot " + doing + " " + shown + ": " + errno_text(err), AOTI_HOST_LOAD_FAILED);
  };
  if (!write_all(fd.fd, bytes, size)) fail("write");
  if (::fsync(fd.fd) != 0) fail("sync");
  if (::fstat(fd.fd, &st) != 0) fail("stat");
  log(LogLevel::Debug, "plugin cache: wrote %s (%llu bytes) as %s", shown.c_str(), static_cast<unsigned long long>(size),
      name.c_str());
  int rc = replace ? ::renameat(dirfd, tmp.c_str(), dirfd, name.c_str())
                   : ::renameat2(dirfd, tmp.c_str(), dirfd, name.c_str(), RENAME_NOREPLACE);
  if (rc != 0 && !replace && errno == EINVAL) {  // a file system without RENAME_NOREPLACE: a hard link fails alike
    rc = ::linkat(dirfd, tmp.c_str(), dirfd, name.c_str(), 0);
    if (rc == 0) ::unlinkat(dirfd, tmp.c_str(), 0);
  }
  if (rc != 0) {
    const int err = errno;
    ::unlinkat(dirfd, tmp.c_str(), 0);
    if (err == EEXIST) {
      st.st_ino = 0;  // written concurrently by another load: verified like any cached entry
      return st;
    }
    throw Error("cannot rename " + shown + " to " + name + ": " + errno_text(err), AOTI_HOST_LOAD_FAILED);
  }
  ::fsync(dirfd);
  return st;
}

// An O_RDONLY descriptor of the verified cache entry `name` in `dirfd` holding these bytes, written first
// when absent; an entry that is not what its name says is replaced, loudly.
int cache_entry(int dirfd, const std::string& shown_dir, const std::string& name, const unsigned char* bytes,
                uint64_t size, const std::string& sha, mode_t mode) {
  const std::string shown = shown_dir + "/" + name;
  struct stat written {};
  for (int attempt = 0; attempt < 3; ++attempt) {
    Fd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    std::string problem;
    if (fd.fd >= 0) {
      struct stat st {};
      // The inode this process just wrote and renamed into its private directory: no need to hash it again.
      if (written.st_ino != 0 && ::fstat(fd.fd, &st) == 0 && st.st_dev == written.st_dev &&
          st.st_ino == written.st_ino && S_ISREG(st.st_mode) && owner_problem(st).empty())
        return fd.release();
      problem = entry_problem(fd.fd, size, sha);
      if (problem.empty()) return fd.release();
    } else if (errno == ELOOP) {
      problem = "is a symbolic link";
    } else if (errno != ENOENT) {
      problem = "cannot be opened: " + errno_text(errno);
    }
    if (!problem.empty()) {
      log(LogLevel::Warning, "plugin cache: %s %s: not loaded; replacing it with the package's bytes", shown.c_str(),
          problem.c_str());
    }
    written = write_entry(dirfd, shown_dir, name, bytes, size, mode, !problem.empty());
  }
  throw Error(shown + ": the cache entry keeps changing under this process; not loaded. fix: make sure nothing else "
              "writes to " + shown_dir + ", or set AOTI_HOST_CACHE_DIR to a new directory", AOTI_HOST_LOAD_FAILED);
}

bool same_file(int fd, const std::string& path) {
  struct stat a {}, b {};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// A sealed memfd holding the bytes, checked to be loadable (mappable executable, reachable through
// /proc/self/fd); -1 with the reason in *why when this system doesn't allow it.
int make_memfd(const std::string& name, const unsigned char* bytes, uint64_t size, std::string* why) {
  Fd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC));
  if (fd.fd < 0 && errno == EINVAL) fd.fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd.fd < 0) {
    *why = "memfd_create failed: " + errno_text(errno);
    return -1;
  }
  if (!write_all(fd.fd, bytes, size)) {
    *why = "writing the memfd failed: " + errno_text(errno);
    return -1;
  }
  if (::fcntl(fd.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    *why = "sealing the memfd failed: " + errno_text(errno);
    return -1;
  }
  const size_t probe = static_cast<size_t>(std::min<uint64_t>(size, static_cast<uint64_t>(::sysconf(_SC_PAGESIZE))));
  if (probe > 0) {
    void* map = ::mmap(nullptr, probe, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd.fd, 0);
    if (map == MAP_FAILED) {
      *why = "a memfd cannot be mapped executable (" + errno_text(errno) + "; vm.memfd_noexec or a security policy)";
      return -1;
    }
    ::munmap(map, probe);
  }
  if (!same_file(fd.fd, "/proc/self/fd/" + std::to_string(fd.fd))) {
    *why = "/proc/self/fd is not available (is /proc mounted?)";
    return -1;
  }
  return fd.release();
}

struct Loaded {
  int fd;
  dev_t dev;
  ino_t ino;
  StoredPlugin plugin;
};

// Content-addressed for the life of the process: one descriptor, hence one load path, per SHA-256.
std::mutex g_mutex;
std::map<std::string, Loaded> g_loaded;
std::string g_memfd_unavailable;  // why memfd loading is off in this process ("" while it works)

bool still_ours(const Loaded& l) {
  struct stat st {};
  return ::fstat(l.fd, &st) == 0 && st.st_dev == l.dev && st.st_ino == l.ino;
}

void remember(int fd, const StoredPlugin& plugin) {
  struct stat st {};
  ::fstat(fd, &st);
  g_loaded[plugin.sha256] = Loaded{fd, st.st_dev, st.st_ino, plugin};
}

bool cache_dir_chosen() {
  const char* env = std::getenv("AOTI_HOST_CACHE_DIR");
  return env != nullptr && *env != '\0';
}

}  // namespace

std::string plugin_cache_root() {
  if (const char* env = std::getenv("AOTI_HOST_CACHE_DIR"); env != nullptr && *env != '\0') return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')  // XDG: only absolute
    return std::string(xdg) + "/aoti-toolchain";
  const char* home = std::getenv("HOME");
  std::string h = home != nullptr && home[0] == '/' ? home : "";
  if (h.empty()) {
    if (const struct passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_dir != nullptr) h = pw->pw_dir;
  }
  if (h.empty() || h[0] != '/')
    throw Error("no cache directory for plugins: HOME is unset and uid " + std::to_string(::geteuid()) +
                " has no home directory. fix: set AOTI_HOST_CACHE_DIR to a directory of your own (mode 0700)",
                AOTI_HOST_LOAD_FAILED);
  return h + "/.cache/aoti-toolchain";
}

// The default is the memfd: for a 1 GB embedded-weights plugin bench/bench_load.py measured it 1.9-2.0x
// faster than a cold file cache and 1.03-1.2x faster than a warm one (bench/RESULTS.md, "Plugin load: memfd
// vs file cache"), and it writes nothing to disk. AOTI_HOST_CACHE_DIR opts into the file cache.
StoredPlugin store_plugin(const unsigned char* bytes, uint64_t size, const std::string& member) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string sha = sha256_hex(bytes, size);
  const double hash_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto it = g_loaded.find(sha); it != g_loaded.end()) {
    if (still_ours(it->second)) return it->second.plugin;
    g_loaded.erase(it);  // something in the process closed our descriptor: store it again
  }
  const std::string leaf = safe_leaf(member);
  if (!cache_dir_chosen() && g_memfd_unavailable.empty()) {
    std::string why;
    int fd = make_memfd(leaf, bytes, size, &why);
    if (fd >= 0) {
      StoredPlugin p{"/proc/self/fd/" + std::to_string(fd), sha, true};
      remember(fd, p);
      log(LogLevel::Debug, "%s: loaded from a sealed memfd (%s), SHA-256 %s (%.1f ms), stored in %.1f ms",
          member.c_str(), p.load_path.c_str(), sha.c_str(), hash_ms,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() - hash_ms);
      return p;
    }
    g_memfd_unavailable = why;
    log(LogLevel::Warning, "plugins are loaded from the file cache %s: %s", plugin_cache_root().c_str(), why.c_str());
  }
  const std::string root = plugin_cache_root();
  Fd dir(open_private_dir(root, "plugin cache directory"));
  const std::string name = sha + "-" + leaf;
  int fd = cache_entry(dir.fd, root, name, bytes, size, sha, 0700);
  StoredPlugin p{"/proc/self/fd/" + std::to_string(fd), sha, false};
  if (!same_file(fd, p.load_path)) {
    // Without /proc the entry is loaded by name: it sits in a directory only this user can write.
    static std::once_flag once;
    std::call_once(once, [] { log(LogLevel::Warning, "/proc/self/fd is not available: plugins load by cache path"); });
    p.load_path = root + "/" + name;
  }
  remember(fd, p);
  log(LogLevel::Debug, "%s: loaded from the cache entry %s/%s, SHA-256 of the package's bytes %.1f ms, entry ready "
      "in %.1f ms", member.c_str(), root.c_str(), name.c_str(), hash_ms,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() - hash_ms);
  return p;
}

bool read_cache_note(const std::string& name, size_t max_size, std::string* text) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Fd dir(open_private_dir(plugin_cache_root(), "plugin cache directory"));
  Fd fd(::openat(dir.fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (fd.fd < 0 || ::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode) || !owner_problem(st).empty() ||
      static_cast<uint64_t>(st.st_size) > max_size)
    return false;
  text->assign(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text->size()) {
    const ssize_t n = ::read(fd.fd, &(*text)[got], text->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

void write_cache_note(const std::string& name, const std::string& text, bool replace) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string root = plugin_cache_root();
  Fd dir(open_private_dir(root, "plugin cache directory"));
  write_entry(dir.fd, root, name, reinterpret_cast<const unsigned char*>(text.data()), text.size(), 0600, replace);
}

// Cubins live in the file cache even when plugins load from memory: the plugin opens each one by name
// inside the directory it is given, which only a real directory provides. That directory is named by the
// SHA-256 over every cubin's leaf name and SHA-256, holds exactly those files, each verified by hash when
// opened here, and sits in the private cache root, so no other user can swap them before the plugin
// opens them.
std::string store_cubins(const std::vector<CubinMember>& cubins) {
  std::vector<std::pair<std::string, const CubinMember*>> named;
  for (const auto& c : cubins) {
    const std::string leaf = leaf_of(c.name);
    bool ok = !leaf.empty() && leaf[0] != '.' && leaf.size() <= 200;
    for (char ch : leaf) ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-');
    if (!ok)
      throw Error(c.name + ": a cubin's file name may only hold letters, digits, '.', '_' and '-' (and must not start "
                  "with '.'); re-export the model", AOTI_HOST_INVALID_PROGRAM);
    named.emplace_back(leaf, &c);
  }
  std::sort(named.begin(), named.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> shas;
  Sha256 key;
  for (size_t i = 0; i < named.size(); ++i) {
    if (i > 0 && named[i].first == named[i - 1].first)
      throw Error(named[i].second->name + ": two cubins share the file name " + named[i].first + "; re-export the model",
                  AOTI_HOST_INVALID_PROGRAM);
    shas.push_back(sha256_hex(named[i].second->bytes, named[i].second->size));
    key.update(named[i].first.data(), named[i].first.size());
    key.update("\0", 1);
    key.update(shas.back().data(), shas.back().size());
    key.update("\n", 1);
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string root = plugin_cache_root();
  Fd rootfd(open_private_dir(root, "plugin cache directory"));
  const std::string dirname = "cubins-" + key.hex();
  const std::string shown = root + "/" + dirname;
  Fd dir(open_private_child(rootfd.fd, dirname, shown, "cubin directory"));
  for (size_t i = 0; i < named.size(); ++i) {
    const CubinMember& c = *named[i].second;
    Fd fd(cache_entry(dir.fd, shown, named[i].first, c.bytes, c.size, shas[i], 0600));
  }
  return shown;
}

}  // namespace aoti_host
