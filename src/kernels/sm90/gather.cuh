// Gather for the sm90 GEMMs: x rows copied into expert order, so that GEMM 1 can read its
// A operand with TMA tiles (Hopper's TMA has no row gather), plus each row's epilogue scale.
//
//   xg[row]    = x[token of row]  for routed and shared rows (padding rows: not written)
//   scale[row] = routing weight (routed), 1 (shared experts), 0 (padding)
// Rows come from moe_scatter (portable/permute.cuh): row_token / row_weight for routed rows;
// the row of (shared expert s, token t) is seg_off[E + s] + t. Padding rows are the ones at
// or past counts[e] inside expert e's segment. They are left as they are: every GEMM output
// row depends on its own A row only, and nothing reads padding rows of h or y, so their
// content cannot matter; zeroing them cost 73 us of 1.8 ms at T = 128 (ncu, H200), where
// almost every row of a 128-row tile is padding.
//
// PERMUTE_K = 1 (the W4A16 / W8A16 decode GEMMs: NVFP4 or FP8 weights): the columns of each
// 64-column block are stored in the permuted K order of sm90/w4_format.cuh (xg[L] = x[physical_k(L)]).
//
// QUANT_FP8 = 1 (FP8 activations, the W8A8 GEMMs): each row is stored as HIDDEN e4m3 codes and
// HIDDEN/128 f32 scales in its 2 * HIDDEN bytes (sm90/quantize.cuh).
//
// Defines: E, E_TOTAL, HIDDEN (multiple of 8; of 64 with PERMUTE_K; of 128 with QUANT_FP8),
// PERMUTE_K, QUANT_FP8.
#pragma once
#include "common/types.cuh"
#if PERMUTE_K
#include "sm90/w4_format.cuh"
#if (HIDDEN % 64) != 0
#error "sm90/gather.cuh with PERMUTE_K needs HIDDEN % 64 == 0"
#endif
#endif

#if QUANT_FP8
#define QUANT_K HIDDEN
#define QUANT_NO_KERNEL
#include "sm90/quantize.cuh"
#endif

#if (HIDDEN % 8) != 0
#error "sm90/gather.cuh needs HIDDEN % 8 == 0"
#endif
#define GATHER_BM 128
#define GATHER_WARPS 8

// grid = (tile bound, split): 128-row tiles (tiles past *num_tiles exit), each split over
// grid.y blocks of 128 / grid.y rows; block = 256.
extern "C" __global__ void __launch_bounds__(32 * GATHER_WARPS)
    moe_sm90_gather(const u16* __restrict__ x, const int* __restrict__ counts, const i64* __restrict__ seg_off,
                    const int* __restrict__ num_tiles, const int* __restrict__ tile_expert,
                    const int* __restrict__ row_token, const float* __restrict__ row_weight,
                    u16* __restrict__ xg, float* __restrict__ scale) {
  const int tile = blockIdx.x;
  if (tile >= *num_tiles) return;
  const int e = tile_expert[tile];
  const i64 seg = seg_off[e];
  const int count = counts[e];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r_end = (blockIdx.y + 1) * (GATHER_BM / gridDim.y);
  for (int r = blockIdx.y * (GATHER_BM / gridDim.y) + warp; r < r_end; r += GATHER_WARPS) {
    const i64 row = (i64)tile * GATHER_BM + r;
    const i64 local = row - seg;
    const bool valid = local < count;  // warp-uniform
    if (lane == 0) scale[row] = valid ? (e < E ? row_weight[row] : 1.0f) : 0.0f;
    if (!valid) continue;
    const i64 token = e < E ? row_token[row] : local;
#if QUANT_FP8
    sm90q::quantize_row(x + token * HIDDEN, reinterpret_cast<unsigned char*>(xg + row * HIDDEN));
#else
    uint4* dst = reinterpret_cast<uint4*>(xg + row * HIDDEN);
    const uint4* src = reinterpret_cast<const uint4*>(x + token * HIDDEN);
#if PERMUTE_K
    // One 64-column block (8 vectors) per lane: read, permute in registers, write.
    for (int b = lane; b < HIDDEN / 64; b += 32) {
      u32 v[32], o[32];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint4 q = src[8 * b + i];
        v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
      }
#pragma unroll
      for (int i = 0; i < 32; ++i) {  // logical columns 2i, 2i + 1
        const int p0 = w4::physical_k(2 * i), p1 = w4::physical_k(2 * i + 1);  // constants once unrolled
        o[i] = ((v[p0 >> 1] >> (16 * (p0 & 1))) & 0xFFFFu) | ((v[p1 >> 1] >> (16 * (p1 & 1))) << 16);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[8 * b + i] = make_uint4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]);
    }
#else
    for (int v = lane; v < HIDDEN / 8; v += 32) dst[v] = src[v];  // 16-byte vectors
#endif  // PERMUTE_K
#endif  // QUANT_FP8
  }
}
