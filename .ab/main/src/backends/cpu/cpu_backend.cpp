// The "cpu" backend: the double-precision reference layer, rounded once into
// the caller's output dtype. Always available; the fallback when there is no GPU.
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "backends/backend.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "moeforge/reference.hpp"

namespace moeforge {
namespace {

void store(const std::vector<double>& values, const TensorView& out) {
  const int64_t n = out.numel();
  switch (out.dtype) {
    case DType::f32: {
      auto* p = static_cast<float*>(out.data);
      for (int64_t i = 0; i < n; ++i) p[i] = float(values[i]);
      return;
    }
    case DType::bf16: {
      auto* p = static_cast<uint16_t*>(out.data);
      for (int64_t i = 0; i < n; ++i) p[i] = formats::float_to_bf16(float(values[i]));
      return;
    }
    case DType::f16: {
      auto* p = static_cast<uint16_t*>(out.data);
      for (int64_t i = 0; i < n; ++i) p[i] = formats::float_to_f16(float(values[i]));
      return;
    }
    default:
      throw InvalidArgument("out", "expected dtype f32, bf16 or f16, got " + std::string(dtype_name(out.dtype)));
  }
}

class CpuLayer final : public PreparedLayer {
 public:
  CpuLayer(MoeSpec spec, std::shared_ptr<const WeightSource> weights) : spec_(std::move(spec)), weights_(std::move(weights)) {}

  void forward(const ForwardCall& call) const override {
    if (call.x->shape[0] == 0) return;
    reference::Options options;
    // Show progress when the double-precision work is long (> ~10 GFLOP: seconds on a laptop).
    const double flops = 6.0 * double(call.x->shape[0]) * (spec_.topk + spec_.num_shared_experts) *
                         double(spec_.hidden) * double(spec_.intermediate);
    if (flops > 1e10)
      options.progress = [tty = bool(isatty(fileno(stderr))), shown = int64_t(-1)](int64_t done, int64_t total) mutable {
        // A live counter on a terminal; quarter steps in logs.
        const int64_t quarter = total > 0 ? done * 4 / total : 4;
        if (!tty && quarter == shown) return;
        shown = quarter;
        std::fprintf(stderr, tty ? "\rcpu reference: %lld/%lld experts%s" : "cpu reference: %lld/%lld experts%s\n",
                     (long long)done, (long long)total, tty && done == total ? "\n" : "");
      };
    const std::vector<double> out =
        call.router_logits
            ? reference::forward(spec_, *weights_, *call.x, *call.router_logits, options)
            : reference::forward_topk(spec_, *weights_, *call.x, *call.topk_ids, *call.topk_weights, options);
    store(out, *call.out);
  }

 private:
  MoeSpec spec_;
  std::shared_ptr<const WeightSource> weights_;
};

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  bool needs_gpu() const override { return false; }
  std::string why_not(const MoeSpec&, const rt::DeviceInfo*) const override { return ""; }
  std::unique_ptr<PreparedLayer> prepare(const MoeSpec& spec, const std::shared_ptr<const WeightSource>& weights,
                                         int) const override {
    return std::make_unique<CpuLayer>(spec, weights);
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace moeforge
