// The W4A16 formats' pure integer parts (see w4a16.cuh for why): the K order and the e2m1
// code -> bf16 bit placement. Plain constexpr code, also compiled as host C++ by
// tests/cpu/test_sm90_backend.cpp, which checks them exhaustively.
#pragma once
#if defined(__CUDACC__)
#define W4_HD __host__ __device__
#else
#define W4_HD
#endif

namespace w4 {

constexpr int kBlock = 64;  // the permutation's period (K must be a multiple)

// Physical column (the weights' order) of logical column L (the fragment's order), L < 64.
W4_HD constexpr int physical_k(int L) {
  const int kk = L >> 4, h = (L >> 3) & 1, t = (L >> 1) & 3, lohi = L & 1;
  return t * 16 + (kk >> 1) * 8 + (kk & 1) * 2 + h + 4 * lohi;
}
// Its inverse: where physical column p is stored in the activations.
W4_HD constexpr int logical_k(int p) {
  const int t = p >> 4, a = (p >> 3) & 1, lohi = (p >> 2) & 1, b = (p >> 1) & 1, h = p & 1;
  return (2 * a + b) * 16 + h * 8 + 2 * t + lohi;
}

// bf16x2 bits of codes J (low half) and J + 4 (high half) of the eight e2m1 codes in w
// (code i at bits 4i .. 4i+3), each times 2^-126: sign to bit 15, e1 e0 m to bits 8..6.
// Isolate the two codes (at bits 0-3 and 16-19, or 4-7 and 20-23: codes 2, 3, 6, 7 come from
// w >> 8), then one multiply makes two shifted copies, by 6 and by 12 (by 2 and 8), which
// cannot overlap or carry: the first puts e1 e0 m on bits 8..6, the second the sign on bit 15;
// the mask keeps just those. Three instructions per pair (the multiply on the FMA pipe).
template <int J>
W4_HD constexpr unsigned pair_bits(unsigned w) {
  const unsigned v = (J < 2 ? w : w >> 8) & (J % 2 ? 0x00F000F0u : 0x000F000Fu);
  return (v * (J % 2 ? 0x104u : 0x1040u)) & 0x81C081C0u;
}
// The exponent offset those bits carry (2^-126) and the one the scales get (2^118): the
// dequantized product is code * scale * 2^-8, undone by the epilogue's 2^8.
constexpr int kCodeExp = -126, kScaleExp = 118, kEpilogueExp = -(kCodeExp + kScaleExp);

}  // namespace w4
