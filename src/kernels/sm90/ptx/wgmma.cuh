// wgmma: warpgroup-level asynchronous matrix multiply-accumulate (sm_90a only).
// All functions here are .sync.aligned: every thread of the warpgroup (4 consecutive
// warps starting at a warp index divisible by 4) must execute them together. Issued by a
// lone warp they raise CUDA_ERROR_ILLEGAL_INSTRUCTION (DESIGN.md, measured facts).
//
// Ordering contract used by the kernels:
//   wgmma_fence()                 before the first wgmma of a batch (the accumulators were
//                                 last touched by ordinary instructions or a previous batch)
//   wgmma_m64n*k16_bf16_ss(...)   x 4 (one 64-wide K block = four k16 steps)
//   wgmma_commit()                closes the batch into one wgmma-group
//   wgmma_wait<0>()               the group is complete: its shared-memory reads are done
//                                 (the stage may be released) and the accumulators are final
// reg_fence() on every accumulator after wgmma_fence() and after wgmma_wait() keeps the
// compiler from moving ordinary reads/writes of those registers across the async window.
#pragma once
#include "sm90/ptx/types.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "sm90: wgmma/setmaxnreg need the sm_90a target (-gencode=arch=compute_90a,code=sm_90a)"
#endif

// wgmma.fence.sync.aligned;   (PTX 8.0, sm_90a)
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

// wgmma.commit_group.sync.aligned;   (PTX 8.0, sm_90a)
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// wgmma.wait_group.sync.aligned N;   (PTX 8.0, sm_90a)
// At most N of this warpgroup's most recent wgmma-groups still pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// (no instruction) Compiler-ordering fence on one accumulator register.
__device__ __forceinline__ void reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Shared-memory matrix descriptor (PTX ISA, "Asynchronous warpgroup level matrix shared
// memory layout: matrix descriptor"):
//   bits  0-13  start address >> 4            (shared-window byte address, 16-B aligned)
//   bits 16-29  leading-dimension byte offset >> 4
//   bits 32-45  stride-dimension byte offset >> 4
//   bits 49-51  matrix base offset            (0: every operand tile is 1024-B aligned)
//   bits 62-63  swizzle mode                  (0 none, 1 = 128B, 2 = 64B, 3 = 32B)
// K-major operand in the 128-byte swizzle, as TMA writes it with CU_TENSOR_MAP_SWIZZLE_128B
// and a box whose inner extent is 64 bf16 = 128 B: row r (an M or N index) occupies bytes
// [128r, 128r+128), its 16-B chunk c stored at chunk position c ^ (r & 7); 8 rows form a
// 1024-B swizzle atom. So SBO = 1024 B (atom to atom along M/N). LBO is not used by
// K-major swizzled layouts (one instruction's K extent, 16 x 2 B = 32 B, lies inside the
// 128-B row); it is set to 16 B by convention. Stepping K by 16 inside the row adds 32 B to
// the start address: the hardware swizzles on address bits [4,7) ^ [7,10), so logical
// chunk 2kk+c of row r is read from chunk (2kk+c) ^ r, exactly where TMA put it.
__device__ __forceinline__ u64 wgmma_desc_k128b(u32 smem_addr) {
  u64 d = 0;
  d |= (u64)((smem_addr & 0x3FFFF) >> 4);   // start address
  d |= (u64)(16 >> 4) << 16;                // LBO (unused here)
  d |= (u64)(1024 >> 4) << 32;              // SBO: 8 rows x 128 B
  d |= (u64)1 << 62;                        // 128B swizzle
  return d;
}

// The descriptor of the operand `bytes` further on in shared memory: the start address is
// the low field (address / 16), and no shared address reaches 256 KB, so the sum never
// carries into the other fields. One add instead of wgmma_desc_k128b's mask, shift and or
// per k step (the W8A8 k-loop spent ~50 of its ~150 instructions a k-block building them).
__device__ __forceinline__ u64 wgmma_desc_add(u64 desc, u32 bytes) {
  // 32-bit add on the low word: a 64-bit add would carry into the high word, whose constant
  // fields (SBO, swizzle) the compiler could then no longer keep out of the loop.
  return (desc & 0xFFFFFFFF00000000ull) | u32(u32(desc) + (bytes >> 4));
}

// Inline asm must list every accumulator register: the 64 operands d[0..63] (and d[64..127])
// and their "%0 .. %63" (and "%64 .. %127") placeholders, written once for the m64n128 and
// m64n256 wrappers below.
#define SM90_WGMMA_D64_LO(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define SM90_WGMMA_D64_HI(d) SM90_WGMMA_D64_LO(((d) + 64))  // d[64] .. d[127]
#define SM90_WGMMA_R64_LO \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define SM90_WGMMA_R64_HI \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// Accumulator fragment of wgmma.m64nNk16 with .f32 D (PTX ISA "Register fragments, matrix
// D"): warp w of the warpgroup (w = warp index % 4) holds rows 16w..16w+15; with
// g = lane / 4 and t = lane % 4, registers d[4i+0], d[4i+1] are (row 16w+g,   cols 8i+2t,
// 8i+2t+1) and d[4i+2], d[4i+3] are (row 16w+g+8, same cols), for i = 0 .. N/8-1.

// wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {d0..d63}, desc_a, desc_b,
//     p(scale_d), 1, 1, 0, 0;   (PTX 8.0, sm_90a)
// D[64x128] (+)= A[64x16] * B[16x128]; A and B both from shared memory, both K-major
// (imm-trans-a = imm-trans-b = 0), scale-a = scale-b = +1. scale_d == 0 ignores the old D.
// D is d[0 .. 63]: an m64n256 accumulator array (N = 128) takes the first 128 columns' part
// of that fragment layout, with no cast that would take the array's address.
template <int N>
__device__ __forceinline__ void wgmma_m64n128k16_bf16_ss(float (&d)[N], u64 desc_a, u64 desc_b, u32 scale_d) {
  static_assert(N >= 64, "64 accumulator registers");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      SM90_WGMMA_R64_LO
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      :
        SM90_WGMMA_D64_LO(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {d0..d127}, desc_a, desc_b,
//     p(scale_d), 1, 1, 0, 0;   (PTX 8.0, sm_90a)
// As above with N = 256 (128 accumulator registers per thread).
__device__ __forceinline__ void wgmma_m64n256k16_bf16_ss(float (&d)[128], u64 desc_a, u64 desc_b, u32 scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      SM90_WGMMA_R64_LO ", " SM90_WGMMA_R64_HI
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      :
        SM90_WGMMA_D64_LO(d), SM90_WGMMA_D64_HI(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {d0..d63}, desc_a, desc_b,
//     p(scale_d), 1, 1;   (PTX 8.0, sm_90a; QGMMA)
// D[64x128] (+)= A[64x32] * B[32x128], both e4m3 from shared memory, K-major (the only
// layout FP8 wgmma takes: no transpose immediates). A 128B-swizzled row is 128 e4m3 = 128 of
// K, so a k32 step advances the start address by 32 B, as a bf16 k16 step does.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_ss(float (&d)[64], u64 desc_a, u64 desc_b, u32 scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      SM90_WGMMA_R64_LO
      "}, %64, %65, p, 1, 1;\n}\n"
      :
        SM90_WGMMA_D64_LO(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// The decode GEMMs' token tiles (N = 16, 32, 64: 8, 16, 32 accumulator registers per thread),
// A and B both from shared memory: one asm body per N, the instruction and its trailing
// immediates as arguments (bf16: "p, 1, 1, 0, 0", scale-a, scale-b, no transposes; e4m3: "p,
// 1, 1", FP8 takes no transpose immediates). %N+2 is scale_d, %N, %N+1 the descriptors.
#define SM90_WGMMA_SS8(INSTR, IMM)                                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n" INSTR                                  \
               " {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, " IMM ";\n}\n"                             \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
                 "+f"(d[7])                                                                          \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define SM90_WGMMA_SS16(INSTR, IMM)                                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n" INSTR                                  \
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, " \
               IMM ";\n}\n"                                                                         \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
                 "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),          \
                 "+f"(d[13]), "+f"(d[14]), "+f"(d[15])                                               \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define SM90_WGMMA_SS32(INSTR, IMM)                                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" INSTR                                  \
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "             \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "    \
               "%32, %33, " IMM ";\n}\n"                                                            \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
                 "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),          \
                 "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),       \
                 "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),       \
                 "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),       \
                 "+f"(d[31])                                                                         \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// wgmma.mma_async.sync.aligned.m64n{16,32,64}k16.f32.bf16.bf16 {d..}, desc_a, desc_b,
//     p(scale_d), 1, 1, 0, 0;   (PTX 8.0, sm_90a)
__device__ __forceinline__ void wgmma_m64n16k16_bf16_ss(float (&d)[8], u64 desc_a, u64 desc_b, u32 scale_d) {
  SM90_WGMMA_SS8("wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16", "p, 1, 1, 0, 0");
}
__device__ __forceinline__ void wgmma_m64n32k16_bf16_ss(float (&d)[16], u64 desc_a, u64 desc_b, u32 scale_d) {
  SM90_WGMMA_SS16("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16", "p, 1, 1, 0, 0");
}
__device__ __forceinline__ void wgmma_m64n64k16_bf16_ss(float (&d)[32], u64 desc_a, u64 desc_b, u32 scale_d) {
  SM90_WGMMA_SS32("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", "p, 1, 1, 0, 0");
}

// wgmma.mma_async.sync.aligned.m64n{16,32,64}k32.f32.e4m3.e4m3 {d..}, desc_a, desc_b,
//     p(scale_d), 1, 1;   (PTX 8.0, sm_90a; QGMMA): the W8A8 decode GEMMs (weights as A).
__device__ __forceinline__ void wgmma_m64n16k32_e4m3_ss(float (&d)[8], u64 desc_a, u64 desc_b, u32 scale_d) {
  SM90_WGMMA_SS8("wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3", "p, 1, 1");
}
__device__ __forceinline__ void wgmma_m64n32k32_e4m3_ss(float (&d)[16], u64 desc_a, u64 desc_b, u32 scale_d) {
  SM90_WGMMA_SS16("wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3", "p, 1, 1");
}
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_ss(float (&d)[32], u64 desc_a, u64 desc_b, u32 scale_d) {
  SM90_WGMMA_SS32("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3", "p, 1, 1");
}

// The token-tile width as a template parameter (decode_gemm.cuh, W8A8).
template <int N>
__device__ __forceinline__ void wgmma_m64nk32_e4m3_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, u32 scale_d) {
  if constexpr (N == 16) wgmma_m64n16k32_e4m3_ss(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 32) wgmma_m64n32k32_e4m3_ss(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 64) wgmma_m64n64k32_e4m3_ss(d, desc_a, desc_b, scale_d);
  else {
    static_assert(N == 128, "token tiles of 16, 32, 64 or 128");
    wgmma_m64n128k32_e4m3_ss(d, desc_a, desc_b, scale_d);
  }
}

// The token-tile width as a template parameter (decode_gemm.cuh).
template <int N>
__device__ __forceinline__ void wgmma_m64nk16_bf16_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, u32 scale_d) {
  if constexpr (N == 16) wgmma_m64n16k16_bf16_ss(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 32) wgmma_m64n32k16_bf16_ss(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 64) wgmma_m64n64k16_bf16_ss(d, desc_a, desc_b, scale_d);
  else {
    static_assert(N == 128, "token tiles of 16, 32, 64 or 128");
    wgmma_m64n128k16_bf16_ss(d, desc_a, desc_b, scale_d);
  }
}

// ---- A from registers (the W4A16 decode GEMMs: weights dequantized in registers) ----
// Register fragment of A for m64nNk16 bf16 (PTX ISA "Register fragments, matrix A",
// identical to mma.m16n8k16's A per warp): warp w of the warpgroup holds rows 16w..16w+15;
// with g = lane / 4, t = lane % 4, a[0] = (row g, k 2t..2t+1), a[1] = (row g+8, k 2t..2t+1),
// a[2] = (row g, k 2t+8..2t+9), a[3] = (row g+8, k 2t+8..2t+9); the lower k in the low half.
// The a registers must not change until the wgmma-group that reads them has completed
// (wgmma_wait), exactly like the accumulators.

// wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {d0..d7}, {a0..a3}, desc_b,
//     p(scale_d), 1, 1, 0;   (PTX 8.0, sm_90a)   B K-major (imm-trans-b = 0)
__device__ __forceinline__ void wgmma_m64n16k16_bf16_rs(float (&d)[8], const u32 (&a)[4], u64 desc_b, u32 scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7"
      "}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// As above with N = 32.
__device__ __forceinline__ void wgmma_m64n32k16_bf16_rs(float (&d)[16], const u32 (&a)[4], u64 desc_b, u32 scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// As above with N = 64.
__device__ __forceinline__ void wgmma_m64n64k16_bf16_rs(float (&d)[32], const u32 (&a)[4], u64 desc_b, u32 scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// As above with N = 128 (64 accumulator registers per thread).
__device__ __forceinline__ void wgmma_m64n128k16_bf16_rs(float (&d)[64], const u32 (&a)[4], u64 desc_b, u32 scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      SM90_WGMMA_R64_LO
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      :
        SM90_WGMMA_D64_LO(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

template <int N>
__device__ __forceinline__ void wgmma_m64nk16_bf16_rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b, u32 scale_d) {
  if constexpr (N == 16) wgmma_m64n16k16_bf16_rs(d, a, desc_b, scale_d);
  else if constexpr (N == 32) wgmma_m64n32k16_bf16_rs(d, a, desc_b, scale_d);
  else if constexpr (N == 64) wgmma_m64n64k16_bf16_rs(d, a, desc_b, scale_d);
  else {
    static_assert(N == 128, "token tiles of 16, 32, 64 or 128");
    wgmma_m64n128k16_bf16_rs(d, a, desc_b, scale_d);
  }
}
