// Tensor memory accelerator: cp.async.bulk.tensor (2-D tiles) and the async-proxy fence.
// `tmap` is the generic address of a CUtensorMap that lives in kernel parameter space
// (`const __grid_constant__ CUtensorMap`), encoded once on the host and never modified.
// Coordinates are in elements, innermost dimension first: {column, row}.
#pragma once
#include "sm90/ptx/types.cuh"

// A CUtensorMap as kernels see it: 128 opaque bytes, 64-byte aligned (cuda.h's layout; NVRTC
// sources do not include cuda.h). Kernels take it as `const __grid_constant__ TensorMap`.
struct alignas(64) TensorMap {
  u64 opaque[16];
};

// prefetch.tensormap [tmap];   (PTX 8.0, sm_90)
__device__ __forceinline__ void tma_prefetch_desc(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(tmap)) : "memory");
}

// cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
//     [dst], [tmap, {c0, c1}], [bar];   (PTX 8.0, sm_90)
// Global -> shared tile load; on arrival its bytes are retired from `bar`'s tx count.
// `dst` must be aligned to the swizzle atom (1024 B for SWIZZLE_128B) for the smem pattern
// to match what the wgmma descriptors assume. The box's first byte of each row in global
// memory (base + c0 * element size) must be 16-byte aligned: Hopper raises an illegal
// instruction otherwise (the driver cannot check coordinates at encode time).
__device__ __forceinline__ void tma_load_2d(u32 dst, const void* tmap, int c0, int c1, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(reinterpret_cast<u64>(tmap)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [tmap, {c0, c1}], [src];
//     (PTX 8.0, sm_90)
// Shared -> global tile store, tracked by the issuing thread's bulk async-groups.
__device__ __forceinline__ void tma_store_2d(const void* tmap, int c0, int c1, u32 src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                   reinterpret_cast<u64>(tmap)),
               "r"(c0), "r"(c1), "r"(src)
               : "memory");
}

// cp.async.bulk.commit_group;   (PTX 8.0, sm_90)
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// cp.async.bulk.wait_group.read N;   (PTX 8.0, sm_90)
// At most N of this thread's most recent bulk groups still READING their shared source.
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// cp.async.bulk.wait_group N;   (PTX 8.0, sm_90)
// At most N of this thread's most recent bulk groups still pending (writes complete).
template <int N>
__device__ __forceinline__ void tma_store_wait_all() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// fence.proxy.async.shared::cta;   (PTX 8.0, sm_90)
// Orders this thread's generic-proxy shared-memory writes before later async-proxy
// accesses (a TMA store reading them). Each writing thread fences, then a barrier.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
//     [dst], [tmap, {c0, c1, c2}], [bar];   (PTX 8.0, sm_90)
// As tma_load_2d with a third coordinate (the NVFP4 scales: {byte in row, k tile, expert}).
__device__ __forceinline__ void tma_load_3d(u32 dst, const void* tmap, int c0, int c1, int c2, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
      "l"(reinterpret_cast<u64>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
