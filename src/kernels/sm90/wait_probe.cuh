// The sm90 watchdog's own check (tests/gpu/test_runtime.cpp): one warp waits, through
// sm90/wait.cuh, on an mbarrier that expects one arrival. With `arrive` = 1 the barrier
// completes and the kernel returns; with 0 nobody arrives, and after WAIT_LIMIT_NS the wait
// faults the grid (a sticky error the runtime attributes to the launching stage).
// NVRTC-compiled: no host includes.
#pragma once
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/wait.cuh"

extern "C" __global__ void moe_sm90_wait_probe(u32 arrive, u32* done) {
  __shared__ alignas(8) u64 bar;
  const u32 b = smem_u32(&bar);
  if (threadIdx.x == 0) {
    mbar_init(b, 1);
    fence_mbar_init();
  }
  __syncwarp();
  if (threadIdx.x == 0 && arrive) mbar_arrive(b);
  mbar_wait(b, 0);
  if (threadIdx.x == 0) *done = 1;
}
