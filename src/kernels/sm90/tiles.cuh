// What the persistent sm90 GEMMs (grouped_gemm.cuh, fp8_gemm.cuh) share about output tiles:
// the tile order, and grouped_gemm.cuh's epilogue (GEMM_STAGE 1: the gated activation, 2: the
// routing weight) with its swizzled store boxes.
#pragma once
#include "common/convert.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/types.cuh"
#include "sm90/ptx/warpgroup.cuh"
#include "sm90/ring.cuh"
#include "sm90/tile_words.cuh"
#if GEMM_STAGE == 1
#include "sm90/activation.cuh"
#endif

namespace sm90 {

// Tile order: tile_words.cuh claimed_tile (expert by expert, bands of kTileBand m-tiles, n-tile
// major in a band). Each CTA's producer claims its tiles from a global counter (one per GEMM of
// a call, zeroed by the gather before GEMM 1), the next one while it issues the current one's
// stages, so the atomic's latency stays off the ring. However long each tile takes, the CTAs in
// flight then hold neighbouring tiles, which share one or two experts' weights in L2. (A static round-robin lets CTAs that drew cheap
// tiles, e.g. half tiles, drift onto other experts' weights: with half tiles under it, bf16
// T = 8192 / 36308 took 7-15 % longer than without them, c2b8c97 and 88deecd.) The producer
// passes each tile to the consumers with its first stage (ring.cuh stage_word) as
// tile_word(t, half), then kNoMoreTiles (tile_words.cuh, with half_tile).

// m-tiles per band of the claim order: a band's A slices are reread kTileBand claims apart
// (~3 MB of other CTAs' streaming a claim, bf16 GEMM 1), and an expert's B is read from DRAM
// about once per band. 8 over 4 (H100, Mistral-Small-4, 2026-12-06 bands records): bf16
// T = 36308 15148 vs 15550 us, W8A8 10506 vs 10396 us; the m-major order before them took
// 16337 / 10460 us, and 4566 us at bf16 T = 8192 against 3863-3920 with bands.
#ifndef SM90_TILE_BAND
#define SM90_TILE_BAND 8
#endif
constexpr int kTileBand = SM90_TILE_BAND;

// The producer warp's loop, run by all 32 lanes of one warp (lane: this thread's): claims tiles
// in order, and for each issues its k_blocks stages (load(s, full_bar, kb, mt, nt, e) issues
// stage s's TMA loads, stage_bytes in all), its word in the first stage's slot; then the end
// mark. k_blocks >= 1 (the host's K > 0): a tile travels with its first stage.
// Why a warp and not one thread: in a branch taken by one thread (tid == 0) ptxas cannot prove
// the TMA coordinates uniform, so it kept them in vector registers and wrapped each TMA in an
// elect loop moving them over (R2UR): ~100 instructions a stage, and ncu (e639ac2, W8A8 GEMM 1,
// T = 2048) found that producer busy ~80 % of the time, waiting for a free slot only ~15 %,
// while the consumers waited ~30 % for data. In converged code the ring position and the
// coordinates live in uniform registers; lane 0 alone claims tiles and issues (the claim is
// broadcast when the next tile starts, so its latency stays hidden).
template <int BM, int STAGES, class LoadStage>
__device__ __forceinline__ void produce_tiles(u64 (&full)[STAGES], u64 (&empty)[STAGES], int (&tile)[STAGES],
                                              int* __restrict__ counter, int total, int n_tiles, int k_blocks,
                                              const int* __restrict__ tile_expert, const int* __restrict__ counts,
                                              const i64* __restrict__ seg_off, u32 stage_bytes, int lane,
                                              LoadStage load) {
  u32 s = 0, ph = 0;  // ring position: stage, phase (advanced by a compare, not a division per stage)
  int claim = lane == 0 ? atomicAdd(counter, 1) : 0;
  for (int t = __shfl_sync(0xffffffffu, claim, 0); t < total;) {
    if (lane == 0) claim = atomicAdd(counter, 1);  // in flight while this tile's stages are issued
    const int e = tile_expert[t / n_tiles];
    const auto [mt, nt] = claimed_tile(t, n_tiles, int(seg_off[e] / BM), int(seg_off[e + 1] / BM), kTileBand);
    const int word = tile_word(mt * n_tiles + nt, half_tile<BM>(counts, seg_off, e, mt));
    for (int kb = 0; kb < k_blocks; ++kb) {
      mbar_wait(smem_u32(&empty[s]), ph ^ 1u);
      if (lane == 0) {
        if (kb == 0) tile[s] = word;
        mbar_arrive_expect_tx(smem_u32(&full[s]), stage_bytes);  // a release: the word is visible with the stage
        load(s, smem_u32(&full[s]), kb, mt, nt, e);
      }
      __syncwarp();
      if (++s == STAGES) s = 0, ph ^= 1u;
    }
    t = __shfl_sync(0xffffffffu, claim, 0);
  }
  // The end mark, in the next stage's slot once it is free: no TMA bytes, a plain arrive.
  mbar_wait(smem_u32(&empty[s]), ph ^ 1u);
  if (lane == 0) {
    tile[s] = kNoMoreTiles;
    mbar_arrive(smem_u32(&full[s]));
  }
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

// Box j of consumer c's accumulators (64 x 64 bf16, its rows from m_row0), stored as output
// box col_j of n-tile nt (j itself, except on grouped_gemm.cuh's half tiles, where consumer c
// holds the tile's column half c), through its smem buffer `box`: thread 0 waits until the
// store that last read the buffer is done reading, the warpgroup fills it (epi.fill, swizzled)
// and hands it to the async proxy, thread 0 issues the TMA store. Named barrier 1 + c: the
// consumer's 128 threads.
template <class Epilogue, int N>
__device__ __forceinline__ void store_box(Epilogue& epi, const float (&acc)[N], int j, int col_j, unsigned char* box,
                                          const void* tm_d, int nt, int m_row0, int c, int r0, int g, int t,
                                          int tid) {
  if (tid == 0) tma_store_wait_read<1>();
  named_bar_sync(1 + c, 128);
  epi.fill(acc, j, box, r0, g, t);
  fence_proxy_async_smem();  // generic-proxy smem writes -> visible to the TMA store
  named_bar_sync(1 + c, 128);
  if (tid == 0) {
    tma_store_2d(tm_d, epi.col(nt, col_j), m_row0, smem_u32(box));
    tma_store_commit();
  }
}

}  // namespace sm90
