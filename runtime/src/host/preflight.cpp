#include "host/preflight.h"

#include <cpuid.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#if CUDA_AVAILABLE
#include <cuda_runtime_api.h>
#endif

#include "aoti_host/cpu_isa.h"
#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/package_layout.h"
#include "aoti_host/package_records.h"
#include "aoti_host/status.h"
#include "base/json.h"
#include "base/mapped_file.h"
#include "host/isa_scan.h"

namespace aoti_host {
namespace {

constexpr const char* kSkipEnv = "AOTI_HOST_SKIP_PREFLIGHT";
constexpr size_t kMaxListed = 256;  // more entries than any record export writes: a crafted one

[[noreturn]] void refuse(const std::string& what) { throw Error(what, AOTI_HOST_INVALID_PROGRAM); }

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::vector<std::string> strings(const Json* list, const std::string& what) {
  std::vector<std::string> out;
  if (list == nullptr) return out;
  if (!list->is_array() || list->array().size() > kMaxListed) refuse(what + " is not a list of at most 256 names");
  for (const Json& j : list->array()) {
    if (!j.is_string() || j.string().empty() || j.string().size() > 64) refuse(what + " holds a non-name");
    out.push_back(j.string());
  }
  return out;
}

std::vector<int> archs(const Json* list, const std::string& what) {
  std::vector<int> out;
  if (list == nullptr) return out;
  if (!list->is_array() || list->array().size() > kMaxListed) refuse(what + " is not a list of architectures");
  for (const Json& j : list->array()) {
    if (!j.is_integer() || j.integer() < 10 || j.integer() > 999) refuse(what + " holds a non-architecture");
    out.push_back(static_cast<int>(j.integer()));
  }
  return out;
}

// "13.0" -> 13000 (the driver's cudaDriverGetVersion encoding); -1 unless 1-2 digits (no leading 0), '.', one
// digit (toolchain/verify/package.py check_target reads the same).
int cuda_version(const std::string& s) {
  const size_t dot = s.find('.');
  if (dot == std::string::npos || dot < 1 || dot > 2 || s.size() != dot + 2 || s[0] == '0') return -1;
  for (size_t i = 0; i < s.size(); ++i)
    if (i != dot && (s[i] < '0' || s[i] > '9')) return -1;
  return std::stoi(s.substr(0, dot)) * 1000 + (s[dot + 1] - '0') * 10;
}

const char* optional_string(const Json& obj, const char* key, const std::string& what) {
  const Json* j = obj.get(key);
  if (j == nullptr || j->is_null()) return "";
  if (!j->is_string()) refuse(what + "." + key + " is not a string");
  return j->string().c_str();
}

uint64_t xcr0() {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return 0;  // no OSXSAVE: no AVX state
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));  // XGETBV is baseline once OSXSAVE is set
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool has(const cpu_isa::Extension& e, uint64_t os_state) {
  uint32_t r[4] = {};
  if (static_cast<uint32_t>(__get_cpuid_max(e.leaf & 0x80000000u, nullptr)) < e.leaf) return false;  // int in clang's cpuid.h
  __cpuid_count(e.leaf, e.subleaf, r[0], r[1], r[2], r[3]);
  return (r[e.reg] >> e.bit & 1u) && (os_state & e.xcr0) == e.xcr0;
}

// The --cpu-isa that builds for the highest level this CPU has.
std::string fitting_option(const std::string& level) {
  std::string best = "x86-64-v2";
  for (const auto& lv : cpu_isa::kLevels) {
    if (*lv.cpu_isa != '\0') best = lv.cpu_isa;
    if (level == lv.name) break;
  }
  return best;
}

// `code`: what the needs were decoded from, for a package without a record (named in the message with the
// first instruction of the highest extension this CPU lacks).
void check_cpu(const TargetNeeds& needs, const std::string& shown, const CodeIsa* code = nullptr) {
  const uint64_t os_state = xcr0();
  std::vector<std::string> lacking, unknown;
  bool os_disabled = false;
  for (const auto& name : needs.extensions) {
    const auto* e = std::find_if(std::begin(cpu_isa::kExtensions), std::end(cpu_isa::kExtensions),
                                 [&](const cpu_isa::Extension& x) { return name == x.name; });
    if (e == std::end(cpu_isa::kExtensions)) {
      unknown.push_back(name);
    } else if (!has(*e, os_state)) {
      lacking.push_back(name);
      uint32_t r[4] = {};
      if (static_cast<uint32_t>(__get_cpuid_max(e->leaf & 0x80000000u, nullptr)) >= e->leaf) {
        __cpuid_count(e->leaf, e->subleaf, r[0], r[1], r[2], r[3]);
        if ((r[e->reg] >> e->bit & 1u) != 0) os_disabled = true;
      }
    }
  }
  if (lacking.empty() && unknown.empty()) return;
  const std::vector<std::string> mine = cpu_extensions();
  const std::string level = cpu_level(mine);
  std::string msg = shown + ": the plugin's code needs " + (needs.cpu_isa.empty() ? "" : needs.cpu_isa + " (") +
                    join(needs.extensions) + (needs.cpu_isa.empty() ? "" : ")");
  if (code != nullptr) {
    msg += " (decoded from its code: it has no target record of aoti-toolchain export";
    if (const IsaUse* u = code->highest(lacking); u != nullptr) {
      char at[32];
      std::snprintf(at, sizeof at, "0x%llx", static_cast<unsigned long long>(u->address));
      msg += "; first " + u->extension + " instruction: " + u->mnemonic + " (bytes " + u->bytes + ") in " + u->function +
             " at " + at;
    }
    msg += ")";
  }
  if (!needs.requested.empty()) msg += ", exported with --cpu-isa " + needs.requested;
  if (!lacking.empty()) {
    msg += "; this CPU (" + level + ") lacks " + join(lacking);
    if (os_disabled) msg += " (the CPU has them but the OS has not enabled their registers: XCR0)";
  }
  if (!unknown.empty()) msg += "; this runtime does not know " + join(unknown) + " and cannot check them";
  if (lacking.empty())
    msg += ". fix: use a runtime built from a toolchain whose toolchain/spec/cpu_isa.toml knows them, or re-export "
           "it with `aoti-toolchain export --cpu-isa " + fitting_option(level) + "`; ";
  else
    msg += ". fix: re-export it with `aoti-toolchain export --cpu-isa " + fitting_option(level) +
           "` (or lower), or run it on a CPU with those extensions; ";
  msg += std::string(kSkipEnv) + "=1 loads it anyway (it dies of SIGILL at the first such instruction)";
  throw Error(msg, AOTI_HOST_NOT_SUPPORTED);
}

#if CUDA_AVAILABLE
std::string arch_list(const std::vector<int>& v, const char* prefix) {
  std::string out;
  for (int a : v) out += (out.empty() ? "" : ", ") + std::string(prefix) + std::to_string(a);
  return out.empty() ? "none" : out;
}

void check_cuda(const TargetNeeds& needs, const std::string& shown, int device) {
  int major = 0, minor = 0, driver = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDriverGetVersion(&driver) != cudaSuccess) {
    cudaGetLastError();
    log(LogLevel::Warning, "%s: cannot read cuda:%d's compute capability or the driver version: the plugin's "
        "architectures are not checked before it loads", shown.c_str(), device);
    return;
  }
  const int cc = major * 10 + minor;
  const std::string has = "cuda:" + std::to_string(device) + " is sm_" + std::to_string(cc) + " (compute capability " +
                          std::to_string(major) + "." + std::to_string(minor) + "), its driver supports CUDA " +
                          std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  const std::string carries = "the plugin carries SASS for " + arch_list(needs.sass, "sm_") + " and PTX for " +
                              arch_list(needs.ptx, "compute_");
  if (needs.cuda_version > driver) {
    throw Error(shown + ": the plugin needs CUDA " + std::to_string(needs.cuda_version / 1000) + "." +
                    std::to_string(needs.cuda_version % 1000 / 10) +
                    (needs.min_driver.empty() ? "" : " (driver >= " + needs.min_driver + ")") + "; " + has +
                    ". fix: update the NVIDIA driver, or re-export with a torch built for an older CUDA; " + kSkipEnv +
                    "=1 loads it anyway",
                AOTI_HOST_NOT_SUPPORTED);
  }
  if (needs.sass.empty() && needs.ptx.empty()) return;  // links CUDA but carries no kernels we can see
  for (int s : needs.sass)
    if (s / 10 == cc / 10 && s % 10 <= cc % 10) return;
  for (int p : needs.ptx)
    if (p <= cc) return;
  throw Error(shown + ": no kernel image for this GPU: " + carries + "; " + has +
                  ". fix: re-export it on an sm_" + std::to_string(cc) + " GPU (aoti-toolchain export --device cuda "
                  "--cuda-arch " + std::to_string(cc) + "), or with --cuda-ptx on an older GPU so the driver "
                  "JIT-compiles it; " + kSkipEnv + "=1 loads it anyway",
              AOTI_HOST_NOT_SUPPORTED);
}
#endif

}  // namespace

TargetNeeds parse_target(const std::string& text, const std::string& what) {
  namespace target = records::target;
  namespace rcpu = records::target_cpu;
  namespace rcuda = records::target_cuda;
  const Json doc = Json::parse(text, what);
  if (!doc.is_object()) refuse(what + ": not a JSON object");
  const Json* schema = doc.get(target::kSchema);
  if (schema == nullptr || !schema->is_integer() || schema->integer() != package_layout::kTargetSchema)
    refuse(what + ": " + target::kSchema + " is not " + std::to_string(package_layout::kTargetSchema));
  TargetNeeds t;
  t.present = true;
  if (const Json* cpu = doc.get(target::kCpu); cpu != nullptr && !cpu->is_null()) {
    const std::string w = what + ": " + target::kCpu;
    if (!cpu->is_object()) refuse(w + " is not an object");
    t.cpu_isa = optional_string(*cpu, rcpu::kIsa, w);
    t.requested = optional_string(*cpu, rcpu::kRequested, w);
    t.extensions = strings(cpu->get(rcpu::kExtensions), w + "." + rcpu::kExtensions);
  }
  if (const Json* cuda = doc.get(target::kCuda); cuda != nullptr && !cuda->is_null()) {
    const std::string w = what + ": " + target::kCuda;
    if (!cuda->is_object()) refuse(w + " is not an object");
    t.cuda = true;
    t.sass = archs(cuda->get(rcuda::kSass), w + "." + rcuda::kSass);
    t.ptx = archs(cuda->get(rcuda::kPtx), w + "." + rcuda::kPtx);
    const std::string version = optional_string(*cuda, rcuda::kCuda, w);
    if (!version.empty() && (t.cuda_version = cuda_version(version)) < 0)
      refuse(w + "." + rcuda::kCuda + " \"" + version + "\" is not a CUDA version (13.0)");
    t.min_driver = optional_string(*cuda, rcuda::kMinDriver, w);
    if (t.min_driver.size() > 32) refuse(w + "." + rcuda::kMinDriver + " is not a driver version");
  }
  return t;
}

std::vector<std::string> cpu_extensions() {
  const uint64_t os_state = xcr0();
  std::vector<std::string> out;
  for (const auto& e : cpu_isa::kExtensions)
    if (has(e, os_state)) out.push_back(e.name);
  return out;
}

std::string cpu_level(const std::vector<std::string>& extensions) {
  std::string level = cpu_isa::kLevels[0].name;
  for (const auto& lv : cpu_isa::kLevels) {
    bool all = true;
    for (const auto& e : cpu_isa::kExtensions)
      if (std::strcmp(e.level, lv.name) == 0 &&
          std::find(extensions.begin(), extensions.end(), e.name) == extensions.end())
        all = false;
    if (!all) break;
    level = lv.name;
  }
  return level;
}

// A plugin without a record: what its code needs, decoded (isa_scan.h), checked like a record.
void check_code(const PluginCode& code, const std::string& shown) {
  const IsaScanMode mode = isa_scan_mode();
  if (mode == IsaScanMode::Off) return;
  CodeIsa decoded;
  std::string why;
  std::unique_ptr<MappedFile> file;  // a bare .so: mapped for the decode only
  if (code.bytes == nullptr) {
    try {
      file = std::make_unique<MappedFile>(code.file, "plugin .so");
    } catch (const Error& e) {
      log(LogLevel::Debug, "%s: not decoded: %s", shown.c_str(), e.what());  // dlopen says what is wrong with it
      return;
    }
  }
  const unsigned char* bytes = file ? file->data() : code.bytes;
  const uint64_t size = file ? file->size() : code.size;
  if (!plugin_code_isa(bytes, size, code.member, &decoded, &why)) {
    const std::string fix = "install Zydis 4 (Debian/Ubuntu: apt-get install libzydis4.0) or set AOTI_HOST_ZYDIS_LIBRARY "
                            "to its libZydis.so.4.0";
    if (mode == IsaScanMode::On)
      throw Error(shown + ": the plugin has no target record and the CPU instructions its code needs cannot be "
                  "checked: " + why + ". fix: " + fix + "; AOTI_HOST_ISA_SCAN=auto loads it unchecked",
                  AOTI_HOST_NOT_SUPPORTED);
    static std::once_flag once;
    std::call_once(once, [&] {
      log(LogLevel::Warning, "plugins without a target record load without checking the CPU instructions their "
          "code needs (they die of SIGILL on a CPU that lacks one): %s. fix: %s; AOTI_HOST_ISA_SCAN=off silences "
          "this", why.c_str(), fix.c_str());
    });
    return;
  }
  TargetNeeds needs;
  needs.present = true;
  needs.cpu_isa = decoded.level;
  needs.extensions = decoded.extensions();
  check_cpu(needs, shown, &decoded);
}

void preflight(const TargetNeeds& needs, const std::string& shown, int cuda_device, const PluginCode& code) {
  const bool decode = !needs.present && cuda_device < 0 && (code.bytes != nullptr || !code.file.empty());
  if (!needs.present && !decode) return;
  if (const char* skip = std::getenv(kSkipEnv); skip != nullptr && std::strcmp(skip, "1") == 0) {
    log(LogLevel::Warning, "%s: %s=1: what the plugin needs of this machine is not checked", shown.c_str(), kSkipEnv);
    return;
  }
  if (decode) {
    check_code(code, shown);
    return;
  }
  check_cpu(needs, shown);
#if CUDA_AVAILABLE
  if (cuda_device >= 0 && needs.cuda) check_cuda(needs, shown, cuda_device);
#else
  (void)cuda_device;
#endif
}

}  // namespace aoti_host
