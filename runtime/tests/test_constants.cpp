// Native tests of the one constants reader (src/constants.cpp) and of the residency helper the CUDA graph
// check uses: a Plugin whose entry-point table points at functions of this file returning controlled
// results (the .so fakes of tests/integration/test_constants_abi.py cover the same through dlopen).
#include <cstring>
#include <string>
#include <vector>

#include "aoti_host/c_api.h"
#include "aoti_host/error.h"
#include "aoti_host/tensor.h"
#include "check.h"
#include "host/constants.h"

namespace {

using aoti_host::Residency;

std::vector<AOTInductorConstantMapEntry> g_entries;
bool g_null_array = false;
int g_rc = 0;

AOTIRuntimeError entries_fn(AOTInductorModelContainerHandle, const AOTInductorConstantMapEntry** out, size_t* n, bool) {
  *out = g_null_array ? nullptr : g_entries.data();
  *n = g_entries.size();
  return g_rc;
}

AOTIRuntimeError last_error_fn(const char** msg) {
  *msg = "swapping constants";
  return 0;
}

aoti_host::Plugin fake(bool with_entries) {
  aoti_host::Plugin p;
  p.path = "/fake/plugin.so";
  if (with_entries) p.fns.AOTInductorModelContainerExtractConstantsMapEntries = entries_fn;
  p.fns.AOTInductorGetLastError = last_error_fn;
  return p;
}

std::string error_of(const aoti_host::Plugin& p, int* status) {
  try {
    aoti_host::extract_constants(p, nullptr);
  } catch (const aoti_host::Error& e) {
    *status = e.status();
    return e.what();
  }
  *status = 0;
  return "";
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

int main() {
  float a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
  AtenTensorHandle ta = aoti_host::to_handle(aoti_host::Tensor::from_blob(a, 6, {4}, {1}, 0, 0, 0));
  AtenTensorHandle tb = aoti_host::to_handle(aoti_host::Tensor::from_blob(b, 6, {2}, {1}, 0, 0, 0));
  aoti_host::Plugin with = fake(true), without = fake(false);
  std::string why;
  int status = 0;

  // No entries call: NotSupported from the reader, Unknown residency (graphs stay off).
  EXPECT(!aoti_host::has_entries_call(without));
  EXPECT(contains(error_of(without, &status), "torch 2.13") && status == AOTI_HOST_NOT_SUPPORTED);
  EXPECT(aoti_host::constants_residency(without, nullptr, 0, &why) == Residency::Unknown);
  EXPECT(contains(why, "AOTInductorModelContainerExtractConstantsMapEntries"));

  // No constants: a null array with count 0 is fine, and everything (nothing) is on the device.
  g_entries.clear();
  g_null_array = true;
  EXPECT(aoti_host::extract_constants(with, nullptr).empty());
  EXPECT(aoti_host::constants_residency(with, nullptr, 1, &why) == Residency::AllOnDevice);
  g_null_array = false;

  // Valid: names are copied (the plugin's array may change after the call).
  g_entries = {{"fc.weight", ta}, {"fc.bias", tb}};
  auto got = aoti_host::extract_constants(with, nullptr);
  EXPECT(got.size() == 2 && got[0].fqn == "fc.weight" && got[1].handle == tb);
  g_entries[0].name = "changed";
  EXPECT(got[0].fqn == "fc.weight");
  // CPU constants: resident for a CPU program, not for a CUDA one (the graph check's "host constant").
  EXPECT(aoti_host::constants_residency(with, nullptr, 0, &why) == Residency::AllOnDevice);
  EXPECT(aoti_host::constants_residency(with, nullptr, 1, &why) == Residency::SomeElsewhere);
  EXPECT(contains(why, "constant changed is on cpu, not cuda"));

  // Malformed results: InvalidProgram naming the plugin and the entry; residency Unknown.
  g_null_array = true;
  EXPECT(contains(error_of(with, &status), "/fake/plugin.so") && contains(error_of(with, &status), "null array with count 2"));
  EXPECT(status == AOTI_HOST_INVALID_PROGRAM);
  EXPECT(aoti_host::constants_residency(with, nullptr, 0, &why) == Residency::Unknown);
  g_null_array = false;
  g_entries = {{"w", ta}, {nullptr, tb}};
  EXPECT(contains(error_of(with, &status), "entry 1 of 2 has a null name") && status == AOTI_HOST_INVALID_PROGRAM);
  g_entries = {{"w", ta}, {"b", nullptr}};
  EXPECT(contains(error_of(with, &status), "entry 1 (b) has a null tensor handle"));
  g_entries = {{"w", ta}, {"w", tb}};
  EXPECT(contains(error_of(with, &status), "entry 1 repeats the name w"));
  EXPECT(aoti_host::constants_residency(with, nullptr, 0, &why) == Residency::Unknown && contains(why, "repeats"));
  // The extractor's own error is the one returned.
  g_rc = 1;
  EXPECT(contains(error_of(with, &status), "failed: swapping constants") && status == AOTI_HOST_INVALID_PROGRAM);

  delete aoti_host::from_handle(ta);
  delete aoti_host::from_handle(tb);
  return test_result("test_constants");
}
