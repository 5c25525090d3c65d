// moeforge/layer.hpp — the MoE layer object.
//
//   std::shared_ptr<const moeforge::WeightSource> weights = moeforge::make_synthetic_weights(spec, 42);
//   auto layer = moeforge::MoeLayer::create(spec, weights, {.backend = "auto", .device = 0});
//   layer.forward(x, router_logits, out, stream);
//
// create() prepares the weights once (device copies in the kernels' layout;
// GPU backends drop the WeightSource afterwards, the "cpu" backend keeps it).
// The layer holds no per-call mutable state: forward() is safe from any thread
// on any stream, each call sizing its own workspace (stream-ordered).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "moeforge/spec.hpp"
#include "moeforge/tensor.hpp"
#include "moeforge/weights.hpp"

namespace moeforge {

struct LayerOptions {
  std::string backend = "auto";  // "auto", "cpu", "portable", ...
  int device = 0;                // CUDA ordinal (ignored by "cpu")
};

class Backend;
class PreparedLayer;

class MoeLayer {
 public:
  static MoeLayer create(const MoeSpec& spec, std::shared_ptr<const WeightSource> weights,
                         const LayerOptions& options = {});

  // x [T, H], router_logits [T, E], out [T, H]; all on the layer's device
  // (host memory for "cpu"). stream: a CUstream (nullptr = the legacy default stream).
  void forward(const TensorView& x, const TensorView& router_logits, const TensorView& out,
               void* stream = nullptr) const;
  // Precomputed routing: topk_ids [T, k] (i32/i64), topk_weights [T, k] f32.
  void forward_topk(const TensorView& x, const TensorView& topk_ids, const TensorView& topk_weights,
                    const TensorView& out, void* stream = nullptr) const;

  const MoeSpec& spec() const;
  const std::string& backend_name() const;
  const std::string& backend_reason() const;  // why this backend was chosen
  Device device() const;

 private:
  struct State;
  std::shared_ptr<const State> state_;
};

}  // namespace moeforge
