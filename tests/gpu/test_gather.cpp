// The sm90 gather (kernels/sm90/gather.cuh, moe_sm90_gather) against a host model of what it
// must write, bit for bit, in its four orders: x rows as they are, in the W4A16 / W8A16 decode
// GEMMs' permuted K order, and quantized to FP8 with the scales in each row or tiled per 32
// rows (formats::quantize_fp8_group128; layouts as tests/gpu/test_quantize.cpp writes them out).
// The permutation is built here as the portable one lays it out (an expert's rows are its entries
// in (token, slot) order, segments padded to 128 rows, shared experts after the routed ones),
// with invalid slots (row_of -1), a partial last block of tokens and grid blocks past the tile
// count. Checked: every row a token goes to, its epilogue scale (routing weight, 1 for shared
// experts, 0 for padding), padding rows and rows past the tiles untouched, the tile counters
// zeroed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
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
#include "sm90/w4_format.cuh"

namespace moeforge {
namespace {

using testing::on_sm90a;

constexpr int kBM = 128;
constexpr uint16_t kPoison = 0xABCD;  // xg before the launch
constexpr uint32_t kScalePoison = 0x7FBADBADu;

// The permutation of n tokens: row_of [n * k], the segments, the tiles.
struct Permutation {
  std::vector<int32_t> row_of, counts, tile_expert;
  std::vector<int64_t> seg_off;
  std::vector<float> row_weight;
  int64_t rows = 0;  // padded rows in all
  int tiles = 0;
};

Permutation permute(const MoeSpec& s, int64_t n, std::mt19937_64& rng) {
  const int64_t E = s.num_experts, et = E + s.num_shared_experts, k = s.topk;
  Permutation p;
  std::vector<int32_t> ids(size_t(n * k));
  std::vector<int32_t> experts(static_cast<size_t>(E));
  std::iota(experts.begin(), experts.end(), 0);
  std::uniform_int_distribution<int> invalid(0, 19);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t j = 0; j < k; ++j) ids[size_t(t * k + j)] = invalid(rng) == 0 ? -1 : experts[size_t(j)];
  }
  p.counts.assign(size_t(et), 0);
  for (int32_t e : ids)
    if (e >= 0) ++p.counts[size_t(e)];
  for (int64_t e = E; e < et; ++e) p.counts[size_t(e)] = int32_t(n);
  p.seg_off.assign(size_t(et + 1), 0);
  for (int64_t e = 0; e < et; ++e)
    p.seg_off[size_t(e + 1)] = p.seg_off[size_t(e)] + (p.counts[size_t(e)] + kBM - 1) / kBM * kBM;
  p.rows = p.seg_off[size_t(et)];
  p.tiles = int(p.rows / kBM);
  for (int64_t e = 0; e < et; ++e)
    for (int64_t r = p.seg_off[size_t(e)]; r < p.seg_off[size_t(e + 1)]; r += kBM) p.tile_expert.push_back(int32_t(e));
  std::vector<int64_t> next(p.seg_off.begin(), p.seg_off.end() - 1);
  p.row_of.assign(size_t(n * k), -1);
  p.row_weight.assign(size_t(p.rows), 0.f);
  std::uniform_real_distribution<float> weight(0.01f, 1.f);
  for (int64_t i = 0; i < n * k; ++i) {
    const int32_t e = ids[size_t(i)];
    if (e < 0) continue;
    const int64_t row = next[size_t(e)]++;
    p.row_of[size_t(i)] = int32_t(row);
    p.row_weight[size_t(row)] = weight(rng);
  }
  return p;
}

// x [n, H] bf16: each 128-group at its own magnitude, one group in 9 all zero.
std::vector<uint16_t> make_x(int64_t n, int64_t h, std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<uint16_t> x(size_t(n * h));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < h / 128; ++g) {
      const int e = exponent(rng);
      for (int64_t i = 0; i < 128; ++i)
        x[size_t(t * h + g * 128 + i)] =
            formats::float_to_bf16((t + g) % 9 == 0 ? 0.f : std::ldexp(normal(rng), e));
    }
  return x;
}

class Sm90Gather : public ::testing::TestWithParam<std::tuple<sm90::GatherOrder, int64_t>> {};

TEST_P(Sm90Gather, WritesEveryRowOfEveryTokenAndNothingElse) {
  REQUIRE_GPU();
  if (!on_sm90a()) GTEST_SKIP() << "the gather is the sm90 backend's, built for sm_90a here";
  const auto [order, h] = GetParam();
  MoeSpec s;
  s.num_experts = 8, s.num_shared_experts = 1, s.topk = 2, s.hidden = h, s.intermediate = 128;
  s.shared_intermediate = 128;
  s.validate();
  const int64_t n = 300, k = s.topk, E = s.num_experts;  // 38 blocks of 8 tokens, the last partial
  std::mt19937_64 rng(testing::next_case_seed());
  const Permutation p = permute(s, n, rng);
  const std::vector<uint16_t> x = make_x(n, h, rng);
  const int tile_bound = p.tiles + 3;  // blocks past the tiles: must exit
  const int64_t rows_bound = int64_t(tile_bound) * kBM;

  const rt::LoadedKernel& kern = rt::load_kernel(0, sm90::gather_kernel(s, order));
  DeviceBuffer dx = DeviceBuffer::from_host(0, x);
  DeviceBuffer drow_of = DeviceBuffer::from_host(0, p.row_of);
  DeviceBuffer dcounts = DeviceBuffer::from_host(0, p.counts);
  DeviceBuffer dseg = DeviceBuffer::from_host(0, p.seg_off);
  DeviceBuffer dntiles = DeviceBuffer::from_host(0, std::vector<int32_t>{p.tiles});
  DeviceBuffer dtexp = DeviceBuffer::from_host(0, p.tile_expert);
  std::vector<float> rw = p.row_weight;
  rw.resize(size_t(rows_bound), 0.f);
  DeviceBuffer drw = DeviceBuffer::from_host(0, rw);
  DeviceBuffer dxg = DeviceBuffer::from_host(0, std::vector<uint16_t>(size_t(rows_bound * h), kPoison));
  float poison_scale;
  std::memcpy(&poison_scale, &kScalePoison, 4);
  DeviceBuffer dscale = DeviceBuffer::from_host(0, std::vector<float>(size_t(rows_bound), poison_scale));
  DeviceBuffer dcounters = DeviceBuffer::from_host(0, std::vector<int32_t>{12345, -7});
  const unsigned token_blocks = unsigned((n + sm90::kGatherWarps - 1) / sm90::kGatherWarps);
  rt::launch_with(kern, {token_blocks + unsigned(tile_bound)}, {unsigned(sm90::kGatherThreads)}, 0, nullptr,
                  "gather-test", dx.ptr(), int(n), drow_of.ptr(), dcounts.ptr(), dseg.ptr(), dntiles.ptr(),
                  dtexp.ptr(), drw.ptr(), dxg.ptr(), dscale.ptr(), dcounters.ptr());
  const std::vector<uint16_t> xg = dxg.to_host<uint16_t>();
  const std::vector<float> scale = dscale.to_host<float>();
  const std::vector<int32_t> counters = dcounters.to_host<int32_t>();
  EXPECT_EQ(counters, (std::vector<int32_t>{0, 0})) << "the GEMMs' tile counters";

  // Where each row's content comes from: its token, or -1 (padding, past the tiles).
  std::vector<int64_t> token_of(size_t(rows_bound), -1);
  for (int64_t i = 0; i < n * k; ++i)
    if (p.row_of[size_t(i)] >= 0) token_of[size_t(p.row_of[size_t(i)])] = i / k;
  for (int64_t sh = 0; sh < s.num_shared_experts; ++sh)
    for (int64_t t = 0; t < n; ++t) token_of[size_t(p.seg_off[size_t(E + sh)] + t)] = t;

  const bool quant = order == sm90::GatherOrder::QuantFp8 || order == sm90::GatherOrder::QuantFp8Tiled;
  const bool tiled = order == sm90::GatherOrder::QuantFp8Tiled;
  const auto* bytes = reinterpret_cast<const uint8_t*>(xg.data());
  std::vector<float> xf(static_cast<size_t>(h)), group_scales(static_cast<size_t>(h / 128));
  std::vector<uint8_t> codes(static_cast<size_t>(h));
  int64_t content_err = 0, scale_err = 0, untouched_err = 0, epilogue_err = 0;
  for (int64_t r = 0; r < rows_bound; ++r) {
    const int64_t t = token_of[size_t(r)];
    const uint16_t* got = &xg[size_t(r * h)];
    // The epilogue scale: rows of the tiles only.
    float want_scale = poison_scale;
    if (r < p.rows) {
      const int64_t e = p.tile_expert[size_t(r / kBM)];
      want_scale = t < 0 ? 0.f : e < E ? p.row_weight[size_t(r)] : 1.f;
    }
    epilogue_err += std::memcmp(&scale[size_t(r)], &want_scale, 4) != 0;
    if (t < 0) {
      untouched_err += std::any_of(got, got + h, [](uint16_t v) { return v != kPoison; });
      continue;
    }
    const uint16_t* src = &x[size_t(t * h)];
    if (!quant) {
      for (int64_t c = 0; c < h; ++c) {
        const int64_t from = order == sm90::GatherOrder::PermutedK ? c / 64 * 64 + w4::physical_k(int(c % 64)) : c;
        content_err += got[c] != src[from];
      }
      continue;
    }
    for (int64_t c = 0; c < h; ++c) xf[size_t(c)] = formats::bf16_to_float(src[c]);
    formats::quantize_fp8_group128(xf.data(), 1, h, codes.data(), group_scales.data());
    content_err += std::memcmp(bytes + r * 2 * h, codes.data(), size_t(h)) != 0;
    for (int64_t g = 0; g < h / 128; ++g) {
      const int64_t at = tiled ? (r - r % 32) * 2 * h + h + 4 * (32 * g + r % 32) : r * 2 * h + h + 4 * g;
      scale_err += std::memcmp(bytes + at, &group_scales[size_t(g)], 4) != 0;
    }
  }
  EXPECT_EQ(content_err, 0) << "rows differing from their token's x (or its codes)";
  EXPECT_EQ(scale_err, 0) << "FP8 group scales differing";
  EXPECT_EQ(untouched_err, 0) << "padding rows or rows past the tiles written";
  EXPECT_EQ(epilogue_err, 0) << "epilogue scales (routing weight, 1, 0) differing";
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<sm90::GatherOrder, int64_t>>& info) {
  static const char* const names[] = {"natural", "permuted_k", "fp8_in_row", "fp8_tiled"};
  return std::string(names[int(std::get<0>(info.param))]) + "_" + std::to_string(std::get<1>(info.param));
}

// H = 384 (3 groups: a half step of the quantizer, 6 vectors of 8 lanes) and 2048.
INSTANTIATE_TEST_SUITE_P(Orders, Sm90Gather,
                         ::testing::Combine(::testing::Values(sm90::GatherOrder::Natural, sm90::GatherOrder::PermutedK,
                                                              sm90::GatherOrder::QuantFp8,
                                                              sm90::GatherOrder::QuantFp8Tiled),
                                            ::testing::Values(int64_t(384), int64_t(2048))),
                         case_name);

}  // namespace
}  // namespace moeforge
