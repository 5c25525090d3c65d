// The runtime's self-test kernel: proves that compile -> cache -> verify -> load ->
// launch works on this device, with this target, end to end. Each thread writes a
// value the host recomputes (src/runtime/selftest.cpp), and thread 0 of block 0
// writes __CUDA_ARCH__, so the host sees which binary the device actually ran.
// NVRTC-compiled: no host includes.
#pragma once
#include "common/types.cuh"

#ifndef SELFTEST_MUL
#error "SELFTEST_MUL must be defined (-DSELFTEST_MUL=<odd constant>)"
#endif

__device__ __forceinline__ u32 moeforge_selftest_mix(u32 x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

extern "C" __global__ void moeforge_selftest(u32* out, u32 n, u32 seed, u32* arch_out) {
  const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = moeforge_selftest_mix((u32)i * (u32)SELFTEST_MUL + seed) ^ (blockIdx.x << 10) ^ threadIdx.x;
  if (i == 0) *arch_out = __CUDA_ARCH__;
}
