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
// HIDDEN/128 f32 scales in the rows' 2 * HIDDEN bytes, the scales in row (SCALES_TILED 0, the
// decode GEMMs) or transposed per tile (1, the wide ones): sm90/quantize.cuh.
//
// Defines: E, E_TOTAL, HIDDEN (multiple of 8; of 64 with PERMUTE_K; of 128 with QUANT_FP8),
// PERMUTE_K, QUANT_FP8, SCALES_TILED (with QUANT_FP8).
#pragma once
#include "common/grid_dependency.cuh"
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
constexpr int kTileCounters = 2;  // GEMM 1's and GEMM 2's (the call's scratch, sm90 backend)

// grid = (tile bound, split): 128-row tiles (tiles past *num_tiles exit), each split over
// grid.y blocks of 128 / grid.y rows; block = 256. tile_counters: [kTileCounters] ints, zeroed.
extern "C" __global__ void __launch_bounds__(32 * GATHER_WARPS)
    moe_sm90_gather(const u16* __restrict__ x, const int* __restrict__ counts, const i64* __restrict__ seg_off,
                    const int* __restrict__ num_tiles, const int* __restrict__ tile_expert,
                    const int* __restrict__ row_token, const float* __restrict__ row_weight,
                    u16* __restrict__ xg, float* __restrict__ scale, int* __restrict__ tile_counters) {
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  // The GEMMs that follow claim their tiles from these (sm90/tiles.cuh): zero at their launch.
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x < kTileCounters) tile_counters[threadIdx.x] = 0;
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
    // Not in place: each row's scales can be stored as soon as they are known.
    sm90q::quantize_row(x + token * HIDDEN, reinterpret_cast<unsigned char*>(xg + row * HIDDEN))
        .store(sm90q::scale_slots(xg + (i64)tile * GATHER_BM * HIDDEN, r));
#else
    uint4* dst = reinterpret_cast<uint4*>(xg + row * HIDDEN);
    const uint4* src = reinterpret_cast<const uint4*>(x + token * HIDDEN);
#if PERMUTE_K
    // 16-byte vectors, one per lane: coalesced loads and stores (a 64-column block per lane,
    // the first version, read 128 bytes a lane at a 128-byte stride: 27 us against 9.6 for the
    // plain copy at T = 128, H200). 8 lanes hold a 64-column block; lane j's output vector takes
    // two columns from each of 4 of the block's vectors (w4::gather_src_vec / _elem), fetched
    // by shuffles within the 8 lanes. HIDDEN / 8 is a multiple of 8, so a block's lanes are all
    // in or all out at the row's end.
    const int j = lane & 7, grp = lane & ~7;
    const int word = w4::gather_src_elem(j) >> 1, half = 16 * (w4::gather_src_elem(j) & 1);
    constexpr int kVecs = HIDDEN / 8, kBatch = 4;  // vectors per row; loads in flight per lane
#pragma unroll 1
    for (int v0 = 0; v0 < kVecs; v0 += 32 * kBatch) {
      uint4 q[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int v = v0 + 32 * i + lane;
        q[i] = v < kVecs ? src[v] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        u32 o[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {  // logical columns 8j + 2t, 8j + 2t + 1
          const int from = grp + w4::gather_src_vec(j, t);
          const u32 w0 = __shfl_sync(0xffffffffu, q[i].x, from), w1 = __shfl_sync(0xffffffffu, q[i].y, from);
          const u32 w2 = __shfl_sync(0xffffffffu, q[i].z, from), w3 = __shfl_sync(0xffffffffu, q[i].w, from);
          const u32 lo = word ? w1 : w0, hi = word ? w3 : w2;  // elements e and e + 4
          o[t] = ((lo >> half) & 0xFFFFu) | ((hi >> half) << 16);
        }
        const int v = v0 + 32 * i + lane;
        if (v < kVecs) dst[v] = make_uint4(o[0], o[1], o[2], o[3]);
      }
    }
#else
    for (int v = lane; v < HIDDEN / 8; v += 32) dst[v] = src[v];  // 16-byte vectors
#endif  // PERMUTE_K
#endif  // QUANT_FP8
  }
}
