// Combine: out[t] = sum_j y[row_of[t*TOPK + j]] for j = 0..TOPK-1 (slot order), then
// + y[seg_off[E + s] + t] for each shared expert s, in f32, written in x's dtype.
// y rows already carry the routing weight (GEMM 2 epilogue). Deterministic: a fixed
// summation order, no atomics. A token with any invalid id (row_of = -1) gets a NaN row.
//
// y is f32 from the portable GEMM 2, bf16 from the sm90 one (Y_BF16 = 1): the sum is f32 either way.
//
// Defines: E, E_TOTAL, TOPK, HIDDEN, OUT_F16 (0: bf16 out, 1: f16 out), Y_BF16 (default 0).
#pragma once
#include "common/convert.cuh"
#include "common/grid_dependency.cuh"
#include "common/types.cuh"

#ifndef Y_BF16
#define Y_BF16 0
#endif
#if Y_BF16
typedef u16 combine_y_t;
#else
typedef float combine_y_t;
#endif
#if (HIDDEN % 4) != 0
#error "combine.cuh needs HIDDEN % 4 == 0"
#endif

// grid.x = tokens of the chunk, grid.y = column slices of a row (decode sizes: a token's row is
// then summed by several blocks at once, one pass of loads each instead of HIDDEN / 1024 passes
// in turn), block = 256.
extern "C" __global__ void __launch_bounds__(256)
    moe_combine(const combine_y_t* __restrict__ y, const int* __restrict__ row_of, const i64* __restrict__ seg_off,
                void* __restrict__ out) {
  constexpr int NR = TOPK + (E_TOTAL - E);
  __shared__ i64 rows[NR];
  __shared__ int bad;
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  const i64 t = blockIdx.x;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (int j = threadIdx.x; j < NR; j += blockDim.x) {
    i64 r;
    if (j < TOPK) {
      r = row_of[t * TOPK + j];
      if (r < 0) bad = 1;
    } else {
      r = seg_off[E + (j - TOPK)] + t;
    }
    rows[j] = r;
  }
  __syncthreads();
  const bool nan_row = bad != 0;
  for (int c = (blockIdx.y * blockDim.x + threadIdx.x) * 4; c < HIDDEN; c += gridDim.y * blockDim.x * 4) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    if (nan_row) {
      const float n = __int_as_float(0x7fc00000);
      s = make_float4(n, n, n, n);
    } else {
#pragma unroll 4
      for (int j = 0; j < NR; ++j) {
#if Y_BF16
        const uint2 b = *reinterpret_cast<const uint2*>(y + rows[j] * HIDDEN + c);
        const float4 v = make_float4(bf16_to_f32(b.x & 0xFFFFu), bf16_to_f32(b.x >> 16), bf16_to_f32(b.y & 0xFFFFu),
                                     bf16_to_f32(b.y >> 16));
#else
        const float4 v = *reinterpret_cast<const float4*>(y + rows[j] * HIDDEN + c);
#endif
        s.x += v.x;
        s.y += v.y;
        s.z += v.z;
        s.w += v.w;
      }
    }
    uint2 o;
#if OUT_F16
    o.x = (u32)f32_to_f16(s.x) | ((u32)f32_to_f16(s.y) << 16);
    o.y = (u32)f32_to_f16(s.z) | ((u32)f32_to_f16(s.w) << 16);
#else
    o.x = pack_bf16x2(s.x, s.y);
    o.y = pack_bf16x2(s.z, s.w);
#endif
    *reinterpret_cast<uint2*>(reinterpret_cast<u16*>(out) + t * HIDDEN + c) = o;
  }
}
