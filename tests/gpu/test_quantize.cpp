// The sm90 FP8 activation quantizer (kernels/sm90/quantize.cuh, moe_sm90_quantize_rows) against
// formats::quantize_fp8_group128, bit for bit: codes and scales written in place over the bf16
// rows, the scales in each row (decode GEMMs) or transposed per 32 rows into the first of them
// (wide GEMMs), for an odd and an even number of 128-groups per row, rows past the expert's
// count left untouched. Rows hold random values at
// random magnitudes, all-zero groups, groups with a NaN or an Inf, groups whose values sit
// exactly on e4m3 rounding ties (amax = 448 x 2^e or 672 x 2^e makes the scale 2^e or
// 1.5 x 2^e exactly, so x / scale lands on the midpoint), and tiny groups with subnormals and
// negative zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/device_buffer.hpp"
#include "backends/sm90/sm90.hpp"
#include "gpu_support.hpp"
#include "moeforge/formats.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace moeforge {
namespace {

using testing::on_sm90a;

// bf16 rows [n, k] with the group kinds above, group kind by (row + group) % 7.
std::vector<uint16_t> make_rows(int64_t n, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-20, 20), mantissa(0, 7), coin(0, 1);
  std::vector<uint16_t> v(size_t(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < k / 128; ++g) {
      uint16_t* p = &v[size_t(r * k + g * 128)];
      const int kind = int((r + g) % 7), e = exponent(rng);
      for (int i = 0; i < 128; ++i) {
        float x = 0.f;
        if (kind == 1) {
          x = 0.f;  // all zero: scale 1, codes 0
        } else if (kind == 2 || kind == 5) {
          // Ties: amax 448 * 2^e makes the scale 2^e (kind 2), amax 672 * 2^e makes it 1.5 * 2^e
          // (kind 5: a scale whose reciprocal is inexact, where dividing by a rounded reciprocal
          // would miss); then (m + 1/2) ulps of e4m3 at exponents 2^-3 .. 2^7, times the scale.
          const float unit = kind == 2 ? 1.f : 1.5f;
          const int ex = i % 11 - 3;
          x = i == 0 ? std::ldexp(448.f * unit, e)
                     : std::ldexp((1.f + (float(mantissa(rng)) + 0.5f) / 8.f) * std::ldexp(unit, ex), e);
          if (coin(rng)) x = -x;
        } else if (kind == 6) {
          // Tiny groups (amax ~2^-70 .. 2^-56, a scale under 2^-60: the division path) and bf16
          // subnormals, with negative zeros (code 0x80) among them.
          x = i % 5 == 0 ? -0.f : std::ldexp(normal(rng), i % 3 == 0 ? -130 : e - 50);
        } else {
          x = std::ldexp(normal(rng), e);
        }
        p[i] = formats::float_to_bf16(x);
      }
      if (kind == 3) p[17] = formats::float_to_bf16(NAN);
      if (kind == 4) p[99] = formats::float_to_bf16(-INFINITY);
    }
  return v;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

// Runs the kernel over rows [0, count) of an n-row buffer (one expert) and returns the buffer.
std::vector<uint16_t> run_quantizer(const std::vector<uint16_t>& rows, int64_t n, int64_t k, int count, bool tiled) {
  const rt::LoadedKernel& kern = rt::load_kernel(0, sm90::quantize_kernel(k, tiled));
  const int tiles = int((n + 127) / 128);
  DeviceBuffer buf = DeviceBuffer::from_host(0, rows);
  DeviceBuffer counts = DeviceBuffer::from_host(0, std::vector<int32_t>{count});
  DeviceBuffer seg = DeviceBuffer::from_host(0, std::vector<int64_t>{0});
  DeviceBuffer ntiles = DeviceBuffer::from_host(0, std::vector<int32_t>{tiles});
  DeviceBuffer texp = DeviceBuffer::from_host(0, std::vector<int32_t>(size_t(tiles), 0));
  rt::launch_with(kern, {unsigned(tiles), sm90::kGatherSplit}, {unsigned(sm90::kGatherThreads)}, 0, nullptr,
                  "quantize-test", buf.ptr(), counts.ptr(), seg.ptr(), ntiles.ptr(), texp.ptr());
  return buf.to_host<uint16_t>();
}

// Byte offset, in the buffer of k-value bf16 rows, of the scale of row r, group g
// (kernels/sm90/quantize.cuh's two layouts, written out here independently).
int64_t scale_offset(int64_t r, int64_t g, int64_t k, bool tiled) {
  if (!tiled) return r * 2 * k + k + 4 * g;
  return (r - r % 32) * 2 * k + k + 4 * (32 * g + r % 32);
}

class Sm90Quantizer : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(Sm90Quantizer, BitExactToTheFormatsLibrary) {
  REQUIRE_GPU();
  if (!on_sm90a()) GTEST_SKIP() << "the quantizer is built for sm_90a here";
  const auto [k, tiled] = GetParam();
  const int64_t n = 300, groups = k / 128;
  const int count = 277;  // rows 277 .. 299: past the expert's rows, must stay as they were
  const std::vector<uint16_t> rows = make_rows(n, k, testing::next_case_seed());
  const std::vector<uint16_t> out = run_quantizer(rows, n, k, count, tiled);
  const auto* out_bytes = reinterpret_cast<const uint8_t*>(out.data());

  std::vector<float> x(static_cast<size_t>(k)), scales(static_cast<size_t>(groups));
  std::vector<uint8_t> q(static_cast<size_t>(k));
  int64_t code_err = 0, scale_err = 0;
  for (int64_t r = 0; r < n; ++r) {
    const uint16_t* in = &rows[size_t(r * k)];
    if (r >= count) {
      // Tiled, a row's scales sit in its 32-row group's first row, never past the count.
      EXPECT_EQ(std::memcmp(&out[size_t(r * k)], in, size_t(k * 2)), 0) << "row " << r << " past the count changed";
      continue;
    }
    for (int64_t i = 0; i < k; ++i) x[size_t(i)] = formats::bf16_to_float(in[i]);
    formats::quantize_fp8_group128(x.data(), 1, k, q.data(), scales.data());
    const auto* bytes = reinterpret_cast<const uint8_t*>(&out[size_t(r * k)]);
    for (int64_t i = 0; i < k; ++i) code_err += bytes[i] != q[size_t(i)];
    for (int64_t g = 0; g < groups; ++g) {
      float s;
      std::memcpy(&s, out_bytes + scale_offset(r, g, k, tiled), 4);
      scale_err += !same_float(s, scales[size_t(g)]);
    }
  }
  EXPECT_EQ(code_err, 0) << "codes differing from formats::quantize_fp8_group128";
  EXPECT_EQ(scale_err, 0) << "scales differing";
}

// 3 groups (a half step at the end), 16 groups, 56 groups (DeepSeek-V3's H = 7168); both
// layouts.
INSTANTIATE_TEST_SUITE_P(K, Sm90Quantizer,
                         ::testing::Combine(::testing::Values(int64_t(384), int64_t(2048), int64_t(7168)),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_tiled" : "_in_row");
                         });

}  // namespace
}  // namespace moeforge
