// Argument checks shared by every entry point (validate.hpp).
//
// Every failure is InvalidArgument(<argument name>, "expected ..., got ...") so that a
// caller can see at once which tensor is wrong and how. The checks run in a fixed
// order — rank, shape, dtype, device, size, data pointer, contiguity, alignment — so the
// first, most basic problem is the one reported.
#include "moeforge/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "moeforge/errors.hpp"

namespace moeforge {
namespace {

std::string dims_text(const int64_t* dims, int rank) {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) s += fmt::format("{}{}", d ? ", " : "", dims[d]);
  return s + "]";
}

std::string expected_shape_text(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  int d = 0;
  for (int64_t v : shape) s += (d++ ? ", " : "") + (v < 0 ? std::string("*") : std::to_string(v));
  return s + "]";
}

std::string device_text(Device d) {
  return fmt::format("{}:{}", d.kind == DeviceKind::CPU ? "cpu" : "cuda", d.index);
}

std::string dtypes_text(std::initializer_list<DType> dtypes) {
  std::string s;
  size_t i = 0;
  for (DType t : dtypes) {
    if (i) s += i + 1 == dtypes.size() ? " or " : ", ";
    s += dtype_name(t);
    ++i;
  }
  return s;
}

// Byte range [begin, end) a contiguous tensor occupies; empty tensors occupy nothing.
struct ByteRange {
  uintptr_t begin = 0, end = 0;
  bool empty() const { return begin == end; }
};
ByteRange bytes_of(const TensorView& t) {
  const int64_t n = t.nbytes();
  if (t.data == nullptr || n <= 0) return {};
  const auto b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + uintptr_t(n)};
}

}  // namespace

void validate_tensor(const char* name, const TensorView& t, std::initializer_list<DType> dtypes,
                     std::initializer_list<int64_t> shape, Device device, int64_t align_bytes) {
  const int want_rank = int(shape.size());
  if (t.rank < 0 || t.rank > TensorView::kMaxRank)
    throw InvalidArgument(name, fmt::format("expected rank {}, got rank {}", want_rank, t.rank));
  if (t.rank != want_rank)
    throw InvalidArgument(name, fmt::format("expected rank {} (shape {}), got rank {} (shape {})", want_rank,
                                            expected_shape_text(shape), t.rank,
                                            dims_text(t.shape.data(), t.rank)));
  {
    int d = 0;
    for (int64_t want : shape) {
      if (t.shape[d] < 0 || (want >= 0 && t.shape[d] != want))
        throw InvalidArgument(name, fmt::format("expected shape {}, got {}", expected_shape_text(shape),
                                                dims_text(t.shape.data(), t.rank)));
      ++d;
    }
  }
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype) == dtypes.end())
    throw InvalidArgument(name, fmt::format("expected dtype {}, got {}", dtypes_text(dtypes),
                                            dtype_known(t.dtype) ? std::string(dtype_name(t.dtype))
                                                                 : fmt::format("unknown dtype code {}", int(t.dtype))));
  if (!(t.device == device))
    throw InvalidArgument(name, fmt::format("expected a tensor on {}, got one on {}", device_text(device),
                                            device_text(t.device)));
  // Size: the element count must not overflow int64, nor pass kMaxElements, and the byte
  // count must fit as well (numel() returns -1 on overflow).
  const int64_t n = t.numel();
  if (n < 0)
    throw InvalidArgument(name, fmt::format("expected at most {} elements, got shape {} whose element count "
                                            "overflows int64",
                                            kMaxElements, dims_text(t.shape.data(), t.rank)));
  if (n > kMaxElements)
    throw InvalidArgument(name, fmt::format("expected at most {} elements, got {} (shape {})", kMaxElements, n,
                                            dims_text(t.shape.data(), t.rank)));
  if (n == 0) return;  // nothing is read or written: pointer, strides and alignment do not matter
  if (t.data == nullptr)
    throw InvalidArgument(name, fmt::format("expected a data pointer for {} elements, got null", n));
  if (!t.is_contiguous()) {
    int64_t want[TensorView::kMaxRank];
    int64_t s = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      want[d] = s;
      s *= t.shape[d];
    }
    throw InvalidArgument(name, fmt::format("expected contiguous row-major strides {}, got strides {} (shape {})",
                                            dims_text(want, t.rank), dims_text(t.strides.data(), t.rank),
                                            dims_text(t.shape.data(), t.rank)));
  }
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (align_bytes > 1 && addr % uintptr_t(align_bytes) != 0)
    throw InvalidArgument(name, fmt::format("expected data aligned to {} bytes, got address {:#x} ({} bytes past "
                                            "a boundary)",
                                            align_bytes, addr, addr % uintptr_t(align_bytes)));
}

void validate_forward(const MoeSpec& spec, const ForwardArgs& a, Device device) {
  spec.validate();
  if (a.x == nullptr) throw InvalidArgument("x", "expected a [T, hidden] tensor, got none");
  if (a.out == nullptr) throw InvalidArgument("out", "expected a [T, hidden] tensor, got none");
  const bool have_logits = a.router_logits != nullptr;
  const bool have_ids = a.topk_ids != nullptr, have_w = a.topk_weights != nullptr;
  if (have_logits && (have_ids || have_w))
    throw InvalidArgument("router_logits", fmt::format("expected either router_logits or topk_ids and topk_weights, "
                                                       "got router_logits and {}",
                                                       have_ids && have_w ? "both topk tensors"
                                                       : have_ids         ? "topk_ids"
                                                                          : "topk_weights"));
  if (!have_logits && !have_ids && !have_w)
    throw InvalidArgument("router_logits",
                          "expected either router_logits or topk_ids and topk_weights, got neither");
  if (!have_logits && have_ids != have_w)
    throw InvalidArgument(have_ids ? "topk_weights" : "topk_ids",
                          fmt::format("expected topk_ids and topk_weights together, got only {}",
                                      have_ids ? "topk_ids" : "topk_weights"));

  const int64_t H = spec.hidden, E = spec.num_experts, k = spec.topk;
  validate_tensor("x", *a.x, {DType::bf16, DType::f16, DType::f32}, {-1, H}, device);
  const int64_t T = a.x->shape[0];
  // out first gets its own dtype message: the allowed set depends on x.
  if (a.out->dtype != a.x->dtype)
    throw InvalidArgument("out", fmt::format("expected dtype {} (the dtype of x), got {}", dtype_name(a.x->dtype),
                                             dtype_name(a.out->dtype)));
  validate_tensor("out", *a.out, {a.x->dtype}, {T, H}, device);
  std::vector<std::pair<const char*, const TensorView*>> inputs{{"x", a.x}};
  if (have_logits) {
    validate_tensor("router_logits", *a.router_logits, {DType::f32, DType::bf16}, {T, E}, device);
    inputs.emplace_back("router_logits", a.router_logits);
  } else {
    validate_tensor("topk_ids", *a.topk_ids, {DType::i32, DType::i64}, {T, k}, device);
    validate_tensor("topk_weights", *a.topk_weights, {DType::f32}, {T, k}, device);
    inputs.emplace_back("topk_ids", a.topk_ids);
    inputs.emplace_back("topk_weights", a.topk_weights);
  }
  // out must not alias an input: kernels read inputs after writing out.
  const ByteRange o = bytes_of(*a.out);
  if (!o.empty()) {
    for (const auto& [name, t] : inputs) {
      const ByteRange r = bytes_of(*t);
      if (!r.empty() && o.begin < r.end && r.begin < o.end)
        throw InvalidArgument("out", fmt::format("expected a buffer that does not overlap {}, got out at "
                                                 "[{:#x}, {:#x}) overlapping {} at [{:#x}, {:#x})",
                                                 name, o.begin, o.end, name, r.begin, r.end));
    }
  }
}

void validate_topk_ids_host(const char* name, const TensorView& ids, int64_t num_experts) {
  if (ids.rank != 2)
    throw InvalidArgument(name, fmt::format("expected rank 2 ([T, k]), got rank {}", ids.rank));
  validate_tensor(name, ids, {DType::i32, DType::i64}, {-1, -1}, Device{DeviceKind::CPU, 0}, 1);
  const int64_t T = ids.shape[0], k = ids.shape[1];
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t i = t * k + s;
      const int64_t v = ids.dtype == DType::i32 ? int64_t(static_cast<const int32_t*>(ids.data)[i])
                                                : static_cast<const int64_t*>(ids.data)[i];
      if (v < 0 || v >= num_experts)
        throw InvalidArgument(name, fmt::format("expected expert ids in [0, {}), got {} at token {}, slot {}",
                                                num_experts, v, t, s));
    }
  }
}

}  // namespace moeforge
