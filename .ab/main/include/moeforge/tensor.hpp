// moeforge/tensor.hpp — a non-owning view of a strided tensor in host or device memory.
//
// This is the currency of the public API: the C++ caller, the Python binding
// (through DLPack) and the tests all describe their buffers this way. moeforge
// never takes ownership of caller memory.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "moeforge/dtype.hpp"

namespace moeforge {

enum class DeviceKind : uint8_t { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
};

struct TensorView {
  static constexpr int kMaxRank = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements (not bytes); e2m1x2 counts bytes
  Device device{};

  // A contiguous (row-major) view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = {});

  int64_t numel() const;                 // product of shape; 0 for an empty tensor
  bool is_contiguous() const;            // row-major, no gaps
  int64_t nbytes() const;                // numel * dtype_size (contiguous extent)
  std::string describe() const;          // "bf16[64, 4096] cuda:0"
};

}  // namespace moeforge
