// Gather for the sm90 GEMMs: x rows copied into expert order, so that GEMM 1 can read its
// A operand with TMA tiles (Hopper's TMA has no row gather), plus each row's epilogue scale.
//
//   xg[row]    = x[token of row]  for routed and shared rows (padding rows: not written)
//   scale[row] = routing weight (routed), 1 (shared experts), 0 (padding)
// Rows come from moe_scatter (portable/permute.cuh): row_of [entry] gives a token's routed rows,
// row_weight [row] their weights; the row of (shared expert s, token t) is seg_off[E + s] + t.
// Padding rows are the ones at or past counts[e] inside expert e's segment. They are left as
// they are: every GEMM output row depends on its own A row only, and nothing reads padding
// rows of h or y, so their content cannot matter; zeroing them cost 73 us of 1.8 ms at
// T = 128 (ncu, H200), where almost every row of a 128-row tile is padding.
//
// PERMUTE_K = 1 (the W4A16 / W8A16 decode GEMMs: NVFP4 or FP8 weights): the columns of each
// 64-column block are stored in the permuted K order of sm90/w4_format.cuh (xg[L] = x[physical_k(L)]).
//
// QUANT_FP8 = 1 (FP8 activations, the W8A8 GEMMs): each row is stored as HIDDEN e4m3 codes and
// HIDDEN/128 f32 scales in the rows' 2 * HIDDEN bytes, the scales in row (SCALES_TILED 0, the
// decode GEMMs) or transposed per tile (1, the wide ones): sm90/quantize.cuh.
//
// Defines: E, E_TOTAL, TOPK, HIDDEN (multiple of 8; of 64 with PERMUTE_K; of 128 with
// QUANT_FP8), GATHER_WARPS (block = 32 x that), PERMUTE_K, QUANT_FP8, SCALES_TILED (with
// QUANT_FP8).
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
#ifndef GATHER_WARPS
#error "sm90/gather.cuh needs GATHER_WARPS (the host's tokens a block: sm90.hpp kGatherWarps)"
#endif
constexpr int kTileCounters = 2;  // GEMM 1's and GEMM 2's (the call's scratch, sm90 backend)
constexpr int kDests = TOPK + (E_TOTAL - E);  // the rows one token is copied to: routed, then shared

// The rows token t goes to: row_of's for its routed slots (-1: an invalid id, no row), then
// seg_off[E + s] + t for each shared expert s. Warp-uniform.
struct TokenRows {
  i64 row[kDests];
  __device__ __forceinline__ TokenRows(int t, const int* __restrict__ row_of, const i64* __restrict__ seg_off) {
#pragma unroll
    for (int j = 0; j < TOPK; ++j) row[j] = row_of[(i64)t * TOPK + j];
#pragma unroll
    for (int s = 0; s < E_TOTAL - E; ++s) row[TOPK + s] = seg_off[E + s] + t;
  }
  // f(row) for each row the token has.
  template <class F>
  __device__ __forceinline__ void each(F&& f) const {
#pragma unroll
    for (int d = 0; d < kDests; ++d)
      if (row[d] >= 0) f(row[d]);
  }
};

#if !QUANT_FP8
// The stored vector for source vector q (this lane's of a batch of 32 consecutive ones): q
// itself, or (PERMUTE_K) its 64-column block's permuted K order. 16-byte vectors, one per lane:
// coalesced loads and stores (a 64-column block per lane, the first version, read 128 bytes a
// lane at a 128-byte stride: 27 us against 9.6 for the plain copy at T = 128, H200). 8 lanes
// hold a 64-column block; lane j's output vector takes two columns from each of 4 of the
// block's vectors (w4::gather_src_vec / _elem), fetched by shuffles within the 8 lanes. A row's
// vector count is a multiple of 8 with PERMUTE_K, so a block's lanes are all in or all out at
// the row's end (the shuffles run in every lane either way).
__device__ __forceinline__ uint4 stored_vector(uint4 q, int lane) {
#if PERMUTE_K
  const int j = lane & 7, grp = lane & ~7;
  const int word = w4::gather_src_elem(j) >> 1, half = 16 * (w4::gather_src_elem(j) & 1);
  u32 o[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) {  // logical columns 8j + 2t, 8j + 2t + 1
    const int from = grp + w4::gather_src_vec(j, t);
    const u32 w0 = __shfl_sync(0xffffffffu, q.x, from), w1 = __shfl_sync(0xffffffffu, q.y, from);
    const u32 w2 = __shfl_sync(0xffffffffu, q.z, from), w3 = __shfl_sync(0xffffffffu, q.w, from);
    const u32 lo = word ? w1 : w0, hi = word ? w3 : w2;  // elements e and e + 4
    o[t] = ((lo >> half) & 0xFFFFu) | ((hi >> half) << 16);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
#else
  (void)lane;
  return q;
#endif
}
#endif

// grid = ceil(n_tokens / GATHER_WARPS) + tile bound, block = 256. Token-major: one token a warp,
// x[t] read once (and, QUANT_FP8, quantized once) and stored to each of its rows; the rows
// used to be gathered one at a time, each reading its token's row again (k = 4: x read 3-4
// times from DRAM, ncu 150 us for the bf16 gather at T = 8192, 74 % of DRAM busy), and W8A8
// quantized each token k times. The last tile-bound blocks write the scales of one 128-row
// tile each (tiles past *num_tiles exit). tile_counters: [kTileCounters] ints, zeroed.
// x, row_of: this chunk's (n_tokens tokens).
extern "C" __global__ void __launch_bounds__(32 * GATHER_WARPS)
    moe_sm90_gather(const u16* __restrict__ x, int n_tokens, const int* __restrict__ row_of,
                    const int* __restrict__ counts, const i64* __restrict__ seg_off,
                    const int* __restrict__ num_tiles, const int* __restrict__ tile_expert,
                    const float* __restrict__ row_weight, u16* __restrict__ xg, float* __restrict__ scale,
                    int* __restrict__ tile_counters) {
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  // The GEMMs that follow claim their tiles from these (sm90/tiles.cuh): zero at their launch.
  if (blockIdx.x == 0 && threadIdx.x < kTileCounters) tile_counters[threadIdx.x] = 0;
  const int token_blocks = (n_tokens + GATHER_WARPS - 1) / GATHER_WARPS;
  if ((int)blockIdx.x >= token_blocks) {  // a tile's scales
    const int tile = blockIdx.x - token_blocks;
    if (tile >= *num_tiles || threadIdx.x >= GATHER_BM) return;
    const int e = tile_expert[tile];
    const i64 row = (i64)tile * GATHER_BM + threadIdx.x;
    const bool valid = row - seg_off[e] < counts[e];
    scale[row] = valid ? (e < E ? row_weight[row] : 1.0f) : 0.0f;
    return;
  }
  const int t = blockIdx.x * GATHER_WARPS + (threadIdx.x >> 5);
  if (t >= n_tokens) return;  // the whole warp
  const TokenRows rows(t, row_of, seg_off);
  const u16* src_row = x + (i64)t * HIDDEN;
#if QUANT_FP8
  // Codes to each row as a step is quantized; the scales once the row is done (not in place).
  unsigned char* const xg_bytes = reinterpret_cast<unsigned char*>(xg);
  const sm90q::RowScales s = sm90q::quantize_row(src_row, [&](int col, uint2 c) {
    rows.each([&](i64 row) { *reinterpret_cast<uint2*>(xg_bytes + row * 2 * HIDDEN + col) = c; });
  });
  rows.each([&](i64 row) {
    s.store(sm90q::scale_slots(xg + (row - row % GATHER_BM) * HIDDEN, int(row % GATHER_BM)));
  });
#else
  const int lane = threadIdx.x & 31;
  const uint4* src = reinterpret_cast<const uint4*>(src_row);
  constexpr int kVecs = HIDDEN / 8, kBatch = 4;  // 16-byte vectors a row; loads in flight per lane
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
      const int v = v0 + 32 * i + lane;
      const uint4 o = stored_vector(q[i], lane);
      if (v < kVecs) rows.each([&](i64 row) { reinterpret_cast<uint4*>(xg + row * HIDDEN)[v] = o; });
    }
  }
#endif
}
