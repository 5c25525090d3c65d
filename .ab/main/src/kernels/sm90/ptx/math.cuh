// Fast transcendental approximations (the MUFU unit) for the gated-activation epilogue.
#pragma once
#include "sm90/ptx/types.cuh"

// ex2.approx.ftz.f32 d, a;   (PTX 1.4 for .ftz, all SMs) -> MUFU.EX2
// 2^a, max relative error 2^-22 (ex2(-inf) = +0, ex2(+inf) = +inf).
__device__ __forceinline__ float ex2_approx(float a) {
  float d;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}

// rcp.approx.ftz.f32 d, a;   (PTX 1.4 for .ftz, all SMs) -> MUFU.RCP
// 1/a, max relative error 2^-23 (rcp(+inf) = +0).
__device__ __forceinline__ float rcp_approx(float a) {
  float d;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}

// sigmoid(x) = 1 / (1 + 2^(-x log2 e)): FMUL, MUFU.EX2, FADD, MUFU.RCP. Saturates cleanly:
// x -> -inf gives rcp(inf) = 0, x -> +inf gives rcp(1) = 1; never NaN for finite x.
__device__ __forceinline__ float sigmoid_approx(float x) {
  return rcp_approx(1.0f + ex2_approx(x * -1.4426950408889634f));
}
