#include "host/contract.h"

#include "aoti_host/dtypes.h"
#include "aoti_host/error.h"
#include "aoti_host/package_layout.h"
#include "aoti_host/package_records.h"
#include "aoti_host/status.h"
#include "base/json.h"

#include <algorithm>
#include <cctype>

namespace aoti_host {
namespace {

// The record's keys (toolchain/spec/records.toml), as they appear in the JSON and in the messages.
namespace con = records::contract;
namespace sym = records::contract_symbol;
namespace ten = records::contract_tensor;
namespace dyn = records::contract_dim;

[[noreturn]] void refuse(const std::string& what) { throw Error(what, AOTI_HOST_INVALID_PROGRAM); }

int64_t bounded_int(const Json& j, const std::string& what);

constexpr size_t kMaxExprText = 4096;  // toolchain/symdims.py MAX_LENGTH
constexpr int kMaxExprDepth = 64;
constexpr size_t kMaxSymbols = 4096;
constexpr size_t kEvalStack = 2 * kMaxExprDepth + 8;

// A recursive-descent compiler of the size-expression grammar (toolchain/symdims.py) to postfix steps.
class ExprCompiler {
 public:
  ExprCompiler(const std::string& text, const std::vector<SymbolRange>& symbols, const std::string& where)
      : t_(text), symbols_(symbols), where_(where) {}

  SizeExpr compile() {
    if (t_.size() > kMaxExprText) fail("is longer than " + std::to_string(kMaxExprText) + " characters");
    SizeExpr e;
    e.text = t_;
    expr(e, 0);
    skip();
    if (i_ != t_.size()) fail("has unexpected text at offset " + std::to_string(i_));
    size_t depth = 0, deepest = 0;  // evaluate() runs it on a fixed stack: refuse what would not fit
    for (const auto& st : e.steps) {
      if (st.op == SizeExpr::Op::kInt || st.op == SizeExpr::Op::kSym) deepest = std::max(deepest, ++depth);
      else if (st.op != SizeExpr::Op::kNeg) --depth;
    }
    if (deepest > kEvalStack) fail("needs more than " + std::to_string(kEvalStack) + " pending values to evaluate");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& why) { refuse(where_ + ": size expression \"" + t_.substr(0, 80) + "\" " + why); }
  void skip() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t')) ++i_;
  }
  bool eat(const char* tok) {
    skip();
    const size_t n = std::char_traits<char>::length(tok);
    if (t_.compare(i_, n, tok) != 0) return false;
    i_ += n;
    return true;
  }
  void expect(const char* tok) {
    if (!eat(tok)) fail(std::string("expects '") + tok + "' at offset " + std::to_string(i_));
  }
  void expr(SizeExpr& e, int depth) {
    if (depth > kMaxExprDepth) fail("is nested more than " + std::to_string(kMaxExprDepth) + " deep");
    term(e, depth);
    for (;;) {
      if (eat("+")) term(e, depth), e.steps.push_back({SizeExpr::Op::kAdd, 0});
      else if (eat("-")) term(e, depth), e.steps.push_back({SizeExpr::Op::kSub, 0});
      else return;
    }
  }
  void term(SizeExpr& e, int depth) {
    unary(e, depth);
    for (;;) {
      if (eat("*")) unary(e, depth), e.steps.push_back({SizeExpr::Op::kMul, 0});
      else if (eat("//")) unary(e, depth), e.steps.push_back({SizeExpr::Op::kFloorDiv, 0});
      else if (eat("%")) unary(e, depth), e.steps.push_back({SizeExpr::Op::kMod, 0});
      else return;
    }
  }
  void unary(SizeExpr& e, int depth) {
    if (eat("-")) {
      if (depth > kMaxExprDepth) fail("is nested more than " + std::to_string(kMaxExprDepth) + " deep");
      unary(e, depth + 1);
      e.steps.push_back({SizeExpr::Op::kNeg, 0});
      return;
    }
    atom(e, depth);
  }
  void atom(SizeExpr& e, int depth) {
    skip();
    if (i_ >= t_.size()) fail("ends early");
    const char c = t_[i_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) {
        v = v * 10 + (t_[i_++] - '0');
        if (v > kMaxContractInt) fail("has a constant above 2^62");
      }
      e.steps.push_back({SizeExpr::Op::kInt, v});
      return;
    }
    if (c == '(') {
      ++i_;
      expr(e, depth + 1);
      expect(")");
      return;
    }
    if (!(std::isalpha(static_cast<unsigned char>(c)) || c == '_')) fail(std::string("has unexpected '") + c + "'");
    const size_t start = i_;
    while (i_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[i_])) || t_[i_] == '_')) ++i_;
    const std::string name = t_.substr(start, i_ - start);
    static const std::pair<const char*, SizeExpr::Op> kFuncs[] = {
        {"Max", SizeExpr::Op::kMax}, {"Min", SizeExpr::Op::kMin}, {"Mod", SizeExpr::Op::kMod},
        {"FloorDiv", SizeExpr::Op::kFloorDiv}};
    skip();
    if (i_ < t_.size() && t_[i_] == '(') {
      for (const auto& f : kFuncs) {
        if (name != f.first) continue;
        ++i_;
        expr(e, depth + 1);
        expect(",");
        expr(e, depth + 1);
        expect(")");
        e.steps.push_back({f.second, 0});
        return;
      }
      fail("calls " + name + ", which is not Max, Min, Mod or FloorDiv");
    }
    for (size_t k = 0; k < symbols_.size(); ++k)
      if (symbols_[k].name == name) {
        e.steps.push_back({SizeExpr::Op::kSym, static_cast<int64_t>(k)});
        return;
      }
    fail("names " + name + ", which is not in the contract's symbols");
  }

  const std::string& t_;
  const std::vector<SymbolRange>& symbols_;
  const std::string& where_;
  size_t i_ = 0;
};

int64_t saturate(__int128 v) {
  return v > kMaxContractInt ? kMaxContractInt : v < -kMaxContractInt ? -kMaxContractInt : static_cast<int64_t>(v);
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::vector<SymbolRange> parse_symbols(const Json* list, const std::string& what) {
  std::vector<SymbolRange> out;
  if (list == nullptr) return out;
  if (!list->is_array()) refuse(what + " is not a list");
  if (list->array().size() > kMaxSymbols) refuse(what + " has more than " + std::to_string(kMaxSymbols) + " entries");
  for (size_t i = 0; i < list->array().size(); ++i) {
    const Json& s = list->array()[i];
    const std::string w = what + "[" + std::to_string(i) + "]";
    const Json* n = s.get(sym::kName);
    if (!s.is_object() || n == nullptr || !n->is_string() || n->string().empty() || n->string().size() > 128)
      refuse(w + " is not an object with a name");
    const std::string& name = n->string();
    if (!(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') ||
        !std::all_of(name.begin(), name.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; }))
      refuse(w + "." + sym::kName + " \"" + name.substr(0, 80) + "\" is not a symbol name (a letter or _, then letters, digits, _)");
    for (const auto& prev : out)
      if (prev.name == name) refuse(w + "." + sym::kName + " " + name + " is given twice");
    SymbolRange r;
    r.name = name;
    if (const Json* lo = s.get(sym::kMin)) r.min = bounded_int(*lo, w + "." + sym::kMin);
    if (const Json* hi = s.get(sym::kMax)) r.max = bounded_int(*hi, w + "." + sym::kMax);
    if (r.min > r.max) refuse(w + " has min " + std::to_string(r.min) + " > max " + std::to_string(r.max));
    out.push_back(std::move(r));
  }
  return out;
}

// An integer literal in [0, kMaxContractInt]; `what` names the field in the message.
int64_t bounded_int(const Json& j, const std::string& what) {
  if (!j.is_integer() || j.integer() < 0 || j.integer() > kMaxContractInt)
    refuse(what + " is not an integer in [0, 2^62]");
  return j.integer();
}

std::vector<TensorContract> parse_tensors(const Json* list, const std::string& what, Contract& contract) {
  std::vector<TensorContract> out;
  if (list == nullptr || !list->is_array()) refuse(what + " is missing or not a list");
  for (size_t i = 0; i < list->array().size(); ++i) {
    const Json& t = list->array()[i];
    const std::string w = what + "[" + std::to_string(i) + "]";
    if (!t.is_object()) refuse(w + " is not an object");
    TensorContract c;
    if (const Json* n = t.get(ten::kName)) {
      if (!n->is_string()) refuse(w + "." + ten::kName + " is not a string");
      c.name = n->string();
    }
    const Json* dt = t.get(ten::kDtype);
    if (dt == nullptr || !dt->is_string() || (c.dtype = dtype_from_name(dt->string())) < 0)
      refuse(w + "." + ten::kDtype + " is missing or not a known dtype name");
    const Json* shape = t.get(ten::kShape);
    if (shape == nullptr || !shape->is_array()) refuse(w + "." + ten::kShape + " is missing or not a list");
    if (shape->array().size() > kMaxContractRank)
      refuse(w + "." + ten::kShape + " has " + std::to_string(shape->array().size()) + " dimensions, more than " +
             std::to_string(kMaxContractRank));
    for (size_t d = 0; d < shape->array().size(); ++d) {
      const Json& dim = shape->array()[d];
      const std::string wd = w + "." + ten::kShape + "[" + std::to_string(d) + "]";
      if (dim.is_object()) {  // {"min": 1, "max": 64}: a dynamic dimension
        const Json* lo = dim.get(dyn::kMin);
        const Json* hi = dim.get(dyn::kMax);
        const int64_t min = lo != nullptr ? bounded_int(*lo, wd + "." + dyn::kMin) : 0;
        const int64_t max = hi != nullptr ? bounded_int(*hi, wd + "." + dyn::kMax) : INT64_MAX;
        if (min > max) refuse(wd + " has min " + std::to_string(min) + " > max " + std::to_string(max));
        c.sizes.push_back(-1), c.min_sizes.push_back(min), c.max_sizes.push_back(max);
        int expr = -1;
        if (const Json* x = dim.get(dyn::kExpr)) {
          const std::string wx = wd + "." + dyn::kExpr;
          if (!x->is_string()) refuse(wx + " is not a string");
          contract.exprs.push_back(ExprCompiler(x->string(), contract.symbols, wx).compile());
          expr = static_cast<int>(contract.exprs.size() - 1);
        }
        c.exprs.push_back(expr);
      } else {
        const int64_t v = bounded_int(dim, wd);
        c.sizes.push_back(v), c.min_sizes.push_back(v), c.max_sizes.push_back(v), c.exprs.push_back(-1);
      }
    }
    if (const Json* st = t.get(ten::kStrides)) {
      const std::string ws = w + "." + ten::kStrides;
      if (!st->is_array()) refuse(ws + " is not a list");
      if (st->array().size() != c.sizes.size())
        refuse(ws + " has " + std::to_string(st->array().size()) + " entries, the shape " +
               std::to_string(c.sizes.size()));
      for (size_t d = 0; d < st->array().size(); ++d)
        c.strides.push_back(bounded_int(st->array()[d], ws + "[" + std::to_string(d) + "]"));
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
  if (const Json* s = j.get(con::kSchema);
      s != nullptr && !(s->is_integer() && s->integer() >= 1 && s->integer() <= package_layout::kContractSchema))
    refuse(where + ": " + con::kSchema + " is not 1.." + std::to_string(package_layout::kContractSchema) +
           " (written by a newer aoti-toolchain?)");
  Contract c;
  c.symbols = parse_symbols(j.get(con::kSymbols), where + ": " + con::kSymbols);
  c.inputs = parse_tensors(j.get(con::kInputs), where + ": " + con::kInputs, c);
  c.outputs = parse_tensors(j.get(con::kOutputs), where + ": " + con::kOutputs, c);
  return c;
}

bool evaluate(const SizeExpr& e, const std::vector<int64_t>& values, int64_t* out) {
  int64_t stack[kEvalStack];
  size_t top = 0;
  for (const auto& st : e.steps) {
    if (st.op == SizeExpr::Op::kInt || st.op == SizeExpr::Op::kSym) {
      if (top == sizeof(stack) / sizeof(stack[0])) return false;
      const int64_t v = st.op == SizeExpr::Op::kInt ? st.value : values[static_cast<size_t>(st.value)];
      if (st.op == SizeExpr::Op::kSym && v < 0) return false;  // unbound
      stack[top++] = v;
      continue;
    }
    if (st.op == SizeExpr::Op::kNeg) {
      if (top < 1) return false;
      stack[top - 1] = -stack[top - 1];
      continue;
    }
    if (top < 2) return false;
    const int64_t b = stack[--top], a = stack[top - 1];
    int64_t r = 0;
    switch (st.op) {
      case SizeExpr::Op::kAdd: r = saturate(static_cast<__int128>(a) + b); break;
      case SizeExpr::Op::kSub: r = saturate(static_cast<__int128>(a) - b); break;
      case SizeExpr::Op::kMul: r = saturate(static_cast<__int128>(a) * b); break;
      case SizeExpr::Op::kFloorDiv:
        if (b == 0) return false;
        r = floor_div(a, b);
        break;
      case SizeExpr::Op::kMod:
        if (b == 0) return false;
        r = a - b * floor_div(a, b);
        break;
      case SizeExpr::Op::kMax: r = std::max(a, b); break;
      case SizeExpr::Op::kMin: r = std::min(a, b); break;
      default: return false;
    }
    stack[top - 1] = r;
  }
  if (top != 1) return false;
  *out = stack[0];
  return true;
}

namespace {

std::string input_label(const Contract& c, const std::string& where, size_t i) {
  return where + ": input " + std::to_string(i) + (c.inputs[i].name.empty() ? "" : " (" + c.inputs[i].name + ")");
}

std::string dim_label(const Contract& c, size_t i, size_t d) {
  return "input " + std::to_string(i) + (c.inputs[i].name.empty() ? "" : " (" + c.inputs[i].name + ")") +
         " dimension " + std::to_string(d);
}

// The value of the one unbound symbol of `e` that makes it `target`, when `e` is linear in it (a*s + b).
bool solve_linear(const SizeExpr& e, int64_t target, std::vector<int64_t>& values, size_t* symbol) {
  int unbound = -1;
  for (const auto& st : e.steps)
    if (st.op == SizeExpr::Op::kSym && values[static_cast<size_t>(st.value)] < 0) {
      if (unbound >= 0 && unbound != st.value) return false;
      unbound = static_cast<int>(st.value);
    }
  if (unbound < 0) return false;
  const size_t s = static_cast<size_t>(unbound);
  int64_t f0 = 0, f1 = 0, fx = 0, fy = 0;
  values[s] = 0;
  const bool ok0 = evaluate(e, values, &f0);
  values[s] = 1;
  const bool ok1 = evaluate(e, values, &f1);
  values[s] = -1;
  const int64_t a = f1 - f0;
  if (!ok0 || !ok1 || a == 0 || (target - f0) % a != 0) return false;
  const int64_t x = (target - f0) / a;
  if (x < 0) return false;
  values[s] = x;
  const bool okx = evaluate(e, values, &fx);
  values[s] = x + 7;
  const bool oky = evaluate(e, values, &fy);
  values[s] = -1;
  if (!okx || !oky || fx != target || fy != target + 7 * a) return false;  // not linear after all
  values[s] = x;
  *symbol = s;
  return true;
}

}  // namespace

void bind_sizes(const Contract& c, const int64_t* const* sizes, const std::string& where,
                std::vector<int64_t>& values) {
  values.assign(c.symbols.size(), -1);
  std::vector<std::pair<size_t, size_t>> from(c.symbols.size());  // where each symbol was bound
  auto check_range = [&](size_t s, size_t i, size_t d) {
    const SymbolRange& r = c.symbols[s];
    if (values[s] < r.min || values[s] > r.max)
      throw Error(input_label(c, where, i) + ": dimension " + std::to_string(d) + " is " + std::to_string(values[s]) +
                      "; the model's size " + r.name + " must be " + std::to_string(r.min) + ".." +
                      (r.max == INT64_MAX ? std::string() : std::to_string(r.max)),
                  AOTI_HOST_INVALID_ARGUMENT);
  };
  // Symbols that stand alone in a dimension are bound by the first input that has them, then checked.
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const TensorContract& t = c.inputs[i];
    for (size_t d = 0; d < t.exprs.size(); ++d) {
      if (t.exprs[d] < 0) continue;
      const int s = c.exprs[static_cast<size_t>(t.exprs[d])].symbol();
      if (s < 0) continue;
      const size_t k = static_cast<size_t>(s);
      if (values[k] < 0) {
        values[k] = sizes[i][d];
        from[k] = {i, d};
        check_range(k, i, d);
      } else if (values[k] != sizes[i][d]) {
        throw Error(input_label(c, where, i) + ": dimension " + std::to_string(d) + " is " +
                        std::to_string(sizes[i][d]) + ", but " + dim_label(c, from[k].first, from[k].second) + " is " +
                        std::to_string(values[k]) + "; the model requires them equal (both are its size " +
                        c.symbols[k].name + ")",
                    AOTI_HOST_INVALID_ARGUMENT);
      }
    }
  }
  // Dimensions derived from symbols (2*s0, s0 + s1): a symbol seen only there is solved for when linear.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const TensorContract& t = c.inputs[i];
      for (size_t d = 0; d < t.exprs.size(); ++d) {
        if (t.exprs[d] < 0) continue;
        const SizeExpr& e = c.exprs[static_cast<size_t>(t.exprs[d])];
        if (e.symbol() >= 0) continue;
        int64_t v = 0;
        if (!evaluate(e, values, &v)) {
          size_t s = 0;
          if (pass == 0 || !solve_linear(e, sizes[i][d], values, &s)) continue;
          from[s] = {i, d};
          check_range(s, i, d);
          if (!evaluate(e, values, &v)) continue;
        }
        if (v != sizes[i][d]) {
          std::string bound;
          for (const auto& st : e.steps)
            if (st.op == SizeExpr::Op::kSym) {
              const size_t k = static_cast<size_t>(st.value);
              const std::string one = c.symbols[k].name + " = " + std::to_string(values[k]) + " (" +
                                      dim_label(c, from[k].first, from[k].second) + ")";
              if (bound.find(one) == std::string::npos) bound += (bound.empty() ? "" : ", ") + one;
            }
          throw Error(input_label(c, where, i) + ": dimension " + std::to_string(d) + " is " +
                          std::to_string(sizes[i][d]) + ", but the model requires " + e.text + " = " +
                          std::to_string(v) + " there, with " + bound,
                      AOTI_HOST_INVALID_ARGUMENT);
        }
      }
    }
  }
}

}  // namespace aoti_host
