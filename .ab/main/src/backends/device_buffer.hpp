// RAII device memory for host-side code that stages data for the GPU
// (layer preparation, self-tests, the CLI, benchmarks, GPU tests).
//
// Per-call workspaces inside forward() do NOT use this: they are stream-ordered
// (cuMemAllocAsync/cuMemFreeAsync) so that they are graph-capturable and never
// shared between calls in flight.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "moeforge/tensor.hpp"

namespace moeforge {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, std::size_t bytes);  // uninitialized; throws DeviceError
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  void* data() const { return reinterpret_cast<void*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  int device() const { return device_; }

  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;
  template <class T>
  static DeviceBuffer from_host(int device, const std::vector<T>& v) {
    DeviceBuffer b(device, v.size() * sizeof(T));
    if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
    return b;
  }
  template <class T>
  std::vector<T> to_host() const {
    std::vector<T> v(bytes_ / sizeof(T));
    if (!v.empty()) download(v.data(), v.size() * sizeof(T));
    return v;
  }
  // A contiguous TensorView of this buffer on its device.
  TensorView view(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
  int device_ = -1;
};

}  // namespace moeforge
