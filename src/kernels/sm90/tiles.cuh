// What the persistent sm90 GEMMs (grouped_gemm.cuh, fp8_gemm.cuh) share about output tiles:
// the tile order and the epilogue (GEMM_STAGE 1: the gated activation, 2: the routing weight)
// with its swizzled store boxes.
#pragma once
#include "common/convert.cuh"
#include "sm90/ptx/types.cuh"
#if GEMM_STAGE == 1
#include "sm90/activation.cuh"
#endif

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

// True when m-tile mt (of expert e, BM rows from the padded segment's start) holds at most 64
// of the expert's rows: the second consumer warpgroup's 64 rows are all padding, and it skips
// the tile (no wgmma, no store; the tensor pipe runs one m64 stream for it instead of two).
// With ~256 rows an expert (Mistral-Small-4 at T = 8192) about one tile in five is such a tile;
// at T = 2048 (~64 rows an expert) about half the routed experts' only tile is.
template <int BM>
__device__ __forceinline__ bool half_tile(const int* __restrict__ counts, const i64* __restrict__ seg_off, int e,
                                          int mt) {
  return seg_off[e] + counts[e] - (i64)mt * BM <= 64;
}

// Byte offset, inside a 64 x 64 bf16 store box, of this thread's 4 bytes of n8-chunk q in row
// r0 (row r0 + 8 is at + 8 * 128). Box layout as TMA SWIZZLE_128B reads it: row r at byte
// 128 r, its 16-B chunk q at chunk position q ^ (r & 7). Rows r0 and r0 + 8 both have
// (r & 7) == g; across a warp the 32 words land in banks 4 (q ^ g) + t: all distinct.
__device__ __forceinline__ u32 store_offset(int r0, int q, int g, int t) {
  return (u32)r0 * 128u + (u32)((q ^ g) << 4) + (u32)t * 4u;
}

// A BM x BN tile's epilogue, for a consumer warpgroup's 64 rows (rows c*64 .. of the tile):
// its f32 accumulators (BN / 2 per thread, the wgmma fragment layout) become 64 x 64 bf16
// store boxes (store_offset), box j at output column col(nt, j).
#if GEMM_STAGE == 1
// GEMM 1: the tile's BN weight rows interleave gate and up in chunks of 8 (layout.cpp), so
// n8-chunk pair (2p, 2p + 1) gives output features 8p .. 8p + 7: BN / 2 features a tile.
template <int BM, int BN>
struct TileEpilogue {
  static constexpr int kBoxes = BN / 2 / 64;
  __device__ __forceinline__ void begin_tile(int mt, int c, int r0) {}
  __device__ __forceinline__ void fill(const float (&acc)[BN / 2], int j, unsigned char* box, int r0, int g, int t) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int p = j * 8 + q;  // output chunk: features 8p .. 8p + 7 of this tile's BN / 2
      const float* gate = &acc[8 * p];
      const float* up = &acc[8 * p + 4];
      const u32 off = store_offset(r0, q, g, t);
      *reinterpret_cast<u32*>(box + off) = pack_bf16x2(activate(gate[0], up[0]), activate(gate[1], up[1]));
      *reinterpret_cast<u32*>(box + off + 8 * 128) = pack_bf16x2(activate(gate[2], up[2]), activate(gate[3], up[3]));
    }
  }
  __device__ __forceinline__ int col(int nt, int j) const { return nt * (BN / 2) + j * 64; }
};
#else
// GEMM 2: y = scale[row] * acc (the routing weight; 1 for shared experts, 0 for padding).
template <int BM, int BN>
struct TileEpilogue {
  static constexpr int kBoxes = BN / 64;
  const float* __restrict__ row_scale;
  float s0, s1;
  __device__ __forceinline__ void begin_tile(int mt, int c, int r0) {
    const i64 m_row0 = (i64)mt * BM + c * 64;
    s0 = row_scale[m_row0 + r0];
    s1 = row_scale[m_row0 + r0 + 8];
  }
  __device__ __forceinline__ void fill(const float (&acc)[BN / 2], int j, unsigned char* box, int r0, int g, int t) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int i = j * 8 + q;  // n8-chunk of the accumulator
      const u32 off = store_offset(r0, q, g, t);
      *reinterpret_cast<u32*>(box + off) = pack_bf16x2(acc[4 * i + 0] * s0, acc[4 * i + 1] * s0);
      *reinterpret_cast<u32*>(box + off + 8 * 128) = pack_bf16x2(acc[4 * i + 2] * s1, acc[4 * i + 3] * s1);
    }
  }
  __device__ __forceinline__ int col(int nt, int j) const { return nt * BN + j * 64; }
};
#endif

}  // namespace sm90
