// Shared helpers of the libFuzzer targets (tests/fuzz/, run by tools/test.d/40-fuzz.sh).
//
// Fake pointers: tensors handed to the validators point into a reserved PROT_NONE
// region (or at arbitrary addresses), so a check that dereferences caller data
// crashes the fuzzer at once instead of reading whatever happens to be there.
#pragma once
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "moeforge/errors.hpp"
#include "moeforge/tensor.hpp"

namespace fuzz {

// 1 MiB of address space nobody may touch.
inline uintptr_t no_access_base() {
  static const uintptr_t base = [] {
    void* p = ::mmap(nullptr, size_t(1) << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) std::abort();
    return reinterpret_cast<uintptr_t>(p);
  }();
  return base;
}

// Sizes that find edges: 0, 1, small, multiples and non-multiples of blocks, 2^31 and
// 2^32 boundaries, kMaxElements, int64 overflow, negatives.
inline int64_t interesting_i64(FuzzedDataProvider& in) {
  static constexpr int64_t kValues[] = {0,
                                        1,
                                        2,
                                        7,
                                        8,
                                        16,
                                        32,
                                        64,
                                        128,
                                        4096,
                                        7168,
                                        36308,
                                        300000,
                                        (int64_t(1) << 31) - 1,
                                        int64_t(1) << 31,
                                        int64_t(1) << 32,
                                        int64_t(1) << 40,
                                        (int64_t(1) << 40) + 1,
                                        int64_t(1) << 62,
                                        INT64_MAX,
                                        INT64_MAX / 2,
                                        -1,
                                        -2,
                                        INT64_MIN};
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return in.PickValueInArray(kValues);
    case 1: return in.ConsumeIntegralInRange<int64_t>(0, 4096);
    case 2:  // a neighbour, wrapping at the int64 ends
      return int64_t(uint64_t(in.PickValueInArray(kValues)) + uint64_t(in.ConsumeIntegralInRange<int64_t>(-3, 3)));
    default: return in.ConsumeIntegral<int64_t>();
  }
}

// A pointer that must never be dereferenced: in the PROT_NONE region (aligned or not),
// null, or arbitrary.
inline void* fake_pointer(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0: return nullptr;
    case 1: return reinterpret_cast<void*>(no_access_base() + in.ConsumeIntegralInRange<uintptr_t>(0, 4096) * 16);
    case 2: return reinterpret_cast<void*>(no_access_base() + in.ConsumeIntegralInRange<uintptr_t>(0, (1 << 20) - 1));
    default: return reinterpret_cast<void*>(in.ConsumeIntegral<uintptr_t>());
  }
}

inline moeforge::TensorView fuzz_view(FuzzedDataProvider& in) {
  moeforge::TensorView t;
  t.rank = in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(0, 4) : in.ConsumeIntegral<int>();
  t.dtype = static_cast<moeforge::DType>(in.ConsumeBool() ? in.ConsumeIntegralInRange<uint8_t>(0, 10)
                                                          : in.ConsumeIntegral<uint8_t>());
  for (int d = 0; d < moeforge::TensorView::kMaxRank; ++d) t.shape[size_t(d)] = interesting_i64(in);
  const bool contiguous = in.ConsumeBool();
  int64_t s = 1;
  for (int d = moeforge::TensorView::kMaxRank - 1; d >= 0; --d) {
    if (contiguous && d < t.rank && t.rank <= moeforge::TensorView::kMaxRank) {
      t.strides[size_t(d)] = s;
      if (t.shape[size_t(d)] > 0 && s <= INT64_MAX / t.shape[size_t(d)]) s *= t.shape[size_t(d)];
    } else {
      t.strides[size_t(d)] = interesting_i64(in);
    }
  }
  t.device = {in.ConsumeBool() ? moeforge::DeviceKind::CUDA : moeforge::DeviceKind::CPU,
              in.ConsumeIntegralInRange<int>(-1, 2)};
  t.data = fake_pointer(in);
  return t;
}

// Runs fn; moeforge::Error is an answer, anything else is a finding.
template <class Fn>
bool expect_moeforge_errors_only(const char* what, Fn fn) {
  try {
    fn();
    return true;
  } catch (const moeforge::Error&) {
    return false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s threw a non-moeforge exception: %s\n", what, e.what());
    std::abort();
  }
}

}  // namespace fuzz
