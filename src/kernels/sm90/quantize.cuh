// FP8 activations for the W8A8 GEMMs (sm90/fp8_gemm.cuh): a bf16 row of K values becomes K
// e4m3 codes and K/128 f32 scales, bit for bit as formats::quantize_fp8_group128 defines
// them (scale = group amax / 448, 1 if that is 0; code = RNE(x / scale), clamped to +-448;
// a group holding a NaN or an Inf gets a NaN scale and NaN codes 0x7F).
//
// Layout (what the GEMMs' tensor maps read): in a buffer of bf16 rows (row stride 2K bytes),
// row r's codes fill bytes [0, K) of the row; its K/128 scales go to the rows' second halves,
// which the codes leave free, in one of two places:
//   SCALES_TILED 0 (the decode GEMMs): in row r itself, bytes [K, K + K/32), group g at float
//     K/4 + g. A token tile's scales of one k-block are then a box {4 floats, BT rows}.
//   SCALES_TILED 1 (the wide QGMMA GEMMs, fp8_gemm.cuh): transposed per 32 rows: the scales of
//     rows 32j .. 32j + 31 in row 32j's second half, row r's of group g at float
//     K/4 + 32 g + r % 32 of row r - r % 32. A tile's 128 scales of one k-block are then a box
//     {32 floats, 4 rows} of a map whose rows are every 32nd row: 4 TMA requests of 128 bytes
//     where the in-row layout needs 128 of 16 bytes, one for each row (the tile's codes are 128
//     requests, so the scales had made a third of the requests of a stage). Each 32 rows hold
//     their own scales, so in place the quantizer splits a tile over blocks of 32 rows (the
//     first version put a tile's scales in its first four rows, one block a tile: 208 blocks
//     at T = 2048 on 132 SMs, the busiest SM 1.81 x the average, 38.8 us, ncu b8ce99c).
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
// Defines: QUANT_K (K, a multiple of 128), SCALES_TILED (0 or 1).
#pragma once
#include "common/grid_dependency.cuh"
#include "sm90/fp8_group.cuh"
#include "sm90/ptx/e4m3.cuh"

#if (QUANT_K % 128) != 0
#error "sm90/quantize.cuh needs QUANT_K % 128 == 0"
#endif

namespace sm90q {

constexpr int kSteps = (QUANT_K + 255) / 256, kBatch = 4;

// Where a row's scales go: group g at at[g * stride] (see the layouts above).
struct ScaleSlots {
  float* at;
  int stride;
};
// Row r_tile of the 128-row tile whose first row is tile_row0 (a buffer of QUANT_K-value bf16 rows).
__device__ __forceinline__ ScaleSlots scale_slots(u16* tile_row0, int r_tile) {
#if SCALES_TILED
  float* base = reinterpret_cast<float*>(tile_row0 + (r_tile - r_tile % 32) * QUANT_K);
  return {base + QUANT_K / 4 + r_tile % 32, 32};
#else
  return {reinterpret_cast<float*>(tile_row0 + r_tile * QUANT_K) + QUANT_K / 4, 1};
#endif
}

// One warp's scales of one row: lanes 0 and 16 hold the group scales of their half-steps.
struct RowScales {
  float s[kSteps];
  __device__ __forceinline__ void store(ScaleSlots out) const {
    const int lane = threadIdx.x & 31, half = lane >> 4, sub = lane & 15;
    if (sub == 0) {
#pragma unroll
      for (int i = 0; i < kSteps; ++i)
        if (2 * i + half < QUANT_K / 128) out.at[(2 * i + half) * out.stride] = s[i];
    }
  }
};

// One warp: bf16 row src (QUANT_K values) -> codes, handed to store_codes(col, c) (8 codes,
// columns col .. col + 7, a lane's of one step); returns the scales, to be stored once the row
// is read whole (RowScales::store). The codes may overwrite src itself (in place, see above).
template <class StoreCodes>
__device__ __forceinline__ RowScales quantize_row(const u16* src, StoreCodes&& store_codes) {
  const int lane = threadIdx.x & 31;
  RowScales out;
  float (&scales)[kSteps] = out.s;  // this half's group scale of each step
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
      u32 amax = amax_bits(w);
#pragma unroll
      for (int o = 8; o > 0; o >>= 1)  // within the 16 lanes of the group
        amax = max(amax, __shfl_xor_sync(~0u, amax, o));
      const GroupQuant q(amax);
      scales[b0 + i] = q.scale;
      float x[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        x[2 * j] = bf16_to_f32(w[j] & 0xFFFFu);
        x[2 * j + 1] = bf16_to_f32(w[j] >> 16);
      }
      q.divide(x);
      const int col = (b0 + i) * 256 + lane * 8;
      if (col < QUANT_K) {
        uint2 c;
        c.x = q.codes4(x[0], x[1], x[2], x[3]);
        c.y = q.codes4(x[4], x[5], x[6], x[7]);
        store_codes(col, c);
      }
    }
  }
  __syncwarp();  // the whole row was read before its scales may overwrite its second half
  return out;
}

// quantize_row with the codes into row dst's first K bytes (dst may be src).
__device__ __forceinline__ RowScales quantize_row_to(const u16* src, unsigned char* dst) {
  return quantize_row(src, [dst](int col, uint2 c) { *reinterpret_cast<uint2*>(dst + col) = c; });
}

}  // namespace sm90q

#ifndef QUANT_NO_KERNEL
// grid = (tile bound, 4): 128-row tiles (tiles past *num_tiles exit), 32 rows a block (the
// rows that share a scale row, SCALES_TILED); block = 256 (8 warps, each a row in turn).
// buf: [rows, QUANT_K] bf16, rewritten in place as codes + scales (rows past an expert's count:
// untouched; nothing reads them).
constexpr int kQuantizeBlockRows = 32;
extern "C" __global__ void __launch_bounds__(256)
    moe_sm90_quantize_rows(u16* __restrict__ buf, const int* __restrict__ counts, const i64* __restrict__ seg_off,
                           const int* __restrict__ num_tiles, const int* __restrict__ tile_expert) {
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  const int tile = blockIdx.x;
  if (tile >= *num_tiles) return;  // the whole block: before the barrier
  const int e = tile_expert[tile];
  const i64 valid = seg_off[e] + counts[e] - (i64)tile * 128;  // rows of the tile (and past it)
  const int r0 = blockIdx.y * kQuantizeBlockRows;
  const int r_end = (int)min((i64)(r0 + kQuantizeBlockRows), valid);
  u16* tile_row0 = buf + (i64)tile * 128 * QUANT_K;
  const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int r = r0 + warp;
#if SCALES_TILED
  // The block's rows store their scales in row r0's second half: in place, r0 must have been
  // read whole first. Its first pass (one row a warp, r0 among them) is quantized, the block
  // syncs, then those scales are stored, and the later rows' as each is done.
  const bool first = r < r_end;  // warp-uniform
  sm90q::RowScales first_scales;
  if (first) first_scales = sm90q::quantize_row_to(tile_row0 + (i64)r * QUANT_K,
                                                reinterpret_cast<unsigned char*>(tile_row0 + (i64)r * QUANT_K));
  __syncthreads();
  if (first) first_scales.store(sm90q::scale_slots(tile_row0, r));
  r += warps;
#endif
  for (; r < r_end; r += warps) {
    u16* p = tile_row0 + (i64)r * QUANT_K;
    sm90q::quantize_row_to(p, reinterpret_cast<unsigned char*>(p)).store(sm90q::scale_slots(tile_row0, r));
  }
}
#endif
