// Sessions: each owns copies of the program's Buffer constants (method_set.h says how runs switch state).
#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/shims.h"
#include "method_set.h"

namespace aoti_host {
namespace {

void copy_into(Tensor& dst, const Tensor& src) {
  if (aoti_torch_copy_(to_handle(&dst), to_handle(const_cast<Tensor*>(&src)), 0) != AOTI_TORCH_SUCCESS)
    throw Error("copying session state failed: " + last_error(), AOTI_HOST_INTERNAL);
}

}  // namespace

SessionState::~SessionState() {
  if (keep_ != nullptr) owner_->release_session(*this);
}

std::unique_ptr<SessionState> MethodSet::new_session(const std::shared_ptr<MethodSet>& self) {
  if (!no_sessions_.empty()) throw Error(no_sessions_, AOTI_HOST_NOT_SUPPORTED);
  std::unique_ptr<SessionState> s(new SessionState());
  s->keep_ = self;
  s->owner_ = this;
  std::lock_guard<std::mutex> lock(mu_);
  s->values = copy_state(true);
  return s;
}

std::unique_ptr<SessionState> MethodSet::clone_session(const std::shared_ptr<MethodSet>& self, SessionState& from) {
  if (from.owner_ != this) throw Error("the session belongs to another program", AOTI_HOST_INVALID_ARGUMENT);
  std::unique_ptr<SessionState> s(new SessionState());
  s->keep_ = self;
  s->owner_ = this;
  std::lock_guard<std::mutex> lock(mu_);
  if (current_ == &from) {
    s->values = copy_state(false);  // its latest values are in the working tensors
  } else {
    for (const auto& v : from.values) {
      s->values.emplace_back(Tensor::empty_strided(v->dtype(), v->sizes(), v->strides(), v->device_type(), v->device_index()));
      copy_into(*s->values.back(), *v);
    }
  }
  return s;
}

void MethodSet::reset_session(SessionState& s) {
  if (s.owner_ != this) throw Error("the session belongs to another program", AOTI_HOST_INVALID_ARGUMENT);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (current_ == &s) {
      for (auto w : slots_[i].working) copy_into(*from_handle(w), *slots_[i].initial);
    } else {
      copy_into(*s.values[i], *slots_[i].initial);
    }
  }
}

void MethodSet::release_session(SessionState& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_ == &s) current_ = nullptr;  // the working tensors hold a dead session's values: never saved
}

}  // namespace aoti_host
