// Conversions between Python objects and the core's types: DLPack arrays (through
// nanobind's ndarray) to TensorView, names to enums. No framework types here: the
// binding only sees DLPack; torch specifics (current stream) live in Python.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>

#include "moeforge/spec.hpp"
#include "moeforge/tensor.hpp"

namespace moeforge::py {

namespace nb = nanobind;

// A zero-copy view of any DLPack array (CPU, CUDA, CUDA-managed, pinned host).
// Throws InvalidArgument(name, ...) for a rank above 4, an unsupported dtype or device.
// Strides of size-1 dimensions are normalized (they never address memory).
TensorView to_view(const nb::ndarray<>& a, const char* name);

// Any DLPack array, or a NumPy array of ml_dtypes.bfloat16 (NumPy cannot export it through
// DLPack: its bits are viewed as uint16 and typed bf16). InvalidArgument(name) otherwise.
nb::ndarray<> as_array(nb::handle o, const std::string& name);
// The memory of a uint16/int16 array, typed bf16; `owner` keeps it alive.
nb::ndarray<> reinterpret_bf16(const nb::ndarray<>& a, nb::handle owner);

RoutingKind parse_routing_kind(const std::string& s, const char* argument);
ActivationKind parse_activation_kind(const std::string& s, const char* argument);

}  // namespace moeforge::py
