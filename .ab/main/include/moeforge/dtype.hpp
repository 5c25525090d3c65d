// moeforge/dtype.hpp — element types of tensors that cross the public API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace moeforge {

enum class DType : uint8_t {
  f64,
  f32,
  bf16,
  f16,
  fp8_e4m3,
  fp8_e5m2,
  e2m1x2,  // two FP4 E2M1 values per byte, element 2i in the low nibble
  ue8m0,   // MX scale: a power of two, exponent biased by 127
  i32,
  i64,
  u8,
};

// False for a value outside the enum (e.g. from a foreign caller or a corrupt view).
bool dtype_known(DType t);
// Bytes per stored element (e2m1x2: one byte holds two logical values); InternalError if unknown.
std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "?" if unknown
// Parses the names dtype_name prints ("bf16", "fp8_e4m3", ...); throws InvalidArgument(argument).
DType parse_dtype(std::string_view name, std::string_view argument = "dtype");

}  // namespace moeforge
