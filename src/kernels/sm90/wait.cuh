// Bounded mbarrier waits for the sm90 kernels. A pipeline bug (wrong expect_tx byte count,
// wrong parity, a role that left early) must not hang a server: a wait that has not
// completed after WAIT_LIMIT_NS (default 10 s; a healthy wait lasts microseconds, and even
// compute-sanitizer's slowest tool stays far below) traps. The trap makes the error sticky
// (CUDA_ERROR_LAUNCH_FAILED), and the runtime's breadcrumbs name the stage that launched this
// kernel (src/runtime/breadcrumbs). No printf here: its argument buffer would put local
// memory into every kernel that waits (dev/sm90/watchdog.cuh records the barrier instead).
#pragma once
#include "sm90/ptx/mbarrier.cuh"

#ifndef WAIT_LIMIT_NS
#define WAIT_LIMIT_NS 10000000000ull
#endif

// Returns once the phase with `parity` of `bar` completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  if (mbar_try_wait(bar, parity)) return;
  const u64 t0 = globaltimer_ns();
  for (u32 n = 1;; ++n) {
    if (mbar_try_wait(bar, parity)) return;
    if ((n & 1023u) == 0u && globaltimer_ns() - t0 > (u64)(WAIT_LIMIT_NS)) asm volatile("trap;");
  }
}
