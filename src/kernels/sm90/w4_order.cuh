// The W4A16 K order (see w4a16.cuh for why): inside every 64-column block, logical column L
// (the order the activations are stored in and the wgmma fragments see) holds physical
// column physical_k(L) (the weights' order). Plain constexpr code, also compiled as host C++
// by tests/cpu/test_sm90_backend.cpp.
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

}  // namespace w4
