#include "aoti_host/log.h"
#include "aoti_host/error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace aoti_host {
namespace {

LogLevel threshold_from_env() {
  const char* v = std::getenv("AOTI_HOST_LOG");
  if (v == nullptr || *v == '\0') return LogLevel::Warning;
  if (std::strcmp(v, "debug") == 0) return LogLevel::Debug;
  if (std::strcmp(v, "info") == 0) return LogLevel::Info;
  if (std::strcmp(v, "warning") == 0 || std::strcmp(v, "warn") == 0) return LogLevel::Warning;
  if (std::strcmp(v, "error") == 0) return LogLevel::Error;
  if (std::strcmp(v, "off") == 0) return LogLevel::Off;
  std::fprintf(stderr,
               "aoti-host: warning: AOTI_HOST_LOG=%s is not one of debug|info|warning|error|off; "
               "using warning\n",
               v);
  return LogLevel::Warning;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warning: return "warning";
    case LogLevel::Error: return "error";
    case LogLevel::Off: break;
  }
  return "?";
}

thread_local std::string t_last_error;

}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = threshold_from_env();
  return level != LogLevel::Off && level >= threshold;
}

void log(LogLevel level, const char* fmt, ...) {
  if (!log_enabled(level)) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "aoti-host: %s: %s\n", level_name(level), buf);
}

void set_last_error(std::string message) { t_last_error = std::move(message); }
void clear_last_error() { t_last_error.clear(); }
const std::string& last_error() { return t_last_error; }

}  // namespace aoti_host
