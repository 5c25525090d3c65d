// MoeLayer: spec + prepared weights + chosen backend. Holds no per-call state.
#include "moeforge/layer.hpp"

#include <fmt/format.h>

#include "backends/backend.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/validate.hpp"

namespace moeforge {

struct MoeLayer::State {
  MoeSpec spec;
  const Backend* backend = nullptr;
  std::string backend_name;
  std::string reason;
  Device device;
  std::unique_ptr<PreparedLayer> prepared;
};

namespace {

// The weights must describe the same layer as the spec, or every result is wrong.
void check_weights_match(const MoeSpec& spec, const WeightSource& w) {
  const MoeSpec& ws = w.spec();
  auto mismatch = [&](const char* field, auto a, auto b) {
    if (a != b)
      throw InvalidArgument("weights", fmt::format("weights were made for {}={}, the spec says {}", field, a, b));
  };
  mismatch("num_experts", ws.num_experts, spec.num_experts);
  mismatch("hidden", ws.hidden, spec.hidden);
  mismatch("intermediate", ws.intermediate, spec.intermediate);
  mismatch("num_shared_experts", ws.num_shared_experts, spec.num_shared_experts);
  mismatch("shared_intermediate", ws.shared_intermediate, spec.shared_intermediate);
  mismatch("expert_bias", ws.expert_bias, spec.expert_bias);
  mismatch("weight_format", to_string(ws.weight_format), to_string(spec.weight_format));
}

}  // namespace

MoeLayer MoeLayer::create(const MoeSpec& spec, std::shared_ptr<const WeightSource> weights,
                          const LayerOptions& options) {
  spec.validate();
  if (!weights) throw InvalidArgument("weights", "expected a WeightSource, got null");
  check_weights_match(spec, *weights);
  if (options.device < 0) throw InvalidArgument("options.device", fmt::format("must be >= 0, got {}", options.device));
  const BackendChoice choice = choose_backend(spec, options.backend, options.device);
  auto state = std::make_shared<State>();
  state->spec = spec;
  state->backend = choice.backend;
  state->backend_name = std::string(choice.backend->name());
  state->reason = choice.reason;
  state->device = choice.backend->needs_gpu() ? Device{DeviceKind::CUDA, options.device} : Device{};
  state->prepared = choice.backend->prepare(spec, weights, options.device);
  MoeLayer layer;
  layer.state_ = std::move(state);
  return layer;
}

void MoeLayer::forward(const TensorView& x, const TensorView& router_logits, const TensorView& out,
                       void* stream) const {
  validate_forward(state_->spec, {.x = &x, .router_logits = &router_logits, .out = &out}, state_->device);
  state_->prepared->forward(
      {.x = &x, .router_logits = &router_logits, .out = &out, .stream = static_cast<CUstream>(stream)});
}

void MoeLayer::forward_topk(const TensorView& x, const TensorView& topk_ids, const TensorView& topk_weights,
                            const TensorView& out, void* stream) const {
  validate_forward(state_->spec, {.x = &x, .topk_ids = &topk_ids, .topk_weights = &topk_weights, .out = &out},
                   state_->device);
  state_->prepared->forward({.x = &x,
                             .topk_ids = &topk_ids,
                             .topk_weights = &topk_weights,
                             .out = &out,
                             .stream = static_cast<CUstream>(stream)});
}

const MoeSpec& MoeLayer::spec() const { return state_->spec; }
const std::string& MoeLayer::backend_name() const { return state_->backend_name; }
const std::string& MoeLayer::backend_reason() const { return state_->reason; }
Device MoeLayer::device() const { return state_->device; }

}  // namespace moeforge
