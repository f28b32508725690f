// Logging for the host runtime: one line per message on stderr, prefixed "aoti-host: <level>: ".
// The threshold comes from AOTI_HOST_LOG (debug|info|warning|error|off, default warning), read once.
#pragma once

#include <cstdarg>

namespace aoti_host {

enum class LogLevel { Debug = 0, Info = 1, Warning = 2, Error = 3, Off = 4 };

bool log_enabled(LogLevel level);
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace aoti_host
