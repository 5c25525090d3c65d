// The sm90 planner: which GEMMs run a call of T tokens. The wide (TMA/wgmma, 128-row token
// tile) GEMMs win once experts have enough rows to fill their tiles; below that the decode
// GEMMs (weights on the M side, 16-64-token tiles) stream each expert's weights once with
// little wasted work. The crossover is measured, not guessed: `moeforge bench --backend sm90`
// with MOEFORGE_SM90_CROSSOVER=0 (wide everywhere) and =1e9 (decode everywhere), per T; the
// table below holds the result and names the records it came from.
#include <algorithm>
#include <limits>

#include "backends/sm90/sm90.hpp"
#include "runtime/settings.hpp"

namespace moeforge::sm90 {

namespace {
// Average routed rows per expert (T * k / E) from which the wide GEMMs run, bf16 weights.
// Measured on the H200 at 85da7ee, Mistral-Small-4, both forced in one run
// (bench/results/2026-11-30-85da7ee-bench-mistral-small-4-sm90-{decode,wide}-bf16.json), us:
//   T (rows/expert)   1 (0.03)  8 (0.25)  32 (1)   128 (4)   512 (16)
//   decode             117.5     418.8     995.7   1849.9    2189.7
//   wide               119.2     464.5    1083.4   1733.7    1773.1
// so the decode GEMMs won up to 1 row per expert and lost from 4. Once their work units were
// single token chunks (dd7a757: the shared expert's T / BT chunks no longer pile onto a few
// SMs), both forced again (...-dd7a757-bench-mistral-small-4-sm90-{decode,wide}-bf16-T*.json), us:
//   T (rows/expert)   128 (4)   256 (8)   512 (16)   1024 (32)   2048 (64)
//   decode            1565.2    1641.5    1698.0     1804.1      2223.9
//   wide              1703.8    1729.2    1758.0     1832.9      1954.0
// The decode GEMMs win up to 32 rows per expert and lose at 64: 45, their geometric middle.
// (At 4e57f60 the wide GEMMs had beaten the portable ones at every T.)
constexpr double kCrossoverRowsBf16 = 45.0;
// NVFP4 (W4A16 dequantizing GEMMs), measured on the H200 at 1092df2, Mistral-Small-4, both
// forced in one run (bench/results/2026-11-30-1092df2-bench-mistral-small-4-sm90-{decode,wide}-nvfp4.json), us:
//   T (rows/expert)   128 (4)   512 (16)   2048 (64)   8192 (256)   36308 (1135)
//   decode             827.1     1236.0     2436.5      8216.9       36048.4
//   wide              2262.8     2280.6     2558.0      6239.4       22541.4
// and again after the decode GEMMs' register split (d35515f), at f3d5173
// (...-f3d5173-bench-mistral-small-4-sm90-{decode,wide}-nvfp4.json), us:
//   T (rows/expert)   2048 (64)   4096 (128)   8192 (256)
//   decode             2199.9       4033.9       7614.2
//   wide               2551.4       3874.8       6285.4
// and with single-chunk work units (dd7a757, ...-dd7a757-bench-mistral-small-4-sm90-{decode,wide}-nvfp4-T*.json):
//   T (rows/expert)   2048 (64)   4096 (128)   8192 (256)   16384 (512)   36308 (1135)
//   decode             1474.3       2598.8       4741.2       9955.9        21984.8
//   wide               2454.8       3716.3       6021.2      10971.7        21835.7
// The decode GEMMs win up to 512 rows per expert and tie at 1135 (+0.7 %): 760, the geometric
// middle. With the 128-token decode tile (below), at 989665d
// (...-989665d-bench-mistral-small-4-sm90-{decode,wide}-nvfp4*.json):
//   T (rows/expert)   2048 (64)   8192 (256)   36308 (1135)
//   decode, BT = 128   1545.8       4100.9      17568.3
//   wide               2575.6       6386.0      23387.7
// and at twice that size, b0a9f1d (...-b0a9f1d-bench-mistral-small-4-sm90-{decode,wide}-nvfp4-T72616.json):
//   T (rows/expert)   72616 (2270)
//   decode, BT = 128    36298.1
//   wide                45616.2
// The decode GEMMs win at every T measured (by 40, 36, 25, 20 %): the planner never picks the
// wide W4A16 GEMMs (they run when forced, MOEFORGE_SM90_CROSSOVER).
constexpr double kCrossoverRowsW4 = std::numeric_limits<double>::infinity();
// FP8 (W8A16 dequantizing GEMMs), measured on the H200 at ce1ce94, Mistral-Small-4, both
// forced in one run (bench/results/2026-11-30-ce1ce94-bench-mistral-small-4-sm90-{decode,wide}-fp8.json), us:
//   T (rows/expert)   128 (4)   512 (16)   2048 (64)   8192 (256)
//   decode            1110.8     1577.3     3125.4     10720.6
//   wide              1645.3     1661.8     1914.2      5458.5
// and with single-chunk work units (dd7a757, ...-dd7a757-bench-mistral-small-4-sm90-{decode,wide}-fp8-T*.json;
// T = 2048 and 4096 from the call before, the same build):
//   T (rows/expert)   1024 (32)   1536 (48)   2048 (64)   4096 (128)
//   decode             1295.1      1442.0      1946.8      3323.0
//   wide               1759.3      1793.1      1897.4      2992.0
// The decode GEMMs win up to 48 rows per expert and lose at 64: 55, their geometric middle.
// With the 128-token decode tile (below), at 989665d (...-989665d-bench-...-sm90-{decode,wide}-fp8*.json):
//   T (rows/expert)   2048 (64)   8192 (256)   36308 (1135)
//   decode, BT = 128   1637.9       4780.8      19710.9
//   wide               1789.9       4959.6      20159.9
// and at b0a9f1d (...-b0a9f1d-bench-mistral-small-4-sm90-{decode,wide}-fp8-T72616.json):
//   T (rows/expert)   72616 (2270)
//   decode, BT = 128    40791.6
//   wide                40290.8
// The decode GEMMs win up to 1135 rows per expert (by 8.5, 3.6, 2.2 %) and lose at 2270 (1.2 %):
// 1600, the geometric middle.
constexpr double kCrossoverRowsW8 = 1600.0;
// FP8 weights with FP8 activations (W8A8): the QGMMA GEMMs against the W8A16 decode GEMMs on
// x and h rounded through FP8 in place (two more launches), both forced in one run (H200,
// Mistral-Small-4, us), first at 52dd978 / 8619edf (2026-11-30-{52dd978,8619edf}-bench-...-fp8-afp8.json)
//   T (rows/expert)   1 (0.03)   8 (0.25)   32 (1)   128 (4)
//   QGMMA              107.6      281.1     650.6    1017.3
//   decode             102.8      275.0     666.8    1360.5
// then after the decode GEMMs' register split (d35515f), at f3d5173
// (2026-11-30-f3d5173-bench-mistral-small-4-sm90-{decode,wide}-fp8-afp8.json):
//   QGMMA                         275.0     644.5    1016.8
//   decode                        259.1     628.3    1041.4
// and with single-chunk work units (dd7a757, ...-dd7a757-bench-mistral-small-4-sm90-{decode,wide}-fp8-afp8-T64-T512.json):
//   T (rows/expert)   64 (2)   128 (4)   256 (8)   512 (16)
//   QGMMA             861.8    1012.4    1021.3    1047.5
//   decode            821.4     969.1    1046.6    1136.8
// Decode wins to 4 rows per expert and loses at 8: 5.7, their geometric middle.
// Since 28d0f25 the W8A8 decode GEMMs are QGMMA ones of their own (decode_gemm.cuh, A8: no
// round trips, no dequantization); forced, H200, Mistral-Small-4
// (2026-12-02-28d0f25-bench-mistral-small-4-sm90-decode-fp8-afp8.json), us:
//   T (rows/expert)   1 (0.03)   8 (0.25)   128 (4)   512 (16)   2048 (64, BT = 128)
//   decode QGMMA        74.8      230.9     871.6      969.9      1427.7
// against 05877a2's bars (another call; the planner's choice): W8A16 decode on rounded x and h
// 79.4 / 252.7 / 969.3 at T = 1 / 8 / 128, the wide QGMMA GEMMs 998.4 at 512, 1188.4 at 2048.
// Both timed in one run at 617ba87 (the wide GEMMs with two partial accumulator sets;
// 2026-12-02-617ba87-w8a8-crossover-mistral-small-4-sm90-{decode,wide}-fp8-afp8.json), us:
//   T (rows/expert)   128 (4)   256 (8)   512 (16)   1024 (32)   2048 (64)   4096 (128)
//   decode QGMMA       871.4     914.3     965.4     1066.2      1385.4      2213.2
//   wide QGMMA         965.3     970.6    1000.4     1048.6      1190.0      1774.8
// Decode wins up to 16 rows per expert and loses at 32 (by 1.7 %): 22.6, the geometric middle.
// Under concurrent load (`moeforge stress`, 8 threads x 8 streams, H200, b5cbb77) the QGMMA
// decode GEMMs gave outputs differing from the same batch run alone: 22 in 28794 calls with them
// forced, none with the wide GEMMs forced (bench/results/2026-12-02-b5cbb77-stress-*.json). The
// consumer released a stage before its loads of the token scales had completed (ptxas issued the
// arrive right after them); since d2c8c77 a proxy fence orders the two, and the same stress
// forced to them found none: 18632 calls at BT = 64 and 8558 in sequence at a6a8976, 17074 at
// every tile at df26bcf (main's decode kernels; bench/results/2026-12-03-*-stress-*-fp8-afp8-*.json).
// So 22.6 again.
constexpr double kCrossoverRowsW8A8 = 22.6;
// The 128-token decode tile (one CTA per SM, 64 accumulators a consumer thread) against the
// 64-token one (two CTAs per SM), both forced, H200, Mistral-Small-4, us: at 989665d
// (...-989665d-bench-mistral-small-4-sm90-decode-{nvfp4,fp8,bf16}-bt{64,128}.json) and, BT = 64
// at T = 1024, at df42e94 (...-df42e94-bench-mistral-small-4-sm90-{bf16,fp8,nvfp4}-bt64.json):
//   T (rows/expert)   1024 (32)   2048 (64)   8192 (256)
//   nvfp4 BT = 64       915.6      1365.0      4727.9
//   nvfp4 BT = 128     1365.6      1545.8      4100.9
//   fp8   BT = 64      1248.1      1839.3      6213.8
//   fp8   BT = 128     1437.4      1637.9      4780.8
//   bf16  BT = 64      1793.3
//   bf16  BT = 128     1848.6      2048.1   (the wide GEMMs: 1863 at T = 2048)
// and between those, at b0a9f1d (...-b0a9f1d-bench-mistral-small-4-sm90-{nvfp4,fp8}.json with the
// planner's 128, ...-b0a9f1d-bench-mistral-small-4-sm90-decode-{nvfp4,fp8}-bt64-T1536-T4096.json):
//   T (rows/expert)   1536 (48)   4096 (128)
//   nvfp4 BT = 64                  2381.7
//   nvfp4 BT = 128                 2340.1
//   fp8   BT = 64      1374.8
//   fp8   BT = 128     1549.5
// Half the dequantization per multiply pays once experts have enough rows to fill the tile;
// with one CTA per SM there is less latency hiding, which costs more at fewer rows. NVFP4:
// from 128 rows per expert (wins there by 2 %, loses at 64); FP8: 55, the geometric middle of
// 48 (loses) and 64 (wins); bf16 weights (no dequantization): never.
constexpr double kLargeTileRowsW4 = 128.0, kLargeTileRowsW8 = 55.0;
}  // namespace

double large_tile_rows(const MoeSpec& spec) {
  switch (codes(spec)) {
    case Codes::W4: return kLargeTileRowsW4;
    case Codes::W8:
    // W8A8 takes W8A16's threshold; it matters only with the crossover forced, since the QGMMA
    // decode stops below it (at 22.6 rows per expert, once it runs again). Consistent with it:
    // at 32 rows per expert the 128-token tile lost to the 64-token one, 1186.4 against 1066.2 us
    // (2026-12-02-617ba87-w8a8-decode-bt-...-bt128.json, ...-w8a8-crossover-...-decode-fp8-afp8.json).
    case Codes::W8A8: return kLargeTileRowsW8;
    default: return std::numeric_limits<double>::infinity();
  }
}

double crossover_rows(const MoeSpec& spec) {
  const double forced = rt::settings().sm90_crossover;
  if (forced >= 0) return forced;
  switch (codes(spec)) {
    case Codes::W8A8: return kCrossoverRowsW8A8;
    case Codes::W4: return kCrossoverRowsW4;
    case Codes::W8: return kCrossoverRowsW8;
    default: return kCrossoverRowsBf16;
  }
}

Plan plan(const MoeSpec& spec, int64_t tokens) {
  const double rows_per_expert = double(tokens) * spec.topk / double(spec.num_experts);
  Plan p;
  p.wide = rows_per_expert >= crossover_rows(spec);
  if (!p.wide) {
    if (rt::settings().sm90_decode_bt > 0) {  // forced, for measuring the choice
      p.bt = rt::settings().sm90_decode_bt;
      return p;
    }
    if (rows_per_expert >= large_tile_rows(spec)) {
      p.bt = 128;
      return p;
    }
    // Twice the average, so that few experts need a second pass over their weights.
    p.bt = 64;
    for (int bt : kDecodeTiles)
      if (bt <= 64 && 2.0 * rows_per_expert <= bt) {
        p.bt = bt;
        break;
      }
  }
  return p;
}

}  // namespace moeforge::sm90
