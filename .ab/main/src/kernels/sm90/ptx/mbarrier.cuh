// mbarrier: shared-memory transaction barriers (the full/empty pipeline of the sm90 kernels).
// A phase completes when the pending-arrival count reaches zero AND the transaction count
// (bytes announced by expect_tx, retired by cp.async.bulk complete_tx) reaches zero.
#pragma once
#include "sm90/ptx/types.cuh"

// mbarrier.init.shared::cta.b64 [bar], count;   (PTX 7.8 for ::cta, sm_80)
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// fence.mbarrier_init.release.cluster;   (PTX 8.0, sm_90)
// Makes the initialized barriers visible to the async proxy (TMA complete_tx) before use;
// follow with a CTA barrier.
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// mbarrier.arrive.shared::cta.b64 _, [bar];   (PTX 7.8 for the sink '_', sm_80)
// One arrival (release semantics at CTA scope by default).
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], tx_bytes;   (PTX 8.0, sm_90)
// One arrival plus `tx_bytes` expected transaction bytes for the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 tx_bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(tx_bytes) : "memory");
}

// mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity;   (PTX 7.8, sm_90)
// True once the phase with the given parity has completed (acquire at CTA scope). May
// suspend the thread for a system-dependent time before returning false. A freshly
// initialized barrier is in phase 0, so waiting on parity 1 returns true at once.
__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
