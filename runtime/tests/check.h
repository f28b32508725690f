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
