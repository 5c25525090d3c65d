// The sm90 backend's host side without a GPU: what it serves, its planner, its resource
// budgets against an H100/H200-sized device and a non-Hopper one, and its self-test sizes.
// (Its kernels compile for sm_90a in All/RuntimeCompileTarget.EveryKernel/sm_90a; they run in
// the GPU suite, tests/gpu/test_layer.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/portable/portable.hpp"
#include "backends/selftest.hpp"
#include "backends/sm90/sm90.hpp"
#include "kernels/sm90/decode_units.cuh"
#include "kernels/sm90/tile_words.cuh"
#include "kernels/sm90/w4_format.cuh"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "moeforge/spec.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace moeforge {
namespace {

rt::DeviceInfo hopper() {  // the limits an H200 reports (tests/gpu record the real ones)
  rt::DeviceInfo d;
  d.name = "H200-like";
  d.cc_major = 9;
  d.target = "sm_90a";
  d.sm_count = 132;
  d.smem_optin_per_block = 232448;
  d.smem_per_sm = 233472;
  d.regs_per_block = d.regs_per_sm = 65536;
  d.max_threads_per_block = 1024;
  d.max_grid_x = 2147483647;
  d.max_grid_y = d.max_grid_z = 65535;
  d.total_mem = int64_t(141) << 30;
  return d;
}

TEST(Sm90Backend, ServesBf16WithoutBiasAndSaysWhyNotOtherwise) {
  const Backend& b = sm90_backend();
  EXPECT_EQ(b.name(), "sm90");
  EXPECT_GT(b.priority(), portable_backend().priority());
  EXPECT_EQ(b.why_not(presets::get("mistral-small-4"), nullptr), "no CUDA device");
  const rt::DeviceInfo h = hopper();
  for (const char* p : {"mistral-small-4", "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b"})
    EXPECT_EQ(b.why_not(presets::get(p), &h), "") << p;
  EXPECT_NE(b.why_not(presets::get("gpt-oss-120b"), &h).find("bias"), std::string::npos);
  MoeSpec mx = presets::get("mistral-small-4");
  mx.weight_format = WeightFormat::MXFP4;
  EXPECT_NE(b.why_not(mx, &h).find("mxfp4"), std::string::npos);
  // NVFP4 and FP8: served (W4A16 / W8A16 GEMMs) when H and I are multiples of 64.
  for (WeightFormat f : {WeightFormat::NVFP4, WeightFormat::FP8_Block128}) {
    MoeSpec q = presets::get("mistral-small-4");
    q.weight_format = f;
    EXPECT_EQ(b.why_not(q, &h), "") << to_string(f);
    q.intermediate = q.shared_intermediate = 2048 + 32;
    EXPECT_NE(b.why_not(q, &h).find("divisible by 64"), std::string::npos) << b.why_not(q, &h);
  }
  // FP8 activations: served with FP8 weights (W8A8) when H and I are multiples of 128.
  MoeSpec a8 = presets::get("deepseek-v3");
  a8.weight_format = WeightFormat::FP8_Block128;
  a8.activation_format = ActivationFormat::FP8_Group128;
  EXPECT_EQ(b.why_not(a8, &h), "");
  EXPECT_NE(portable_backend().why_not(a8, &h).find("activation"), std::string::npos);
  MoeSpec a8_bf16w = a8;
  a8_bf16w.weight_format = WeightFormat::BF16;
  EXPECT_NE(b.why_not(a8_bf16w, &h).find("need fp8 weights"), std::string::npos) << b.why_not(a8_bf16w, &h);
  a8.intermediate = a8.shared_intermediate = 2048 + 64;
  EXPECT_NE(b.why_not(a8, &h).find("divisible by 128"), std::string::npos) << b.why_not(a8, &h);
  // The decode GEMMs' occupancy is set for the sm_90a SM's 228 KiB (decode_launch_smem_bytes).
  rt::DeviceInfo odd = h;
  odd.smem_per_sm = 200 * 1024;
  EXPECT_NE(b.why_not(presets::get("mistral-small-4"), &odd).find("shared memory per SM"), std::string::npos);
  rt::DeviceInfo ada = h;
  ada.cc_major = 8;
  ada.cc_minor = 9;
  ada.target = "sm_89";
  EXPECT_NE(b.why_not(presets::get("mistral-small-4"), &ada).find("sm_90a"), std::string::npos);
}

TEST(Sm90Backend, KernelsFitTheDeviceAndExistOnlyForSm90a) {
  const rt::DeviceInfo h = hopper();
  const MoeSpec s = presets::get("deepseek-v3");
  int sm90_only = 0, decode = 0, fixups = 0;
  for (const rt::KernelSpec& k : sm90_backend().kernels(s)) {
    EXPECT_EQ(rt::budget_violation(k, h), "") << k.entry;
    if (!k.targets.empty()) {
      ++sm90_only;
      EXPECT_TRUE(rt::built_for(k, "sm_90a"));
      EXPECT_FALSE(rt::built_for(k, "sm_100a"));
    }
    decode += k.entry == "moe_sm90_decode";
    fixups += k.entry == "moe_sm90_decode_fixup";
  }
  // Wide GEMM 1 and 2; decode GEMM 1 and 2 for 4 token tiles, and stream-K at 16 with its fixups.
  EXPECT_EQ(sm90_only, 2 + 8 + 4);
  EXPECT_EQ(decode, 8 + 2);
  EXPECT_EQ(fixups, 2);
  // Exactly as many decode CTAs per SM as the kernel assumes at each token tile (its streaming
  // depth, and the grid its units are strided over): they fit, one more does not.
  const int et = s.num_experts + s.num_shared_experts;
  auto decode_occupancy_is_pinned = [&](sm90::Codes c, int experts) {
    for (int bt : sm90::kDecodeTiles) {
      const int ctas = sm90::decode_ctas_per_sm(bt), launch = sm90::decode_launch_smem_bytes(bt, c, experts);
      EXPECT_GE(launch, sm90::decode_smem_bytes(bt, c, experts)) << bt;
      EXPECT_LE(ctas * (launch + 1024), h.smem_per_sm) << bt << " " << experts;
      EXPECT_GT((ctas + 1) * (launch + 1024), h.smem_per_sm) << bt << " " << experts;
    }
  };
  decode_occupancy_is_pinned(sm90::Codes::BF16, et);
  EXPECT_EQ(sm90::decode_launch_smem_bytes(16, sm90::Codes::BF16, et), 76 * 1024);  // 3 of 75 KB would fit
  // 4 stages x (16 KB of weights + 8 KB of tokens), the ring's barriers, 257 experts' ids and
  // running unit counts (6 bytes each), rounded to 1 KB, plus 1 KB of alignment slack.
  EXPECT_EQ(sm90::decode_smem_bytes(64, sm90::Codes::BF16, et), 99 * 1024);
  // NVFP4 and FP8: the dequantizing wide GEMMs and the W4A16 / W8A16 decode GEMMs, all within
  // the limits, two decode CTAs per SM even at the largest expert count the runtime takes.
  for (WeightFormat f : {WeightFormat::NVFP4, WeightFormat::FP8_Block128}) {
    SCOPED_TRACE(to_string(f));
    MoeSpec q = s;
    q.weight_format = f;
    int q_sm90 = 0, q_gathers = 0;
    for (const rt::KernelSpec& k : sm90_backend().kernels(q)) {
      EXPECT_EQ(rt::budget_violation(k, h), "") << k.entry;
      q_sm90 += !k.targets.empty();
      q_gathers += k.entry == "moe_sm90_gather";
    }
    EXPECT_EQ(q_sm90, 2 + 8 + 4);
    EXPECT_EQ(q_gathers, 2);  // natural and permuted K order
    const sm90::Codes c = sm90::codes(q);
    decode_occupancy_is_pinned(c, et);
    decode_occupancy_is_pinned(c, portable::kMaxExperts + 8);
  }
  // W8A8: the QGMMA GEMM pair (its GEMM 1 quantizes h), the quantizing gather in two forms
  // (scales in the rows for the decode GEMMs, tiled for the wide ones), the h quantizer of the
  // decode GEMMs; below the crossover the QGMMA decode GEMMs (W8 and A8: 8, and 2 stream-K with
  // 2 fixups): no permuted gather.
  MoeSpec a8 = s;
  a8.weight_format = WeightFormat::FP8_Block128;
  a8.activation_format = ActivationFormat::FP8_Group128;
  int a8_sm90 = 0, a8_quant = 0, a8_decode = 0;
  for (const rt::KernelSpec& k : sm90_backend().kernels(a8)) {
    EXPECT_EQ(rt::budget_violation(k, h), "") << k.entry;
    a8_sm90 += !k.targets.empty();
    a8_quant += k.entry == "moe_sm90_quantize_rows";
    if (k.entry == "moe_sm90_decode") {
      ++a8_decode;
      for (const char* d : {"W8", "A8"})
        EXPECT_NE(std::find(k.defines.begin(), k.defines.end(), std::pair<std::string, std::string>{d, "1"}),
                  k.defines.end())
            << d;
    }
  }
  EXPECT_EQ(a8_sm90, 2 + 2 + 1 + 8 + 4);
  EXPECT_EQ(a8_quant, 1);
  EXPECT_EQ(a8_decode, 8 + 2);
}

// The W4A16 K permutation (kernels/sm90/w4_format.cuh): a bijection of each
// 64-column block whose inverse is logical_k, and thread t's 16 codes (physical t*16 ..
// t*16+15) are exactly the logical columns its wgmma A fragment holds: 2t, 2t+1, 2t+8, 2t+9
// of every k16 step.
TEST(Sm90Backend, W4PermutationMatchesTheFragmentLayout) {
  std::set<int> seen;
  for (int L = 0; L < 64; ++L) {
    const int p = w4::physical_k(L);
    ASSERT_TRUE(p >= 0 && p < 64) << L;
    seen.insert(p);
    EXPECT_EQ(w4::logical_k(p), L);
    const int t = p / 16, in_step = L % 16;
    EXPECT_TRUE(in_step % 8 / 2 == t) << "logical " << L << " is not thread " << t << "'s column";
  }
  EXPECT_EQ(seen.size(), 64u);
}

TEST(Sm90Backend, PlannerSplitsAtTheCrossoverAndSelfTestCoversBothSides) {
  for (WeightFormat f : {WeightFormat::BF16, WeightFormat::NVFP4, WeightFormat::FP8_Block128}) {
    SCOPED_TRACE(to_string(f));
    MoeSpec s = presets::get("mistral-small-4");
    s.weight_format = f;
    const double c = sm90::crossover_rows(s);
    for (int64_t T : {1, 8, 32, 64, 128, 512, 2048, 36308}) {
      const double rows = double(T) * s.topk / s.num_experts;
      const sm90::Plan p = sm90::plan(s, T);
      EXPECT_EQ(p.wide, rows >= c) << T;
      if (!p.wide) {
        EXPECT_GE(p.bt, 16) << T;
        // The 128-token tile from the format's threshold on; below it twice the average fits,
        // unless at the cap of 64.
        if (rows >= sm90::large_tile_rows(s)) EXPECT_EQ(p.bt, 128) << T;
        else EXPECT_TRUE(p.bt == 64 || 2 * rows <= p.bt) << T;
      }
    }
    // The self-test runs every GEMM pair the planner can pick: wide (unless never), decode, and
    // the 128-token decode tile where the format uses it.
    const MoeSpec ts = self_test_spec(s);
    bool saw_wide = !std::isfinite(c), saw_decode = c <= 0, saw_large = !(sm90::large_tile_rows(ts) < c);
    for (int64_t T : sm90_backend().self_test_tokens(ts)) {
      EXPECT_EQ(T % 2, 1) << "odd sizes: partial tiles everywhere";
      const sm90::Plan p = sm90::plan(ts, T);
      (p.wide ? saw_wide : p.bt == 128 ? saw_large : saw_decode) = true;
    }
    EXPECT_TRUE(saw_wide);
    EXPECT_TRUE(saw_decode);
    EXPECT_TRUE(saw_large);
  }
  // What bench records say ran.
  const MoeSpec s = presets::get("mistral-small-4");
  EXPECT_EQ(sm90_backend().gemm_plan(s, 1), "decode GEMMs (16-token tiles)");
  EXPECT_EQ(sm90_backend().gemm_plan(s, 36308), "wide GEMMs (128x256 tiles)");
  EXPECT_EQ(portable_backend().gemm_plan(s, 36308), "m128n128 GEMMs");
  MoeSpec nv = s;
  nv.weight_format = WeightFormat::NVFP4;
  EXPECT_EQ(sm90_backend().gemm_plan(nv, 1), "decode GEMMs (nvfp4 W4A16, 16-token tiles)");
  EXPECT_EQ(sm90_backend().gemm_plan(nv, 36308), "decode GEMMs (nvfp4 W4A16, 128-token tiles)");
  MoeSpec f8 = s;
  f8.weight_format = WeightFormat::FP8_Block128;
  EXPECT_EQ(sm90_backend().gemm_plan(f8, 1), "decode GEMMs (fp8 W8A16, 16-token tiles)");
  EXPECT_EQ(sm90_backend().gemm_plan(f8, 36308), "decode GEMMs (fp8 W8A16, 128-token tiles)");
  f8.activation_format = ActivationFormat::FP8_Group128;
  EXPECT_EQ(sm90_backend().gemm_plan(f8, 1), "decode GEMMs (fp8 W8A8 QGMMA, 16-token tiles)");
  EXPECT_EQ(sm90_backend().gemm_plan(f8, 32),  // 1 row/expert
            "decode GEMMs (fp8 W8A8 QGMMA, 16-token tiles)");
  EXPECT_EQ(sm90_backend().gemm_plan(f8, 128),  // 4 rows/expert
            "decode GEMMs (fp8 W8A8 QGMMA, 16-token tiles)");
  EXPECT_EQ(sm90_backend().gemm_plan(f8, 512),  // 16 rows/expert
            "decode GEMMs (fp8 W8A8 QGMMA, 32-token tiles)");
  EXPECT_EQ(sm90_backend().gemm_plan(f8, 1024), "wide GEMMs (fp8 W8A8 QGMMA, 128x256 tiles)");  // 32 rows/expert
}

// The permuted-K gather's vector moves (sm90/gather.cuh) against the permutation itself: every
// logical column of every output vector comes from the physical column physical_k says.
TEST(Sm90Backend, PermutedGatherMovesMatchThePermutation) {
  for (int j = 0; j < 8; ++j)
    for (int t = 0; t < 4; ++t)
      for (int lohi = 0; lohi < 2; ++lohi) {
        const int from = 8 * w4::gather_src_vec(j, t) + w4::gather_src_elem(j) + 4 * lohi;
        EXPECT_EQ(from, w4::physical_k(8 * j + 2 * t + lohi)) << j << " " << t << " " << lohi;
      }
}

// The wide GEMMs' half tiles (sm90/tile_words.cuh, the kernels' own test): over random segment
// layouts padded to 128 rows (empty experts, 1 ... 400 rows, a shared expert), a tile is half
// exactly when rows 64 .. 127 of it are all padding, which happens only on an expert's last
// tile; and a tile word gives back its tile and flag.
TEST(Sm90Backend, HalfTilesAreTheTilesWhoseSecondHalfIsPadding) {
  constexpr int kBM = 128, kExperts = 65;
  std::mt19937 rng(11);
  int halves = 0, fulls = 0;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int> counts(kExperts);
    std::vector<long long> seg_off(kExperts + 1, 0);
    std::vector<int> tile_expert;
    for (int e = 0; e < kExperts; ++e) {
      counts[e] = rng() % 4 == 0 ? 0 : int(rng() % 400) + 1;
      const int tiles = (counts[e] + kBM - 1) / kBM;
      seg_off[e + 1] = seg_off[e] + (long long)tiles * kBM;
      for (int i = 0; i < tiles; ++i) tile_expert.push_back(e);
    }
    for (int mt = 0; mt < int(tile_expert.size()); ++mt) {
      const int e = tile_expert[mt];
      const long long first = (long long)mt * kBM - seg_off[e];  // the tile's first row within its expert
      const bool second_half_padding = first + 64 >= counts[e];
      const bool half = ::sm90::half_tile<kBM>(counts.data(), seg_off.data(), e, mt);
      EXPECT_EQ(half, second_half_padding) << "trial " << trial << " tile " << mt << " rows " << counts[e];
      if (half) {
        EXPECT_GT(counts[e], first) << "a half tile still holds rows of its expert";
        EXPECT_TRUE(mt + 1 == int(tile_expert.size()) || tile_expert[mt + 1] != e) << "only a last tile is half";
      }
      (half ? halves : fulls) += 1;
      for (int n_tiles : {1, 8, 16}) {
        const auto [m, n] = ::sm90::tile_mn(mt * n_tiles + n_tiles - 1, n_tiles);
        EXPECT_TRUE(m == mt && n == n_tiles - 1) << "tile_mn of tile (" << mt << ", " << n_tiles - 1 << ")";
      }
      for (bool h : {false, true}) {
        const int word = ::sm90::tile_word(mt, h);
        EXPECT_EQ(::sm90::word_tile(word), mt);
        EXPECT_EQ(::sm90::word_half(word), h);
        EXPECT_NE(word, ::sm90::kNoMoreTiles);
      }
    }
  }
  EXPECT_GT(halves, 100);  // both kinds occur
  EXPECT_GT(fulls, 100);
}

// The wide GEMMs' claim order (sm90/tile_words.cuh claimed_tile, the producers' own map): over
// random segment layouts, the claims 0 .. m_tiles * n_tiles - 1 are every (m-tile, n-tile) once,
// each claim's m-tile belongs to the expert tile_expert[claim / n_tiles] names (how the producer
// finds the expert), and inside a band the m-tiles of one n-tile are consecutive claims.
TEST(Sm90Backend, ClaimOrderIsEveryTileOnceBandByBand) {
  constexpr int kBM = 128, kExperts = 33;
  std::mt19937 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<long long> seg_off(kExperts + 1, 0);
    std::vector<int> tile_expert;
    for (int e = 0; e < kExperts; ++e) {
      const int rows = rng() % 5 == 0 ? 0 : e == kExperts - 1 ? 4000 : int(rng() % 1300) + 1;  // the last: a shared expert
      const int tiles = (rows + kBM - 1) / kBM;
      seg_off[e + 1] = seg_off[e] + (long long)tiles * kBM;
      for (int i = 0; i < tiles; ++i) tile_expert.push_back(e);
    }
    const int m_tiles = int(tile_expert.size());
    for (int n_tiles : {1, 3, 16, 28})
      for (int band : {1, 2, 4, 8}) {
        std::vector<int> seen(size_t(m_tiles) * n_tiles, 0);
        int prev_mt = -1, prev_nt = -1;
        for (int c = 0; c < m_tiles * n_tiles; ++c) {
          const int e = tile_expert[c / n_tiles];
          const int mt0 = int(seg_off[e] / kBM), mt1 = int(seg_off[e + 1] / kBM);
          const auto [mt, nt] = ::sm90::claimed_tile(c, n_tiles, mt0, mt1, band);
          ASSERT_TRUE(mt >= mt0 && mt < mt1 && nt >= 0 && nt < n_tiles)
              << "claim " << c << " -> (" << mt << ", " << nt << "), expert " << e << " m-tiles " << mt0 << ".." << mt1;
          ++seen[size_t(mt) * n_tiles + nt];
          // Within a band, the next claim keeps the n-tile or moves to the band's next one.
          const bool same_band = prev_mt >= mt0 && (prev_mt - mt0) / band == (mt - mt0) / band;
          if (same_band && nt != prev_nt) {
            EXPECT_EQ(mt, mt0 + (mt - mt0) / band * band) << "claim " << c;
          } else if (same_band) {
            EXPECT_EQ(mt, prev_mt + 1) << "claim " << c;
          }
          prev_mt = mt, prev_nt = nt;
        }
        for (size_t i = 0; i < seen.size(); ++i)
          ASSERT_EQ(seen[i], 1) << "tile " << i << " of " << seen.size() << ", n_tiles " << n_tiles << ", band " << band;
      }
  }
}

// The decode GEMMs' work units (sm90/decode_units.cuh, the kernel's own lookup): for random
// routed counts (empty experts, a shared expert with every token, 1..3x the token tile), the
// units 0 .. total - 1 are every (expert with rows, weight tile, token chunk) exactly once,
// and the chunks of one tile are consecutive units.
TEST(Sm90Backend, DecodeUnitsAreEveryTileAndChunkOnce) {
  constexpr int kExperts = 129;
  struct List {  // the kernel's shared-memory list, as list_active_experts fills it
    int num_active = 0;
    int unit_end[kExperts];
    uint16_t active[kExperts];
  };
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int bt = 16 << (trial % 3), n_tiles = trial % 4 == 0 ? 1 : 8 * (trial % 5 + 1);
    std::vector<int> counts(kExperts);
    for (int e = 0; e < kExperts - 1; ++e) counts[e] = rng() % 3 == 0 ? 0 : int(rng() % (3 * bt)) + 1;
    counts[kExperts - 1] = trial % 2 ? int(rng() % 2048) + 1 : 0;  // the shared expert, or none
    List L;
    int total = 0;
    std::set<std::tuple<int, int, int>> expected;
    for (int e = 0; e < kExperts; ++e) {
      if (counts[e] == 0) continue;
      total += decode_units::units_of(counts[e], bt, n_tiles);
      L.active[L.num_active] = uint16_t(e);
      L.unit_end[L.num_active++] = total;
      for (int nt = 0; nt < n_tiles; ++nt)
        for (int c = 0; c * bt < counts[e]; ++c) expected.insert({e, nt, c});
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " bt " << bt << " n_tiles " << n_tiles);
    ASSERT_EQ(size_t(total), expected.size());
    std::set<std::tuple<int, int, int>> seen;
    decode_units::Unit prev{-1, -1, -1};
    for (int u = 0; u < total; ++u) {
      const decode_units::Unit x = decode_units::unit_at(L, counts.data(), bt, u);
      ASSERT_TRUE(expected.count({x.e, x.nt, x.c}))
          << "unit " << u << ": (" << x.e << ", " << x.nt << ", " << x.c << ")";
      EXPECT_TRUE(seen.insert({x.e, x.nt, x.c}).second) << "unit " << u << " repeats";
      if (x.c > 0) {
        EXPECT_TRUE(prev.e == x.e && prev.nt == x.nt && prev.c == x.c - 1) << "unit " << u;
      }
      prev = x;
    }
    EXPECT_EQ(seen, expected);
  }
}

// When stream-K runs (sm90::stream_k_pays), on the H200's 132 SMs, at the unit bounds of the
// measured calls (T * k + S experts x 32 or 56 128-row tiles): on below 4 / 5 of the last round.
TEST(Sm90Backend, StreamKRunsOnlyWhereWholeUnitsFillTheSmsUnevenly) {
  using moeforge::sm90::stream_k_pays;
  EXPECT_TRUE(stream_k_pays(5 * 32, 132));    // Mistral-Small-4, T = 1: 160 units, fill 0.61
  EXPECT_TRUE(stream_k_pays(13 * 32, 132));   // T = 3: 416, fill 0.79
  EXPECT_FALSE(stream_k_pays(17 * 32, 132));  // T = 4: 544, fill 0.82
  EXPECT_FALSE(stream_k_pays(33 * 32, 132));  // T = 8: 1056, 8 full rounds
  EXPECT_TRUE(stream_k_pays(9 * 32, 132));    // DeepSeek-V3, T = 1, GEMM 1: 288, fill 0.73
  EXPECT_FALSE(stream_k_pays(9 * 56, 132));   // GEMM 2: 504, fill 0.95
  EXPECT_FALSE(stream_k_pays(0, 132));
  EXPECT_TRUE(stream_k_pays(1, 132));
  EXPECT_FALSE(stream_k_pays(132, 132));
}

// Stream-K pieces (sm90/decode_units.cuh), as the decode kernel walks them and its fixup adds
// them up: for unit counts below, at and above the grid, every (unit, k-block) task is done
// exactly once; every CTA streams tasks / G k-blocks (+-1); only a range's first piece starts
// inside a unit and only its last ends inside one; and a split unit's owner (the CTA with its
// k-block 0) finds the other pieces in slot 0 of the next pieces_of_unit - 1 CTAs, in k order.
TEST(Sm90Backend, StreamKPiecesCoverEveryTaskOnceInOrder) {
  for (int ctas : {1, 7, 264}) {
    for (int k_blocks : {1, 3, 16, 64}) {
      for (int n_units : {1, 5, 160, 263, 264, 265, 992}) {
        SCOPED_TRACE(::testing::Message() << "ctas " << ctas << " k_blocks " << k_blocks << " units " << n_units);
        const int tasks = n_units * k_blocks;
        const int grid = decode_units::stream_k_grid(tasks, ctas);
        EXPECT_EQ(grid, std::min(tasks, ctas));
        std::vector<int> done(size_t(tasks), 0);
        // slot[b][s]: the (unit, k0, k1) CTA b left in its partial-sum slot s, if any.
        std::vector<std::array<decode_units::Piece, 2>> slot(size_t(grid), {{{-1, 0, 0}, {-1, 0, 0}}});
        std::vector<std::pair<int, int>> owners;  // (CTA, unit)
        for (int b = 0; b < grid; ++b) {
          const int begin = decode_units::range_begin(tasks, grid, b);
          const int end = decode_units::range_begin(tasks, grid, b + 1);
          EXPECT_LE(end - begin, tasks / grid + 1);
          EXPECT_GE(end - begin, std::max(1, tasks / grid));
          for (int t = begin; t < end; ++t) EXPECT_EQ(decode_units::cta_of_task(tasks, grid, t), b) << t;
          int pieces = 0;
          for (int t = begin; t < end;) {
            const decode_units::Piece p = decode_units::piece_at(t, end, k_blocks);
            ASSERT_LT(p.k0, p.k1);
            for (int k = p.k0; k < p.k1; ++k) ++done[size_t(p.u * k_blocks + k)];
            t += p.k1 - p.k0;
            const bool first = pieces++ == 0, last = t == end;
            EXPECT_TRUE(p.k0 == 0 || first) << "CTA " << b << " starts inside unit " << p.u << " mid-range";
            EXPECT_TRUE(p.k1 == k_blocks || last) << "CTA " << b << " ends inside unit " << p.u << " mid-range";
            if (p.k0 == 0 && p.k1 == k_blocks) continue;  // whole: stored by the GEMM itself
            auto& s = slot[size_t(b)][size_t(decode_units::piece_slot(p))];
            EXPECT_EQ(s.u, -1) << "CTA " << b << " slot used twice";
            s = p;
            if (p.k0 == 0) owners.push_back({b, p.u});
          }
        }
        for (int t = 0; t < tasks; ++t) ASSERT_EQ(done[size_t(t)], 1) << "task " << t;
        for (const auto& [b, u] : owners) {
          const int n = decode_units::pieces_of_unit(tasks, grid, b, u, k_blocks);
          ASSERT_GE(n, 2);
          int k = slot[size_t(b)][1].k1;
          for (int q = 1; q < n; ++q) {
            const decode_units::Piece& p = slot[size_t(b + q)][0];
            EXPECT_EQ(p.u, u) << "piece " << q;
            EXPECT_EQ(p.k0, k) << "piece " << q;
            k = p.k1;
          }
          EXPECT_EQ(k, k_blocks);
        }
      }
    }
  }
}

// The W4A16 dequantization arithmetic, exhaustively: every e2m1 code in every position of a
// word lands as a bf16 that is exactly code * 2^-126 (bf16 subnormals included), every finite
// e4m3 scale's magnitude times 2^118 is an exact, finite bf16 from its scale byte
// (w4::scale_byte, w4::scale_pair), and their product (what mul.rn.bf16x2
// computes) is exactly representable, so the kernel's dequantized weight is
// code * scale * 2^-8 with no rounding; the epilogue's 2^8 undoes the offset.
double bf16_value(unsigned bits16) {
  float f;
  const uint32_t u = uint32_t(bits16 & 0xFFFFu) << 16;
  std::memcpy(&f, &u, 4);
  return f;
}
bool fits_bf16(double v) {  // finite and at most 8 significant bits (normal range)
  if (v == 0) return true;
  int e;
  const double m = std::frexp(std::fabs(v), &e);  // v = m * 2^e, m in [0.5, 1)
  return std::isfinite(v) && e - 1 >= -126 && e - 1 <= 127 && std::ldexp(m, 8) == std::floor(std::ldexp(m, 8));
}

template <int J>
void check_pair(unsigned code_lo, unsigned code_hi) {
  const unsigned w = code_lo << (4 * J) | code_hi << (4 * (J + 4));  // the other codes 0
  const unsigned r = w4::pair_bits<J>(w4::pack_word(w));             // the kernels read packed words
  EXPECT_EQ(bf16_value(r & 0xFFFF), std::ldexp(formats::e2m1_to_float(code_lo), w4::kCodeExp)) << J << " " << code_lo;
  EXPECT_EQ(bf16_value(r >> 16), std::ldexp(formats::e2m1_to_float(code_hi), w4::kCodeExp)) << J << " " << code_hi;
  // Neighbouring codes must not leak in: all other nibbles set to 0xF.
  unsigned noisy = w;
  for (int i = 0; i < 8; ++i)
    if (i != J && i != J + 4) noisy |= 0xFu << (4 * i);
  EXPECT_EQ(w4::pair_bits<J>(w4::pack_word(noisy)), r) << J;
}

// pack_word moves bits and loses none: each of the 32 goes to its own place.
TEST(Sm90Backend, W4PackWordIsABitPermutation) {
  unsigned seen = 0;
  for (int b = 0; b < 32; ++b) {
    const unsigned p = w4::pack_word(1u << b);
    ASSERT_EQ(__builtin_popcount(p), 1) << b;
    EXPECT_EQ(seen & p, 0u) << b;
    seen |= p;
  }
  EXPECT_EQ(seen, 0xFFFFFFFFu);
}

// What a W4 kernel multiplies for element (n, c) of a packed matrix, as a double: its code's
// bf16 bits (pair_bits on the packed word) times its scale's (scale_pair), times the
// epilogue's 2^8. The bf16 product is exact (W4DequantIsExact), so the GPU computes the same.
double w4_kernel_value(const portable::PreparedMatrix& m, int64_t n, int64_t c) {
  uint32_t w;
  std::memcpy(&w, m.data.data() + n * m.kp / 2 + (c / 8) * 4, 4);
  const int i = int(c % 8), J = i % 4;
  const unsigned pair = J == 0 ? w4::pair_bits<0>(w) : J == 1 ? w4::pair_bits<1>(w) : J == 2 ? w4::pair_bits<2>(w)
                                                                                              : w4::pair_bits<3>(w);
  const unsigned code = i < 4 ? pair & 0xFFFF : pair >> 16;
  const unsigned scale = w4::scale_pair(m.scales[size_t(((c / 32) * m.rows + n) * 2 + (c % 32) / 16)]) & 0xFFFF;
  return std::ldexp(bf16_value(code) * bf16_value(scale), w4::kEpilogueExp);
}

// The prepare hook: every element of a matrix whose groups take every e4m3 scale (negative,
// zero, -0, subnormal, NaN) and random codes dequantizes in the kernels' arithmetic to the
// reference's code * scale, bit for bit (the sign of zero and NaN included); other formats
// and mismatched sizes are refused.
TEST(Sm90Backend, PackW4KeepsEveryValue) {
  portable::PreparedMatrix m;
  m.format = WeightFormat::NVFP4;
  m.rows = 16;
  m.cols = m.kp = 512;  // 16 rows x 32 groups = 512 groups: each scale byte twice
  std::mt19937 rng(7);
  m.data.resize(size_t(m.rows * m.kp / 2));
  for (uint8_t& b : m.data) b = uint8_t(rng());
  m.scales.resize(size_t(m.rows * m.kp / 16));
  for (size_t i = 0; i < m.scales.size(); ++i) m.scales[i] = uint8_t(i * 167);  // 167 odd: every byte
  const portable::PreparedMatrix ref = m;
  sm90::pack_w4(m);
  int checked_nan = 0, checked_zero = 0;
  for (int64_t n = 0; n < m.rows; ++n)
    for (int64_t c = 0; c < m.cols; ++c) {
      const uint8_t byte = ref.data[size_t(n * ref.kp / 2 + c / 2)];
      const double code = formats::e2m1_to_float(c % 2 ? byte >> 4 : byte & 0xF);
      const double scale = formats::e4m3_to_float(ref.scales[size_t(((c / 32) * ref.rows + n) * 2 + (c % 32) / 16)]);
      const double want = code * scale, got = w4_kernel_value(m, n, c);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << n << " " << c;
        ++checked_nan;
        continue;
      }
      checked_zero += want == 0;
      ASSERT_EQ(got, want) << n << " " << c << " scale " << scale;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << n << " " << c << " scale " << scale;
    }
  EXPECT_GT(checked_nan, 0);
  EXPECT_GT(checked_zero, 0);
  portable::PreparedMatrix bad = ref;
  bad.scales.pop_back();
  EXPECT_THROW(sm90::pack_w4(bad), InternalError);
  bad = ref;
  bad.format = WeightFormat::FP8_Block128;
  EXPECT_THROW(sm90::pack_w4(bad), InternalError);
}

TEST(Sm90Backend, W4DequantIsExact) {
  for (unsigned a = 0; a < 16; ++a)
    for (unsigned b = 0; b < 16; ++b) {
      check_pair<0>(a, b);
      check_pair<1>(a, b);
      check_pair<2>(a, b);
      check_pair<3>(a, b);
    }
  // The scale byte of every e4m3 scale: its bf16 (scale_pair, both halves) is |scale| * 2^118
  // (NaN for NaN); sign and zero are the codes' (PackW4KeepsEveryValue).
  for (unsigned s = 0; s < 256; ++s) {
    const double scale = std::fabs(formats::e4m3_to_float(uint8_t(s)));
    const w4::ScaleByte b = w4::scale_byte(uint8_t(s));
    const unsigned pair = w4::scale_pair(b.byte);
    ASSERT_EQ(pair >> 16, pair & 0xFFFF) << s;
    EXPECT_EQ(b.negate, s >= 0x80 && (s & 0x7F) != 0x7F) << s;
    EXPECT_EQ(b.zero, scale == 0) << s;
    if (std::isnan(scale)) {
      EXPECT_TRUE(std::isnan(bf16_value(pair))) << s;
      continue;
    }
    if (scale == 0) continue;
    const double scaled = bf16_value(pair);
    ASSERT_EQ(scaled, std::ldexp(scale, w4::kScaleExp)) << "scale byte " << s;
    ASSERT_TRUE(fits_bf16(scaled)) << "scale byte " << s;
    for (unsigned c = 0; c < 16; ++c) {
      const double code = formats::e2m1_to_float(c);
      const double product = std::ldexp(code, w4::kCodeExp) * scaled;
      ASSERT_TRUE(fits_bf16(product)) << s << " " << c;  // >= 2^-18: normal, exact
      EXPECT_EQ(std::ldexp(product, w4::kEpilogueExp), code * scale) << s << " " << c;
    }
  }
}

}  // namespace
}  // namespace moeforge
