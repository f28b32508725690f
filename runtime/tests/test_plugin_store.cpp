// Native test of plugin_store.cpp's file cache: cubin directories (content-addressed, private, each file
// verified and a tampered or symlinked one replaced without writing through it), refused cubin names, and
// plugins stored in the cache loading the same bytes through one stable /proc/self/fd path.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "aoti_host/error.h"
#include "check.h"
#include "host/plugin_store.h"

namespace {

namespace fs = std::filesystem;
using aoti_host::CubinMember;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

CubinMember member(const std::string& name, const std::string& bytes) {
  return CubinMember{name, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()};
}

bool throws(const std::vector<CubinMember>& cubins, const char* needle) {
  try {
    aoti_host::store_cubins(cubins);
  } catch (const aoti_host::Error& e) {
    if (std::strstr(e.what(), needle) != nullptr) return true;
    std::printf("unexpected message: %s\n", e.what());
  }
  return false;
}

}  // namespace

int main() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/aoti-store-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return std::perror("mkdtemp"), 2;
  const std::string root = templ;
  const std::string cache = root + "/cache";
  ::setenv("AOTI_HOST_CACHE_DIR", cache.c_str(), 1);
  EXPECT(aoti_host::plugin_cache_root() == cache);

  const std::string a = "kernel a", b = "kernel b bytes";
  const std::vector<CubinMember> cubins = {member("pkg/data/aotinductor/model/a.cubin", a),
                                           member("pkg/data/aotinductor/model/b.cubin", b)};
  const std::string dir = aoti_host::store_cubins(cubins);
  EXPECT(dir.rfind(cache + "/cubins-", 0) == 0 && dir.size() == cache.size() + 8 + 64);
  EXPECT(slurp(dir + "/a.cubin") == a && slurp(dir + "/b.cubin") == b);
  struct stat st {};
  EXPECT(::stat(cache.c_str(), &st) == 0 && (st.st_mode & 0777) == 0700);
  EXPECT(::stat(dir.c_str(), &st) == 0 && (st.st_mode & 0777) == 0700);
  EXPECT(aoti_host::store_cubins(cubins) == dir);
  // the key is the content: other bytes, another directory
  EXPECT(aoti_host::store_cubins({member("a.cubin", "other")}) != dir);

  spit(dir + "/a.cubin", "tampered");  // a wrong file under the right name is replaced
  spit(root + "/precious", "keep me");
  fs::remove(dir + "/b.cubin");
  fs::create_symlink(root + "/precious", dir + "/b.cubin");  // never written through
  EXPECT(aoti_host::store_cubins(cubins) == dir);
  EXPECT(slurp(dir + "/a.cubin") == a && slurp(dir + "/b.cubin") == b);
  EXPECT(!fs::is_symlink(dir + "/b.cubin") && slurp(root + "/precious") == "keep me");
  for (const auto& e : fs::directory_iterator(dir)) EXPECT(e.path().filename().string().rfind(".tmp-", 0) != 0);

  EXPECT(throws({member("x/.hidden.cubin", a)}, "must not start"));
  EXPECT(throws({member("x/a b.cubin", a)}, "may only hold"));
  EXPECT(throws({member("x/a.cubin", a), member("y/a.cubin", b)}, "share the file name"));

  const std::string so = "not really a plugin, but bytes to store";
  const auto* bytes = reinterpret_cast<const unsigned char*>(so.data());
  const aoti_host::StoredPlugin p = aoti_host::store_plugin(bytes, so.size(), "pkg.pt2:m/data/aotinductor/x.so");
  EXPECT(!p.in_memory && p.load_path.rfind("/proc/self/fd/", 0) == 0 && slurp(p.load_path) == so);
  EXPECT(fs::exists(cache + "/" + p.sha256 + "-x.so"));
  EXPECT(aoti_host::store_plugin(bytes, so.size(), "other.pt2:x.so").load_path == p.load_path);

  ::chmod(cache.c_str(), 0770);  // group-writable: refused, with the fix
  try {
    aoti_host::store_cubins({member("c.cubin", "c")});
    EXPECT(false);
  } catch (const aoti_host::Error& e) {
    EXPECT(std::strstr(e.what(), "is writable by its group (mode 0770)") != nullptr);
    EXPECT(std::strstr(e.what(), "fix:") != nullptr);
  }
  fs::remove_all(root);
  return test_result("test_plugin_store");
}
