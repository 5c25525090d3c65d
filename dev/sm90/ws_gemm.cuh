// The warp-specialized persistent grouped GEMM of ladder step 02, shared by 02 (plain GEMM,
// routing-weight scale) and 03 (GEMM1 with the gated activation). Everything up to the
// epilogue is here: tile shape, shared-memory layout, producer (TMA) and consumer (wgmma)
// loops, the double-buffered 64 x 64 store boxes and their TMA stores. A version supplies
// only an epilogue policy `Epi` (what goes into each store box) and its __global__ wrapper,
// so kernel names, parameters and the generated code of 02 are what they were when 02 was
// one file (checked: same registers, same SASS length and instruction mix; only a few integer
// ops of the per-tile address setup differ, NOTES.md).
//
// D[m, n] = epilogue(sum_k A[m, k] * B[e(m) * N_b + n, k]): A [M_total, K] expert-contiguous,
// segments padded to BM = 128 rows, B [E * N_b, K], the expert chosen by the TMA row
// coordinate e * N_b + n0 (tensor maps encoded once on the host, passed as __grid_constant__).
//
// Thread roles (384 threads, __launch_bounds__(384, 1) on the wrapper):
//   warpgroup 0  producer: thread 0 issues TMA; the other 127 threads leave after setmaxnreg
//   warpgroup 1  consumer 0: output rows m0 + 0..63
//   warpgroup 2  consumer 1: output rows m0 + 64..127
// Barriers: full[s] (count 1: producer's arrive.expect_tx, + 48 KB of TMA bytes),
//           empty[s] (count 8: lane 0 of each consumer warp after its wgmma group completed),
//           named barrier 1 + c among consumer c's 128 threads around each store box.
//
// Epilogue policy (a struct passed by value; see 02 and 03 for the two instances):
//   static constexpr int kBoxes;   64 x 64 store boxes per consumer per tile (02: 4, 03: 2)
//   __device__ void begin_tile(int mt, int c, int r0)      per-tile setup (scales, row validity)
//   __device__ void fill(const float (&acc)[128], int j, unsigned char* box, int r0, int g, int t)
//                                 write box j (bf16, 128B-swizzled, see store_offset) from acc
//   __device__ int col(int nt, int j)                     output column of box j
#pragma once
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/types.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/wgmma.cuh"
#include "02_scheduler.cuh"
#include "watchdog.cuh"

#include <cstddef>

namespace ws {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;
constexpr int kConsumers = 2;                      // consumer warpgroups, 64 rows each
constexpr int kThreads = 128 * (1 + kConsumers);  // 384
constexpr int kEpiBox = 64;                        // TMA store box: 64 rows x 64 cols (128-B rows)
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr u32 kStageBytes = (BM + BN) * BK * 2;    // 48 KB per stage
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536, "register file");
static_assert(BM == 64 * kConsumers, "each consumer warpgroup owns 64 rows");

// Shared-memory layout: operand tiles and store boxes on 1024-byte boundaries (the
// 128B-swizzle atom) so TMA's pattern and the wgmma descriptors (base offset 0) agree.
struct Smem {
  alignas(1024) unsigned short a[STAGES][BM * BK];                  // 16 KB per stage
  alignas(1024) unsigned short b[STAGES][BN * BK];                  // 32 KB per stage
  alignas(1024) unsigned short d[kConsumers][2][64 * kEpiBox];      // 8 KB per box buffer
  alignas(8) u64 full[STAGES];
  u64 empty[STAGES];
};
static_assert(BM * BK * 2 % 1024 == 0 && BN * BK * 2 % 1024 == 0 && 64 * kEpiBox * 2 % 1024 == 0,
              "tiles must keep 1024-B alignment");
static_assert(BK * 2 == 128 && kEpiBox * 2 == 128, "one 128-byte swizzle row per tile row");
constexpr size_t kSmemBytes = sizeof(Smem) + 1024;  // + slack to align the dynamic base
static_assert(kSmemBytes <= 232448, "exceeds the sm_90 opt-in shared memory per block (227 KB)");

// Byte offset, inside a 64 x 64 bf16 store box, of this thread's 4 bytes of n8-chunk q in row
// r0 (row r0 + 8 is at + 8 * 128). Box layout (as TMA SWIZZLE_128B reads it): row r at byte
// 128 r, 16-B chunk q of the row at chunk position q ^ (r & 7). This thread's rows r0 and
// r0 + 8 both have (r & 7) == g; its 4 bytes of chunk q sit at byte 4 t of that chunk. Across
// a warp (g = 0..7, t = 0..3) the 32 words land in banks 4 (q ^ g) + t: all distinct.
__device__ __forceinline__ u32 store_offset(int r0, int q, int g, int t) {
  return (u32)r0 * 128u + (u32)((q ^ g) << 4) + (u32)t * 4u;
}

// tm_a, tm_b, tm_d: addresses of the wrapper's __grid_constant__ CUtensorMap parameters.
template <class Epi>
__device__ __forceinline__ void gemm_body(const void* tm_a, const void* tm_b, const void* tm_d,
                                          const int* __restrict__ tile_expert, int m_tiles, int n_tiles, int N_b,
                                          int k_blocks, Epi epi) {
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u));

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_u32(&sm.full[s]), 1);
      mbar_init(smem_u32(&sm.empty[s]), 4 * kConsumers);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ================= producer warpgroup
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) {
      tma_prefetch_desc(tm_a);
      tma_prefetch_desc(tm_b);
      TileScheduler sched(m_tiles, n_tiles);
      int mt, nt;
      u32 it = 0;  // k-block counter over all tiles: stage = it % STAGES, phase = it / STAGES
      bool alive = true;
      while (alive && sched.next(mt, nt)) {
        const int m0 = mt * BM;
        const int b_row = tile_expert[mt] * N_b + nt * BN;  // the expert is a coordinate
        for (int kb = 0; kb < k_blocks; ++kb, ++it) {
          const u32 s = it % STAGES, ph = (it / STAGES) & 1u;
          if (!mbar_wait_bounded(smem_u32(&sm.empty[s]), ph ^ 1u, (kWaitEmpty << 16) | s, it)) {
            alive = false;
            break;
          }
          const u32 full = smem_u32(&sm.full[s]);
          mbar_arrive_expect_tx(full, kStageBytes);
          tma_load_2d(smem_u32(sm.a[s]), tm_a, kb * BK, m0, full);
          tma_load_2d(smem_u32(sm.b[s]), tm_b, kb * BK, b_row, full);
        }
      }
    }
  } else {
    // ================= consumer warpgroups
    setmaxnreg_inc<kConsumerRegs>();
    const int c = wg - 1;  // rows c*64 .. c*64+63 of each tile
    const int g = lane >> 2, t = lane & 3;
    const int r0 = warp * 16 + g;  // this thread's first row within the 64 (second: r0 + 8)
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;

    TileScheduler sched(m_tiles, n_tiles);
    int mt, nt;
    u32 it = 0;
    bool alive = true;
    while (alive && sched.next(mt, nt)) {
      // ---- main loop
      for (int kb = 0; kb < k_blocks; ++kb, ++it) {
        const u32 s = it % STAGES, ph = (it / STAGES) & 1u;
        if (!mbar_wait_bounded(smem_u32(&sm.full[s]), ph, (kWaitFull << 16) | s, it)) {
          alive = false;
          break;
        }
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < 128; ++i) reg_fence(acc[i]);
        const u32 a_addr = smem_u32(sm.a[s]) + c * 64 * 128, b_addr = smem_u32(sm.b[s]);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
          wgmma_m64n256k16_bf16_ss(acc, wgmma_desc_k128b(a_addr + kk * 32), wgmma_desc_k128b(b_addr + kk * 32),
                                   (kb > 0 || kk > 0) ? 1u : 0u);
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 128; ++i) reg_fence(acc[i]);
        if (lane == 0) mbar_arrive(smem_u32(&sm.empty[s]));
      }
      if (!alive) break;

      // ---- epilogue: Epi::kBoxes boxes of 64 x 64 bf16 through swizzled smem, TMA store.
      const int m_row0 = mt * BM + c * 64;
      epi.begin_tile(mt, c, r0);
#pragma unroll
      for (int j = 0; j < Epi::kBoxes; ++j) {
        const int buf = j & 1;
        if (tid == 0) tma_store_wait_read<1>();  // the store that last read `buf` is done reading
        named_bar_sync(1 + c, 128);
        unsigned char* box = reinterpret_cast<unsigned char*>(sm.d[c][buf]);
        epi.fill(acc, j, box, r0, g, t);
        fence_proxy_async_smem();  // generic-proxy smem writes -> visible to the TMA store
        named_bar_sync(1 + c, 128);
        if (tid == 0) {
          tma_store_2d(tm_d, epi.col(nt, j), m_row0, smem_u32(box));
          tma_store_commit();
        }
      }
    }
    if (tid == 0) tma_store_wait_all<0>();  // smem must outlive the stores' reads
  }
}

}  // namespace ws
