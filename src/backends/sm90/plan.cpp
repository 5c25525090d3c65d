// The sm90 planner: which GEMMs run a call of T tokens. The wide (TMA/wgmma, 128-row token
// tile) GEMMs win once experts have enough rows to fill their tiles; below that the decode
// GEMMs (weights on the M side, 16-64-token tiles) stream each expert's weights once with
// little wasted work. The crossover is measured, not guessed: `moeforge bench --backend sm90`
// with MOEFORGE_SM90_CROSSOVER=0 (wide everywhere) and =1e9 (decode everywhere), per T; the
// table below holds the result and names the records it came from.
#include <algorithm>

#include "backends/sm90/sm90.hpp"
#include "runtime/settings.hpp"

namespace moeforge::sm90 {

namespace {
// Average routed rows per expert (T * k / E) from which the wide GEMMs run, bf16 weights.
// History: at 4e57f60 the wide GEMMs beat the portable ones at every T on the H200
// (bench/results/2026-11-30-4e57f60-bench-mistral-small-4-sm90-wide-bf16.json: T = 1 137.9
// vs 178.6 us, T = 128 1784 vs 2655 us). The decode GEMMs are not measured yet: until they
// are, the table keeps the measured winner (wide everywhere) and the decode kernels run only
// where MOEFORGE_SM90_CROSSOVER asks for them (tests, bench).
constexpr double kCrossoverRowsBf16 = 0.0;
}  // namespace

double crossover_rows(const MoeSpec& spec) {
  const double forced = rt::settings().sm90_crossover;
  return forced >= 0 ? forced : kCrossoverRowsBf16;
}

Plan plan(const MoeSpec& spec, int64_t tokens) {
  const double rows_per_expert = double(tokens) * spec.topk / double(spec.num_experts);
  Plan p;
  p.wide = rows_per_expert >= crossover_rows(spec);
  if (!p.wide) {
    // Twice the average, so that few experts need a second pass over their weights.
    p.bt = 64;
    for (int bt : kDecodeTiles)
      if (2.0 * rows_per_expert <= bt) {
        p.bt = bt;
        break;
      }
  }
  return p;
}

}  // namespace moeforge::sm90
