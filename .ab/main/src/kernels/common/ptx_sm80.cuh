// Thin PTX wrappers for the sm_80+ warp-level tensor-core path: cp.async, ldmatrix,
// mma.sync. NVRTC-compiled: no host or toolkit includes. Each wrapper names the PTX it
// emits and the minimum PTX ISA / SM.
#pragma once
#include "common/types.cuh"

// Generic -> shared-window address (cvta.to.shared, PTX 2.0, all SMs).
__device__ __forceinline__ u32 smem_addr(const void* p) {
  u32 r;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

// cp.async.cg.shared.global [dst], [src], 16, src_size;   (PTX 7.0, sm_80)
// Copies 16 bytes global -> shared, bypassing L1. src_size = 0 reads nothing and
// zero-fills the 16 destination bytes (masked rows and K tails); `src` must still be a
// valid address then, callers pass the tensor's base.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
               "r"(src_size)
               : "memory");
}
// cp.async.commit_group;   (PTX 7.0, sm_80)
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// cp.async.wait_group N;   (PTX 7.0, sm_80): at most N most recent groups still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 {r0,r1,r2,r3}, [addr];   (PTX 6.5, sm_75)
// Lanes 8q..8q+7 give the row addresses (16 bytes each) of 8x8 matrix q; register rq
// receives matrix q with lane L holding row L/4, columns 2*(L%4) and 2*(L%4)+1 (the
// lower-indexed column in the low half).
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem_row)));
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   (PTX 7.0, sm_80)
// With g = lane/4, t = lane%4 (PTX ISA "Matrix Fragments for mma.m16n8k16"):
//   A (16x16, row):  a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//   B (16x8,  col):  b0 = (k 2t..2t+1, n g)  b1 = (k 2t+8..2t+9, n g)
//   C (16x8, f32):   c0,c1 = (g, 2t), (g, 2t+1)   c2,c3 = (g+8, 2t), (g+8, 2t+1)
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Same with f16 operands: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (PTX 6.4, sm_75).
__device__ __forceinline__ void mma_f16_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
