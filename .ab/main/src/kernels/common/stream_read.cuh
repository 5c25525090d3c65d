// Streaming-read bandwidth probe: the "read" ceiling every benchmark is judged
// against. Each thread reads 16-byte vectors with a grid-stride loop (several
// loads in flight per iteration) and folds them into one word, written only if
// it matches an impossible value, so the loads cannot be removed.
#include "common/types.cuh"

struct alignas(16) u32x4 {
  u32 x, y, z, w;
};

extern "C" __global__ void moe_stream_read(const u32x4* __restrict__ src, u64 n_vec, u32* __restrict__ sink) {
  u32 acc = 0;
  const u64 stride = u64(gridDim.x) * blockDim.x;
  u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n_vec; i += 4 * stride) {
    u32x4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n_vec; i += stride) {
    u32x4 a = src[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;
}
