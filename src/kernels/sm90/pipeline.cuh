// The stage ring shared by the sm90 GEMMs (grouped_gemm.cuh, decode_gemm.cuh): a producer
// thread fills stage s with TMA loads and arrives on full[s] (one arrival plus the bytes);
// consumer warpgroups wait on full[s], run one wgmma group over it and release it on
// empty[s] (lane 0 of every consumer warp). A k-block counter `it`, kept over the CTA's
// life by producer and consumers alike, gives the stage (it % STAGES) and phase (it / STAGES).
#pragma once
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/wgmma.cuh"
#include "sm90/wait.cuh"

namespace sm90 {

// The dynamic shared memory as a T on a 1024-byte boundary (the 128B-swizzle atom, so TMA's
// pattern and the wgmma descriptors agree); launches add 1 KB of slack for this.
template <class T>
__device__ __forceinline__ T& aligned_smem() {
  extern __shared__ unsigned char smem_raw[];
  return *reinterpret_cast<T*>(smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u));
}

// Thread 0 initializes the ring; everyone must __syncthreads() before using it.
template <int STAGES>
__device__ __forceinline__ void ring_init(u64 (&full)[STAGES], u64 (&empty)[STAGES], u32 consumer_warps) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_u32(&full[s]), 1);
      mbar_init(smem_u32(&empty[s]), consumer_warps);
    }
    fence_mbar_init();
  }
}

// Consumer warpgroup, one output tile: acc = sum over k_blocks of A(s) . B(s)^T, each k-block
// one wgmma group of BK / 16 m64nNk16 steps (A and B K-major, 128B-swizzled, at the shared
// addresses operands(s) returns as {a, b}), one group kept in flight: after issuing block kb,
// wait until only that one is pending, i.e. block kb - 1 finished reading its stage, and
// release it. The tensor pipe never drains between k-blocks; acc is final on return.
template <int N, int STAGES, int BK, class Operands>
__device__ __forceinline__ void mma_k_blocks(float (&acc)[N / 2], u64 (&full)[STAGES], u64 (&empty)[STAGES], u32& it,
                                             int k_blocks, int lane, Operands operands) {
  u32 prev_s = 0;
  for (int kb = 0; kb < k_blocks; ++kb, ++it) {
    const u32 s = it % STAGES, ph = (it / STAGES) & 1u;
    mbar_wait(smem_u32(&full[s]), ph);
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < N / 2; ++i) reg_fence(acc[i]);
    const uint2 ab = operands(s);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)
      wgmma_m64nk16_bf16_ss<N>(acc, wgmma_desc_k128b(ab.x + kk * 32), wgmma_desc_k128b(ab.y + kk * 32),
                               (kb > 0 || kk > 0) ? 1u : 0u);
    wgmma_commit();
    wgmma_wait<1>();
#pragma unroll
    for (int i = 0; i < N / 2; ++i) reg_fence(acc[i]);
    if (kb > 0 && lane == 0) mbar_arrive(smem_u32(&empty[prev_s]));
    prev_s = s;
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < N / 2; ++i) reg_fence(acc[i]);
  if (k_blocks > 0 && lane == 0) mbar_arrive(smem_u32(&empty[prev_s]));
}

}  // namespace sm90
