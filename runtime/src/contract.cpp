#include "contract.h"

#include "aoti_host/dtypes.h"
#include "aoti_host/error.h"
#include "aoti_host/package_layout.h"
#include "aoti_host/status.h"
#include "json.h"

namespace aoti_host {
namespace {

[[noreturn]] void refuse(const std::string& what) { throw Error(what, AOTI_HOST_INVALID_PROGRAM); }

// An integer literal in [0, kMaxContractInt]; `what` names the field in the message.
int64_t bounded_int(const Json& j, const std::string& what) {
  if (!j.is_integer() || j.integer() < 0 || j.integer() > kMaxContractInt)
    refuse(what + " is not an integer in [0, 2^62]");
  return j.integer();
}

std::vector<TensorContract> parse_tensors(const Json* list, const std::string& what) {
  std::vector<TensorContract> out;
  if (list == nullptr || !list->is_array()) refuse(what + " is missing or not a list");
  for (size_t i = 0; i < list->array().size(); ++i) {
    const Json& t = list->array()[i];
    const std::string w = what + "[" + std::to_string(i) + "]";
    if (!t.is_object()) refuse(w + " is not an object");
    TensorContract c;
    if (const Json* n = t.get("name")) {
      if (!n->is_string()) refuse(w + ".name is not a string");
      c.name = n->string();
    }
    const Json* dt = t.get("dtype");
    if (dt == nullptr || !dt->is_string() || (c.dtype = dtype_from_name(dt->string())) < 0)
      refuse(w + ".dtype is missing or not a known dtype name");
    const Json* shape = t.get("shape");
    if (shape == nullptr || !shape->is_array()) refuse(w + ".shape is missing or not a list");
    if (shape->array().size() > kMaxContractRank)
      refuse(w + ".shape has " + std::to_string(shape->array().size()) + " dimensions, more than " +
             std::to_string(kMaxContractRank));
    for (size_t d = 0; d < shape->array().size(); ++d) {
      const Json& dim = shape->array()[d];
      const std::string wd = w + ".shape[" + std::to_string(d) + "]";
      if (dim.is_object()) {  // {"min": 1, "max": 64}: a dynamic dimension
        const Json* lo = dim.get("min");
        const Json* hi = dim.get("max");
        const int64_t min = lo != nullptr ? bounded_int(*lo, wd + ".min") : 0;
        const int64_t max = hi != nullptr ? bounded_int(*hi, wd + ".max") : INT64_MAX;
        if (min > max) refuse(wd + " has min " + std::to_string(min) + " > max " + std::to_string(max));
        c.sizes.push_back(-1), c.min_sizes.push_back(min), c.max_sizes.push_back(max);
      } else {
        const int64_t v = bounded_int(dim, wd);
        c.sizes.push_back(v), c.min_sizes.push_back(v), c.max_sizes.push_back(v);
      }
    }
    if (const Json* st = t.get("strides")) {
      if (!st->is_array()) refuse(w + ".strides is not a list");
      if (st->array().size() != c.sizes.size())
        refuse(w + ".strides has " + std::to_string(st->array().size()) + " entries, the shape " +
               std::to_string(c.sizes.size()));
      for (size_t d = 0; d < st->array().size(); ++d)
        c.strides.push_back(bounded_int(st->array()[d], w + ".strides[" + std::to_string(d) + "]"));
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

int32_t dtype_from_name(const std::string& name) {
  std::string n = name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
  for (const auto& e : dtypes::kNames)  // generated from toolchain/spec/abi.toml
    if (n == e.name) return e.code;
  return -1;
}

Contract parse_contract(const std::string& text, const std::string& where) {
  Json j = Json::parse(text, where);
  if (!j.is_object()) refuse(where + ": the contract is not a JSON object");
  if (const Json* s = j.get("schema");
      s != nullptr && !(s->is_integer() && s->integer() == package_layout::kContractSchema))
    refuse(where + ": schema is not " + std::to_string(package_layout::kContractSchema) +
           " (written by a newer aoti-toolchain?)");
  Contract c;
  c.inputs = parse_tensors(j.get("inputs"), where + ": inputs");
  c.outputs = parse_tensors(j.get("outputs"), where + ": outputs");
  return c;
}

}  // namespace aoti_host
