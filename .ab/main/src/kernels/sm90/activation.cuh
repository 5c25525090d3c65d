// The gated activation of GEMM 1's epilogue, h = act(gate, up), for the sm90 kernels.
// Defines: ACT (0 SwiGLU, 1 GeGLU tanh, 2 clamped SwiGLU), ACT_ALPHA, ACT_LIMIT (float literals).
// Same formulas as the portable kernels (portable/grouped_gemm.cuh), with the MUFU sigmoid.
#pragma once
#include "sm90/ptx/math.cuh"

namespace sm90 {

__device__ __forceinline__ float activate(float g, float u) {
#if ACT == 0
  return g * sigmoid_approx(g) * u;
#elif ACT == 1
  // 0.5 g (1 + tanh z) == g * sigmoid(2 z): ex2 + rcp keep ~1e-6 relative error where
  // tanh.approx's ~2^-11 absolute error would cancel in 1 + tanh (dev/sm90/NOTES.md).
  const float z2 = 2.0f * 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return g * sigmoid_approx(z2) * u;
#else
  const float L = (float)(ACT_LIMIT);
  g = g > L ? L : g;  // comparisons keep NaN, as the reference does
  u = u > L ? L : (u < -L ? -L : u);
  return (u + 1.0f) * (g * sigmoid_approx((float)(ACT_ALPHA) * g));
#endif
}

}  // namespace sm90
