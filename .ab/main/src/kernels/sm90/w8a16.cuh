// FP8 (e4m3, 128-column f32 block scales) weights as bf16 wgmma operands (W8A16): the codes
// stay 8-bit in device memory, in the portable prepared layout (src/backends/portable/
// layout.cpp: e4m3 [rows][KP]; f32 scales [KP/128][rows] per expert matrix, a 128 x 128
// checkpoint block repeated over its rows, or per-channel scales as they come), and are
// dequantized in registers right before their wgmma (decode GEMMs: the A fragments) or into
// the bf16 B tile in shared memory (wide GEMMs).
//
// Value: e4m3 -> f16 is exact (cvt.rn.f16x2.e4m3x2, one instruction per pair), f16 -> f32
// exact, times the f32 scale, rounded once to bf16: the same single rounding a bf16
// checkpoint of the dequantized weights has. (The scale cannot go to the f32 accumulator
// instead: it changes every 128 columns of K.) NaN codes (0x7F / 0xFF) and NaN scales stay NaN.
//
// The decode GEMMs read the K order of sm90/w4_format.cuh (thread t holds the 16 consecutive
// columns t*16 .. t*16+15 of each 64-column block; the activations are stored in the same
// order): one 128-bit shared load per row and 64 columns. Register kk (h) of a row's
// fragment is the pair of bytes o and o + 4, o = (kk / 2) * 8 + (kk % 2) * 2 + h, of those 16.
#pragma once
#include "common/convert.cuh"
#include "sm90/ptx/e4m3.cuh"
#include "sm90/w4_format.cuh"  // physical_k, logical_k: the same K order as W4A16

namespace w8 {

// bf16x2 of (code lo, code hi) * scale, each rounded once (lo in the low half).
__device__ __forceinline__ u32 dequant_pair(u32 v, float scale) {
  float lo, hi;
  e4m3x2_to_f32(v, lo, hi);
  return pack_bf16x2(lo * scale, hi * scale);
}

// Bytes o (low) and o + 4 (high) of the 8 bytes {x, y} (o < 4).
template <int O>
__device__ __forceinline__ u32 byte_pair(u32 x, u32 y) {
  return __byte_perm(x, y, O | (O + 4) << 4);
}

// The A fragments of one 64-column k-block for row g (R = 0: registers 0 and 2 of each k16
// step) or row g + 8 (R = 1: registers 1 and 3) from the row's 16 codes w and its scale: a[kk]
// feeds k16 step kk. One row at a time keeps the codes of only one row live (the 80-register
// budget of two CTAs per SM at 64-token tiles).
template <int R>
__device__ __forceinline__ void dequant_row(uint4 w, float scale, u32 (&a)[4][4]) {
  a[0][R] = dequant_pair(byte_pair<0>(w.x, w.y), scale);
  a[0][2 + R] = dequant_pair(byte_pair<1>(w.x, w.y), scale);
  a[1][R] = dequant_pair(byte_pair<2>(w.x, w.y), scale);
  a[1][2 + R] = dequant_pair(byte_pair<3>(w.x, w.y), scale);
  a[2][R] = dequant_pair(byte_pair<0>(w.z, w.w), scale);
  a[2][2 + R] = dequant_pair(byte_pair<1>(w.z, w.w), scale);
  a[3][R] = dequant_pair(byte_pair<2>(w.z, w.w), scale);
  a[3][2 + R] = dequant_pair(byte_pair<3>(w.z, w.w), scale);
}

}  // namespace w8
