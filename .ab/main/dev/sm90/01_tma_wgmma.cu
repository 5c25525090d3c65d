// dev/sm90 ladder, step 01: the simplest correct TMA + wgmma grouped GEMM.
//
// D[m, n] = row_scale[m] * sum_k A[m, k] * B[e(m) * N + n, k]     (bf16 in, f32 acc, bf16 out)
// A [M_total, K] expert-contiguous, segments padded to BM = 128 rows, e(m) = tile_expert[m / BM];
// B [E * N, K] stacked nn.Linear weights (K contiguous). The expert is chosen by the TMA row
// coordinate e * N + n0; both tensor maps are encoded once on the host, passed by value.
//
// Shape of this version (deliberately plain, the reference point for 02):
//   - one CTA per 128 x 128 output tile, grid (N / 128, m_tiles), no persistence;
//   - 160 threads: warps 0-3 = one consumer warpgroup, warp 4 = producer (lane 0 issues TMA);
//   - 4-stage full/empty mbarrier ring, BK = 64 (one 128-byte swizzle row per tile row);
//   - consumer: per k16 step two wgmma.m64n128k16 (rows 0-63 and 64-127 share the B tile),
//     commit, wait_group 0, release the stage; accumulators 2 x 64 f32 per thread;
//   - epilogue: scale rows, convert to bf16, bf16x2 stores straight from registers to
//     global (each warp store covers 8 rows x 16 B; L2 merges the halves of each sector).
// No setmaxnreg (one consumer warpgroup fits in 255 registers at 160 threads).
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/types.cuh"
#include "sm90/ptx/wgmma.cuh"
#include "watchdog.cuh"
#include "harness.cuh"

#include <cstddef>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "01_tma_wgmma.cu must be compiled for sm_90a (-gencode=arch=compute_90a,code=sm_90a)"
#endif

namespace v01 {

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 4;
constexpr int kThreads = 160;  // consumer warpgroup (warps 0-3) + producer warp 4
constexpr u32 kStageBytes = (BM + BN) * BK * 2;

// Shared-memory layout. Every operand tile starts on a 1024-byte boundary (the 128B-swizzle
// atom), so TMA's swizzle and the wgmma descriptors (base offset 0) agree.
struct Smem {
  alignas(1024) unsigned short a[STAGES][BM * BK];  // 16 KB per stage
  alignas(1024) unsigned short b[STAGES][BN * BK];  // 16 KB per stage
  alignas(8) u64 full[STAGES];                      // TMA -> consumer: stage filled
  u64 empty[STAGES];                                // consumer -> TMA: stage free
};
static_assert(sizeof(unsigned short) * BM * BK % 1024 == 0, "A stage must keep 1024-B alignment");
static_assert(sizeof(unsigned short) * BN * BK % 1024 == 0, "B stage must keep 1024-B alignment");
static_assert(BK * 2 == 128, "BK must span exactly one 128-byte swizzle row");
constexpr size_t kSmemBytes = sizeof(Smem) + 1024;  // + slack to align the dynamic base
static_assert(kSmemBytes <= 232448, "exceeds the sm_90 opt-in shared memory per block");

__global__ void __launch_bounds__(kThreads, 1)
    gemm01(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
           __nv_bfloat16* __restrict__ D, const float* __restrict__ row_scale, const int* __restrict__ tile_expert,
           int N, int k_blocks) {
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u));

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int nt = blockIdx.x, mt = blockIdx.y;
  const int m0 = mt * BM, n0 = nt * BN;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_u32(&sm.full[s]), 1);   // the producer's arrive.expect_tx
      mbar_init(smem_u32(&sm.empty[s]), 4);  // one arrive per consumer warp
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (warp == 4) {  // ---------------- producer
    if (lane == 0) {
      tma_prefetch_desc(&tm_a);
      tma_prefetch_desc(&tm_b);
      const int b_row = tile_expert[mt] * N + n0;  // the expert is a coordinate
      for (int kb = 0; kb < k_blocks; ++kb) {
        const int s = kb % STAGES;
        const u32 ph = (u32)(kb / STAGES) & 1u;
        if (!mbar_wait_bounded(smem_u32(&sm.empty[s]), ph ^ 1u, (kWaitEmpty << 16) | s, kb)) break;
        mbar_arrive_expect_tx(smem_u32(&sm.full[s]), kStageBytes);
        tma_load_2d(smem_u32(sm.a[s]), &tm_a, kb * BK, m0, smem_u32(&sm.full[s]));
        tma_load_2d(smem_u32(sm.b[s]), &tm_b, kb * BK, b_row, smem_u32(&sm.full[s]));
      }
    }
    return;
  }

  // ---------------- consumer warpgroup (warps 0-3)
  float acc[2][64];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[h][i] = 0.f;

  for (int kb = 0; kb < k_blocks; ++kb) {
    const int s = kb % STAGES;
    const u32 ph = (u32)(kb / STAGES) & 1u;
    if (!mbar_wait_bounded(smem_u32(&sm.full[s]), ph, (kWaitFull << 16) | s, kb)) return;
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 64; ++i) reg_fence(acc[h][i]);
    const u32 a_addr = smem_u32(sm.a[s]), b_addr = smem_u32(sm.b[s]);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      const u64 db = wgmma_desc_k128b(b_addr + kk * 32);
      const u32 scale_d = (kb > 0 || kk > 0) ? 1u : 0u;
      wgmma_m64n128k16_bf16_ss(acc[0], wgmma_desc_k128b(a_addr + kk * 32), db, scale_d);
      wgmma_m64n128k16_bf16_ss(acc[1], wgmma_desc_k128b(a_addr + 64 * 128 + kk * 32), db, scale_d);
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 64; ++i) reg_fence(acc[h][i]);
    if (lane == 0) mbar_arrive(smem_u32(&sm.empty[s]));
  }

  // ---------------- epilogue: fragment (see ptx/wgmma.cuh) -> scaled bf16 -> global
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long r0 = (long long)m0 + h * 64 + warp * 16 + g, r1 = r0 + 8;
    const float s0 = row_scale[r0], s1 = row_scale[r1];
    __nv_bfloat16* d0 = D + (size_t)r0 * N + n0 + 2 * t;
    __nv_bfloat16* d1 = D + (size_t)r1 * N + n0 + 2 * t;
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
      *reinterpret_cast<__nv_bfloat162*>(d0 + 8 * i) =
          __floats2bfloat162_rn(acc[h][4 * i + 0] * s0, acc[h][4 * i + 1] * s0);
      *reinterpret_cast<__nv_bfloat162*>(d1 + 8 * i) =
          __floats2bfloat162_rn(acc[h][4 * i + 2] * s1, acc[h][4 * i + 3] * s1);
    }
  }
}

struct Version {
  static constexpr const char* kName = "01_tma_wgmma";
  static constexpr int kBM = BM, kBN = BN, kBK = BK;
  static const void* func() { return reinterpret_cast<const void*>(&gemm01); }
  static size_t smem_bytes() { return kSmemBytes; }
  CUtensorMap ta, tb;
  void setup(const h::Problem& p, const h::DevInfo&) {
    ta = h::tmap_bf16_2d(p.A, p.s.K, p.M_total, BK, BM);
    tb = h::tmap_bf16_2d(p.B, p.s.K, (uint64_t)p.s.E * p.s.N, BK, BN);
    CK(cudaFuncSetAttribute(gemm01, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmemBytes));
  }
  void launch(const h::Problem& p, cudaStream_t st) {
    const dim3 grid(p.s.N / BN, p.m_tiles);
    gemm01<<<grid, kThreads, kSmemBytes, st>>>(ta, tb, p.D, p.scale, p.tile_expert, p.s.N, p.s.K / BK);
  }
};

}  // namespace v01

int main(int argc, char** argv) { return h::run_main<v01::Version>(argc, argv); }
