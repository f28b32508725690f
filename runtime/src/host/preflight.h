// What a plugin needs of the machine, checked before it is dlopened: the package's target record
// (<model>/extra/aoti_toolchain_target.json, written by `aoti-toolchain export` from the plugin's decoded
// code; docs/targets.md) against this CPU (cpuid, and xgetbv for the register state the OS enabled) and,
// for a CUDA program, the device's compute capability and the driver's CUDA version. A plugin that would
// die of SIGILL or "no kernel image is available" is refused with what it needs, what the machine has
// and the export option that fixes it. A package without a record (torch's own) has its plugin's code
// decoded instead (isa_scan.h). AOTI_HOST_SKIP_PREFLIGHT=1 skips the check (docs/environment).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aoti_host {

struct TargetNeeds {
  bool present = false;                 // the package has a target record
  std::string cpu_isa;                  // the psABI level its code needs ("x86-64-v3")
  std::string requested;                // the --cpu-isa it was exported with ("avx2"), may be empty
  std::vector<std::string> extensions;  // decoded from its code
  bool cuda = false;                    // it carries GPU code or links the CUDA runtime
  std::vector<int> sass, ptx;           // sm_XY / compute_XY as XY
  int cuda_version = 0;                 // the CUDA version it needs, as the driver reports one (13000); 0: none
  std::string min_driver;               // as recorded, for the message
};

// Parses a target record; throws Error(INVALID_PROGRAM) naming `what` and the field for a malformed one.
TargetNeeds parse_target(const std::string& text, const std::string& what);

// The plugin of a package without a record, or a bare .so: what its code needs is decoded (isa_scan.h).
struct PluginCode {
  const unsigned char* bytes = nullptr;  // null: read from `file` (a bare .so), or nothing to decode
  uint64_t size = 0;
  std::string member;  // package:member (or the file), for messages and logs
  std::string file;    // a bare plugin .so: mapped and decoded when `bytes` is null
};

// Throws Error(NOT_SUPPORTED) when this machine lacks what `needs` says; `shown` names the package.
// `cuda_device` < 0: a CPU program (the GPU part is not checked). Without a record (`needs.present` false),
// a CPU program's plugin `code` is decoded and checked the same way (AOTI_HOST_ISA_SCAN, isa_scan.h).
void preflight(const TargetNeeds& needs, const std::string& shown, int cuda_device, const PluginCode& code = {});

// This CPU's extensions among those the runtime knows (aoti_host/cpu_isa.h) and its psABI level.
std::vector<std::string> cpu_extensions();
std::string cpu_level(const std::vector<std::string>& extensions);

}  // namespace aoti_host
