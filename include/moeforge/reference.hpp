// moeforge/reference.hpp — the CPU reference layer: the oracle for every test.
//
// Double precision on the *dequantized* weights (QuantMatrix::dequantize_rows),
// so quantization error is never blamed on a kernel. Deterministic and
// parallel: results do not depend on the number of threads. Only the experts
// the batch touches are ever materialized.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "moeforge/spec.hpp"
#include "moeforge/tensor.hpp"
#include "moeforge/weights.hpp"

namespace moeforge::reference {

// Selected experts per token, [T, k] row-major, ordered by descending selection
// score (ties: lowest expert id first).
struct Routing {
  int64_t tokens = 0;
  int topk = 0;
  std::vector<int32_t> ids;
  std::vector<double> weights;  // final combine weights (renormalized, scaled)
};

// logits: [T, E] row-major f32. correction_bias: [E] or empty.
Routing route(const MoeSpec& spec, const float* logits, int64_t tokens,
              const std::vector<float>& correction_bias);

// The gated activation of one (gate, up) pair.
double activate(const ActivationSpec& act, double gate, double up);

struct Options {
  int threads = 0;                    // 0: every core
  std::vector<int64_t> rows;          // tokens to compute (sorted, unique); empty: all
  std::function<void(int64_t done, int64_t total)> progress;  // called from one thread
};

// Options::rows for checking a batch of `tokens` on at most `want` rows: all of them (empty)
// when tokens <= want, else `want` rows spread evenly, the first and the last included.
std::vector<int64_t> even_rows(int64_t tokens, int64_t want);

// ||out - ref||^2 and ||ref||^2 over `rows` (empty: every row) of a [T, hidden] bf16 output (raw
// bits) against forward()'s result for the same rows. Sums of several calls add up (operator+=).
struct ErrorSums {
  double err_sq = 0, ref_sq = 0;
  bool nan = false;  // a compared output element is NaN
  ErrorSums& operator+=(const ErrorSums& o);
  double rel_err() const;  // sqrt(err_sq / ref_sq); NaN if nan
};
ErrorSums error_sums(const std::vector<uint16_t>& out_bf16, const std::vector<double>& ref, int64_t hidden,
                     const std::vector<int64_t>& rows);
// ||out - ref|| / ||ref||: error_sums(...).rel_err().
double rel_err(const std::vector<uint16_t>& out_bf16, const std::vector<double>& ref, int64_t hidden,
               const std::vector<int64_t>& rows);

// The bound on ||out - ref|| / ||ref|| a backend's output must meet (DESIGN.md, "Testing
// rules"): 1e-2 with bf16 / fp16 activations (bf16 output and bf16 h between the GEMMs), 3e-2
// with FP8 activations (the fp8 bound: h held in bf16 before its 1 x 128 quantization moves
// e4m3 roundings across their ties, ~1.1e-2 on random data by itself).
double error_bound(const MoeSpec& spec);

// out[T, H] in double (rows not in options.rows are left 0).
// x: [T, H] bf16, f16 or f32 on the CPU; router_logits: [T, E] f32 or bf16 on the CPU.
std::vector<double> forward(const MoeSpec& spec, const WeightSource& weights, const TensorView& x,
                            const TensorView& router_logits, const Options& options = {});
// Same with routing given: topk_ids [T, k] i32/i64, topk_weights [T, k] f32 (used as given).
std::vector<double> forward_topk(const MoeSpec& spec, const WeightSource& weights, const TensorView& x,
                                 const TensorView& topk_ids, const TensorView& topk_weights,
                                 const Options& options = {});
// The routed experts + shared experts for a given routing.
std::vector<double> forward_routed(const MoeSpec& spec, const WeightSource& weights, const TensorView& x,
                                   const Routing& routing, const Options& options = {});

}  // namespace moeforge::reference
