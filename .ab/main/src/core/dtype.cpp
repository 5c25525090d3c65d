#include "moeforge/dtype.hpp"

#include <array>
#include <string>

#include "moeforge/errors.hpp"

namespace moeforge {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<DTypeInfo, 11> kTypes{{
    {DType::f64, "f64", 8},
    {DType::f32, "f32", 4},
    {DType::bf16, "bf16", 2},
    {DType::f16, "f16", 2},
    {DType::fp8_e4m3, "fp8_e4m3", 1},
    {DType::fp8_e5m2, "fp8_e5m2", 1},
    {DType::e2m1x2, "e2m1x2", 1},
    {DType::ue8m0, "ue8m0", 1},
    {DType::i32, "i32", 4},
    {DType::i64, "i64", 8},
    {DType::u8, "u8", 1},
}};
const DTypeInfo& info(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i;
  throw InternalError("unknown DType " + std::to_string(int(t)));
}
}  // namespace

bool dtype_known(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return true;
  return false;
}
std::size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return dtype_known(t) ? info(t).name : "?"; }

DType parse_dtype(std::string_view name, std::string_view argument) {
  std::string known;
  for (const auto& i : kTypes) {
    if (i.name == name) return i.type;
    known += (known.empty() ? "" : ", ") + std::string(i.name);
  }
  throw InvalidArgument(std::string(argument), "unknown dtype '" + std::string(name) + "' (expected one of " + known + ")");
}

}  // namespace moeforge
