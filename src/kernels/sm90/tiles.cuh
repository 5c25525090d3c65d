// What the persistent sm90 GEMMs (grouped_gemm.cuh, fp8_gemm.cuh) share about output tiles:
// the tile order and the epilogue's swizzled store boxes.
#pragma once
#include "sm90/ptx/types.cuh"

namespace sm90 {

// Static round-robin over tiles t = mt * n_tiles + nt (n fastest): every tile costs the same
// K, so CTAs stay balanced within one tile; producer and consumers walk the same sequence.
struct TileScheduler {
  int total, n_tiles, next_t;
  __device__ __forceinline__ TileScheduler(int m_tiles, int n_tiles_)
      : total(m_tiles * n_tiles_), n_tiles(n_tiles_), next_t((int)blockIdx.x) {}
  __device__ __forceinline__ bool next(int& mt, int& nt) {
    if (next_t >= total) return false;
    mt = next_t / n_tiles;
    nt = next_t - mt * n_tiles;
    next_t += (int)gridDim.x;
    return true;
  }
};

// Byte offset, inside a 64 x 64 bf16 store box, of this thread's 4 bytes of n8-chunk q in row
// r0 (row r0 + 8 is at + 8 * 128). Box layout as TMA SWIZZLE_128B reads it: row r at byte
// 128 r, its 16-B chunk q at chunk position q ^ (r & 7). Rows r0 and r0 + 8 both have
// (r & 7) == g; across a warp the 32 words land in banks 4 (q ^ g) + t: all distinct.
__device__ __forceinline__ u32 store_offset(int r0, int q, int g, int t) {
  return (u32)r0 * 128u + (u32)((q ^ g) << 4) + (u32)t * 4u;
}

}  // namespace sm90
