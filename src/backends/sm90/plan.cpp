// The sm90 planner: which GEMMs run a call of T tokens. The wide (TMA/wgmma, 128-row tile)
// GEMMs win once experts have enough rows to fill their tiles; below that the portable
// 16-row-tile GEMMs waste less work on padding. The crossover is measured, not guessed:
// `moeforge bench --backend sm90` with MOEFORGE_SM90_CROSSOVER=0 (wide everywhere) against
// the default, per T; the table below holds the result and names the record it came from.
#include <algorithm>

#include "backends/sm90/sm90.hpp"
#include "runtime/settings.hpp"

namespace moeforge::sm90 {

namespace {
// Average routed rows per expert (T * k / E) from which the wide GEMMs run, bf16 weights.
// Measured on the H200 at 4e57f60 (bench/results/2026-11-30-4e57f60-bench-mistral-small-4-
// sm90-wide-bf16.json against ...-sm90-bf16.json, which ran the portable GEMMs below 48 rows):
// the wide GEMMs were faster at every T, T = 1 included (137.9 vs 178.6 us; T = 128: 1784 vs
// 2655 us), so there is no crossover on that device: 0.
constexpr double kCrossoverRowsBf16 = 0.0;
}  // namespace

double crossover_rows(const MoeSpec& spec) {
  const double forced = rt::settings().sm90_crossover;
  return forced >= 0 ? forced : kCrossoverRowsBf16;
}

bool use_wide(const MoeSpec& spec, int64_t tokens) {
  const double rows_per_expert = double(tokens) * spec.topk / double(spec.num_experts);
  return rows_per_expert >= crossover_rows(spec);
}

}  // namespace moeforge::sm90
