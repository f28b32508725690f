#include "host/program.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "aoti_host/error.h"
#include "aoti_host/input_file.h"
#include "aoti_host/log.h"
#include "aoti_host/package_layout.h"
#include "aoti_host/package_records.h"
#include "aoti_host/shims.h"
#include "base/json.h"
#include "host/constants.h"
#include "host/package.h"
#if CUDA_AVAILABLE
#include "aoti_host/cuda/cuda.h"
#include "host/cuda/method_state.h"
#endif

namespace aoti_host {
namespace {

constexpr const char* kManifest = package_layout::kMethodsManifest;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<MethodSpec> parse_manifest(const std::string& path) {
  // A regular file only (a FIFO named methods.json would block a stream read forever); bounded by its size.
  const InputFile file(path, "methods manifest");
  constexpr uint64_t kMaxManifest = uint64_t{16} << 20;
  if (file.size() > kMaxManifest)
    throw Error(path + ": a methods manifest of " + std::to_string(file.size()) + " bytes (at most " +
                std::to_string(kMaxManifest) + " are read); give the small methods.json export_methods writes",
                AOTI_HOST_INVALID_ARGUMENT);
  std::string text(static_cast<size_t>(file.size()), '\0');
  file.read_at(0, text.data(), text.size());
  const std::string fix = "; write {\"schema\": 1, \"methods\": [{\"name\": \"forward\", \"package\": \"forward.pt2\"}, "
                          "...]} (toolchain.export.export_methods does)";
  Json j;
  try {
    j = Json::parse(text, path);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + fix, AOTI_HOST_INVALID_ARGUMENT);
  }
  namespace rm = records::method;
  const Json* list = j.get(records::methods::kMethods);
  if (list == nullptr || !list->is_array() || list->array().empty())
    throw Error(path + ": no \"" + records::methods::kMethods + "\" list" + fix, AOTI_HOST_INVALID_ARGUMENT);
  std::vector<MethodSpec> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < list->array().size(); ++i) {
    const Json& m = list->array()[i];
    const Json* name = m.get(rm::kName);
    const Json* pkg = m.get(rm::kPackage);
    std::string where = path + ": " + records::methods::kMethods + "[" + std::to_string(i) + "]";
    if (name == nullptr || !name->is_string() || name->string().empty())
      throw Error(where + " has no \"" + rm::kName + "\"" + fix, AOTI_HOST_INVALID_ARGUMENT);
    if (pkg == nullptr || !pkg->is_string() || pkg->string().empty())
      throw Error(where + " (" + name->string() + ") has no \"" + rm::kPackage + "\"" + fix,
                  AOTI_HOST_INVALID_ARGUMENT);
    if (!seen.insert(name->string()).second)
      throw Error(where + " repeats the method name " + name->string(), AOTI_HOST_INVALID_ARGUMENT);
    std::string file = pkg->string()[0] == '/' ? pkg->string() : dir_of(path) + "/" + pkg->string();
    if (!is_file(file))
      throw Error(where + " (" + name->string() + "): " + file + ": no such file; export the method again",
                  AOTI_HOST_NOT_FOUND);
    out.push_back({name->string(), file});
  }
  return out;
}

bool same_layout(const Tensor& a, const Tensor& b, std::string* why) {
  if (a.dtype() != b.dtype()) return *why = std::string("dtype ") + dtype_name(b.dtype()) + " vs " + dtype_name(a.dtype()), false;
  if (a.sizes() != b.sizes()) return *why = "sizes " + list_str(b.sizes()) + " vs " + list_str(a.sizes()), false;
  if (a.strides() != b.strides()) return *why = "strides " + list_str(b.strides()) + " vs " + list_str(a.strides()), false;
  if (a.device_type() != b.device_type() || a.device_index() != b.device_index())
    return *why = std::string("device ") + device_type_name(b.device_type()) + ":" + std::to_string(b.device_index()) +
                  " vs " + device_type_name(a.device_type()) + ":" + std::to_string(a.device_index()),
           false;
  return true;
}

size_t nbytes(const Tensor& t) { return compute_storage_nbytes(t.sizes(), t.strides(), t.itemsize(), 0); }

// Same FQN and layout but other values (methods exported from different modules) must not be shared.
// Called after same_layout (same dtype, sizes, strides, device), so both span nbytes(a). Host tensors are
// compared with memcmp; CUDA tensors on the device (cuda::same_bytes, on the current stream: the method's),
// never through host memory. Bytes, not values: -0.0 and 0.0 (or two NaN payloads) count as different,
// which only costs a copy.
bool same_values(const Tensor& a, const Tensor& b, std::string* why) {
  if (a.device_type() != b.device_type() || a.device_index() != b.device_index()) {
    *why = std::string("values on ") + device_type_name(b.device_type()) + " vs " + device_type_name(a.device_type()) +
           " are not compared";
    return false;
  }
  const size_t n = nbytes(a);
  bool same = false;
  if (a.device_type() == device_code::kCPU) {
    same = n == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), n) == 0;
#if CUDA_AVAILABLE
  } else if (a.device_type() == device_code::kCUDA) {
    same = cuda::same_bytes(a.data_ptr(), b.data_ptr(), n, a.device_index());
#endif
  } else {
    *why = std::string("values on ") + device_type_name(a.device_type()) + " cannot be compared by this runtime";
    return false;
  }
  if (!same) *why = "same layout, different values";
  return same;
}

bool on_device(const Tensor& t) { return t.device_type() != device_code::kCPU; }

// dst <- src (same sizes), on the current stream; `what` names what is copied in the error.
void copy_into(Tensor& dst, const Tensor& src, const char* what) {
  if (aoti_torch_copy_(to_handle(&dst), to_handle(const_cast<Tensor*>(&src)), 0) != AOTI_TORCH_SUCCESS)
    throw Error(std::string("copying ") + what + " failed: " + last_error(), AOTI_HOST_INTERNAL);
}

// A runtime-owned copy with the same dtype, sizes, strides and device, made on the current stream.
std::unique_ptr<Tensor> copy_of(const Tensor& t) {
  std::unique_ptr<Tensor> c(Tensor::empty_strided(t.dtype(), t.sizes(), t.strides(), t.device_type(), t.device_index()));
  copy_into(*c, t, "a constant");
  return c;
}

// Waits for a CUDA method's stream (the load's copies and comparisons are done before the next method's).
void finish(const Method& p) {
#if CUDA_AVAILABLE
  if (p.cuda_state() != nullptr) p.cuda_state()->synchronize();
#else
  (void)p;
#endif
}

std::string plugin_why(const Plugin& plugin) {
  const std::string why = plugin.last_error();
  if (!why.empty()) return ": " + why;
  return last_error().empty() ? "" : " (host shim: " + last_error() + ")";
}

}  // namespace

StreamScopePtr Program::order_state(size_t method) {
  StreamScopePtr scope = stream_scope(*methods_.at(method));
#if CUDA_AVAILABLE
  const cuda::MethodState* next = methods_.at(method)->cuda_state();
  if (next != nullptr && method != state_method_) {
    const cuda::MethodState* last = methods_.at(state_method_)->cuda_state();
    if (last != nullptr) cuda::stream_wait(next->stream(), last->stream());
  }
#endif
  state_method_ = method;
  return scope;
}

std::unique_ptr<Tensor> Program::copy_value(const Tensor& src) {
  std::unique_ptr<Tensor> c = copy_of(src);
  (on_device(src) ? stats_.state_device_copy_bytes : stats_.state_host_copy_bytes) += nbytes(src);
  return c;
}

void Program::copy_value(Tensor& dst, const Tensor& src) {
  copy_into(dst, src, "session state");
  (on_device(dst) && on_device(src) ? stats_.state_device_copy_bytes : stats_.state_host_copy_bytes) += nbytes(src);
}

WeightStats Program::weight_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::vector<MethodSpec> resolve_methods(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": no such file or directory", AOTI_HOST_NOT_FOUND);
  if (S_ISDIR(st.st_mode)) {
    std::string manifest = path + "/" + kManifest;
    if (is_file(manifest)) return parse_manifest(manifest);
    std::vector<MethodSpec> out;
    if (DIR* d = ::opendir(path.c_str())) {
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n[0] != '.' && ends_with(n, ".pt2")) out.push_back({n.substr(0, n.size() - 4), path + "/" + n});
      }
      ::closedir(d);
    }
    if (out.empty())
      throw Error(path + ": a directory without " + kManifest + " or *.pt2 packages; give a .pt2, or export the "
                  "methods with toolchain.export.export_methods", AOTI_HOST_NOT_FOUND);
    std::sort(out.begin(), out.end(), [](const MethodSpec& a, const MethodSpec& b) {
      return (a.name != "forward") < (b.name != "forward") ||
             ((a.name != "forward") == (b.name != "forward") && a.name < b.name);
    });
    return out;
  }
  if (ends_with(path, ".json")) return parse_manifest(path);
  return {{"forward", path}};
}

// FQN -> the tensor every later method with that FQN borrows (a handle of its owner's container, or a
// host copy); valid for the life of the Program (owners are never updated after they join).
struct Pool {
  std::map<std::string, std::pair<AtenTensorHandle, std::string>> items;  // fqn -> (tensor, owner method)
};

std::shared_ptr<Program> Program::load(const std::string& path, const aoti_host_load_options& options) {
  load_device(options.device, path);  // a bad device is refused before any file is looked at
  std::vector<MethodSpec> specs = resolve_methods(path);
  if (specs.size() > 1 && options.weights_path != nullptr && *options.weights_path != '\0')
    throw Error(path + ": a weights blob is for one plugin .so; each method of a multi-method program takes its "
                "weights from its own package", AOTI_HOST_INVALID_ARGUMENT);
  std::shared_ptr<Program> set(new Program());
  set->path_ = path;
  const bool share = options.no_weight_sharing == 0 && specs.size() > 1;
  for (const auto& s : specs) {
    try {
      set->methods_.push_back(Method::load(s.path, options, share));
      // One pack cache for the set: a weight the methods share is packed once.
      if (set->methods_.size() > 1) set->methods_.back()->share_pack_cache(*set->methods_.front());
    } catch (const Error& e) {
      if (specs.size() == 1) throw;
      throw Error("method " + s.name + ": " + e.what(), e.status());
    }
    set->names_.push_back(s.name);
  }
  set->user_managed_.resize(specs.size());
  Pool pool;
  for (size_t k = 0; k < set->methods_.size(); ++k) {
    // Its weights reach its device with that device current; the caller's is restored after.
    const StreamScopePtr on_k = stream_scope(*set->methods_[k]);
    if (share) set->share(k, options, pool);
    set->methods_[k]->load_pending_weights();
    if (!share && has_entries_call(set->methods_[k]->plugin()))
      set->stats_.constants += constant_infos(set->methods_[k]->plugin(), set->methods_[k]->container()).size();
    finish(*set->methods_[k]);  // what it holds is complete before a later method compares or borrows it
  }
  set->find_state();
  set->own_state_.reset(new SessionState());
  set->own_state_->owner_ = set.get();
  // its values are allocated when another state first takes the working tensors (switch_to)
  set->current_ = set->own_state_.get();
  if (specs.size() > 1)
    log(LogLevel::Info, "%s: %zu methods, %zu constants, %zu shared (%zu bytes not loaded twice), %zu mismatched",
        path.c_str(), specs.size(), set->stats_.constants, set->stats_.shared, set->stats_.shared_bytes,
        set->stats_.mismatched);
  return set;
}

void Program::share(size_t k, const aoti_host_load_options& options, Pool& pool) {
  Method& m = *methods_[k];
  const Plugin& pl = m.plugin();
  const AotiEntryPoints& f = pl.fns;
  const std::string& name = names_[k];
  auto keep_own = [&](const char* why) {
    if (why != nullptr) log(LogLevel::Info, "%s: method %s loads its own weights: %s", m.path().c_str(), name.c_str(), why);
    m.load_pending_weights();
  };
  if (!has_entries_call(pl)) return keep_own(nullptr);  // its load already warned
  std::vector<ConstantInfo> infos = constant_infos(pl, m.container());
  stats_.constants += infos.size();
  std::map<std::string, std::string> internal;  // fqn -> internal name
  bool folded = false, overlap = false;
  for (const auto& c : infos) {
    folded |= c.from_folded;
    internal[c.fqn] = c.name;
    overlap |= pool.items.count(c.fqn) > 0;
  }
  const bool pending = m.weights_pending();
  if (overlap && f.AOTInductorModelContainerUpdateUserManagedConstantBufferPairs == nullptr) {
    keep_own("the plugin lacks AOTInductorModelContainerUpdateUserManagedConstantBufferPairs");
  } else if (overlap && !pending && (f.AOTInductorModelContainerSwapConstantBuffer == nullptr ||
                                     f.AOTInductorModelContainerFreeInactiveConstantBuffer == nullptr)) {
    keep_own("the plugin cannot swap and free its constant buffer");
  } else if (overlap && folded) {
    keep_own("it has constant-folded constants, which the plugin recomputes into its own buffer");
  } else if (overlap) {
    // Its own tensors: the container's (embedded weights) or a probe's that read the blob.
    std::unique_ptr<Method> probe;
    if (pending) probe = Method::load(m.path(), options, false);
    const Method& src = probe ? *probe : m;
    // Comparisons and copies of its tensors run on the stream of the method that holds them.
    StreamScopePtr on_src = stream_scope(src);
    std::vector<ConstantEntry> own = extract_constants(src.plugin(), src.container());
    std::vector<AOTInductorConstantMapEntry> pairs;
    std::vector<std::string> names;
    names.reserve(own.size());
    for (const auto& e : own) {
      auto in = internal.find(e.fqn);
      if (in == internal.end())
        throw Error(m.path() + ": constant " + e.fqn + " from the entries call is not among its constants' FQNs",
                    AOTI_HOST_INVALID_PROGRAM);
      const Tensor& mine = *from_handle(e.handle);
      auto p = pool.items.find(e.fqn);
      std::string why;
      AtenTensorHandle use = nullptr;
      if (p != pool.items.end() && same_layout(*from_handle(p->second.first), mine, &why) &&
          same_values(*from_handle(p->second.first), mine, &why)) {
        use = p->second.first;
        stats_.shared++;
        stats_.shared_bytes += nbytes(mine);
      } else {
        if (p != pool.items.end()) {
          stats_.mismatched++;
          log(LogLevel::Warning, "%s: method %s: constant %s differs from method %s's (%s): it keeps its own copy",
              m.path().c_str(), name.c_str(), e.fqn.c_str(), p->second.second.c_str(), why.c_str());
        }
        host_owned_.push_back(copy_of(mine));
        use = to_handle(host_owned_.back().get());
        (on_device(mine) ? stats_.device_copy_bytes : stats_.host_copy_bytes) += nbytes(mine);
        if (p == pool.items.end()) pool.items[e.fqn] = {use, name};
      }
      names.push_back(in->second);
      pairs.push_back({names.back().c_str(), use});
    }
    finish(src);  // the copies are complete before a probe (and the memory they read) goes
    on_src.reset();
    clear_last_error();
    auto update = f.AOTInductorModelContainerUpdateUserManagedConstantBufferPairs;
    if (pending) {
      // The container never loaded its blob: the pairs are its constants.
      if (update(m.container(), pairs.data(), pairs.size(), false, false) != AOTI_RUNTIME_SUCCESS)
        throw Error(m.path() + ": AOTInductorModelContainerUpdateUserManagedConstantBufferPairs failed" + plugin_why(pl),
                    AOTI_HOST_INVALID_PROGRAM);
      m.weights_supplied();
    } else {
      // Embedded weights were copied at Create: hand over into the inactive buffer, swap, free the old blob.
      if (update(m.container(), pairs.data(), pairs.size(), true, false) != AOTI_RUNTIME_SUCCESS ||
          f.AOTInductorModelContainerSwapConstantBuffer(m.container()) != AOTI_RUNTIME_SUCCESS ||
          f.AOTInductorModelContainerFreeInactiveConstantBuffer(m.container()) != AOTI_RUNTIME_SUCCESS)
        throw Error(m.path() + ": handing shared weights to method " + name + " failed" + plugin_why(pl),
                    AOTI_HOST_INVALID_PROGRAM);
    }
    user_managed_[k] = std::move(names);
    m.constants_changed();
    return;
  } else {
    m.load_pending_weights();
  }
  // An owner: what it holds, later methods borrow.
  for (const auto& e : extract_constants(pl, m.container()))
    if (!pool.items.count(e.fqn)) pool.items[e.fqn] = {e.handle, name};
}

void Program::find_state() {
  std::map<std::string, size_t> index;
  for (size_t k = 0; k < methods_.size(); ++k) {
    const Plugin& pl = methods_[k]->plugin();
    if (!has_entries_call(pl)) {
      no_sessions_ = pl.path + ": the plugin (method " + names_[k] +
                     ") does not export AOTInductorModelContainerExtractConstantsMapEntries (first emitted by torch " +
                     entries_call_since() + "), so its state cannot be read: sessions are not supported; re-export "
                     "the model with torch >= " + entries_call_since();
      slots_.clear();
      return;
    }
    std::map<std::string, AtenTensorHandle> by_fqn;
    for (const auto& e : extract_constants(pl, methods_[k]->container())) by_fqn[e.fqn] = e.handle;
    const StreamScopePtr on_k = stream_scope(*methods_[k]);  // the initial values are copied on its stream
    for (const auto& c : constant_infos(pl, methods_[k]->container())) {
      if (c.type != kBuffer || c.from_folded) continue;
      auto h = by_fqn.find(c.fqn);
      if (h == by_fqn.end()) continue;
      auto [it, fresh] = index.emplace(c.fqn, slots_.size());
      if (fresh) slots_.push_back({c.fqn, {}, copy_value(*from_handle(h->second))});
      Slot& s = slots_[it->second];
      bool seen = false;
      for (auto w : s.working) seen |= from_handle(w)->data_ptr() == from_handle(h->second)->data_ptr();
      if (!seen) s.working.push_back(h->second);
    }
    finish(*methods_[k]);
  }
}

std::vector<std::unique_ptr<Tensor>> Program::copy_state(bool from_initial) {
  std::vector<std::unique_ptr<Tensor>> out;
  for (const auto& s : slots_) out.push_back(copy_value(from_initial ? *s.initial : *from_handle(s.working[0])));
  return out;
}

void Program::switch_to(SessionState* s) {
  if (current_ == s || slots_.empty()) return;
  if (current_ != nullptr && current_->values.empty()) {
    current_->values = copy_state(false);  // the program's own state, saved for the first time
  } else if (current_ != nullptr) {
    for (size_t i = 0; i < slots_.size(); ++i) copy_value(*current_->values[i], *from_handle(slots_[i].working[0]));
  }
  for (size_t i = 0; i < slots_.size(); ++i)
    for (auto w : slots_[i].working) copy_value(*from_handle(w), *s->values[i]);
  current_ = s;
}

size_t Program::find(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return i;
  std::string all;
  for (const auto& n : names_) all += (all.empty() ? "" : ", ") + n;
  throw Error(path_ + ": no method \"" + name + "\"; it has: " + all, AOTI_HOST_NOT_FOUND);
}

void Program::run(size_t method, SessionState* session, const aoti_host_tensor_view* inputs, size_t num_inputs,
                    AtenTensorHandle* outputs, size_t num_outputs) {
  if (method >= methods_.size())
    throw Error(path_ + ": method index " + std::to_string(method) + " out of range (" +
                    std::to_string(methods_.size()) + " methods)", AOTI_HOST_INVALID_ARGUMENT);
  if (session != nullptr && session->owner_ != this)
    throw Error(path_ + ": the session belongs to another program (" + session->owner_->path_ + ")",
                AOTI_HOST_INVALID_ARGUMENT);
  // Stateless programs keep concurrent runs (num_models > 1); state switching needs runs serialised.
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  if (!slots_.empty()) {
    lock.lock();
    // On CUDA: after the state's last work (another method's stream), before this run on this method's.
    const StreamScopePtr ordered = order_state(method);
    switch_to(session != nullptr ? session : own_state_.get());
  }
  methods_[method]->run(inputs, num_inputs, outputs, num_outputs);
}

Program::~Program() {
  // Borrowers before owners (an owner always has the lower index), each container before the user-managed
  // handles it holds: torch 2.13 wraps a user-managed constant in a handle of its own
  // (aoti_torch_new_tensor_handle) that its container never deletes.
  for (size_t k = methods_.size(); k-- > 0;) {
    std::vector<AtenTensorHandle> aliases;
    if (k < user_managed_.size() && !user_managed_[k].empty()) {  // a failed load leaves it short
      try {
        for (const auto& e : extract_constants(methods_[k]->plugin(), methods_[k]->container())) aliases.push_back(e.handle);
      } catch (const Error& e) {
        log(LogLevel::Warning, "%s", e.what());  // leaks the small handles, never frees what is in use
        aliases.clear();
      }
    }
    methods_[k].reset();
    for (auto h : aliases) delete from_handle(h);
  }
  host_owned_.clear();
}

}  // namespace aoti_host
