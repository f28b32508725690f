// The one export macro of the host runtime. Everything is hidden by default (-fvisibility=hidden);
// only the aoti_torch_* shims and the aoti_host_* C API carry AOTI_HOST_API.
#pragma once

#include "aoti_host/config.h"  // records this translation unit's configuration in its object

#if defined(_WIN32)
#define AOTI_HOST_API __declspec(dllexport)
#else
#define AOTI_HOST_API __attribute__((visibility("default")))
#endif
