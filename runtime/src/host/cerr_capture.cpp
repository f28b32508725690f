#include "host/cerr_capture.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <ostream>
#include <streambuf>

namespace aoti_host {
namespace {

constexpr size_t kMaxCaptured = 8192;  // a reason is a line or two; a plugin printing more is cut here

thread_local bool t_armed = false;
thread_local std::string t_text;

// Forwards everything to the stream's original buffer; what an armed thread writes is also kept.
class TeeBuf : public std::streambuf {
 public:
  explicit TeeBuf(std::streambuf* original) : original_(original) {}

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    keep(static_cast<char>(c), 1);
    return original_ != nullptr ? original_->sputc(static_cast<char>(c)) : c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    keep(s, n);
    return original_ != nullptr ? original_->sputn(s, n) : n;
  }
  int sync() override { return original_ != nullptr ? original_->pubsync() : 0; }

 private:
  static void keep(char c, std::streamsize n) { keep(&c, n); }
  static void keep(const char* s, std::streamsize n) {
    if (!t_armed || n <= 0 || t_text.size() >= kMaxCaptured) return;
    t_text.append(s, std::min<size_t>(static_cast<size_t>(n), kMaxCaptured - t_text.size()));
  }
  std::streambuf* original_;
};

std::mutex g_mutex;
std::map<void*, TeeBuf*> g_teed;  // stream -> its tee; never freed: the plugin may write at any later time

}  // namespace

void* plugin_cerr(void* dl_handle) {
  static const char* kCerr = "_ZSt4cerr";
  void* global = ::dlopen(nullptr, RTLD_NOW);  // the global scope, which the loader searches first
  void* obj = global != nullptr ? ::dlsym(global, kCerr) : nullptr;
  if (global != nullptr) ::dlclose(global);
  if (obj == nullptr && dl_handle != nullptr) obj = ::dlsym(dl_handle, kCerr);
  return obj;
}

CerrCapture::CerrCapture(void* cerr_object) {
  t_text.clear();
  if (cerr_object == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto& tee = g_teed[cerr_object];
    if (tee == nullptr) {
      auto* os = static_cast<std::ostream*>(cerr_object);
      tee = new TeeBuf(os->rdbuf());
      os->rdbuf(tee);
    }
  }
  t_armed = armed_ = true;
}

CerrCapture::~CerrCapture() {
  if (armed_) t_armed = false;
}

std::string captured_plugin_error() {
  std::string text = t_text;
  const size_t at = text.rfind("Error: ");
  if (at != std::string::npos) text = text.substr(at + 7);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace aoti_host
