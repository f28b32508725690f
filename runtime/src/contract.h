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
// - every size, bound and stride is an integer literal (no fraction, no exponent) in [0, 2^62].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aoti_host {

// One input or output as the package's contract describes it.
struct TensorContract {
  std::string name;
  int32_t dtype = -1;
  std::vector<int64_t> sizes;      // -1: dynamic
  std::vector<int64_t> min_sizes;  // for dynamic dims; equal to sizes for static ones
  std::vector<int64_t> max_sizes;  // INT64_MAX: unbounded
  std::vector<int64_t> strides;    // expected layout for the example sizes; empty: contiguous
};

struct Contract {
  std::vector<TensorContract> inputs, outputs;
};

constexpr int64_t kMaxContractInt = int64_t{1} << 62;  // largest size, bound, stride, offset accepted
constexpr size_t kMaxContractRank = 64;

// Parses and validates `text`; throws aoti_host::Error naming `where` and the field at fault.
Contract parse_contract(const std::string& text, const std::string& where);

// Dtype code (c10::ScalarType) of a contract dtype name ("float32", "torch.float32", "float", ...); -1 when
// unknown.
int32_t dtype_from_name(const std::string& name);

}  // namespace aoti_host
