// Programmatic dependent launch (PDL, sm_90+). The layer's kernels are launched with
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (runtime/kernels.cpp, KernelSpec::pdl):
// the next kernel in the stream may be scheduled while this one still runs, so its launch and
// block placement overlap this one's tail instead of following it (at T = 1 the layer is six
// short kernels back to back). The rule that keeps it correct: every thread of a kernel
// launched that way calls pdl_enter() before its first global memory access. It waits until
// the previous grid in the stream has completed and its writes are visible (also when that
// grid is someone else's kernel, which never signals: then at its completion), then lets the
// next grid start launching. No-op below sm_90 and for a launch without the attribute.
#pragma once

__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
