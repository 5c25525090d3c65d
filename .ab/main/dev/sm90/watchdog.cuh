// Bounded mbarrier waits: a pipeline bug (wrong expect_tx byte count, wrong parity, a role
// that exits early) must not hang the GPU. A wait that has not completed after
// kWatchdogNs (1 s; a healthy wait lasts microseconds) or kWatchdogPolls polls records
// which barrier stalled in g_watchdog and returns false; the caller leaves the kernel.
// Every other waiter sees `fired` within 256 polls and leaves too. No trap: the context
// stays usable and the host prints the record (watchdog_check) and fails the version.
#pragma once
#include <cstdio>

#include "sm90/ptx/mbarrier.cuh"

struct WatchdogRecord {
  u32 fired;      // 0 = clean
  u32 tag;        // (kind << 16) | stage
  u32 block, thread, parity, iter;
  u64 waited_ns;
};
enum : u32 { kWaitFull = 1, kWaitEmpty = 2 };
constexpr u64 kWatchdogNs = 1000000000ull;
constexpr u32 kWatchdogPolls = 1u << 30;

__device__ WatchdogRecord g_watchdog;

__device__ __forceinline__ bool mbar_wait_bounded(u32 bar, u32 parity, u32 tag, u32 iter) {
  if (mbar_try_wait(bar, parity)) return true;
  const u64 t0 = globaltimer_ns();
  for (u32 n = 1;; ++n) {
    if (mbar_try_wait(bar, parity)) return true;
    if ((n & 255u) == 0u) {
      if (*reinterpret_cast<volatile u32*>(&g_watchdog.fired) != 0u) return false;
      const u64 dt = globaltimer_ns() - t0;
      if (dt > kWatchdogNs || n >= kWatchdogPolls) {
        if (atomicCAS(&g_watchdog.fired, 0u, 1u) == 0u) {
          g_watchdog.tag = tag;
          g_watchdog.block = blockIdx.x + blockIdx.y * gridDim.x;
          g_watchdog.thread = threadIdx.x;
          g_watchdog.parity = parity;
          g_watchdog.iter = iter;
          g_watchdog.waited_ns = dt;
          __threadfence();
        }
        return false;
      }
    }
  }
}

// Host: read the record after a synchronize; print it and clear it. True = clean.
inline bool watchdog_check(const char* what) {
  WatchdogRecord r{};
  if (cudaMemcpyFromSymbol(&r, g_watchdog, sizeof(r)) != cudaSuccess) {
    std::printf("  [watchdog] could not read the record after %s\n", what);
    return false;
  }
  if (!r.fired) return true;
  const u32 kind = r.tag >> 16, stage = r.tag & 0xffffu;
  std::printf("  [watchdog] %s: mbarrier %s[%u] never completed (block %u thread %u parity %u k-iter %u, "
              "gave up after %.3f s). %s\n",
              what, kind == kWaitFull ? "full" : "empty", stage, r.block, r.thread, r.parity, r.iter,
              r.waited_ns * 1e-9,
              kind == kWaitFull ? "Consumer starved: TMA bytes never matched expect_tx, or the producer left."
                                : "Producer starved: consumers never released the stage.");
  WatchdogRecord z{};
  cudaMemcpyToSymbol(g_watchdog, &z, sizeof(z));
  return false;
}
