// libFuzzer target: host-side argument validation with arbitrary shapes, strides, dtypes,
// devices and (fake, never dereferenced) pointers.
//
// Findings are crashes, sanitizer reports, non-moeforge exceptions, and broken
// invariants: whatever validate_* accepts must really be what the kernels assume
// (rank, shape, dtype, device, element count <= kMaxElements, contiguous, aligned,
// out not overlapping any input, computed here in exact 128-bit arithmetic).
//
// The TensorView helpers (numel, is_contiguous, nbytes, describe) are fuzzed on any
// rank and any shape: an out-of-range rank or an overflowing product must give -1 /
// false, never undefined behaviour.
#include <cstring>

#include "fuzz_common.hpp"
#include "moeforge/spec.hpp"
#include "moeforge/validate.hpp"

using namespace moeforge;

namespace {

using i128 = __int128;

// Exact element count of dims [0, rank) or -1 if negative; saturates at 2^100.
i128 exact_numel(const TensorView& t) {
  const i128 cap = i128(1) << 100;
  i128 n = 1;
  bool zero = false;
  for (int d = 0; d < t.rank; ++d) {
    const int64_t s = t.shape[size_t(d)];
    if (s < 0) return -1;
    if (s == 0) zero = true;
    else n = n > cap / s ? cap : n * s;
  }
  return zero ? 0 : n;
}
bool valid_dtype(DType t) { return uint8_t(t) <= uint8_t(DType::u8); }

void check_helpers(const TensorView& t) {
  const bool rank_ok = t.rank >= 0 && t.rank <= TensorView::kMaxRank;
  const i128 exact = rank_ok ? exact_numel(t) : -1;
  const int64_t n = t.numel();
  if (exact < 0 || exact > INT64_MAX) {
    if (n != -1) std::abort();
  } else if (n != int64_t(exact)) {
    std::abort();
  }
  const bool c = t.is_contiguous();
  if (c && n < 0) std::abort();  // an invalid view is never contiguous
  if (c && n > 0) {  // contiguous means row-major strides for every dim that is not 1
    int64_t want = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      if (t.shape[size_t(d)] != 1 && t.strides[size_t(d)] != want) std::abort();
      want *= t.shape[size_t(d)];
    }
  }
  if (valid_dtype(t.dtype)) {
    const int64_t b = t.nbytes();
    const i128 exact_bytes = n < 0 ? -1 : i128(n) * i128(dtype_size(t.dtype));
    if (exact_bytes < 0 || exact_bytes > INT64_MAX ? b != -1 : b != int64_t(exact_bytes)) std::abort();
  }
  (void)t.describe();
}

MoeSpec fuzz_spec(FuzzedDataProvider& in) {
  MoeSpec s;
  static const char* kPresets[] = {"mistral-small-4", "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-120b"};
  if (in.ConsumeBool()) {
    s = presets::get(in.PickValueInArray(kPresets));
    if (in.ConsumeBool()) s.hidden = fuzz::interesting_i64(in);
  } else {
    s.num_experts = in.ConsumeIntegralInRange<int64_t>(-1, 300);
    s.hidden = in.ConsumeIntegralInRange<int64_t>(-8, 1024);
    s.intermediate = in.ConsumeIntegralInRange<int64_t>(-8, 1024);
    s.topk = in.ConsumeIntegralInRange<int>(-1, 16);
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const int mode = in.ConsumeIntegralInRange<int>(0, 2);
  if (mode == 0) {  // one tensor: helpers, then validate_tensor against a fuzzed expectation
    const TensorView t = fuzz::fuzz_view(in);
    check_helpers(t);
    const int64_t d0 = in.ConsumeBool() ? -1 : fuzz::interesting_i64(in);
    const int64_t d1 = in.ConsumeBool() ? -1 : fuzz::interesting_i64(in);
    const DType want = static_cast<DType>(in.ConsumeIntegralInRange<uint8_t>(0, 10));
    const Device dev{in.ConsumeBool() ? DeviceKind::CUDA : DeviceKind::CPU, 0};
    const int64_t align = in.PickValueInArray({int64_t(0), int64_t(1), int64_t(2), int64_t(16), int64_t(256)});
    const bool ok = fuzz::expect_moeforge_errors_only(
        "validate_tensor", [&] { validate_tensor("t", t, {want, DType::bf16}, {d0, d1}, dev, align); });
    if (ok) {
      if (t.rank != 2 || (t.dtype != want && t.dtype != DType::bf16) || !(t.device == dev)) std::abort();
      if ((d0 >= 0 && t.shape[0] != d0) || (d1 >= 0 && t.shape[1] != d1) || t.shape[0] < 0 || t.shape[1] < 0)
        std::abort();
      const i128 n = exact_numel(t);
      if (n < 0 || n > kMaxElements) std::abort();
      if (n > 0) {
        if (t.data == nullptr || !t.is_contiguous()) std::abort();
        if (align > 1 && reinterpret_cast<uintptr_t>(t.data) % uintptr_t(align) != 0) std::abort();
      }
    }
    return 0;
  }
  // A whole forward call: spec + 3 or 4 tensors, logits or precomputed routing.
  MoeSpec spec;
  if (!fuzz::expect_moeforge_errors_only("presets/spec", [&] { spec = fuzz_spec(in); })) return 0;
  TensorView v[5];
  for (auto& t : v) {
    t = fuzz::fuzz_view(in);
    check_helpers(t);
  }
  // Often make the shapes right so that the later checks (overlap, alignment) are reached.
  if (in.ConsumeBool()) {
    const int64_t T = in.ConsumeIntegralInRange<int64_t>(0, 70000);
    const int64_t cols[5] = {spec.hidden, spec.num_experts, spec.topk, spec.topk, spec.hidden};
    for (int i = 0; i < 5; ++i) {
      if (!in.ConsumeBool()) continue;
      v[i].rank = 2;
      v[i].shape[0] = T;
      v[i].shape[1] = cols[i];
      v[i].strides[1] = 1;
      v[i].strides[0] = cols[i];
    }
    v[1].dtype = DType::f32;
    v[2].dtype = in.ConsumeBool() ? DType::i32 : DType::i64;
    v[3].dtype = DType::f32;
    v[4].dtype = v[0].dtype = in.ConsumeBool() ? DType::bf16 : DType::f32;
    if (in.ConsumeBool()) {  // out overlapping an input, by a fuzzed offset
      const int src = in.ConsumeIntegralInRange<int>(0, 3);
      v[4].data = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(v[src].data) +
                                          uintptr_t(in.ConsumeIntegralInRange<int64_t>(-4096, 4096) * 16));
    }
  }
  const Device dev{in.ConsumeBool() ? DeviceKind::CUDA : DeviceKind::CPU, 0};
  ForwardArgs a;
  a.x = in.ConsumeBool() ? &v[0] : nullptr;
  a.out = in.ConsumeBool() || mode == 2 ? &v[4] : nullptr;
  if (mode == 1) {
    a.router_logits = &v[1];
    if (in.ConsumeIntegralInRange<int>(0, 7) == 0) a.topk_ids = &v[2];
  } else {
    a.topk_ids = in.ConsumeIntegralInRange<int>(0, 7) ? &v[2] : nullptr;
    a.topk_weights = in.ConsumeIntegralInRange<int>(0, 7) ? &v[3] : nullptr;
  }
  const bool ok = fuzz::expect_moeforge_errors_only("validate_forward", [&] { validate_forward(spec, a, dev); });
  if (!ok) return 0;
  // Accepted: the call must be exactly what the backends assume.
  const TensorView& x = *a.x;
  const TensorView& out = *a.out;
  if (x.rank != 2 || x.shape[1] != spec.hidden || out.rank != 2 || out.shape[0] != x.shape[0] ||
      out.shape[1] != spec.hidden || out.dtype != x.dtype)
    std::abort();
  std::vector<const TensorView*> inputs{a.x};
  if (a.router_logits) {
    if (a.topk_ids || a.topk_weights) std::abort();
    inputs.push_back(a.router_logits);
  } else {
    if (!a.topk_ids || !a.topk_weights) std::abort();
    inputs.push_back(a.topk_ids);
    inputs.push_back(a.topk_weights);
  }
  inputs.push_back(a.out);
  for (const TensorView* t : inputs) {
    if (!(t->device == dev) || t->rank != 2 || t->shape[0] != x.shape[0]) std::abort();
    const i128 n = exact_numel(*t);
    if (n < 0 || n > kMaxElements) std::abort();
    if (n > 0 && (t->data == nullptr || reinterpret_cast<uintptr_t>(t->data) % 16 != 0 || !t->is_contiguous()))
      std::abort();
  }
  // No overlap between out and any input, in exact arithmetic (no address wrap-around).
  auto range = [](const TensorView& t) {
    const i128 b = i128(reinterpret_cast<uintptr_t>(t.data));
    return std::pair<i128, i128>{b, b + exact_numel(t) * i128(dtype_size(t.dtype))};
  };
  const auto [ob, oe] = range(out);
  for (size_t i = 0; i + 1 < inputs.size(); ++i) {
    const auto [b, e] = range(*inputs[i]);
    // A range that wraps past 2^64 cannot be a real allocation; the library compares
    // uintptr_t ends, so such fake tensors are out of scope for this invariant.
    if (oe > (i128(1) << 64) || e > (i128(1) << 64)) continue;
    if (ob < oe && b < e && ob < e && b < oe) {
      std::fprintf(stderr, "validate_forward accepted out overlapping an input\n");
      std::abort();
    }
  }
  return 0;
}
