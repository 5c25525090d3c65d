// Number-format conversions on the device, bit-exact with src/formats (CPU).
// NVRTC-compiled: no cuda_bf16.h / cuda_fp16.h / cuda_fp8.h; inline PTX and bit
// operations only.
#pragma once
#include "common/types.cuh"

// ---- bf16 / f16 <-> f32 ----
__device__ __forceinline__ float bf16_to_f32(u32 bits16) { return __uint_as_float(bits16 << 16); }
// cvt.rn.bf16.f32 (PTX 7.0, sm_80): round to nearest even, NaN stays NaN.
__device__ __forceinline__ u16 f32_to_bf16(float f) {
  u16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
// cvt.rn.bf16x2.f32 d, hi, lo (PTX 7.0, sm_80): `lo` lands in the low half (lower address).
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// cvt.f32.f16 / cvt.rn.f16.f32 (all SMs).
__device__ __forceinline__ float f16_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ u16 f32_to_f16(float f) {
  u16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}

// ---- FP8 E4M3 (OCP "fn": bias 7, no Inf, NaN = S.1111.111) -> bf16 bits, exact ----
// Normal: 2^(e-7) * 1.mmm  -> bf16 exponent e + 120, mantissa mmm in its top 3 bits.
// Subnormal: m * 2^-9 (exact in f32, low 16 bits zero). NaN -> quiet bf16 NaN.
__device__ __forceinline__ u32 e4m3_to_bf16_bits(u32 b) {
  const u32 s = (b & 0x80u) << 8, e = (b >> 3) & 0xFu, m = b & 7u;
  if (e == 15u && m == 7u) return s | 0x7FC0u;
  if (e == 0u) return s | (__float_as_uint(float(m) * 0.001953125f) >> 16);
  return s | ((e + 120u) << 7) | (m << 4);
}
__device__ __forceinline__ float e4m3_to_f32(u32 b) { return bf16_to_f32(e4m3_to_bf16_bits(b)); }

// ---- FP4 E2M1 (code = s<<3 | e<<1 | m): {0, .5, 1, 1.5, 2, 3, 4, 6} ----
__device__ __forceinline__ float e2m1_to_f32(u32 code) {
  const u32 em = code & 7u;
  u32 bits = em == 0u ? 0u : em == 1u ? 0x3F000000u : (((em >> 1) + 126u) << 23) | ((em & 1u) << 22);
  return __uint_as_float(bits | ((code & 8u) << 28));
}
// ---- UE8M0 (MX scale): 2^(s-127), 0xFF = NaN ----
__device__ __forceinline__ float ue8m0_to_f32(u32 s) {
  if (s == 0xFFu) return __uint_as_float(0x7FC00000u);
  if (s == 0u) return __uint_as_float(0x00400000u);  // 2^-127, an f32 subnormal
  return __uint_as_float(s << 23);
}
// e2m1 * scale rounded to bf16 by truncation. Exact whenever the product has at most 8
// significant bits: e2m1 (2 bits) * e4m3 (4 bits) or * a power of two always does, so
// this is the exact dequantized value, as QuantMatrix::dequantize_rows defines it.
__device__ __forceinline__ u32 e2m1_scaled_bf16_bits(u32 code, float scale) {
  return __float_as_uint(e2m1_to_f32(code) * scale) >> 16;
}
