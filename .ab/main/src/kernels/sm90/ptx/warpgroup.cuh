// Warpgroup register reallocation and named barriers.
#pragma once
#include "sm90/ptx/types.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "sm90: setmaxnreg needs the sm_90a target (-gencode=arch=compute_90a,code=sm_90a)"
#endif

// setmaxnreg.inc.sync.aligned.u32 N;   (PTX 8.0, sm_90a)
// Raise this warpgroup's per-thread register limit to N (multiple of 8, 24..256). Takes
// effect only when the kernel has a register cap at entry (__launch_bounds__(T, 1)).
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg range");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
// setmaxnreg.dec.sync.aligned.u32 N;   (PTX 8.0, sm_90a)
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg range");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// bar.sync id, nthreads;   (PTX 2.0, all SMs)
// Named barrier among `nthreads` threads (multiple of 32); id 0 is __syncthreads().
__device__ __forceinline__ void named_bar_sync(u32 id, u32 nthreads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}
// bar.arrive id, nthreads;   (PTX 2.0, all SMs)
// Counts toward barrier id's `nthreads` without waiting (the waiters use bar.sync).
__device__ __forceinline__ void named_bar_arrive(u32 id, u32 nthreads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}
