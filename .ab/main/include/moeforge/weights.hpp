// moeforge/weights.hpp — where a layer's weights come from.
//
// A WeightSource hands out one expert at a time, so that neither the CPU
// reference nor the GPU upload ever needs the whole layer in a wide format in
// host memory (a Mistral-Small-4 layer holds 3.2 billion expert parameters).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "moeforge/spec.hpp"

namespace moeforge {

// One weight matrix [rows, cols] (nn.Linear: rows = out features) in a storage format.
struct QuantMatrix {
  WeightFormat format = WeightFormat::BF16;
  int64_t rows = 0;
  int64_t cols = 0;
  // BF16/FP16: 2 bytes per element. FP8_Block128: 1 byte. NVFP4/MXFP4: packed, cols/2 bytes a row.
  std::vector<uint8_t> data;
  // FP8_Block128: f32 [ceil(rows/128), ceil(cols/128)]; NVFP4: E4M3 [rows, cols/16];
  // MXFP4: UE8M0 [rows, cols/32]; BF16/FP16: empty.
  std::vector<uint8_t> scales;
  float global_scale = 1.0f;  // NVFP4 only

  // Quantizes float values (row-major [rows, cols]) into `format`.
  static QuantMatrix quantize(WeightFormat format, int64_t rows, int64_t cols, const float* values);
  // The exact values the kernels multiply by, rows [r0, r1), written row-major to out.
  void dequantize_rows(int64_t r0, int64_t r1, double* out) const;
  // Throws InvalidArgument(name, ...) unless sizes agree with format, rows and cols.
  void validate(const char* name) const;
};

struct ExpertWeights {
  QuantMatrix w13;          // [2I, H]: gate rows then up rows
  QuantMatrix w2;           // [H, I]
  std::vector<float> b13;   // [2I] when spec.expert_bias, else empty
  std::vector<float> b2;    // [H]  when spec.expert_bias, else empty
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const MoeSpec& spec() const = 0;
  // Routed expert e in [0, E). Must be safe to call from several threads at once.
  virtual ExpertWeights expert(int64_t e) const = 0;
  // Shared expert s in [0, num_shared_experts) (I = spec.shared_intermediate, no biases).
  virtual ExpertWeights shared_expert(int s) const = 0;
  // e_score_correction_bias [E] for SigmoidBiasGrouped routing; empty otherwise.
  virtual std::vector<float> correction_bias() const = 0;
};

// Deterministic weights made on demand from (spec, seed): expert e's values
// depend only on (seed, e, which matrix, index), never on call order or threads.
// Values are scaled like a trained layer (std ~ 1/sqrt(fan_in)), then stored in
// spec.weight_format.
std::unique_ptr<WeightSource> make_synthetic_weights(const MoeSpec& spec, uint64_t seed);

// Weights held in memory (tests, checkpoints): every expert given up front.
class InMemoryWeights : public WeightSource {
 public:
  InMemoryWeights(MoeSpec spec, std::vector<ExpertWeights> experts, std::vector<ExpertWeights> shared,
                  std::vector<float> correction_bias);
  const MoeSpec& spec() const override { return spec_; }
  ExpertWeights expert(int64_t e) const override;
  ExpertWeights shared_expert(int s) const override;
  std::vector<float> correction_bias() const override { return bias_; }

 private:
  MoeSpec spec_;
  std::vector<ExpertWeights> experts_, shared_;
  std::vector<float> bias_;
};

}  // namespace moeforge
