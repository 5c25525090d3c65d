// Gated activations (GEMM1 epilogue) and the W13 "prepare" permutation that puts the gate
// and up halves of a gated activation into the same 256-column N tile.
//
// Activations, h = act(gate, up), selected at compile time (the kernel's template parameter):
//   kSwiGLU         silu(gate) * up = gate * sigmoid(gate) * up                 (Mistral, Qwen, DeepSeek)
//   kGeGLUTanh      gelu_tanh(gate) * up,
//                   gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (Gemma-style)
//   kClampedSwiGLU  g = min(gate, limit), u = clamp(up, -limit, limit),
//                   h = (u + 1) * g * sigmoid(alpha g), alpha = 1.702, limit = 7   (gpt-oss)
// gated_act_fast: device epilogue (MUFU approximations, ptx/math.cuh); gated_act_ref: the
// reference (accurate expf/tanhf), host and device.
//
// W13 prepare (pure, host). The checkpoint stores W13 per expert as 2I rows of K: gate rows
// [0, I) then up rows [I, 2I) ("plain" layout, [E * 2I, K]). The kernel's B tile is 256
// rows (N tile 256) and its epilogue pairs accumulator column c with column c + 128, so the
// prepared layout interleaves the halves in blocks of 128 rows. Within one expert, prepared
// row p (0 <= p < 2I), with tile j = p / 256 and w = p % 256, is
//     plain row        128 j + w           if w < 128    (gate row 128 j + w)
//     plain row   I +  128 j + (w - 128)   if w >= 128   (up row   128 j + w - 128)
// i.e. prepared = [g0..g127 | u0..u127 | g128..g255 | u128..u255 | ...]. Experts stay where
// they were (rows e*2I .. e*2I + 2I - 1). N tile j then produces output columns
// h[:, 128 j .. 128 j + 127]. Requires I % 128 == 0.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#include "sm90/ptx/math.cuh"
#define GATED_HD __host__ __device__
#else
#define GATED_HD
#endif

namespace gated {

enum Act : int { kNone = 0, kSwiGLU = 1, kGeGLUTanh = 2, kClampedSwiGLU = 3 };
constexpr float kClampAlpha = 1.702f, kClampLimit = 7.0f;
constexpr float kGeluK0 = 0.7978845608028654f, kGeluK1 = 0.044715f;  // sqrt(2/pi), cubic coefficient
constexpr int kHalfTile = 128;                                        // gate (or up) rows per N tile

inline const char* act_name(int a) {
  return a == kSwiGLU ? "swiglu" : a == kGeGLUTanh ? "geglu_tanh" : a == kClampedSwiGLU ? "clamped_swiglu" : "none";
}

// Plain (checkpoint) row of prepared row p, both within one expert of 2I rows.
GATED_HD inline int w13_plain_row(int p, int I) {
  const int j = p / (2 * kHalfTile), w = p % (2 * kHalfTile);
  return w < kHalfTile ? kHalfTile * j + w : I + kHalfTile * j + (w - kHalfTile);
}

// prepared[e*2I + p, :] = plain[e*2I + w13_plain_row(p, I), :]   for E experts, rows of K
// elements of `elem` bytes (2 for bf16). Pure: no state, no device; out must not alias in.
inline bool w13_prepare_interleave(const void* plain, void* prepared, long long E, int I, int K, int elem) {
  if (I <= 0 || I % kHalfTile != 0 || K <= 0 || E < 0) return false;
  const size_t row = (size_t)K * elem;
  const unsigned char* src = static_cast<const unsigned char*>(plain);
  unsigned char* dst = static_cast<unsigned char*>(prepared);
  for (long long e = 0; e < E; ++e)
    for (int p = 0; p < 2 * I; ++p)
      std::memcpy(dst + ((size_t)e * 2 * I + p) * row, src + ((size_t)e * 2 * I + w13_plain_row(p, I)) * row, row);
  return true;
}

#ifdef __CUDACC__
template <int A>
__device__ __forceinline__ float gated_act_fast(float gate, float up) {
  if constexpr (A == kSwiGLU) {
    return gate * sigmoid_approx(gate) * up;
  } else if constexpr (A == kGeGLUTanh) {
    // 0.5 x (1 + tanh z) == x * sigmoid(2 z). Not via tanh.approx (MUFU.TANH, one MUFU
    // fewer): its ~2^-11 absolute error near tanh = -1 cancels in 1 + tanh, e.g. ~10 %
    // relative error in gelu(-3); ex2 + rcp keep ~1e-6 relative everywhere.
    const float z2 = (2.0f * kGeluK0) * fmaf(kGeluK1 * gate, gate * gate, gate);
    return gate * sigmoid_approx(z2) * up;
  } else {
    static_assert(A == kClampedSwiGLU, "unknown activation");
    const float g = fminf(gate, kClampLimit);
    const float u = fminf(fmaxf(up, -kClampLimit), kClampLimit);
    return (u + 1.0f) * (g * sigmoid_approx(kClampAlpha * g));
  }
}
#endif

GATED_HD inline float gated_act_ref(int a, float gate, float up) {
  if (a == kSwiGLU) return gate / (1.0f + expf(-gate)) * up;
  if (a == kGeGLUTanh) return 0.5f * gate * (1.0f + tanhf(kGeluK0 * (gate + kGeluK1 * gate * gate * gate))) * up;
  if (a == kClampedSwiGLU) {
    const float g = fminf(gate, kClampLimit), u = fminf(fmaxf(up, -kClampLimit), kClampLimit);
    return (u + 1.0f) * g / (1.0f + expf(-kClampAlpha * g));
  }
  return gate;
}

}  // namespace gated
