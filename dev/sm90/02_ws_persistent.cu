// dev/sm90 ladder, step 02: warp-specialized persistent grouped GEMM (the intended design).
//
// D[m, n] = row_scale[m] * sum_k A[m, k] * B[e(m) * N + n, k]     (bf16 in, f32 acc, bf16 out)
// Same contiguous layout and inputs as 01 (A [M_total, K], segments padded to BM = 128,
// B [E * N, K], the expert chosen by the TMA row coordinate e * N + n0; all three tensor maps
// encoded once per buffer on the host and passed as __grid_constant__ parameters).
//
// Changes from 01, and why:
//   - tile 128 x 256 (was 128 x 128): per k16 step each consumer reads 2 KB of A + 8 KB of B
//     for 64x256x16 MACs (80 B/clk at full tensor rate, inside the 128 B/clk shared-memory
//     port), where 01's two m64n128 re-read B (96 B/clk): nearer the smem limit;
//   - two consumer warpgroups (rows 0-63 and 64-127), one producer warpgroup: while one
//     consumer waits on its wgmma group the other's keeps the tensor cores busy;
//   - setmaxnreg: producer 40 registers, consumers 232 (128 accumulators each);
//   - persistent grid (one CTA per SM, read from the device), tiles from 02_scheduler.cuh:
//     the producer runs ahead into the next tile's stages while the consumers store;
//   - epilogue through shared memory and TMA stores: each consumer writes its 64 x 256
//     result as four 64 x 64 boxes, double-buffered (2 x 8 KB per consumer), in the same
//     128B-swizzled layout TMA uses (conflict-free 4-byte stores, see below); one thread per
//     consumer issues cp.async.bulk.tensor stores and only waits for them to have READ the
//     buffer before it is reused, so global writes overlap the next tile's main loop.
//
// Thread roles (384 threads, __launch_bounds__(384, 1)):
//   warpgroup 0  producer: thread 0 issues TMA; the other 127 threads leave after setmaxnreg
//   warpgroup 1  consumer 0: output rows m0 + 0..63
//   warpgroup 2  consumer 1: output rows m0 + 64..127
// Barriers: full[s] (count 1: producer's arrive.expect_tx, + 48 KB of TMA bytes),
//           empty[s] (count 8: lane 0 of each consumer warp after its wgmma group completed).
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/types.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/wgmma.cuh"
#include "02_scheduler.cuh"
#include "watchdog.cuh"
#include "harness.cuh"

#include <algorithm>
#include <cstddef>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "02_ws_persistent.cu must be compiled for sm_90a (-gencode=arch=compute_90a,code=sm_90a)"
#endif

namespace v02 {

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

__global__ void __launch_bounds__(kThreads, 1)
    gemm02(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
           const __grid_constant__ CUtensorMap tm_d, const float* __restrict__ row_scale,
           const int* __restrict__ tile_expert, int m_tiles, int n_tiles, int N, int k_blocks) {
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
      tma_prefetch_desc(&tm_a);
      tma_prefetch_desc(&tm_b);
      TileScheduler sched(m_tiles, n_tiles);
      int mt, nt;
      u32 it = 0;  // k-block counter over all tiles: stage = it % STAGES, phase = it / STAGES
      bool alive = true;
      while (alive && sched.next(mt, nt)) {
        const int m0 = mt * BM;
        const int b_row = tile_expert[mt] * N + nt * BN;  // the expert is a coordinate
        for (int kb = 0; kb < k_blocks; ++kb, ++it) {
          const u32 s = it % STAGES, ph = (it / STAGES) & 1u;
          if (!mbar_wait_bounded(smem_u32(&sm.empty[s]), ph ^ 1u, (kWaitEmpty << 16) | s, it)) {
            alive = false;
            break;
          }
          const u32 full = smem_u32(&sm.full[s]);
          mbar_arrive_expect_tx(full, kStageBytes);
          tma_load_2d(smem_u32(sm.a[s]), &tm_a, kb * BK, m0, full);
          tma_load_2d(smem_u32(sm.b[s]), &tm_b, kb * BK, b_row, full);
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

      // ---- epilogue: scale, bf16, 4 boxes of 64 x 64 through swizzled smem, TMA store.
      // Box layout (as TMA SWIZZLE_128B reads it): row r at byte 128 r, 16-B chunk q of the
      // row at chunk position q ^ (r & 7). This thread's rows r0 and r0 + 8 both have
      // (r & 7) == g; its 4 bytes of n8-chunk q sit at byte 4 t of that chunk. Across a warp
      // (g = 0..7, t = 0..3) the 32 words land in banks 4 (q ^ g) + t: all distinct.
      const long long m_row0 = (long long)mt * BM + c * 64;
      const float s0 = row_scale[m_row0 + r0], s1 = row_scale[m_row0 + r0 + 8];
#pragma unroll
      for (int j = 0; j < BN / kEpiBox; ++j) {
        const int buf = j & 1;
        if (tid == 0) tma_store_wait_read<1>();  // the store that last read `buf` is done reading
        named_bar_sync(1 + c, 128);
        unsigned char* box = reinterpret_cast<unsigned char*>(sm.d[c][buf]);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const int i = j * 8 + q;  // n8-chunk index in the 256-wide accumulator
          const u32 off = (u32)r0 * 128u + (u32)((q ^ g) << 4) + (u32)t * 4u;
          __nv_bfloat162 v0 = __floats2bfloat162_rn(acc[4 * i + 0] * s0, acc[4 * i + 1] * s0);
          __nv_bfloat162 v1 = __floats2bfloat162_rn(acc[4 * i + 2] * s1, acc[4 * i + 3] * s1);
          *reinterpret_cast<__nv_bfloat162*>(box + off) = v0;
          *reinterpret_cast<__nv_bfloat162*>(box + off + 8 * 128) = v1;
        }
        fence_proxy_async_smem();  // generic-proxy smem writes -> visible to the TMA store
        named_bar_sync(1 + c, 128);
        if (tid == 0) {
          tma_store_2d(&tm_d, nt * BN + j * kEpiBox, (int)m_row0, smem_u32(box));
          tma_store_commit();
        }
      }
    }
    if (tid == 0) tma_store_wait_all<0>();  // smem must outlive the stores' reads
  }
}

struct Version {
  static constexpr const char* kName = "02_ws_persist";
  static constexpr int kBM = BM, kBN = BN, kBK = BK;
  static const void* func() { return reinterpret_cast<const void*>(&gemm02); }
  static size_t smem_bytes() { return kSmemBytes; }
  CUtensorMap ta, tb, td;
  int grid = 0;
  void setup(const h::Problem& p, const h::DevInfo& dev) {
    ta = h::tmap_bf16_2d(p.A, p.s.K, p.M_total, BK, BM);
    tb = h::tmap_bf16_2d(p.B, p.s.K, (uint64_t)p.s.E * p.s.N, BK, BN);
    td = h::tmap_bf16_2d(p.D, p.s.N, p.M_total, kEpiBox, 64);
    CK(cudaFuncSetAttribute(gemm02, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmemBytes));
    const long long tiles = (long long)p.m_tiles * (p.s.N / BN);
    grid = (int)std::min<long long>(dev.sms, tiles);  // persistent: at most one CTA per SM
  }
  void launch(const h::Problem& p, cudaStream_t st) {
    gemm02<<<grid, kThreads, kSmemBytes, st>>>(ta, tb, td, p.scale, p.tile_expert, p.m_tiles, p.s.N / BN, p.s.N,
                                               p.s.K / BK);
  }
};

}  // namespace v02

int main(int argc, char** argv) { return h::run_main<v02::Version>(argc, argv); }
