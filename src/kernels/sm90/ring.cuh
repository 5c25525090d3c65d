// What the sm90 GEMM kernels share around their stage ring: the 1024-byte aligned view of
// dynamic shared memory (the 128B-swizzle atom: TMA's pattern and the wgmma descriptors,
// base offset 0, agree only on such a base), the full/empty mbarrier set-up, and a word that
// travels with a stage.
#pragma once
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/wait.cuh"

// The kernel's Smem struct at the first 1024-byte boundary of dynamic shared memory (the
// launch adds 1024 bytes of slack for this).
template <class Smem>
__device__ __forceinline__ Smem& aligned_smem() {
  extern __shared__ unsigned char smem_raw[];
  return *reinterpret_cast<Smem*>(smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u));
}

// Thread 0: full[s] completes on the producer's arrive_expect_tx plus the TMA bytes; empty[s]
// on `releases` arrivals (lane 0 of each consumer warp). The caller's __syncthreads()
// publishes them.
template <int STAGES>
__device__ __forceinline__ void init_ring(u64 (&full)[STAGES], u64 (&empty)[STAGES], u32 releases) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_u32(&full[s]), 1);
      mbar_init(smem_u32(&empty[s]), releases);
    }
    fence_mbar_init();
  }
}

// A word about a tile (tiles.cuh tile_word) from the producer to the consumers: the producer
// stores it in the slot of the tile's first stage before that stage's arrive (a release), and a
// consumer reads it once the stage is full (try_wait: an acquire). The slot is rewritten only
// after every consumer has released the stage. The end mark travels the same way, with a plain
// arrive and no TMA bytes.
template <int STAGES>
__device__ __forceinline__ int stage_word(u64 (&full)[STAGES], const int (&word)[STAGES], u32 it) {
  mbar_wait(smem_u32(&full[it % STAGES]), (it / STAGES) & 1u);
  return word[it % STAGES];
}
