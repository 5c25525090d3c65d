// The W4A16 formats' pure integer parts (see w4a16.cuh for why): the K order and the e2m1
// code -> bf16 bit placement. Plain constexpr code, also compiled as host C++ by
// tests/cpu/test_sm90_backend.cpp, which checks them exhaustively.
#pragma once
#include "common/host_device.cuh"

namespace w4 {

constexpr int kBlock = 64;  // the permutation's period (K must be a multiple)

// Physical column (the weights' order) of logical column L (the fragment's order), L < 64.
MOE_HD constexpr int physical_k(int L) {
  const int kk = L >> 4, h = (L >> 3) & 1, t = (L >> 1) & 3, lohi = L & 1;
  return t * 16 + (kk >> 1) * 8 + (kk & 1) * 2 + h + 4 * lohi;
}
// The permuted-K gather (sm90/gather.cuh) moves 8-column vectors: output vector j of a 64-column
// block (logical columns 8j .. 8j + 7) takes logical columns 8j + 2t and 8j + 2t + 1 from
// elements gather_src_elem(j) and gather_src_elem(j) + 4 of the block's vector gather_src_vec(j, t).
MOE_HD constexpr int gather_src_vec(int j, int t) { return 2 * t + (j >> 2); }
MOE_HD constexpr int gather_src_elem(int j) { return j & 3; }
// Its inverse: where physical column p is stored in the activations.
MOE_HD constexpr int logical_k(int p) {
  const int t = p >> 4, a = (p >> 3) & 1, lohi = (p >> 2) & 1, b = (p >> 1) & 1, h = p & 1;
  return (2 * a + b) * 16 + h * 8 + 2 * t + lohi;
}

// The sm90 backend stores each 32-bit word of codes with its bits moved (pack_word, applied at
// prepare time through the portable layer's PrepareHook; kernels see only packed words) so
// that pair_bits needs few instructions. Pair J is codes J (low half) and J + 4 (high half);
// its bf16x2 needs each code's e1 e0 m on bits 6..8 (22..24) and its sign on bit 15 (31),
// i.e. a code's value times 2^-126. Natural words (code i at bits 4i .. 4i+3) need a shift of
// 6 for the magnitude but 12 for the sign: isolate, multiply, mask, 3 instructions a pair. In
// the packed word pairs 0, 1, 2 sit exactly 0, 3 and 6 bits below their targets (1, 2 and 2
// instructions: shift, mask), and pair 3 takes the 8 bits left over (bits 10, 11, 13, 14 and
// +16: 4 instructions, one multiply making its three shifted copies). 9 instructions a word
// instead of 13; no two pairs share a bit, so pairs read alone never see their neighbours.
// kPackedBit[J][i]: where bit i of the low code of pair J goes (the high code: + 16).
constexpr unsigned char kPackedBit[4][4] = {{6, 7, 8, 15}, {3, 4, 5, 12}, {0, 1, 2, 9}, {13, 14, 10, 11}};

constexpr unsigned pack_word(unsigned natural) {  // host only (prepare time)
  unsigned packed = 0;
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 4; ++i) {
      packed |= ((natural >> (4 * j + i)) & 1u) << kPackedBit[j][i];
      packed |= ((natural >> (4 * (j + 4) + i)) & 1u) << (kPackedBit[j][i] + 16);
    }
  return packed;
}

// bf16x2 bits of pair J of a packed word, each code times 2^-126 (see above).
template <int J>
MOE_HD constexpr unsigned pair_bits(unsigned w) {
  constexpr unsigned kTargets = 0x81C081C0u;  // bits 6..8, 15 and 22..24, 31
  return J == 0   ? w & kTargets
         : J == 1 ? (w << 3) & kTargets
         : J == 2 ? (w << 6) & kTargets
                  : (((w & 0x6C006C00u) >> 8) * 0x1042u) & kTargets;  // << 1, << 6, << 12 at once
}
// The exponent offset those bits carry (2^-126) and the one the scales get (2^118): the
// dequantized product is code * scale * 2^-8, undone by the epilogue's 2^8.
constexpr int kCodeExp = -126, kScaleExp = 118, kEpilogueExp = -(kCodeExp + kScaleExp);

// The scales are stored in a byte of the backend's own (scale_byte, at prepare time) whose
// bf16 x 2^118 is two integer operations away, where e4m3 needed a conversion to f16, two to
// f32, two multiplies and a pack (11 of a decode sub-block's ~87 instructions with the loads
// and the duplication into both halves; the kernels are issue-bound on dequantization). Every
// e4m3 magnitude, subnormals included, is a normal number 2^e * 1.mmm with e in [-9, 8]: the
// byte is (e + 9) << 3 | mmm, an unsigned E5M3 without subnormals, and
//   bf16 bits of (byte's value * 2^118) = (byte << 4) + (236 << 7)
// (mantissa to bits 4..6, e + 9 to the exponent field, biased there by 127 + 118 - 9 = 236).
// What the byte cannot hold is moved into the group's 16 codes, exactly: a negative scale
// flips their signs (e2m1 signs are bits; -0 stays the -0 the product gives), a zero scale
// clears their magnitudes (keeping the product's sign of zero; the byte then holds any
// positive value), and a NaN scale (e4m3 S.1111.111) gets the byte whose bf16 is NaN.
constexpr unsigned kScaleBias = 236u << 7;
constexpr unsigned char kScaleByteNaN = 0x9C;  // (0x9C << 4) + kScaleBias = 0x7FC0, a bf16 NaN
struct ScaleByte {
  unsigned char byte;   // what the kernels read
  bool negate;          // flip the 16 codes' signs
  bool zero;            // clear the 16 codes' magnitudes
};
constexpr ScaleByte scale_byte(unsigned char e4m3) {  // host only (prepare time)
  const unsigned mag = e4m3 & 0x7Fu;
  const bool neg = (e4m3 & 0x80u) != 0;
  if (mag == 0x7Fu) return {kScaleByteNaN, false, false};
  if (mag == 0) return {0, neg, true};
  if (mag >= 8) return {static_cast<unsigned char>(mag + 0x10u), neg, false};  // normal: e = E - 7
  // Subnormal M * 2^-9, M in 1..7, its leading one at bit p: 2^(p - 9) * 1.mmm.
  const int p = mag >= 4 ? 2 : mag >= 2 ? 1 : 0;
  return {static_cast<unsigned char>(p << 3 | ((mag << (3 - p)) & 7u)), neg, false};
}
// bf16 bits of a scale byte's value times 2^118, in both halves (the W4 kernels' multiplier).
MOE_HD constexpr unsigned scale_pair(unsigned byte) { return byte * 0x00100010u + (kScaleBias * 0x00010001u); }

}  // namespace w4
