// Portable grouped GEMM over the expert-contiguous padded layout (mma.sync m16n8k16).
//
//   GEMM_STAGE 1:  h[row, :] = act(A[row] . W13[e]^T + b13[e])   A = x rows gathered by token
//   GEMM_STAGE 2:  y[row, :] = (h[row] . W2[e]^T + b2[e]) * weight[row]   (f32 out)
//
// Grid: x = M tile (bounded on the host by ceil((T*k + E_TOTAL*(BM-1)) / BM); tiles past
// *num_tiles exit at once), y = N tile. Tile m covers padded rows [m*BM, m*BM + BM) of
// expert tile_expert[m]; rows past the expert's count are padding: their A rows are
// zero-filled (cp.async src-size 0) and their outputs are never stored.
//
// Layouts (prepared once by src/backends/portable/layout.cpp; K padded to KP, a multiple
// of BK = 32, with zero weights, so no B load is ever partial):
//   W  [E_TOTAL][GEMM_N][KP] in WFMT: 0 bf16 (2 B), 1 fp8 e4m3 (1 B), 2 nvfp4 / 3 mxfp4
//      (e2m1, 2 per byte, element 2j in the low nibble).
//   Wsc  fp8:   f32 [E_TOTAL][KP/128 (ceil)][GEMM_N]  one scale per (row, 128-column block)
//        nvfp4: e4m3 [E_TOTAL][KP/32][GEMM_N][2]     two 16-element scales per (row, k-tile)
//        mxfp4: ue8m0 [E_TOTAL][KP/32][GEMM_N]       one 32-element scale per (row, k-tile)
//      so the scales of one (k-tile, BN rows) are contiguous and travel by cp.async too.
//   wglobal [E_TOTAL] f32: the NVFP4 global scale, applied to the accumulator in the epilogue.
//   GEMM 1's W13 rows are interleaved in blocks of 8: rows 16b..16b+7 = gate rows
//   8b..8b+7, rows 16b+8..16b+15 = up rows I+8b..; so the n8 sub-tiles 2p and 2p+1 of a
//   warp hold matching gate and up columns in the same thread's registers (C fragment
//   column 2t(+1) of both), and the activation is computed in registers.
//
// Dequantization keeps the exact values of QuantMatrix::dequantize_rows:
//   bf16: as is.  nvfp4 / mxfp4: e2m1 * block scale is exact in bf16 (<= 8 significant
//   bits) and staged as bf16; the NVFP4 global scale multiplies the f32 accumulator.
//   fp8: e4m3 is exact in bf16; products of one 128-wide K block are accumulated apart and
//   added times the block scale (per output column) to the f32 accumulator (as DeepGEMM
//   promotes its FP8 accumulators), so no weight is ever rounded.
//
// Main loop: STAGES-deep cp.async ring (A tile, raw B tile, B scales); quantized formats
// then convert the raw tile of the current k-tile into one bf16 tile (bc) between two
// barriers; ldmatrix.x4 reads A and B fragments from rows padded to 40 halves (80 bytes:
// the 8 rows of one 8x8 matrix land on 8 distinct 16-byte bank groups).
//
// Defines: GEMM_STAGE, E, E_TOTAL, GEMM_N, GEMM_K, GEMM_KP, A_LD, BM, BN, WARPS_M, WARPS_N,
// STAGES, WFMT, ACT (0 SwiGLU, 1 GeGLU tanh, 2 clamped SwiGLU), ACT_ALPHA, ACT_LIMIT
// (float literals), HAS_BIAS.
#pragma once
#include "common/convert.cuh"
#include "common/grid_dependency.cuh"
#include "common/ptx_sm80.cuh"
#include "common/types.cuh"

#define GG_BK 32
#define GG_LDS (GG_BK + 8)  // smem row stride in halves (80 bytes)
#define GG_THREADS (32 * WARPS_M * WARPS_N)
#define GG_WM (BM / WARPS_M)
#define GG_WN (BN / WARPS_N)
#define GG_MT (GG_WM / 16)
#define GG_NT (GG_WN / 8)
#define GG_KT (GEMM_KP / GG_BK)

#if (GG_WM % 16) != 0 || (GG_WN % 16) != 0 || (GEMM_KP % GG_BK) != 0 || (BN % 16) != 0 || STAGES < 2
#error "grouped_gemm.cuh: bad tile configuration"
#endif
#if GEMM_STAGE == 1 && (GEMM_N % 16) != 0
#error "grouped_gemm.cuh: GEMM 1 needs 2I % 16 == 0 (gate/up interleave in blocks of 8)"
#endif

#if WFMT == 0
#define GG_ROW_BYTES ((i64)GEMM_KP * 2)
#elif WFMT == 1
#define GG_ROW_BYTES ((i64)GEMM_KP)
#define GG_RAW_ROW 32
#define GG_SCALE_BYTES (BN * 4)
#else
#define GG_ROW_BYTES ((i64)GEMM_KP / 2)
#define GG_RAW_ROW 16
#if WFMT == 2
#define GG_SCALE_BYTES (BN * 2)
#else
#define GG_SCALE_BYTES (BN)
#endif
#endif

namespace gg {

// Shared memory of one block. Every member is a multiple of 16 bytes (cp.async targets).
struct Smem {
  u16 a[STAGES][BM][GG_LDS];
#if WFMT == 0
  u16 b[STAGES][BN][GG_LDS];
#else
  u8 braw[STAGES][BN][GG_RAW_ROW];
  u8 bscale[STAGES][GG_SCALE_BYTES];
  u16 bc[BN][GG_LDS];
#endif
};
static_assert(sizeof(u16) * BM * GG_LDS % 16 == 0, "A stage must keep 16-byte alignment");

__device__ __forceinline__ float activate(float g, float u) {
#if ACT == 0
  return g / (1.0f + expf(-g)) * u;  // silu(g) * u; g -> -inf gives -0, not NaN
#elif ACT == 1
  return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
#else
  const float L = (float)(ACT_LIMIT);
  g = g > L ? L : g;                       // comparisons keep NaN (as the reference)
  u = u > L ? L : (u < -L ? -L : u);
  return (u + 1.0f) * g / (1.0f + expf(-(float)(ACT_ALPHA) * g));
#endif
}

}  // namespace gg

// grid = (M tile bound, ceil(GEMM_N / BN)), block = GG_THREADS, dynamic smem = sizeof(gg::Smem).
extern "C" __global__ void __launch_bounds__(GG_THREADS)
    moe_grouped_gemm(const u16* __restrict__ A, const u8* __restrict__ W, const u8* __restrict__ Wsc,
                     const float* __restrict__ wglobal, const float* __restrict__ bias,
                     const i64* __restrict__ seg_off, const int* __restrict__ counts,
                     const int* __restrict__ tile_expert, const int* __restrict__ num_tiles,
                     const int* __restrict__ row_token, const float* __restrict__ row_weight,
                     void* __restrict__ out) {
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  const int tile = blockIdx.x;
  if (tile >= num_tiles[0]) return;  // surplus block of the host's upper bound
  extern __shared__ __align__(16) u8 smem_raw[];
  gg::Smem& sm = *reinterpret_cast<gg::Smem*>(smem_raw);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int e = tile_expert[tile];
  const i64 row0 = (i64)tile * BM;
  const i64 seg_rows = seg_off[e] + counts[e] - row0;
  const int valid = seg_rows < BM ? (int)seg_rows : BM;
  const int n0 = blockIdx.y * BN;
  const int wm0 = (warp / WARPS_N) * GG_WM, wn0 = (warp % WARPS_N) * GG_WN;

  // ---- A sources: each thread copies the same rows/chunks at every k-tile ----
  constexpr int A_CHUNKS = BM * (GG_BK / 8);
  constexpr int A_PER = (A_CHUNKS + GG_THREADS - 1) / GG_THREADS;
  const u16* a_src[A_PER];
  bool a_ok[A_PER];
#pragma unroll
  for (int i = 0; i < A_PER; ++i) {
    const int c = tid + i * GG_THREADS, r = c >> 2, ch = c & 3;
    a_ok[i] = c < A_CHUNKS && r < valid;
    a_src[i] = A;
    if (a_ok[i]) {
#if GEMM_STAGE == 1
      const i64 tok = e < E ? (i64)row_token[row0 + r] : row0 + r - seg_off[e];
#else
      const i64 tok = row0 + r;
#endif
      a_src[i] = A + tok * (i64)A_LD + ch * 8;
    }
  }
  const u8* wbase = W + (i64)e * GEMM_N * GG_ROW_BYTES;
#if WFMT == 1
  const u8* sbase = Wsc + (i64)e * ((GEMM_KP + 127) / 128) * GEMM_N * 4;
#elif WFMT == 2
  const u8* sbase = Wsc + (i64)e * GG_KT * GEMM_N * 2;
#elif WFMT == 3
  const u8* sbase = Wsc + (i64)e * GG_KT * GEMM_N;
#endif

  auto load_stage = [&](int st, int kt) {
    const int k0 = kt * GG_BK;
#pragma unroll
    for (int i = 0; i < A_PER; ++i) {
      const int c = tid + i * GG_THREADS;
      if (c < A_CHUNKS) {
        const int r = c >> 2, ch = c & 3;
        const bool ok = a_ok[i] && k0 + ch * 8 < GEMM_K;
        cp_async16(&sm.a[st][r][ch * 8], ok ? (const void*)(a_src[i] + k0) : (const void*)A, ok);
      }
    }
#if WFMT == 0
    for (int c = tid; c < BN * 4; c += GG_THREADS) {
      const int n = c >> 2, ch = c & 3;
      const bool ok = n0 + n < GEMM_N;
      const u8* src = ok ? wbase + (i64)(n0 + n) * GG_ROW_BYTES + (k0 + ch * 8) * 2 : W;
      cp_async16(&sm.b[st][n][ch * 8], src, ok);
    }
#elif WFMT == 1
    for (int c = tid; c < BN * 2; c += GG_THREADS) {
      const int n = c >> 1, ch = c & 1;
      const bool ok = n0 + n < GEMM_N;
      cp_async16(&sm.braw[st][n][ch * 16], ok ? wbase + (i64)(n0 + n) * GG_ROW_BYTES + k0 + ch * 16 : W, ok);
    }
    for (int c = tid; c < BN / 4; c += GG_THREADS) {
      const bool ok = n0 + 4 * c < GEMM_N;
      cp_async16(&sm.bscale[st][16 * c], ok ? sbase + ((i64)(kt >> 2) * GEMM_N + n0 + 4 * c) * 4 : Wsc, ok);
    }
#else
    for (int c = tid; c < BN; c += GG_THREADS) {
      const bool ok = n0 + c < GEMM_N;
      cp_async16(&sm.braw[st][c][0], ok ? wbase + (i64)(n0 + c) * GG_ROW_BYTES + kt * 16 : W, ok);
    }
#if WFMT == 2
    for (int c = tid; c < BN / 8; c += GG_THREADS) {
      const bool ok = n0 + 8 * c < GEMM_N;
      cp_async16(&sm.bscale[st][16 * c], ok ? sbase + ((i64)kt * GEMM_N + n0 + 8 * c) * 2 : Wsc, ok);
    }
#else
    for (int c = tid; c < BN / 16; c += GG_THREADS) {
      const bool ok = n0 + 16 * c < GEMM_N;
      cp_async16(&sm.bscale[st][16 * c], ok ? sbase + (i64)kt * GEMM_N + n0 + 16 * c : Wsc, ok);
    }
#endif
#endif
  };

  float acc[GG_MT][GG_NT][4];
#pragma unroll
  for (int mi = 0; mi < GG_MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < GG_NT; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
#if WFMT == 1
  float part[GG_MT][GG_NT][4];  // one 128-wide K block, before its scale
#pragma unroll
  for (int mi = 0; mi < GG_MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < GG_NT; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) part[mi][ni][q] = 0.0f;
#define GG_ACC part
#else
#define GG_ACC acc
#endif

  // ---- prologue: STAGES-1 k-tiles in flight (one commit group each, empty past the end) ----
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < GG_KT) load_stage(s, s);
    cp_async_commit();
  }

#pragma unroll 1
  for (int kt = 0; kt < GG_KT; ++kt) {
    cp_async_wait<STAGES - 2>();  // k-tile kt has landed (this thread's copies)
    __syncthreads();              // ... everyone's; and everyone is done with k-tile kt-1
    {
      const int nk = kt + STAGES - 1;
      if (nk < GG_KT) load_stage(nk % STAGES, nk);  // refills the slot k-tile kt-1 used
      cp_async_commit();
    }
    const int st = kt % STAGES;
#if WFMT != 0
    // Raw k-tile -> bf16 tile bc. Item c: row n = c/2, 16 elements from k = 16*(c%2).
    for (int c = tid; c < BN * 2; c += GG_THREADS) {
      const int n = c >> 1, h = c & 1;
      u32 o[8];
#if WFMT == 1
      const uint4 raw = *reinterpret_cast<const uint4*>(&sm.braw[st][n][16 * h]);
      const u32 w4[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const u32 word = w4[i >> 1], sh = (i & 1) * 16;
        o[i] = e4m3_to_bf16_bits((word >> sh) & 0xFFu) | (e4m3_to_bf16_bits((word >> (sh + 8)) & 0xFFu) << 16);
      }
#else
      const uint2 raw = *reinterpret_cast<const uint2*>(&sm.braw[st][n][8 * h]);
#if WFMT == 2
      const float scale = e4m3_to_f32(sm.bscale[st][2 * n + h]);
#else
      const float scale = ue8m0_to_f32(sm.bscale[st][n]);
#endif
#pragma unroll
      for (int i = 0; i < 8; ++i) {  // byte i holds elements 2i (low nibble) and 2i+1
        const u32 byte = ((i < 4 ? raw.x : raw.y) >> (8 * (i & 3))) & 0xFFu;
        o[i] = e2m1_scaled_bf16_bits(byte & 0xFu, scale) | (e2m1_scaled_bf16_bits(byte >> 4, scale) << 16);
      }
#endif
      *reinterpret_cast<uint4*>(&sm.bc[n][16 * h]) = make_uint4(o[0], o[1], o[2], o[3]);
      *reinterpret_cast<uint4*>(&sm.bc[n][16 * h + 8]) = make_uint4(o[4], o[5], o[6], o[7]);
    }
    __syncthreads();
    const u16(*Bs)[GG_LDS] = sm.bc;
#else
    const u16(*Bs)[GG_LDS] = sm.b[st];
#endif
    const u16(*As)[GG_LDS] = sm.a[st];

#pragma unroll
    for (int ks = 0; ks < GG_BK / 16; ++ks) {
      // A fragments: matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) -> a0..a3; lane L
      // addresses row L%16, k-offset 8*(L/16).
      u32 af[GG_MT][4];
#pragma unroll
      for (int mi = 0; mi < GG_MT; ++mi)
        ldmatrix_x4(af[mi], &As[wm0 + 16 * mi + (lane & 15)][16 * ks + (lane >> 4) * 8]);
      // B fragments from [n][k] rows (k contiguous): matrix q of lane group q = L/8 is
      // (n 8*(q/2).., k 8*(q%2)..): b0,b1 of sub-tile 2p, then b0,b1 of sub-tile 2p+1.
      u32 bfr[GG_NT][2];
#pragma unroll
      for (int np = 0; np < GG_NT / 2; ++np) {
        u32 r[4];
        ldmatrix_x4(r, &Bs[wn0 + 16 * np + (lane & 7) + ((lane >> 4) << 3)][16 * ks + ((lane >> 3) & 1) * 8]);
        bfr[2 * np][0] = r[0];
        bfr[2 * np][1] = r[1];
        bfr[2 * np + 1][0] = r[2];
        bfr[2 * np + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < GG_MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < GG_NT; ++ni) mma_bf16_16816(GG_ACC[mi][ni], af[mi], bfr[ni][0], bfr[ni][1]);
    }

#if WFMT == 1
    if ((kt & 3) == 3 || kt == GG_KT - 1) {  // end of a 128-wide K block: apply its scales
      const float* sc = reinterpret_cast<const float*>(sm.bscale[st]);
#pragma unroll
      for (int ni = 0; ni < GG_NT; ++ni) {
        const int col = wn0 + 8 * ni + 2 * (lane & 3);
        const float s0 = sc[col], s1 = sc[col + 1];
#pragma unroll
        for (int mi = 0; mi < GG_MT; ++mi) {
          acc[mi][ni][0] += part[mi][ni][0] * s0;
          acc[mi][ni][1] += part[mi][ni][1] * s1;
          acc[mi][ni][2] += part[mi][ni][2] * s0;
          acc[mi][ni][3] += part[mi][ni][3] * s1;
#pragma unroll
          for (int q = 0; q < 4; ++q) part[mi][ni][q] = 0.0f;
        }
      }
    }
#endif
  }
  cp_async_wait<0>();

  // ---- epilogue ----
#if WFMT == 2
  const float gs = wglobal[e];
#else
  const float gs = 1.0f;
#endif
  const int g = lane >> 2, t4 = lane & 3;
#if GEMM_STAGE == 1
  constexpr int I_OUT = GEMM_N / 2;
  u16* h = reinterpret_cast<u16*>(out);
#if HAS_BIAS
  const float* b = bias + (i64)e * GEMM_N;
#endif
#pragma unroll
  for (int mi = 0; mi < GG_MT; ++mi)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = wm0 + 16 * mi + g + 8 * hf;
      if (r >= valid) continue;
      const i64 R = row0 + r;
#pragma unroll
      for (int p = 0; p < GG_NT / 2; ++p) {
        const int ng = n0 + wn0 + 16 * p + 2 * t4;  // gate row (interleaved), up row = ng + 8
        if (ng >= GEMM_N) continue;
        float gt0 = acc[mi][2 * p][2 * hf] * gs, gt1 = acc[mi][2 * p][2 * hf + 1] * gs;
        float up0 = acc[mi][2 * p + 1][2 * hf] * gs, up1 = acc[mi][2 * p + 1][2 * hf + 1] * gs;
#if HAS_BIAS
        gt0 += b[ng];
        gt1 += b[ng + 1];
        up0 += b[ng + 8];
        up1 += b[ng + 9];
#endif
        const int col = (n0 + wn0 + 16 * p) / 2 + 2 * t4;
        *reinterpret_cast<u32*>(h + R * I_OUT + col) = pack_bf16x2(gg::activate(gt0, up0), gg::activate(gt1, up1));
      }
    }
#else
  float* y = reinterpret_cast<float*>(out);
#if HAS_BIAS
  const float* b = bias + (i64)e * GEMM_N;
#endif
#pragma unroll
  for (int mi = 0; mi < GG_MT; ++mi)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = wm0 + 16 * mi + g + 8 * hf;
      if (r >= valid) continue;
      const i64 R = row0 + r;
      const float w = e < E ? row_weight[R] : 1.0f;
#pragma unroll
      for (int ni = 0; ni < GG_NT; ++ni) {
        const int col = n0 + wn0 + 8 * ni + 2 * t4;
        if (col >= GEMM_N) continue;
        float v0 = acc[mi][ni][2 * hf] * gs, v1 = acc[mi][ni][2 * hf + 1] * gs;
#if HAS_BIAS
        v0 += b[col];
        v1 += b[col + 1];
#endif
        *reinterpret_cast<float2*>(y + R * GEMM_N + col) = make_float2(v0 * w, v1 * w);
      }
    }
#endif
}
