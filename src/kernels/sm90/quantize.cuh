// FP8 activations for the W8A8 GEMMs (sm90/fp8_gemm.cuh): a bf16 row of K values becomes K
// e4m3 codes and K/128 f32 scales, bit for bit as formats::quantize_fp8_group128 defines
// them (scale = group amax / 448, 1 if that is 0; code = RNE(x / scale), clamped to +-448;
// a group holding a NaN or an Inf gets a NaN scale and NaN codes 0x7F).
//
// Layout (what the GEMM's tensor maps read): in a buffer of bf16 rows (row stride 2K bytes),
// row r's codes fill bytes [0, K) of the row and its scales bytes [K, K + K/32). One warp
// per row, one 128-group at a time, 4 values per lane. In place (h: GEMM 1's output becomes
// GEMM 2's input) this is safe: group g's codes overwrite bf16 values of group g / 2, already
// read, and the scales, which overwrite values of later groups, are written after the last
// group was read (each lane keeps the scales of groups lane, lane + 32, ...).
//
// moe_sm90_quantize_rows: the valid rows of h in place (GEMM 1 -> GEMM 2). The gather
// (sm90/gather.cuh with QUANT_FP8) quantizes x rows with the same function.
//
// Defines: QUANT_K (K, a multiple of 128).
#pragma once
#include "common/convert.cuh"

#if (QUANT_K % 128) != 0
#error "sm90/quantize.cuh needs QUANT_K % 128 == 0"
#endif

namespace sm90q {

constexpr int kGroups = QUANT_K / 128, kScaleRegs = (kGroups + 31) / 32;

// Two f32 -> e4m3x2 (RNE, saturating to +-448, NaN kept): lo in bits 0-7.
__device__ __forceinline__ u32 e4m3x2(float lo, float hi) {
  u32 r;
  asm("{\n.reg .b16 t;\ncvt.rn.satfinite.e4m3x2.f32 t, %2, %1;\ncvt.u32.u16 %0, t;\n}" : "=r"(r) : "f"(lo), "f"(hi));
  return r;
}

// One warp: bf16 row src (QUANT_K values) -> codes at dst[0 .. K), scales at dst + K. src and
// dst may be the same row (see above).
__device__ __forceinline__ void quantize_row(const u16* src, unsigned char* dst) {
  const int lane = threadIdx.x & 31;
  float scales[kScaleRegs];
#pragma unroll 1
  for (int grp = 0; grp < kGroups; ++grp) {
    const uint2 v = *reinterpret_cast<const uint2*>(src + grp * 128 + lane * 4);
    const float x0 = bf16_to_f32(u16(v.x)), x1 = bf16_to_f32(u16(v.x >> 16));
    const float x2 = bf16_to_f32(u16(v.y)), x3 = bf16_to_f32(u16(v.y >> 16));
    float amax = fmaxf(fmaxf(fabsf(x0), fabsf(x1)), fmaxf(fabsf(x2), fabsf(x3)));
    // fmaxf drops NaN: test finiteness apart (NaN and Inf fail "<= FLT_MAX").
    const bool finite = fabsf(x0) <= 3.40282347e38f && fabsf(x1) <= 3.40282347e38f &&
                        fabsf(x2) <= 3.40282347e38f && fabsf(x3) <= 3.40282347e38f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, o));
    const bool bad = !__all_sync(~0u, finite);
    float scale = amax / 448.0f;
    if (!(scale > 0.0f)) scale = 1.0f;
    if (bad) scale = __int_as_float(0x7FC00000);
    const u32 codes = bad ? 0x7F7F7F7Fu : e4m3x2(x0 / scale, x1 / scale) | e4m3x2(x2 / scale, x3 / scale) << 16;
    __syncwarp();  // every lane has read this group before any lane overwrites it (in place)
    *reinterpret_cast<u32*>(dst + grp * 128 + lane * 4) = codes;
#pragma unroll
    for (int i = 0; i < kScaleRegs; ++i)
      if (grp == i * 32 + lane) scales[i] = scale;
  }
  __syncwarp();
  float* out = reinterpret_cast<float*>(dst + QUANT_K);
#pragma unroll
  for (int i = 0; i < kScaleRegs; ++i)
    if (i * 32 + lane < kGroups) out[i * 32 + lane] = scales[i];
}

}  // namespace sm90q

#ifndef QUANT_NO_KERNEL
// grid.x = tile bound (128-row tiles; tiles past *num_tiles exit), block = 256 (8 warps).
// buf: [rows, QUANT_K] bf16, rewritten in place as codes + scales (rows past an expert's count:
// untouched; nothing reads them).
extern "C" __global__ void __launch_bounds__(256)
    moe_sm90_quantize_rows(u16* __restrict__ buf, const int* __restrict__ counts, const i64* __restrict__ seg_off,
                           const int* __restrict__ num_tiles, const int* __restrict__ tile_expert) {
  const int tile = blockIdx.x;
  if (tile >= *num_tiles) return;
  const int e = tile_expert[tile];
  const i64 end = seg_off[e] + counts[e];
  for (int r = threadIdx.x >> 5; r < 128; r += 8) {
    const i64 row = (i64)tile * 128 + r;
    if (row >= end) break;  // warp-uniform
    u16* p = buf + row * QUANT_K;
    sm90q::quantize_row(p, reinterpret_cast<unsigned char*>(p));
  }
}
#endif
