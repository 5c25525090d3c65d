#include "moeforge/tensor.hpp"

#include <fmt/format.h>

#include "moeforge/errors.hpp"

namespace moeforge {

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  if (shape.size() > std::size_t(kMaxRank))
    throw InvalidArgument("shape", fmt::format("rank {} exceeds the maximum {}", shape.size(), kMaxRank));
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.rank = int(shape.size());
  t.device = device;
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  // Row-major strides. A shape whose extent overflows int64 gets stride 0 for the
  // dimensions past the overflow: numel() is -1 for it, so every check refuses it.
  int64_t stride = 1;
  bool overflow = false;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = overflow ? 0 : stride;
    overflow = overflow || __builtin_mul_overflow(stride, t.shape[d] > 0 ? t.shape[d] : 1, &stride);
  }
  return t;
}

namespace {
bool rank_ok(int rank) { return rank >= 0 && rank <= TensorView::kMaxRank; }
}  // namespace

int64_t TensorView::numel() const {
  if (!rank_ok(rank)) return -1;
  for (int d = 0; d < rank; ++d)
    if (shape[d] < 0) return -1;
  for (int d = 0; d < rank; ++d)
    if (shape[d] == 0) return 0;  // empty, however large the other dimensions
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) {
    if (n > INT64_MAX / shape[d]) return -1;  // overflow: callers reject -1
    n *= shape[d];
  }
  return n;
}

bool TensorView::is_contiguous() const {
  const int64_t n = numel();
  if (n < 0) return false;  // bad rank, negative or overflowing shape
  if (n == 0) return true;  // no elements: nothing is out of place (and products could overflow)
  int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];  // cannot overflow: bounded by numel()
  }
  return true;
}

int64_t TensorView::nbytes() const {
  const int64_t n = numel();
  const int64_t size = int64_t(dtype_size(dtype));
  return n < 0 || n > INT64_MAX / size ? -1 : n * size;
}

std::string TensorView::describe() const {
  if (!rank_ok(rank)) return fmt::format("{}[rank {}?]", dtype_name(dtype), rank);
  std::string dims;
  for (int d = 0; d < rank; ++d) dims += fmt::format("{}{}", d ? ", " : "", shape[d]);
  return fmt::format("{}[{}] {}:{}", dtype_name(dtype), dims, device.kind == DeviceKind::CPU ? "cpu" : "cuda",
                     device.index);
}

}  // namespace moeforge
