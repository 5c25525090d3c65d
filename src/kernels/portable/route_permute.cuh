// Routing and the one-chunk permutation in one launch, for decode-sized calls with router logits
// (T <= 8 tokens, the host's kRoutePermuteTokens, so one per warp; T * TOPK <= PERMUTE_CHUNK):
// route.cuh's route_token, then permute.cuh's permute_small, with the same results bit for bit
// as moe_route followed by moe_permute_small. At T = 1 each launch costs more than its work;
// this saves one.
//
// Defines: route.cuh's and permute.cuh's (E, E_TOTAL, TOPK, ROUTING, N_GROUPS, TOPK_GROUPS,
// GROUP_TOPN, RENORM, SCALE, LOGITS_BF16).
#pragma once
#include "common/grid_dependency.cuh"
#include "portable/permute.cuh"
#include "portable/route.cuh"

// grid = 1, block = 256 (8 warps, a token each; more tokens would be routed in turn, which at 4
// per warp cost more than a second launch: route_token's per-lane arrays want more than the 64
// registers a block of 1024 would leave). ids / weights: the routing's outputs (global, as
// moe_route writes them; the permutation reads them back after the block barrier).
extern "C" __global__ void __launch_bounds__(256)
    moe_route_permute_small(const void* __restrict__ logits, int n_tokens, const float* __restrict__ correction_bias,
                            int* __restrict__ ids, float* __restrict__ weights, int bm, int* __restrict__ counts,
                            i64* __restrict__ seg_off, int* __restrict__ num_tiles, int* __restrict__ tile_expert,
                            int tile_bound, int* __restrict__ row_of, int* __restrict__ row_token,
                            float* __restrict__ row_weight) {
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  for (int t = threadIdx.x >> 5; t < n_tokens; t += blockDim.x >> 5)  // warp-uniform
    route::route_token(logits, t, correction_bias, ids, weights);
  // Orders the block's global writes of ids / weights before the reads below, which are plain
  // ld.global, not the non-coherent path (PTX checked: the compiler sees them written here).
  __syncthreads();
  permute_small(ids, weights, (i64)n_tokens * TOPK, n_tokens, bm, counts, seg_off, num_tiles, tile_expert, tile_bound,
                row_of, row_token, row_weight);
}
