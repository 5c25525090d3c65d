// Gated activations of the CPU reference, in double (spec.hpp, ActivationKind).
#include <algorithm>
#include <cmath>

#include "moeforge/reference.hpp"

namespace moeforge::reference {
namespace {

// Written so that exp() never overflows: sigmoid(+-Inf) = 1 / 0 exactly.
inline double sigmoid(double v) {
  if (v >= 0) return 1.0 / (1.0 + std::exp(-v));
  const double e = std::exp(v);
  return e / (1.0 + e);
}

// GELU, tanh approximation (as Gemma and PyTorch's approximate="tanh").
inline double gelu_tanh(double g) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
  return 0.5 * g * (1.0 + std::tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g)));
}

}  // namespace

double activate(const ActivationSpec& act, double gate, double up) {
  switch (act.kind) {
    case ActivationKind::SwiGLU:
      return gate * sigmoid(gate) * up;
    case ActivationKind::GeGLU:
      return gelu_tanh(gate) * up;
    case ActivationKind::ClampedSwiGLU: {
      // gpt-oss: the gate is clamped from above only, the up projection on both sides,
      // and the up term carries a +1. The comparisons are written so NaN propagates
      // (std::min/std::clamp return their first argument when it is NaN).
      const double g = std::min(gate, act.limit);
      const double u = std::clamp(up, -act.limit, act.limit);
      return (u + 1.0) * g * sigmoid(act.alpha * g);
    }
  }
  return NAN;
}

}  // namespace moeforge::reference
