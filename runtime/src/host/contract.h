// The package's input/output contract (<model>/extra/aoti_toolchain_contract.json, written by
// `aoti-toolchain export`), parsed and validated.
//
// The rules (docs/package-json.md; toolchain/verify/package.py applies the same ones in Python):
// - the text is UTF-8 JSON (RFC 8259, no NaN/Infinity, no duplicate keys, finite numbers, at most 64
//   nested arrays/objects); the document is an object;
// - "schema", when present, is the integer 1; "inputs" and "outputs" are lists of tensor objects;
// - a tensor: "name" (optional) is a string; "dtype" is a known dtype name; "shape" is a list of at most
//   64 entries, each an integer size or a dynamic dimension {"min": lo, "max": hi} (both optional: 0 and
//   unbounded) with lo <= hi; "strides" (optional) is a list with the shape's rank;
// - every size, bound and stride is an integer literal (no fraction, no exponent) in [0, 2^62];
// - schema 2 adds "symbols" (a list of {"name", "min", "max"}: the sizes torch's program is written over) and
//   "expr" on a dynamic dimension: a size expression over those symbols (toolchain/symdims.py states the
//   grammar), so that inputs sharing a dimension share its symbol; "output_tree" and each output's "path"
//   are for the tools, not read here. A schema-1 dynamic dimension is a symbol of its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aoti_host {

// A size expression compiled to a stack program (postfix), evaluated once per dimension per Run.
struct SizeExpr {
  enum class Op : uint8_t { kInt, kSym, kNeg, kAdd, kSub, kMul, kFloorDiv, kMod, kMax, kMin };
  struct Step {
    Op op;
    int64_t value;  // kInt: the constant; kSym: the symbol's index in Contract::symbols
  };
  std::string text;
  std::vector<Step> steps;
  int symbol() const { return steps.size() == 1 && steps[0].op == Op::kSym ? static_cast<int>(steps[0].value) : -1; }
};

struct SymbolRange {
  std::string name;
  int64_t min = 0, max = INT64_MAX;
};

// One input or output as the package's contract describes it.
struct TensorContract {
  std::string name;
  int32_t dtype = -1;
  std::vector<int64_t> sizes;      // -1: dynamic
  std::vector<int64_t> min_sizes;  // for dynamic dims; equal to sizes for static ones
  std::vector<int64_t> max_sizes;  // INT64_MAX: unbounded
  std::vector<int64_t> strides;    // expected layout for the example sizes; empty: contiguous
  std::vector<int> exprs;          // per dimension: index into Contract::exprs, -1 for none
};

struct Contract {
  std::vector<SymbolRange> symbols;
  std::vector<SizeExpr> exprs;
  std::vector<TensorContract> inputs, outputs;
  bool has_shared_sizes() const { return !exprs.empty(); }
};

// The value of `e` with symbol i bound to values[i]; false when a symbol it uses is unbound (values[i] < 0) or
// it divides by zero. Arithmetic saturates at +-2^62 rather than overflowing.
bool evaluate(const SizeExpr& e, const std::vector<int64_t>& values, int64_t* out);

// Binds the contract's symbols from the inputs' sizes (sizes[i] is input i's shape; each rank has been checked)
// and checks every input dimension that has an expression against it, before the plugin is called. Throws
// aoti_host::Error (AOTI_HOST_INVALID_ARGUMENT) naming both inputs, the dimension and the values when two
// inputs disagree on a shared size, or a size is outside its symbol's range; `where` starts each message.
// `values` (scratch, resized here) holds each symbol's value afterwards.
void bind_sizes(const Contract& c, const int64_t* const* sizes, const std::string& where,
                std::vector<int64_t>& values);

constexpr int64_t kMaxContractInt = int64_t{1} << 62;  // largest size, bound, stride, offset accepted
constexpr size_t kMaxContractRank = 64;

// Parses and validates `text`; throws aoti_host::Error naming `where` and the field at fault.
Contract parse_contract(const std::string& text, const std::string& where);

// Dtype code (c10::ScalarType) of a contract dtype name ("float32", "torch.float32", "float", ...); -1 when
// unknown.
int32_t dtype_from_name(const std::string& name);

}  // namespace aoti_host
