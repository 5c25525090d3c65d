// The generic -> shared-window address conversion and the global timer, used by every
// wrapper in sm90/ptx/. NVRTC-compiled (and nvcc for dev/sm90): no host or toolkit includes.
// Each wrapper is preceded by the PTX it emits and its minimum PTX ISA / SM.
#pragma once
#include "common/types.cuh"

// cvta.to.shared.u64 + cvt.u32.u64   (PTX 2.0, all SMs)
// The 32-bit shared-window address of a generic pointer into shared memory: what
// mbarrier, cp.async.bulk and wgmma descriptors take.
__device__ __forceinline__ u32 smem_u32(const void* p) {
  u32 r;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

// ld.shared.f32 d, [a];   (PTX 1.0, all SMs)
// A shared-memory load the compiler keeps in program order with the other volatile asm (the
// wgmma fences and groups): for a value wanted early, whose latency should pass while a
// group is issued.
__device__ __forceinline__ float ld_shared_f32(u32 smem_addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(smem_addr) : "memory");
  return v;
}

// mov.u64 %r, %globaltimer;   (PTX 3.1, sm_30+)
// Nanoseconds (coarse ticks on some parts). Used only by the watchdog in the wait loops.
__device__ __forceinline__ u64 globaltimer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
