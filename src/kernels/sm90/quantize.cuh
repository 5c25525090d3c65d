// FP8 activations for the W8A8 GEMMs (sm90/fp8_gemm.cuh): a bf16 row of K values becomes K
// e4m3 codes and K/128 f32 scales, bit for bit as formats::quantize_fp8_group128 defines
// them (scale = group amax / 448, 1 if that is 0; code = RNE(x / scale), clamped to +-448;
// a group holding a NaN or an Inf gets a NaN scale and NaN codes 0x7F).
//
// Layout (what the GEMM's tensor maps read): in a buffer of bf16 rows (row stride 2K bytes),
// row r's codes fill bytes [0, K) of the row and its scales bytes [K, K + K/32).
//
// One warp per row. A step is 256 values: lanes 0-15 hold group 2s, lanes 16-31 group 2s + 1,
// 8 values (16 bytes) each, the group's amax reduced over its 16 lanes. kBatch steps are
// loaded before any is quantized, so a warp has kBatch 16-byte loads in flight instead of one
// dependent chain per group (the first version, one group at a time, was latency-bound:
// 435 us for 32768 rows of 4096 at T = 8192, DRAM 14 % busy). In place (h: GEMM 1's output
// becomes GEMM 2's input) this is safe: step s reads bytes [512 s, 512 s + 512) and writes
// its codes to bytes [256 s, 256 s + 256), bytes this or an earlier batch already read (a
// batch is read whole before it writes), and the scales, which overwrite values of the
// row's second half, are written after the last batch was read.
//
// moe_sm90_quantize_rows: the valid rows of h in place (GEMM 1 -> GEMM 2, wide and decode).
// The gather (sm90/gather.cuh with QUANT_FP8) quantizes x rows with the same function.
//
// Defines: QUANT_K (K, a multiple of 128).
#pragma once
#include "common/convert.cuh"
#include "common/grid_dependency.cuh"
#include "sm90/ptx/e4m3.cuh"

#if (QUANT_K % 128) != 0
#error "sm90/quantize.cuh needs QUANT_K % 128 == 0"
#endif

namespace sm90q {

constexpr int kSteps = (QUANT_K + 255) / 256, kBatch = 4;

// Two f32 -> e4m3x2 (RNE, saturating to +-448, NaN kept): lo in bits 0-7.
__device__ __forceinline__ u32 e4m3x2(float lo, float hi) {
  u32 r;
  asm("{\n.reg .b16 t;\ncvt.rn.satfinite.e4m3x2.f32 t, %2, %1;\ncvt.u32.u16 %0, t;\n}" : "=r"(r) : "f"(lo), "f"(hi));
  return r;
}

// One warp: bf16 row src (QUANT_K values) -> codes at dst[0 .. K), scales at dst + K. src and
// dst may be the same row (see above).
__device__ __forceinline__ void quantize_row(const u16* src, unsigned char* dst) {
  const int lane = threadIdx.x & 31, half = lane >> 4, sub = lane & 15;
  float scales[kSteps];  // this half's group scale of each step
#pragma unroll
  for (int b0 = 0; b0 < kSteps; b0 += kBatch) {
    uint4 v[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int col = (b0 + i) * 256 + lane * 8;
      v[i] = b0 + i < kSteps && col < QUANT_K ? *reinterpret_cast<const uint4*>(src + col) : make_uint4(0, 0, 0, 0);
    }
    __syncwarp();  // every lane has read this batch before any lane overwrites part of it (in place)
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (b0 + i >= kSteps) break;
      const u32 w[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
      float x[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        x[2 * j] = bf16_to_f32(u16(w[j]));
        x[2 * j + 1] = bf16_to_f32(u16(w[j] >> 16));
      }
      float amax = 0.f;
      bool finite = true;  // fmaxf drops NaN: test finiteness apart (NaN and Inf fail "<= FLT_MAX")
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        amax = fmaxf(amax, fabsf(x[j]));
        finite = finite && fabsf(x[j]) <= 3.40282347e38f;
      }
      u32 bad = finite ? 0u : 1u;
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) {  // within the 16 lanes of the group
        amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, o));
        bad |= __shfl_xor_sync(~0u, bad, o);
      }
      float scale = amax / 448.0f;
      if (!(scale > 0.0f)) scale = 1.0f;
      if (bad) scale = __int_as_float(0x7FC00000);
      scales[b0 + i] = scale;
      const int col = (b0 + i) * 256 + lane * 8;
      if (col < QUANT_K) {
        uint2 c;
        c.x = bad ? 0x7F7F7F7Fu : e4m3x2(x[0] / scale, x[1] / scale) | e4m3x2(x[2] / scale, x[3] / scale) << 16;
        c.y = bad ? 0x7F7F7F7Fu : e4m3x2(x[4] / scale, x[5] / scale) | e4m3x2(x[6] / scale, x[7] / scale) << 16;
        *reinterpret_cast<uint2*>(dst + col) = c;
      }
    }
  }
  __syncwarp();  // the whole row was read before the scales overwrite its second half
  float* out = reinterpret_cast<float*>(dst + QUANT_K);
  if (sub == 0) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      if (2 * s + half < QUANT_K / 128) out[2 * s + half] = scales[s];
  }
}

}  // namespace sm90q

#ifndef QUANT_NO_KERNEL
// grid = (tile bound, 4): 128-row tiles (tiles past *num_tiles exit), 32 rows a block;
// block = 256 (8 warps).
// buf: [rows, QUANT_K] bf16, rewritten in place as codes + scales (rows past an expert's count:
// untouched; nothing reads them).
extern "C" __global__ void __launch_bounds__(256)
    moe_sm90_quantize_rows(u16* __restrict__ buf, const int* __restrict__ counts, const i64* __restrict__ seg_off,
                           const int* __restrict__ num_tiles, const int* __restrict__ tile_expert) {
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  const int tile = blockIdx.x;
  if (tile >= *num_tiles) return;
  const int e = tile_expert[tile];
  const i64 end = seg_off[e] + counts[e];
  const int r_end = (blockIdx.y + 1) * (128 / gridDim.y);
  for (int r = blockIdx.y * (128 / gridDim.y) + (threadIdx.x >> 5); r < r_end; r += 8) {
    const i64 row = (i64)tile * 128 + r;
    if (row >= end) break;  // warp-uniform
    u16* p = buf + row * QUANT_K;
    sm90q::quantize_row(p, reinterpret_cast<unsigned char*>(p));
  }
}
#endif
