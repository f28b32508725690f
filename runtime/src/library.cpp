// The shared runtime library's own translation unit (the rest comes whole-archived).
#include "aoti_host/c_api.h"

#ifndef AOTI_HOST_VERSION
#define AOTI_HOST_VERSION "0.1.0"
#endif

extern "C" const char* aoti_host_version(void) { return AOTI_HOST_VERSION; }
