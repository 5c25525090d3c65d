// Programmatic dependent launch (PDL), the kernel side.
//
// A kernel whose spec says `pdl` (rt::KernelSpec) is compiled with MOE_PDL=1 on sm_90 and up
// (unless MOEFORGE_PDL=0) and may be launched so that it starts while the kernel before it on
// the stream is still running (calls of at most portable.hpp's kPdlMaxTokens): its
// CTAs become resident early and do what needs nothing from that kernel (shared memory carving,
// mbarrier init, descriptor prefetch), then wait. The runtime proves the wait is compiled in: the
// compile of a `pdl` spec fails unless the entry's PTX contains griddepcontrol.wait (compiler.cpp),
// and only such kernels are launched with the attribute (kernels.cpp).
//
// Rules for a `pdl` kernel (DESIGN.md: "PDL only where the wait is provably compiled in"):
//   - wait_for_prior_grid() comes before its first global memory access that another kernel of
//     the stream writes or reads (its inputs, and the buffers it writes: a predecessor may still
//     be reading them). Weights and __grid_constant__ parameters may be touched before it, and
//     so may reads of what a kernel at least two launches back wrote: pdl_begin lets dependents
//     launch only after its own wait, so once a grid runs, the grid before its predecessor has
//     completed and flushed (the sm90 decode GEMMs read the routing's counts so, to start
//     streaming weights early).
//   - let_dependents_launch() may come anywhere: the next kernel waits for this one's completion
//     (and memory flush) in its own wait_for_prior_grid, whenever it was launched.
// Launched without the attribute (larger calls, rt::PdlScope) the wait returns at once: the
// stream already ordered this grid after its predecessor. Without MOE_PDL (other targets,
// MOEFORGE_PDL=0) both are empty and the launch is ordinary.
#pragma once

#if defined(MOE_PDL) && MOE_PDL
__device__ __forceinline__ void wait_for_prior_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void let_dependents_launch() { asm volatile("griddepcontrol.launch_dependents;" :::); }
#else
__device__ __forceinline__ void wait_for_prior_grid() {}
__device__ __forceinline__ void let_dependents_launch() {}
#endif

// Both at one point, as every forward kernel does: at its top, or after setup that touches
// nothing another kernel of the stream reads or writes (mbarrier init).
__device__ __forceinline__ void pdl_begin() {
  wait_for_prior_grid();
  let_dependents_launch();
}
