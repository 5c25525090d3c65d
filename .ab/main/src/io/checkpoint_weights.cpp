// CheckpointWeights: one MoE layer of a Hugging Face checkpoint as a WeightSource.
// Layouts and formats: include/moeforge/checkpoint.hpp; config mapping: io/hf_config.hpp.
#include <fmt/format.h>

#include <cstdio>
#include <set>

#include "io/checkpoint_dir.hpp"
#include "io/hf_config.hpp"
#include "io/native_matrix.hpp"
#include "moeforge/checkpoint.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"

namespace moeforge {

using io::NativeMatrix;

struct CheckpointWeights::Impl {
  std::unique_ptr<io::CheckpointDir> dir;
  MoeSpec spec;
  int layer = 0;
  std::string module;              // "model.layers.0.mlp."
  bool fused = false;              // gpt-oss experts.gate_up_proj / down_proj
  std::string names[3];            // per-expert projection names: gate, up, down
  std::string shared;              // "...mlp.shared_experts." or ""
  bool fallback = false;
  std::vector<float> router_w, router_b, corr_bias, b13, b2;  // b13 [E, 2I] as stored (interleaved), b2 [E, H]
  std::string description;
  std::vector<std::string> warnings;

  // Expert e (or the shared expert for e < 0), part 0 gate, 1 up, 2 down.
  NativeMatrix load(int64_t e, int part, bool scales_only) const {
    const int64_t H = spec.hidden;
    if (e < 0) {
      const int64_t I = spec.shared_intermediate;
      return io::load_linear(*dir, shared + names[part], part < 2 ? I : H, part < 2 ? H : I, scales_only);
    }
    const int64_t I = spec.intermediate;
    if (fused) return io::load_fused(*dir, module + "experts.", spec.num_experts, e, part, H, I, scales_only);
    return io::load_linear(*dir, fmt::format("{}experts.{}.{}", module, e, names[part]), part < 2 ? I : H,
                           part < 2 ? H : I, scales_only);
  }

  // "" if expert e converts exactly to `target`, else why not.
  std::string problem(int64_t e, WeightFormat target) const {
    const NativeMatrix g = load(e, 0, true), u = load(e, 1, true), d = load(e, 2, true);
    NativeMatrix w13;
    std::string why;
    if (!io::stack(g, u, &w13, &why)) return why;
    if (std::string p = io::exact_problem(w13, target); !p.empty()) return "w13: " + p;
    if (std::string p = io::exact_problem(d, target); !p.empty()) return "w2: " + p;
    return "";
  }

  ExpertWeights make(int64_t e) const {
    const NativeMatrix g = load(e, 0, false), u = load(e, 1, false), d = load(e, 2, false);
    ExpertWeights w;
    if (fallback) {
      w.w13 = io::concat_rows(io::to_bf16(g), io::to_bf16(u));
      w.w2 = io::to_bf16(d);
    } else {
      NativeMatrix w13;
      std::string why;
      if (!io::stack(g, u, &w13, &why)) throw InternalError("checkpoint: planned exact layer cannot stack: " + why);
      w.w13 = io::to_quant(w13, spec.weight_format);
      w.w2 = io::to_quant(d, spec.weight_format);
    }
    if (e >= 0 && spec.expert_bias) {
      const int64_t I = spec.intermediate, H = spec.hidden;
      w.b13.resize(size_t(2 * I));
      for (int64_t j = 0; j < I; ++j) {  // interleaved as stored: gate 2j, up 2j + 1
        w.b13[size_t(j)] = b13[size_t(e * 2 * I + 2 * j)];
        w.b13[size_t(I + j)] = b13[size_t(e * 2 * I + 2 * j + 1)];
      }
      w.b2.assign(b2.begin() + e * H, b2.begin() + (e + 1) * H);
    }
    return w;
  }
};

namespace {

// Finds "<prefix>layers.{L}.mlp." (or block_sparse_moe.) holding routed experts.
std::string find_module(const io::CheckpointDir& dir, int layer) {
  const std::string key = fmt::format("layers.{}.", layer);
  std::set<std::string> modules;
  bool layer_seen = false;
  int64_t max_layer = -1;
  for (const std::string& n : dir.names()) {
    for (size_t pos = n.find("layers."); pos != std::string::npos; pos = n.find("layers.", pos + 1)) {
      if (pos != 0 && n[pos - 1] != '.') continue;
      size_t end = pos + 7;
      int64_t v = 0;
      bool digits = false;
      while (end < n.size() && std::isdigit(static_cast<unsigned char>(n[end]))) {
        v = v * 10 + (n[end++] - '0');
        digits = true;
        if (v > 1'000'000) break;
      }
      if (!digits || end >= n.size() || n[end] != '.') continue;
      max_layer = std::max(max_layer, v);
      if (n.compare(pos, key.size(), key) != 0) continue;
      layer_seen = true;
      const std::string rest = n.substr(pos + key.size());
      for (const char* m : {"mlp.", "block_sparse_moe."})
        if (rest.rfind(std::string(m) + "experts.", 0) == 0) modules.insert(n.substr(0, pos + key.size()) + m);
    }
  }
  if (modules.size() > 1)
    throw IoError(fmt::format("{}: layer {} is ambiguous: experts under {}", dir.dir(), layer, fmt::join(modules, ", ")));
  if (modules.empty()) {
    if (layer_seen) throw IoError(fmt::format("{}: layer {} has no routed experts (a dense layer?)", dir.dir(), layer));
    throw IoError(fmt::format("{}: no tensors for layer {} (the checkpoint's layers: 0..{})", dir.dir(), layer, max_layer));
  }
  return *modules.begin();
}

bool has_linear(const io::CheckpointDir& dir, const std::string& base) {
  return dir.has(base + ".weight") || dir.has(base + ".weight_packed");
}

}  // namespace

CheckpointWeights::CheckpointWeights(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointWeights::~CheckpointWeights() = default;

std::unique_ptr<CheckpointWeights> CheckpointWeights::open(const std::string& path, int layer,
                                                           const CheckpointOptions& options) {
  auto im = std::make_unique<Impl>();
  Impl& m = *im;
  auto warn = [&](const std::string& w) {
    m.warnings.push_back(w);
    if (options.warn) options.warn(w);
    else std::fprintf(stderr, "moeforge: warning: %s\n", w.c_str());
  };
  if (layer < 0) throw InvalidArgument("layer", fmt::format("must be >= 0, got {}", layer));
  m.dir = std::make_unique<io::CheckpointDir>(path);
  m.layer = layer;
  const std::string cfg_path = path + "/config.json";
  io::ConfigSpec cs = io::spec_from_config(m.dir->config(), cfg_path);
  m.spec = cs.spec;
  for (const auto& n : cs.notes) warn(cfg_path + ": " + n);
  m.module = find_module(*m.dir, layer);
  const std::string ex = m.module + "experts.";

  // Expert naming scheme.
  std::string scheme;
  if (has_linear(*m.dir, ex + "0.gate_proj")) {
    m.names[0] = "gate_proj", m.names[1] = "up_proj", m.names[2] = "down_proj";
    scheme = "per-expert gate/up/down";
  } else if (has_linear(*m.dir, ex + "0.w1")) {
    m.names[0] = "w1", m.names[1] = "w3", m.names[2] = "w2";
    scheme = "per-expert w1/w3/w2";
  } else if (m.dir->has(ex + "gate_up_proj") || m.dir->has(ex + "gate_up_proj_blocks")) {
    if (cs.model_type != "gpt_oss")
      throw Unsupported(fmt::format("{}: fused experts ({}gate_up_proj) are only understood for model_type gpt_oss "
                                    "(its [E, H, 2I] interleaved layout), got model_type '{}'",
                                    path, ex, cs.model_type));
    m.fused = true;
    m.names[0] = "gate_proj", m.names[1] = "up_proj", m.names[2] = "down_proj";  // shared experts, if any
    scheme = "fused gpt-oss gate_up/down";
  } else {
    throw IoError(fmt::format("{}: layer {}: no expert weights found under '{}' (expected {}0.gate_proj.weight, "
                              "{}0.w1.weight or {}gate_up_proj)", path, layer, ex, ex, ex, ex));
  }
  if (!m.fused)
    for (int64_t e = 0; e < m.spec.num_experts; ++e)
      if (!has_linear(*m.dir, fmt::format("{}{}.{}", ex, e, m.names[0])))
        throw IoError(fmt::format("{}: config.json says {} experts, but '{}{}.{}.weight' is not in the checkpoint", path,
                                  m.spec.num_experts, ex, e, m.names[0]));

  // Shared experts.
  for (const char* s : {"shared_experts.", "shared_expert."})
    if (has_linear(*m.dir, m.module + s + "gate_proj")) m.shared = m.module + s;
  if (!m.shared.empty()) {
    if (m.dir->has(m.module + "shared_expert_gate.weight"))
      throw Unsupported(fmt::format("{}: {}shared_expert_gate (a sigmoid gate on the shared expert, Qwen2-MoE) is not "
                                    "expressible in MoeSpec", path, m.module));
    const std::string g = m.shared + "gate_proj";
    const io::TensorRef t = m.dir->get(m.dir->has(g + ".weight_packed") ? g + ".weight_packed" : g + ".weight");
    if (t.tensor->shape.size() != 2) throw IoError(fmt::format("{}: expected a matrix, got shape {}", t.where(), t.tensor->shape_str()));
    m.spec.num_shared_experts = 1;
    m.spec.shared_intermediate = t.tensor->shape[0];
    if (cs.expected_shared_intermediate > 0 && cs.expected_shared_intermediate != m.spec.shared_intermediate)
      throw IoError(fmt::format("{}: {} rows, but config.json implies a shared intermediate size of {}", t.where(),
                                m.spec.shared_intermediate, cs.expected_shared_intermediate));
  }

  // Router and correction bias.
  const int64_t E = m.spec.num_experts, H = m.spec.hidden, I = m.spec.intermediate;
  for (const char* r : {"gate", "router"})
    if (m.dir->has(m.module + r + ".weight")) {
      m.router_w = io::read_floats(m.dir->get(m.module + r + ".weight"), {E, H});
      if (m.dir->has(m.module + r + ".bias")) m.router_b = io::read_floats(m.dir->get(m.module + r + ".bias"), {E});
      break;
    }
  if (m.router_w.empty()) warn(fmt::format("{}: no router weight ({}gate.weight or {}router.weight)", path, m.module, m.module));
  if (m.dir->has(m.module + "gate.e_score_correction_bias")) {
    const auto b = io::read_floats(m.dir->get(m.module + "gate.e_score_correction_bias"), {E});
    if (m.spec.routing.kind == RoutingKind::SigmoidBiasGrouped) m.corr_bias = b;
    else warn("e_score_correction_bias ignored: the routing is not sigmoid (scoring_func)");
  } else if (m.spec.routing.kind == RoutingKind::SigmoidBiasGrouped) {
    warn(fmt::format("{}: no {}gate.e_score_correction_bias: sigmoid routing without correction", path, m.module));
  }
  if (m.spec.expert_bias) {
    m.b13 = io::read_floats(m.dir->get(ex + "gate_up_proj_bias"), {E, 2 * I});
    m.b2 = io::read_floats(m.dir->get(ex + "down_proj_bias"), {E, H});
  }

  // The layer's format: expert 0's gate; every matrix must convert to it exactly, or fall back.
  const NativeMatrix first = m.load(0, 0, true);
  m.spec.weight_format = io::native_format(first);
  std::string problem;
  int64_t bad = 0;
  for (int64_t e = m.spec.num_shared_experts > 0 ? -1 : 0; e < E; ++e) {
    const std::string p = m.problem(e, m.spec.weight_format);
    if (p.empty()) continue;
    if (bad++ == 0) problem = (e < 0 ? std::string("shared expert: ") : fmt::format("expert {}: ", e)) + p;
  }
  if (bad > 0) {
    const std::string msg = fmt::format("{} layer {}: {} of {} experts cannot be held exactly as {} ({})", path, layer, bad,
                                        E + m.spec.num_shared_experts, to_string(m.spec.weight_format), problem);
    if (!options.allow_bf16_fallback) throw Unsupported(msg);
    warn(msg + "; dequantizing the layer to bf16");
    m.fallback = true;
    m.spec.weight_format = WeightFormat::BF16;
  }
  try {
    m.spec.validate();
  } catch (const InvalidArgument& e) {
    throw Unsupported(fmt::format("{}: layer {} cannot run: {}", path, layer, e.what()));
  }
  m.description = fmt::format("{} layer {}: {} ({}), {}{} -> {}{}", path, layer, scheme, m.module, first.what,
                              cs.quant_summary.empty() ? "" : " [" + cs.quant_summary + "]",
                              to_string(m.spec.weight_format), m.fallback ? " (bf16 fallback)" : "");
  return std::unique_ptr<CheckpointWeights>(new CheckpointWeights(std::move(im)));
}

const MoeSpec& CheckpointWeights::spec() const { return impl_->spec; }

ExpertWeights CheckpointWeights::expert(int64_t e) const {
  if (e < 0 || e >= impl_->spec.num_experts)
    throw InvalidArgument("expert", fmt::format("expected an id in [0, {}), got {}", impl_->spec.num_experts, e));
  return impl_->make(e);
}

ExpertWeights CheckpointWeights::shared_expert(int s) const {
  if (s < 0 || s >= impl_->spec.num_shared_experts)
    throw InvalidArgument("shared_expert", fmt::format("expected an id in [0, {}), got {}", impl_->spec.num_shared_experts, s));
  return impl_->make(-1);
}

std::vector<float> CheckpointWeights::correction_bias() const { return impl_->corr_bias; }
const std::vector<float>& CheckpointWeights::router_weight() const { return impl_->router_w; }
const std::vector<float>& CheckpointWeights::router_bias() const { return impl_->router_b; }
const std::string& CheckpointWeights::describe() const { return impl_->description; }
const std::vector<std::string>& CheckpointWeights::warnings() const { return impl_->warnings; }
bool CheckpointWeights::dequantized_to_bf16() const { return impl_->fallback; }

std::vector<float> CheckpointWeights::router_logits(const TensorView& x) const {
  if (impl_->router_w.empty()) throw Unsupported(impl_->description + ": the checkpoint has no router weight");
  return compute_router_logits(x, impl_->router_w.data(), impl_->spec.num_experts,
                               impl_->router_b.empty() ? nullptr : impl_->router_b.data());
}

std::vector<float> compute_router_logits(const TensorView& x, const float* w, int64_t E, const float* bias) {
  if (x.device.kind != DeviceKind::CPU || x.rank != 2 || !x.is_contiguous())
    throw InvalidArgument("x", "expected a contiguous [T, H] tensor in host memory, got " + x.describe());
  if (x.dtype != DType::bf16 && x.dtype != DType::f16 && x.dtype != DType::f32)
    throw InvalidArgument("x", "expected dtype bf16, f16 or f32, got " + x.describe());
  const int64_t T = x.shape[0], H = x.shape[1];
  std::vector<double> row(static_cast<size_t>(H));
  std::vector<float> out(size_t(T * E));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = t * H + h;
      switch (x.dtype) {
        case DType::bf16: row[size_t(h)] = formats::bf16_to_float(static_cast<const uint16_t*>(x.data)[i]); break;
        case DType::f16: row[size_t(h)] = formats::f16_to_float(static_cast<const uint16_t*>(x.data)[i]); break;
        default: row[size_t(h)] = static_cast<const float*>(x.data)[i]; break;
      }
    }
    for (int64_t e = 0; e < E; ++e) {
      double acc = bias ? double(bias[e]) : 0.0;
      const float* we = w + e * H;
      for (int64_t h = 0; h < H; ++h) acc += row[size_t(h)] * double(we[h]);
      out[size_t(t * E + e)] = float(acc);
    }
  }
  return out;
}

}  // namespace moeforge
