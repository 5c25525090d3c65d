// NVFP4 weights as the register A operand of the decode GEMMs (W4A16): the codes stay 4-bit
// in device memory, in the portable prepared layout (src/backends/portable/layout.cpp:
// row-major e2m1 pairs, the even column in the low nibble; scales [K/32][rows][2] per expert;
// one f32 global scale per expert matrix) with each 32-bit word of codes bit-permuted and each
// e4m3 scale re-encoded at prepare time (w4_format.cuh: pack_word, scale_byte), and are
// dequantized in registers right before the wgmma that consumes them.
//
// Which k a thread holds. In wgmma's A fragment thread (g, t) holds, per k16 step, columns
// 2t, 2t+1, 2t+8, 2t+9 of rows g and g+8: scattered nibbles of the row. Instead the K order
// is permuted inside every 64-column block so that thread t holds the 16 consecutive codes
// t*16 .. t*16+15 of its rows (8 bytes: one 64-bit shared load per row per k-block, one
// 16-element scale group). The activations are stored in the same permuted order (the
// gather for GEMM 1's input, GEMM 1's epilogue for h): a dot product does not care about
// the order of its terms as long as both sides agree. Logical column L of a block:
//   kk = L / 16 (the k16 step), h = L / 8 % 2 (a[0]/a[1] or a[2]/a[3]), t = L / 2 % 4,
//   lo/hi = L % 2  ->  physical column t*16 + (kk / 2)*8 + (kk % 2)*2 + h + 4*lohi,
// chosen so that the bf16 pair of a register, (lo, hi), is codes j and j + 4 of one 32-bit
// word: converted together by pair_bits, on words the backend stored bit-permuted
// (w4_format.cuh, pack_word) so that this costs 1-4 instructions a pair.
//
// Dequantization. An e2m1 code s.e1e0.m placed at bf16 bits 15 (sign) and 8..6 (e1 e0 m)
// is exactly the code's value times 2^-126 (e = 0 lands on the bf16 subnormal m * 2^-127,
// e > 0 on 2^(e-127) * 1.m). The scale, stored as the backend's scale byte (w4_format.cuh,
// scale_byte), becomes bf16 times 2^118 in one multiply-add (scale_pair; exact: 4 significant
// bits, and 448 * 2^118 < the bf16 maximum), so one bf16x2 multiply gives
// code * scale * 2^-8, exactly (at most 6 significant bits); the epilogue multiplies the
// f32 accumulator by global_scale * 2^8.
#pragma once
#include "common/convert.cuh"
#include "sm90/w4_format.cuh"  // physical_k, logical_k, pair_bits, scale_pair

namespace w4 {

// d = a * b, bf16x2, round to nearest (exact here). Subnormal inputs are kept (no .ftz).
__device__ __forceinline__ u32 mul_bf16x2(u32 a, u32 b) {
  u32 d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// The A fragments of one 64-column k-block for rows g (codes wa, scale_pair sa) and g+8
// (wb, sb): a[kk] feeds k16 step kk. wa.x holds codes 0..7 of the thread's 16, wa.y 8..15.
__device__ __forceinline__ void dequant_block(uint2 wa, uint2 wb, u32 sa, u32 sb, u32 (&a)[4][4]) {
  a[0][0] = mul_bf16x2(pair_bits<0>(wa.x), sa);
  a[0][1] = mul_bf16x2(pair_bits<0>(wb.x), sb);
  a[0][2] = mul_bf16x2(pair_bits<1>(wa.x), sa);
  a[0][3] = mul_bf16x2(pair_bits<1>(wb.x), sb);
  a[1][0] = mul_bf16x2(pair_bits<2>(wa.x), sa);
  a[1][1] = mul_bf16x2(pair_bits<2>(wb.x), sb);
  a[1][2] = mul_bf16x2(pair_bits<3>(wa.x), sa);
  a[1][3] = mul_bf16x2(pair_bits<3>(wb.x), sb);
  a[2][0] = mul_bf16x2(pair_bits<0>(wa.y), sa);
  a[2][1] = mul_bf16x2(pair_bits<0>(wb.y), sb);
  a[2][2] = mul_bf16x2(pair_bits<1>(wa.y), sa);
  a[2][3] = mul_bf16x2(pair_bits<1>(wb.y), sb);
  a[3][0] = mul_bf16x2(pair_bits<2>(wa.y), sa);
  a[3][1] = mul_bf16x2(pair_bits<2>(wb.y), sb);
  a[3][2] = mul_bf16x2(pair_bits<3>(wa.y), sa);
  a[3][3] = mul_bf16x2(pair_bits<3>(wb.y), sb);
}

}  // namespace w4
