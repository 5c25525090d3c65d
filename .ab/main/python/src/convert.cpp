#include "convert.hpp"

#include <fmt/format.h>

#include "moeforge/errors.hpp"

namespace moeforge::py {

namespace {

DType to_dtype(nb::dlpack::dtype t, const char* name) {
  using C = nb::dlpack::dtype_code;
  const auto code = C(t.code);
  if (t.lanes == 1) {
    if (code == C::Float && t.bits == 64) return DType::f64;
    if (code == C::Float && t.bits == 32) return DType::f32;
    if (code == C::Float && t.bits == 16) return DType::f16;
    if (code == C::Bfloat && t.bits == 16) return DType::bf16;
    if (code == C::Int && t.bits == 32) return DType::i32;
    if (code == C::Int && t.bits == 64) return DType::i64;
    if (code == C::UInt && t.bits == 8) return DType::u8;
  }
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const std::string code_name = t.code < 7 ? codes[t.code] : fmt::format("code{}", t.code);
  throw InvalidArgument(name, fmt::format("expected dtype f32, bf16, f16, f64, i32, i64 or u8, got {}{}{}", code_name,
                                          t.bits, t.lanes == 1 ? "" : fmt::format("x{}", t.lanes)));
}

}  // namespace

TensorView to_view(const nb::ndarray<>& a, const char* name) {
  TensorView t;
  const size_t rank = a.ndim();
  if (rank > size_t(TensorView::kMaxRank))
    throw InvalidArgument(name, fmt::format("expected at most {} dimensions, got {}", TensorView::kMaxRank, rank));
  t.rank = int(rank);
  t.dtype = to_dtype(a.dtype(), name);
  t.data = const_cast<void*>(a.data());
  int64_t expected = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[size_t(d)] = int64_t(a.shape(size_t(d)));
    t.strides[size_t(d)] = t.shape[size_t(d)] == 1 ? expected : int64_t(a.stride(size_t(d)));
    expected *= std::max<int64_t>(t.shape[size_t(d)], 1);
  }
  const int32_t dev = a.device_type();
  if (dev == nb::device::cpu::value || dev == nb::device::cuda_host::value) {
    t.device = Device{DeviceKind::CPU, 0};
  } else if (dev == nb::device::cuda::value || dev == nb::device::cuda_managed::value) {
    t.device = Device{DeviceKind::CUDA, a.device_id()};
  } else {
    throw InvalidArgument(name, fmt::format("expected a CPU or CUDA array, got DLPack device type {}", dev));
  }
  return t;
}

nb::ndarray<> reinterpret_bf16(const nb::ndarray<>& a, nb::handle owner) {
  const auto t = a.dtype();
  using C = nb::dlpack::dtype_code;
  if (!((t.code == uint8_t(C::UInt) || t.code == uint8_t(C::Int)) && t.bits == 16 && t.lanes == 1))
    throw InvalidArgument("a", "expected a 16-bit integer array holding bf16 bits");
  std::vector<size_t> shape(a.ndim());
  std::vector<int64_t> strides(a.ndim());
  for (size_t d = 0; d < a.ndim(); ++d) {
    shape[d] = a.shape(d);
    strides[d] = a.stride(d);
  }
  const nb::dlpack::dtype bf16{uint8_t(C::Bfloat), 16, 1};
  return nb::ndarray<>(const_cast<void*>(a.data()), a.ndim(), shape.data(), owner, strides.data(), bf16,
                       a.device_type(), a.device_id());
}

nb::ndarray<> as_array(nb::handle o, const std::string& name) {
  nb::ndarray<> a;
  if (nb::try_cast(o, a)) return a;
  if (nb::hasattr(o, "dtype") && nb::hasattr(o, "view")) {
    nb::object dt = o.attr("dtype");
    if (nb::hasattr(dt, "name") && nb::cast<std::string>(nb::str(dt.attr("name"))) == "bfloat16") {
      nb::object bits = o.attr("view")(nb::module_::import_("numpy").attr("uint16"));
      return reinterpret_bf16(nb::cast<nb::ndarray<>>(bits), bits);
    }
  }
  throw InvalidArgument(name, fmt::format("expected a DLPack array (NumPy, torch, CuPy, JAX), got {}",
                                          nb::cast<std::string>(nb::str(o.type()))));
}

RoutingKind parse_routing_kind(const std::string& s, const char* argument) {
  for (auto k : {RoutingKind::Softmax, RoutingKind::SoftmaxGrouped, RoutingKind::SigmoidBiasGrouped})
    if (to_string(k) == s) return k;
  throw InvalidArgument(argument, fmt::format("unknown routing kind '{}' (expected softmax, softmax-grouped or "
                                              "sigmoid-bias-grouped)",
                                              s));
}

ActivationKind parse_activation_kind(const std::string& s, const char* argument) {
  for (auto k : {ActivationKind::SwiGLU, ActivationKind::GeGLU, ActivationKind::ClampedSwiGLU})
    if (to_string(k) == s) return k;
  throw InvalidArgument(argument,
                        fmt::format("unknown activation kind '{}' (expected swiglu, geglu or clamped-swiglu)", s));
}

}  // namespace moeforge::py
