// Sessions: each owns copies of the program's Buffer constants (program.h says how runs switch state).
#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/shims.h"
#include "host/program.h"

// On CUDA the copies run device-to-device on the stream of the method that last worked on the state
// (order_state), so they queue behind its runs and ahead of the next; nothing here waits for the device.
namespace aoti_host {

SessionState::~SessionState() {
  if (keep_ != nullptr) owner_->release_session(*this);
}

std::unique_ptr<SessionState> Program::new_session(const std::shared_ptr<Program>& self) {
  if (!no_sessions_.empty()) throw Error(no_sessions_, AOTI_HOST_NOT_SUPPORTED);
  std::unique_ptr<SessionState> s(new SessionState());
  s->keep_ = self;
  s->owner_ = this;
  std::lock_guard<std::mutex> lock(mu_);
  const StreamScopePtr ordered = order_state();
  s->values = copy_state(true);
  return s;
}

std::unique_ptr<SessionState> Program::clone_session(const std::shared_ptr<Program>& self, SessionState& from) {
  if (from.owner_ != this) throw Error("the session belongs to another program", AOTI_HOST_INVALID_ARGUMENT);
  std::unique_ptr<SessionState> s(new SessionState());
  s->keep_ = self;
  s->owner_ = this;
  std::lock_guard<std::mutex> lock(mu_);
  const StreamScopePtr ordered = order_state();
  if (current_ == &from) {
    s->values = copy_state(false);  // its latest values are in the working tensors
  } else {
    for (const auto& v : from.values) s->values.push_back(copy_value(*v));
  }
  return s;
}

void Program::reset_session(SessionState& s) {
  if (s.owner_ != this) throw Error("the session belongs to another program", AOTI_HOST_INVALID_ARGUMENT);
  std::lock_guard<std::mutex> lock(mu_);
  const StreamScopePtr ordered = order_state();
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (current_ == &s) {
      for (auto w : slots_[i].working) copy_value(*from_handle(w), *slots_[i].initial);
    } else {
      copy_value(*s.values[i], *slots_[i].initial);
    }
  }
}

void Program::release_session(SessionState& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_ == &s) current_ = nullptr;  // the working tensors hold a dead session's values: never saved
  try {
    const StreamScopePtr ordered = order_state();
    s.values.clear();  // freed in stream order after the copies that used them
  } catch (const std::exception& e) {
    // (called from a destructor: never throws; the values are then freed with the session, on the thread's
    // current stream)
    log(LogLevel::Warning, "%s: freeing a session's state on the program's stream: %s", path_.c_str(), e.what());
  }
}

}  // namespace aoti_host
