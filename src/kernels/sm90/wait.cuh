// Bounded mbarrier waits for the sm90 kernels. A pipeline bug (wrong expect_tx byte count,
// wrong parity, a role that left early) must not hang a server: a wait that has not
// completed after WAIT_LIMIT_NS (default 10 s; a healthy wait lasts microseconds, and even
// compute-sanitizer's slowest tool stays far below) faults. The fault makes the error sticky
// (CUDA_ERROR_ILLEGAL_ADDRESS), and the runtime's breadcrumbs name the stage that launched
// this kernel (src/runtime/breadcrumbs). No printf here: its argument buffer would put local
// memory into every kernel that waits (dev/sm90/watchdog.cuh records the barrier instead).
//
// Why a faulting store and not `trap`: ptxas gives code after `setmaxnreg.inc` the raised
// register budget only when no `trap` is reachable from it; with one (anywhere in a consumer
// warpgroup) it compiles the consumer to the launch-time count (168 at 384 threads) and spills.
// And why one loop with one exit: a wait with a second exit (the timeout) while a wgmma group
// is in flight is a "divergent path" to ptxas, which then serializes the wgmma (C7518).
#pragma once
#include "sm90/ptx/mbarrier.cuh"

#ifndef WAIT_LIMIT_NS
#define WAIT_LIMIT_NS 10000000000ull
#endif

// st.volatile.global.u32 [0], 0   (PTX 1.0): an illegal-address fault that kills the grid.
__device__ __forceinline__ void watchdog_fault() {
  asm volatile("st.volatile.global.u32 [%0], 0;" ::"l"(0ull) : "memory");
}

// Returns once the phase with `parity` of `bar` completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  const u64 t0 = globaltimer_ns();
  bool done, late;
  do {
    done = mbar_try_wait(bar, parity);
    late = globaltimer_ns() - t0 > (u64)(WAIT_LIMIT_NS);
  } while (!(done | late));
  if (!done) watchdog_fault();
}
