// Synthetic weights made on demand, and weights held in memory (weights.hpp).
//
// Synthetic values come from a counter-based generator: element i of matrix m of
// expert e is a pure function of (seed, domain, e, m, i) — a splitmix64 finalizer
// applied to a per-matrix key plus i times the golden-ratio increment (i.e. position
// i of a splitmix64 stream). So any expert can be made at any time, in any order, on
// any number of threads, and always comes out the same: the CPU reference, the GPU
// upload and a test process years later all see identical layers.
//
// Distribution: Irwin-Hall of four 16-bit uniforms from one 64-bit hash, centred and
// scaled to unit variance (a bounded, bell-shaped approximation of a normal, |z| <
// 3.47), then multiplied by the target std: 1/sqrt(fan_in) for W13 (fan_in = H) and W2
// (fan_in = I), like a trained layer; 0.02 for expert biases; 0.01 for the routing
// correction bias.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "moeforge/errors.hpp"
#include "core/parallel.hpp"
#include "core/synthetic_internal.hpp"
#include "moeforge/weights.hpp"

namespace moeforge {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

inline uint64_t mix64(uint64_t z) {  // the splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Which matrix a stream belongs to; part of the key so streams never overlap.
enum class Mat : uint64_t { W13 = 1, W2 = 2, B13 = 3, B2 = 4, CorrectionBias = 5 };
enum class Domain : uint64_t { Routed = 1, Shared = 2, Layer = 3 };

uint64_t stream_key(uint64_t seed, Domain d, uint64_t index, Mat m) {
  uint64_t k = mix64(seed + kGamma);
  k = mix64(k ^ (uint64_t(d) * 0xD1B54A32D192ED03ull));
  k = mix64(k ^ (index + 1) * 0xAEF17502108EF2D9ull);
  return mix64(k ^ (uint64_t(m) * 0x8CB92BA72F3D8DD7ull));
}

// Approximately N(0, 1) times `scale`: element i of stream `key`.
inline float scaled_normal(uint64_t key, uint64_t i, float scale) {
  const uint64_t h = mix64(key + (i + 1) * kGamma);
  const int32_t s = int32_t(h & 0xFFFF) + int32_t((h >> 16) & 0xFFFF) + int32_t((h >> 32) & 0xFFFF) +
                    int32_t(h >> 48);
  // Each (b + 0.5) / 65536 is U(0,1) with variance ~1/12; the sum of four has mean 2 and
  // variance 1/3, hence the sqrt(3). (int32 -> float converts faster than uint32.)
  return float(s - 131070) * scale;
}
constexpr float kUnit = 1.7320508075688772f / 65536.0f;

// Fills out[0, n) with std * N(0,1) element i of stream key, split over threads for large n. Each
// element depends only on its index, so the split cannot change the values.
void fill(std::vector<float>& out, int64_t n, uint64_t key, double stddev) {
  out.resize(size_t(n));
  const float scale = float(stddev) * kUnit;
  parallel_ranges(n, int64_t(1) << 20, [&](int64_t b, int64_t e) {
    float* o = out.data();
    for (int64_t i = b; i < e; ++i) o[i] = scaled_normal(key, uint64_t(i), scale);
  });
}

}  // namespace

// Quantizes with several threads where the format allows it: BF16, FP16 and MXFP4 rows
// are independent, FP8_Block128 rows are independent in whole 128-row blocks, so the
// matrix is cut into row chunks, each quantized by QuantMatrix::quantize, and the
// row-major data and scales concatenated — the same bytes as one call (tested).
// NVFP4's global scale depends on the whole matrix, so it is quantized in one call.
QuantMatrix quantize_in_chunks(WeightFormat format, int64_t rows, int64_t cols, const float* values, int threads) {
  const int64_t grain = format == WeightFormat::FP8_Block128 ? 128 : 1;
  int64_t nt = std::max<int64_t>(1, threads);
  nt = std::min<int64_t>(nt, std::max<int64_t>(1, rows * cols / (int64_t(1) << 19)));
  if (format == WeightFormat::NVFP4 || nt == 1 || rows < 2 * grain)
    return QuantMatrix::quantize(format, rows, cols, values);
  int64_t per = (rows + nt - 1) / nt;
  per = (per + grain - 1) / grain * grain;
  std::vector<QuantMatrix> parts(size_t((rows + per - 1) / per));
  std::vector<std::thread> pool;
  auto work = [&](size_t i) {
    const int64_t r0 = int64_t(i) * per, r1 = std::min(rows, r0 + per);
    parts[i] = QuantMatrix::quantize(format, r1 - r0, cols, values + r0 * cols);
  };
  for (size_t i = 1; i < parts.size(); ++i) pool.emplace_back(work, i);
  work(0);
  for (auto& t : pool) t.join();
  QuantMatrix out = std::move(parts[0]);
  out.rows = rows;
  for (size_t i = 1; i < parts.size(); ++i) {
    out.data.insert(out.data.end(), parts[i].data.begin(), parts[i].data.end());
    out.scales.insert(out.scales.end(), parts[i].scales.begin(), parts[i].scales.end());
  }
  return out;
}

namespace {

int hw_threads() { return int(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 16u)); }

class SyntheticWeights final : public WeightSource {
 public:
  SyntheticWeights(MoeSpec spec, uint64_t seed) : spec_(std::move(spec)), seed_(seed) { spec_.validate(); }
  const MoeSpec& spec() const override { return spec_; }

  ExpertWeights expert(int64_t e) const override {
    if (e < 0 || e >= spec_.num_experts)
      throw InvalidArgument("expert", fmt::format("expected an id in [0, {}), got {}", spec_.num_experts, e));
    return make(Domain::Routed, uint64_t(e), spec_.intermediate, spec_.expert_bias);
  }

  ExpertWeights shared_expert(int s) const override {
    if (s < 0 || s >= spec_.num_shared_experts)
      throw InvalidArgument("shared_expert",
                            fmt::format("expected an id in [0, {}), got {}", spec_.num_shared_experts, s));
    return make(Domain::Shared, uint64_t(s), spec_.shared_intermediate, false);
  }

  std::vector<float> correction_bias() const override {
    if (spec_.routing.kind != RoutingKind::SigmoidBiasGrouped) return {};
    std::vector<float> b;
    fill(b, spec_.num_experts, stream_key(seed_, Domain::Layer, 0, Mat::CorrectionBias), 0.01);
    return b;
  }

 private:
  ExpertWeights make(Domain d, uint64_t index, int64_t I, bool bias) const {
    const int64_t H = spec_.hidden;
    ExpertWeights w;
    std::vector<float> v;
    fill(v, 2 * I * H, stream_key(seed_, d, index, Mat::W13), 1.0 / std::sqrt(double(H)));
    w.w13 = quantize_in_chunks(spec_.weight_format, 2 * I, H, v.data(), hw_threads());
    fill(v, H * I, stream_key(seed_, d, index, Mat::W2), 1.0 / std::sqrt(double(I)));
    w.w2 = quantize_in_chunks(spec_.weight_format, H, I, v.data(), hw_threads());
    if (bias) {
      fill(w.b13, 2 * I, stream_key(seed_, d, index, Mat::B13), 0.02);
      fill(w.b2, H, stream_key(seed_, d, index, Mat::B2), 0.02);
    }
    return w;
  }

  MoeSpec spec_;
  uint64_t seed_;
};

void check_expert(const MoeSpec& spec, const ExpertWeights& w, const std::string& name, int64_t I, bool bias) {
  const int64_t H = spec.hidden;
  if (w.w13.rows != 2 * I || w.w13.cols != H)
    throw InvalidArgument(name + ".w13", fmt::format("expected [{}, {}], got [{}, {}]", 2 * I, H, w.w13.rows,
                                                     w.w13.cols));
  if (w.w2.rows != H || w.w2.cols != I)
    throw InvalidArgument(name + ".w2",
                          fmt::format("expected [{}, {}], got [{}, {}]", H, I, w.w2.rows, w.w2.cols));
  if (w.w13.format != spec.weight_format || w.w2.format != spec.weight_format)
    throw InvalidArgument(name, fmt::format("expected {} weights, got w13 {} and w2 {}",
                                            to_string(spec.weight_format), to_string(w.w13.format),
                                            to_string(w.w2.format)));
  w.w13.validate((name + ".w13").c_str());
  w.w2.validate((name + ".w2").c_str());
  const size_t b13 = bias ? size_t(2 * I) : 0, b2 = bias ? size_t(H) : 0;
  if (w.b13.size() != b13)
    throw InvalidArgument(name + ".b13", fmt::format("expected {} values, got {}", b13, w.b13.size()));
  if (w.b2.size() != b2)
    throw InvalidArgument(name + ".b2", fmt::format("expected {} values, got {}", b2, w.b2.size()));
}

}  // namespace

std::unique_ptr<WeightSource> make_synthetic_weights(const MoeSpec& spec, uint64_t seed) {
  return std::make_unique<SyntheticWeights>(spec, seed);
}

InMemoryWeights::InMemoryWeights(MoeSpec spec, std::vector<ExpertWeights> experts, std::vector<ExpertWeights> shared,
                                 std::vector<float> correction_bias)
    : spec_(std::move(spec)), experts_(std::move(experts)), shared_(std::move(shared)), bias_(std::move(correction_bias)) {
  spec_.validate();
  if (int64_t(experts_.size()) != spec_.num_experts)
    throw InvalidArgument("experts", fmt::format("expected {} experts, got {}", spec_.num_experts, experts_.size()));
  if (int64_t(shared_.size()) != spec_.num_shared_experts)
    throw InvalidArgument("shared", fmt::format("expected {} shared experts, got {}", spec_.num_shared_experts,
                                                shared_.size()));
  if (!bias_.empty() && int64_t(bias_.size()) != spec_.num_experts)
    throw InvalidArgument("correction_bias",
                          fmt::format("expected {} values or none, got {}", spec_.num_experts, bias_.size()));
  for (size_t e = 0; e < experts_.size(); ++e)
    check_expert(spec_, experts_[e], fmt::format("experts[{}]", e), spec_.intermediate, spec_.expert_bias);
  for (size_t s = 0; s < shared_.size(); ++s)
    check_expert(spec_, shared_[s], fmt::format("shared[{}]", s), spec_.shared_intermediate, false);
}

ExpertWeights InMemoryWeights::expert(int64_t e) const {
  if (e < 0 || e >= int64_t(experts_.size()))
    throw InvalidArgument("expert", fmt::format("expected an id in [0, {}), got {}", experts_.size(), e));
  return experts_[size_t(e)];
}

ExpertWeights InMemoryWeights::shared_expert(int s) const {
  if (s < 0 || s >= int(shared_.size()))
    throw InvalidArgument("shared_expert", fmt::format("expected an id in [0, {}), got {}", shared_.size(), s));
  return shared_[size_t(s)];
}

}  // namespace moeforge
