// The check macro of the native tests: each failed check prints "FAIL: file:line: condition" and is
// counted in g_failures; a test's main returns non-zero when g_failures > 0.
#pragma once

#include <cstdio>

inline int g_failures = 0;

#define EXPECT(cond)                                               \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::printf("FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                \
    }                                                              \
  } while (0)

// A test's exit status, after its checks: prints "<name>: all checks passed" or "<name>: N check(s) failed";
// 0 when none failed.
inline int test_result(const char* name) {
  if (g_failures != 0) {
    std::printf("%s: %d check(s) failed\n", name, g_failures);
    return 1;
  }
  std::printf("%s: all checks passed\n", name);
  return 0;
}
