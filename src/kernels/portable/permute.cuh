// Token permutation: routing ids -> expert-contiguous padded rows.
//
// Entries are (token, slot) pairs, entry = t * TOPK + j, for the tokens of one chunk.
// Shared experts are appended as experts E .. E_TOTAL-1 that every token visits with
// weight 1 (this backend requires shared_intermediate == intermediate); their rows need
// no map: the row of (shared s, token t) is seg_off[E + s] + t.
//
// Three kernels, all deterministic (no order depends on scheduling):
//  1. moe_count:   per chunk of PERMUTE_CHUNK entries, a histogram over experts
//                  -> chunk_counts [n_chunks, E].
//  2. moe_scan:    one block. chunk_counts -> exclusive offsets per (chunk, expert) in
//                  place; counts [E_TOTAL]; seg_off [E_TOTAL + 1] (i64): each expert's
//                  segment padded to the GEMM's M tile bm; num_tiles; tile_expert [tile].
//  3. moe_scatter: one block per chunk, entries in order; the rank of an entry within
//                  its expert = entries of that expert earlier in the chunk. Each of the
//                  block's PERMUTE_SCATTER_WARPS warps takes a contiguous slice: a histogram
//                  of the slices, their exclusive sums per expert, then each warp walks its
//                  slice (running next row in shared memory + __match_any_sync within a
//                  32-entry round). Writes row_of [entry] (-1 for invalid ids), row_token
//                  [row] (token in the chunk) and row_weight [row].
// So an expert's rows are its entries in (token, slot) order, padding rows at the end of
// each segment are never written (the GEMMs mask them).
//
// moe_permute_small does all three in one launch (one block) when the call has a single
// chunk (decode-sized: T * k <= PERMUTE_CHUNK), with the same results bit for bit: at T = 1
// the three launches cost more than their work.
//
// Defines: E (routed experts), E_TOTAL (E + shared), TOPK.
#pragma once
#include "common/grid_dependency.cuh"
#include "common/types.cuh"

#define PERMUTE_CHUNK 1024
#define PERMUTE_SCATTER_WARPS 8

// grid.x = n_chunks, block = 256.
extern "C" __global__ void __launch_bounds__(256)
    moe_count(const int* __restrict__ ids, i64 n_entries, int* __restrict__ chunk_counts) {
  __shared__ int hist[E];
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const i64 begin = (i64)blockIdx.x * PERMUTE_CHUNK;
  const i64 end = begin + PERMUTE_CHUNK < n_entries ? begin + PERMUTE_CHUNK : n_entries;
  for (i64 i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const int e = ids[i];
    if (e >= 0 && e < E) atomicAdd(&hist[e], 1);  // integer sums: order-independent
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) chunk_counts[(i64)blockIdx.x * E + e] = hist[e];
}

// Steps 2 and 3 of the scan, by every thread of the block: off[0 .. E_TOTAL) holds each
// expert's padded size on entry (written before a barrier); on return off[e] is its segment
// offset, off[E_TOTAL] the total, and seg_off, num_tiles, tile_expert are written.
__device__ __forceinline__ void scan_segments(i64* off, int bm, i64* __restrict__ seg_off, int* __restrict__ num_tiles,
                                              int* __restrict__ tile_expert, int tile_bound) {
  __syncthreads();
  // 2. Exclusive scan of the padded sizes by warp 0: lane L scans a contiguous slice.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    constexpr int per = (E_TOTAL + 31) / 32;
    const int b = lane * per, en = b + per < E_TOTAL ? b + per : E_TOTAL;
    i64 local = 0;
    for (int e = b; e < en; ++e) local += off[e];
    i64 incl = local;
    for (int d = 1; d < 32; d <<= 1) {
      const i64 o = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += o;
    }
    i64 run = incl - local;
    for (int e = b; e < en; ++e) {
      const i64 sz = off[e];
      off[e] = run;
      run += sz;
    }
    if (lane == 31) off[E_TOTAL] = incl;
  }
  __syncthreads();
  for (int e = threadIdx.x; e <= E_TOTAL; e += blockDim.x) seg_off[e] = off[e];
  const int tiles = (int)(off[E_TOTAL] / bm);
  if (threadIdx.x == 0) num_tiles[0] = tiles;
  // 3. Tile list: tile -> the expert whose segment holds row tile*bm (upper bound - 1;
  //    empty segments share their offset with the next one and are skipped by it).
  for (int tile = threadIdx.x; tile < tiles && tile < tile_bound; tile += blockDim.x) {
    const i64 row = (i64)tile * bm;
    int lo = 0, hi = E_TOTAL;  // invariant: off[lo] <= row < off[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (off[mid] <= row) lo = mid; else hi = mid;
    }
    tile_expert[tile] = lo;
  }
}

// grid = 1, block = 1024.
extern "C" __global__ void __launch_bounds__(1024)
    moe_scan(int* __restrict__ chunk_counts, int n_chunks, int n_tokens, int bm, int* __restrict__ counts,
             i64* __restrict__ seg_off, int* __restrict__ num_tiles, int* __restrict__ tile_expert,
             int tile_bound) {
  __shared__ i64 off[E_TOTAL + 1];
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  // 1. Per expert: exclusive offsets over chunks (in place) and the total.
  for (int e = threadIdx.x; e < E_TOTAL; e += blockDim.x) {
    int total = 0;
    if (e < E) {
      for (int c = 0; c < n_chunks; ++c) {
        const i64 idx = (i64)c * E + e;
        const int v = chunk_counts[idx];
        chunk_counts[idx] = total;
        total += v;
      }
    } else {
      total = n_tokens;  // shared expert: every token
    }
    counts[e] = total;
    off[e] = ((i64)total + bm - 1) / bm * bm;  // padded size for now
  }
  scan_segments(off, bm, seg_off, num_tiles, tile_expert, tile_bound);
}

// One warp places entries [begin, end) in order: entry of expert e -> row next[e] + its rank
// among e's entries in this round; next[e] (shared memory, set by the caller to the expert's
// first row for this range) then moves past them. Rows fit an int (row_of holds them).
// The ids and weights of kBatch rounds are loaded before any is placed: one global-memory
// latency per 8 rounds instead of a chain of dependent loads per round (32 rounds of a
// 1024-entry chunk took 32 us on an H200, ncu, 9a9ea1b).
__device__ __forceinline__ void scatter_entries(const int* __restrict__ ids, const float* __restrict__ weights,
                                                i64 begin, i64 end, int* next, int* __restrict__ row_of,
                                                int* __restrict__ row_token, float* __restrict__ row_weight) {
  constexpr int kBatch = 8;
  const int lane = threadIdx.x & 31;
  const u32 lt_mask = (1u << lane) - 1u;
  for (i64 b = begin; b < end; b += 32 * kBatch) {
    int eb[kBatch];
    float wb[kBatch];
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const i64 idx = b + 32 * r + lane;
      eb[r] = idx < end ? ids[idx] : -1;
      wb[r] = idx < end ? weights[idx] : 0.f;
    }
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const i64 idx = b + 32 * r + lane;
      const bool in = idx < end;
      int e = eb[r];
      const bool valid = in && e >= 0 && e < E;
      if (!valid) e = -1;
      const u32 peers = __match_any_sync(0xffffffffu, e);
      if (valid) {
        const int row = next[e] + __popc(peers & lt_mask);
        row_of[idx] = row;
        row_token[row] = (int)(idx / TOPK);
        row_weight[row] = wb[r];
      } else if (in) {
        row_of[idx] = -1;
      }
      __syncwarp();
      if (valid && lane == 31 - __clz(peers)) next[e] += __popc(peers);  // one writer per expert
      __syncwarp();
    }
  }
}

// Entries [begin, end) placed by the block's first PERMUTE_SCATTER_WARPS warps, each walking a
// contiguous slice of whole rounds with scatter_entries, from where the slices before it end:
// the same rows as one warp walking the whole range, in an eighth of the rounds (one warp per
// 1024-entry chunk took ~12 us at any T >= 512, and 6 of the 8.7 us of moe_permute_small at
// T = 128: H200, ncu, 4df4c19). first(e): expert e's first row for the range. next: shared
// [PERMUTE_SCATTER_WARPS][E] scratch. Every thread of the block calls it (it holds barriers);
// the block has at least PERMUTE_SCATTER_WARPS warps.
template <class FirstRow>
__device__ __forceinline__ void scatter_range(const int* __restrict__ ids, const float* __restrict__ weights,
                                              i64 begin, i64 end, FirstRow first, int (*next)[E],
                                              int* __restrict__ row_of, int* __restrict__ row_token,
                                              float* __restrict__ row_weight) {
  constexpr int W = PERMUTE_SCATTER_WARPS;
  const int warp = threadIdx.x >> 5;
  const i64 slice = ((end - begin + W - 1) / W + 31) / 32 * 32;
  const i64 sb = begin + warp * slice, se = sb + slice < end ? sb + slice : end;  // this warp's slice
  for (int i = threadIdx.x; i < W * E; i += blockDim.x) next[i / E][i % E] = 0;
  __syncthreads();
  if (warp < W)
    for (i64 i = sb + (threadIdx.x & 31); i < se; i += 32) {
      const int e = ids[i];
      if (e >= 0 && e < E) atomicAdd(&next[warp][e], 1);  // integer sums: order-independent
    }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {  // counts -> each slice's first rows
    int run = first(e);
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const int c = next[w][e];
      next[w][e] = run;
      run += c;
    }
  }
  __syncthreads();
  if (warp < W && sb < se) scatter_entries(ids, weights, sb, se, next[warp], row_of, row_token, row_weight);
}

// grid.x = n_chunks, block = 32 * PERMUTE_SCATTER_WARPS.
extern "C" __global__ void __launch_bounds__(32 * PERMUTE_SCATTER_WARPS)
    moe_scatter(const int* __restrict__ ids, const float* __restrict__ weights, i64 n_entries,
                const int* __restrict__ chunk_off, const i64* __restrict__ seg_off, int* __restrict__ row_of,
                int* __restrict__ row_token, float* __restrict__ row_weight) {
  __shared__ int next[PERMUTE_SCATTER_WARPS][E];
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  const i64 chunk = blockIdx.x;
  const i64 begin = chunk * PERMUTE_CHUNK;
  const i64 end = begin + PERMUTE_CHUNK < n_entries ? begin + PERMUTE_CHUNK : n_entries;
  // This chunk's first row of each expert: its segment plus the entries of earlier chunks.
  const int* off = chunk_off + chunk * E;
  scatter_range(ids, weights, begin, end, [&](int e) { return (int)(seg_off[e] + off[e]); }, next, row_of,
                row_token, row_weight);
}

// Count, scan and scatter of one chunk (n_entries <= PERMUTE_CHUNK) by one block of at least
// PERMUTE_SCATTER_WARPS warps.
__device__ __forceinline__ void permute_small(const int* __restrict__ ids, const float* __restrict__ weights,
                                              i64 n_entries, int n_tokens, int bm, int* __restrict__ counts,
                                              i64* __restrict__ seg_off, int* __restrict__ num_tiles,
                                              int* __restrict__ tile_expert, int tile_bound, int* __restrict__ row_of,
                                              int* __restrict__ row_token, float* __restrict__ row_weight) {
  __shared__ int next[PERMUTE_SCATTER_WARPS][E];  // the scatter's; its first row is the histogram first
  __shared__ i64 off[E_TOTAL + 1];
  int* hist = next[0];
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  for (i64 i = threadIdx.x; i < n_entries; i += blockDim.x) {
    const int e = ids[i];
    if (e >= 0 && e < E) atomicAdd(&hist[e], 1);  // integer sums: order-independent
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E_TOTAL; e += blockDim.x) {
    const int total = e < E ? hist[e] : n_tokens;  // shared expert: every token
    counts[e] = total;
    off[e] = ((i64)total + bm - 1) / bm * bm;
  }
  scan_segments(off, bm, seg_off, num_tiles, tile_expert, tile_bound);  // its first barrier follows hist's reads
  scatter_range(ids, weights, 0, n_entries, [&](int e) { return (int)off[e]; }, next, row_of, row_token, row_weight);
}

// grid = 1, block = 1024, n_entries <= PERMUTE_CHUNK: count, scan and scatter of one chunk.
extern "C" __global__ void __launch_bounds__(1024)
    moe_permute_small(const int* __restrict__ ids, const float* __restrict__ weights, i64 n_entries, int n_tokens,
                      int bm, int* __restrict__ counts, i64* __restrict__ seg_off, int* __restrict__ num_tiles,
                      int* __restrict__ tile_expert, int tile_bound, int* __restrict__ row_of,
                      int* __restrict__ row_token, float* __restrict__ row_weight) {
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  permute_small(ids, weights, n_entries, n_tokens, bm, counts, seg_off, num_tiles, tile_expert, tile_bound, row_of,
                row_token, row_weight);
}
