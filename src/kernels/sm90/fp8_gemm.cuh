// Hopper FP8 x FP8 grouped GEMM (W8A8, QGMMA) over the expert-contiguous padded layout, for
// FP8 weights with FP8 activations (MoeSpec::activation_format = fp8): the layer as the CPU
// reference defines it, activations quantized in 1 x 128 groups before each GEMM.
//
//   GEMM_STAGE 1:  h[row, f] = act(gate, up)           A = x quantized by the gather (bf16 out [rows, I])
//   GEMM_STAGE 2:  y[row, n] = scale[row] * (h[row] . W2[e]^T)   A = h quantized in place (bf16 out [rows, H])
//
// Operands (K = H for GEMM 1, I for GEMM 2; K % 128 == 0):
//   A  the row-major buffer that held the bf16 rows (row stride 2K bytes): row r's e4m3 codes
//      in its first K bytes, the f32 group scales of each 32 rows transposed in the second half
//      of the first of them (sm90/quantize.cuh, SCALES_TILED): k-block kb's scale of row r at
//      float K/4 + 32 kb + r % 32 of row r - r % 32. TMA: codes box {128 B, 128 rows},
//      128B-swizzled; scales over the 32-row groups, box {32 floats, 4 groups}, which lands as
//      the tile's 128 scales in row order. (The scales used to sit in each row, a box {4 floats,
//      128 rows}: 128 requests of 16 bytes a stage, as many as the codes'.)
//   B  the portable prepared layout: e4m3 [E_TOTAL * N, KP], boxes {128 B, 128 rows},
//      128B-swizzled; f32 scales [E_TOTAL][KP/128][N] (one per row and 128 columns), box
//      {128, 1, 1}.
// Tile 128 x 128 (two consumer warpgroups of 64 rows), BK = 128 = one scale block, 5 stages.
// Per k-block a consumer issues 4 wgmma m64n128k32 (e4m3 x e4m3 -> f32) into a fresh partial
// accumulator, and the block is then "promoted": final += partial * a_scale[row] *
// b_scale[col], in f32 (the scales change every 128 columns of K, so the tensor cores cannot
// apply them). B's scales are uniform over 128 source rows (FP8_Block128 weights: one scale
// per 128 x 128 block), and a tile's rows are one 128-row block (GEMM 2) or 64 gate rows and
// 64 up rows, each a 64-aligned span of one block (GEMM 1's interleave, I % 128 == 0): so a
// thread needs 4 products a_scale x b_scale per block and one FFMA per accumulator. The
// scales are read while the wgmma group runs. Two partial sets alternate over the k-blocks:
// block kb + 1's group is issued before block kb's promotion, and each stage is released as
// soon as its group completed. 64 + 2 x 64 accumulator registers per thread: more than the
// 168 of the launch (384 threads), within the 232 that setmaxnreg gives the consumers, which
// ptxas honours only because no `trap` is reachable from them (sm90/wait.cuh). N = 256 would
// need 384.
//
// Roles, persistence, tile order (claimed in order), half tiles (GEMM 2: split by columns
// between the consumers, m64n64 each, as grouped_gemm.cuh; GEMM 1: consumer 1 passes over them,
// its column half being half a store box), epilogue (swizzled 64 x 64 boxes, TMA stores): as
// grouped_gemm.cuh. GEMM 1's 128 interleaved rows give 64 features (one box per consumer).
//
// Defines: GEMM_STAGE, ACT, ACT_ALPHA, ACT_LIMIT (GEMM 1), SM90_FP8_SMEM_BYTES (the host's
// launch size, checked), optional WAIT_LIMIT_NS (sm90/wait.cuh).
#pragma once
#include "common/convert.cuh"
#include "common/grid_dependency.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/warpgroup.cuh"
#include "sm90/ptx/wgmma.cuh"
#include "sm90/ring.cuh"
#include "sm90/tiles.cuh"
#include "sm90/wait.cuh"

namespace sm90f8 {

constexpr int BM = 128, BN = 128, BK = 128, STAGES = 5;
constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
constexpr int kEpiBox = 64;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr u32 kStageBytes = BM * BK + BN * BK + BM * 4 + BN * 4;  // A, B codes; A, B scales
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536, "register file");

struct Smem {
  alignas(1024) unsigned char a[STAGES][BM * BK];    // 16 KB
  alignas(1024) unsigned char b[STAGES][BN * BK];    // 16 KB
  alignas(1024) u16 d[kConsumers][2][64 * kEpiBox];  // 8 KB per box buffer
  alignas(128) float as[STAGES][BM];                 // A scales of the block: row r's at [r]
  alignas(128) float bs[STAGES][BN];                 // B scales of the block
  alignas(8) u64 full[STAGES];
  u64 empty[STAGES];
  int tile[STAGES];  // ring.cuh stage_word: the tile starting at this stage (tiles.cuh tile_word)
};
constexpr unsigned kSmemBytes = sizeof(Smem) + 1024;
static_assert(kSmemBytes <= 232448, "exceeds the sm_90 opt-in shared memory per block (227 KB)");
static_assert(kSmemBytes == SM90_FP8_SMEM_BYTES, "the host's fp8 GEMM smem size must match");

// One k-block: 4 x m64nNk32 into p (fresh: the first ignores p's old value), from the
// stage's A and B tiles (descriptors of their first k32 step). N = 128: a consumer's 64 rows
// x the tile's 128 columns; N = 64: a half tile's column half.
template <int N>
__device__ __forceinline__ void issue_block(float (&p)[N / 2], u64 a_desc, u64 b_desc) {
  wgmma_fence();
#pragma unroll
  for (int i = 0; i < N / 2; ++i) reg_fence(p[i]);
#pragma unroll
  for (int kk = 0; kk < BK / 32; ++kk)
    wgmma_m64nk32_e4m3_ss<N>(p, wgmma_desc_add(a_desc, kk * 32), wgmma_desc_add(b_desc, kk * 32), kk > 0 ? 1u : 0u);
  wgmma_commit();
}

// The B scale of n8 chunk q of the tile: GEMM 1 alternates gate (even q) and up (odd q)
// chunks, whose scales are those of tile rows 0 and 8; GEMM 2's tile is one block.
constexpr int kOddChunkRow = GEMM_STAGE == 1 ? 8 : 0;

// This thread's scales for k-block kb in stage s_: A's of rows r0, r0 + 8, B's of the even and
// odd chunks. as_row = shared address of sm.as[0][r0], bs = of sm.bs[0]:
// set up once, offset per stage. Read before the wgmma group is issued (volatile asm: kept
// ahead of the group's), so their latency has passed when the products are formed: read
// after the issue, ptxas placed the products between the group's wgmmas and the last one
// waited on the loads (ncu: short scoreboard on those FMULs, ~5 % of the warp samples).
struct BlockScales {
  float sa0, sa1, sb0, sb1;
  __device__ __forceinline__ BlockScales(u32 as_row, u32 bs, u32 s_) {
    const u32 a = as_row + s_ * (BM * 4), b = bs + s_ * (BN * 4);
    sa0 = ld_shared_f32(a), sa1 = ld_shared_f32(a + 8 * 4), sb0 = ld_shared_f32(b);
    sb1 = kOddChunkRow ? ld_shared_f32(b + kOddChunkRow * 4) : sb0;
  }
};

// The combined scales [row r0, r0 + 8][even, odd chunk], formed once the group is issued.
struct PromoteScales {
  float s[2][2];
  __device__ __forceinline__ explicit PromoteScales(const BlockScales& b) {
    s[0][0] = b.sa0 * b.sb0, s[0][1] = b.sa0 * b.sb1, s[1][0] = b.sa1 * b.sb0, s[1][1] = b.sa1 * b.sb1;
  }
};

// final += p * scale for this thread's rows r0, r0 + 8 (within the tile), its N / 8 chunks q
// (N as in issue_block: a half tile's chunks are its column half's, which starts at an even
// chunk, so the parity of q is the tile's).
template <int N>
__device__ __forceinline__ void promote(float (&fin)[N / 2], float (&p)[N / 2], const PromoteScales& bs) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) reg_fence(p[i]);
#pragma unroll
  for (int q = 0; q < N / 8; ++q) {
    fin[4 * q + 0] = fmaf(p[4 * q + 0], bs.s[0][q & 1], fin[4 * q + 0]);
    fin[4 * q + 1] = fmaf(p[4 * q + 1], bs.s[0][q & 1], fin[4 * q + 1]);
    fin[4 * q + 2] = fmaf(p[4 * q + 2], bs.s[1][q & 1], fin[4 * q + 2]);
    fin[4 * q + 3] = fmaf(p[4 * q + 3], bs.s[1][q & 1], fin[4 * q + 3]);
  }
}

// A k-block whose wgmma group was issued: its promotion scales and its ring stage.
struct InFlight {
  PromoteScales scales;
  u32 stage;
};

// tiles.cuh; GEMM 1 gives 64 features a tile: one store box per consumer.
using Epilogue = sm90::TileEpilogue<BM, BN>;

}  // namespace sm90f8

// grid = min(SMs, tile_bound * n_tiles) (persistent), block = 384, dynamic smem kSmemBytes.
// tm_a / tm_as: A codes / scales (see above); tm_b / tm_bs: W codes / scales; tm_d: out
// [rows, N_out] bf16 (GEMM 1: I, GEMM 2: H). counts / seg_off: the permute stage's (half
// tiles). tile_counter: this GEMM's claim counter, 0 at launch (tiles.cuh). k_scale0: the
// first A scale's column in tm_as (floats: K / 4, the codes' bytes; a multiple of 32).
// row_scale: GEMM 2 only (null for GEMM 1).
extern "C" __global__ void __launch_bounds__(sm90f8::kThreads, 1)
    moe_sm90_fp8_gemm(const __grid_constant__ TensorMap tm_a, const __grid_constant__ TensorMap tm_as,
                      const __grid_constant__ TensorMap tm_b, const __grid_constant__ TensorMap tm_bs,
                      const __grid_constant__ TensorMap tm_d, const int* __restrict__ tile_expert,
                      const int* __restrict__ counts, const i64* __restrict__ seg_off,
                      int* __restrict__ tile_counter, const int* __restrict__ num_tiles, int tile_bound,
                      const float* __restrict__ row_scale,
                      int n_tiles, int n_per_expert, int k_blocks, int k_scale0) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "sm90/fp8_gemm.cuh must be compiled for sm_90a"
#endif
  using namespace sm90f8;
  Smem& sm = aligned_smem<Smem>();
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  init_ring(sm.full, sm.empty, 4 * kConsumers);  // lane 0 of each consumer warp
  pdl_begin();  // PDL (common/grid_dependency.cuh): the ring is set up before it
  __syncthreads();
  const int m_tiles = min(*num_tiles, tile_bound);

  if (wg == 0) {
    // ================= producer warpgroup
    setmaxnreg_dec<kProducerRegs>();
    if (warp == 0) {  // the producer warp (tiles.cuh produce_tiles)
      if (lane == 0) {
        tma_prefetch_desc(&tm_a);
        tma_prefetch_desc(&tm_as);
        tma_prefetch_desc(&tm_b);
        tma_prefetch_desc(&tm_bs);
      }
      auto load = [&](u32 s, u32 full, int kb, int mt, int nt, int e) {
        tma_load_2d(smem_u32(sm.a[s]), &tm_a, kb * BK, mt * BM, full);
        tma_load_2d(smem_u32(sm.as[s]), &tm_as, k_scale0 + kb * 32, mt * (BM / 32), full);
        tma_load_2d(smem_u32(sm.b[s]), &tm_b, kb * BK, e * n_per_expert + nt * BN, full);  // the expert: a coordinate
        tma_load_3d(smem_u32(sm.bs[s]), &tm_bs, nt * BN, kb, e, full);
      };
      sm90::produce_tiles<BM>(sm.full, sm.empty, sm.tile, tile_counter, m_tiles * n_tiles, n_tiles, k_blocks,
                              tile_expert, counts, seg_off, kStageBytes, lane, load);
    }
    return;
  }

  // ================= consumer warpgroups: rows c*64 .. c*64+63 of each tile
  setmaxnreg_inc<kConsumerRegs>();
  // The consumer loop is instantiated once per consumer, c a constant: the k-loop then holds
  // nothing that depends on threadIdx, so ptxas keeps the ring position and the wgmma
  // descriptors in uniform registers (UIADD3 between back-to-back QGMMAs) instead of
  // rebuilding each descriptor in vector registers and moving it over (R2UR) per k32 step:
  // GEMM 2's k-loop 150 -> 134 instructions. Twice the code, ~1.7 k instructions in all.
  auto consume = [&](auto consumer) {
    constexpr int c = decltype(consumer)::value;
    const int g = lane >> 2, t = lane & 3;
    const int r_local = warp * 16 + g;  // within the consumer's 64 (second: + 8)
    const int r_tile = c * 64 + r_local;
    Epilogue epi;
#if GEMM_STAGE == 2
    epi.row_scale = row_scale;
#endif
    // Stage 0's operand descriptors, barriers and A scales of this thread's rows, advanced per
    // stage: no address is rebuilt in the k-loop. A full tile: this consumer's 64 rows of A x
    // all 128 rows of B. A half tile of GEMM 2 (the tile's rows 64-127 are padding): the first
    // 64 rows of A x this consumer's 64 rows of B (its column half), so both warpgroups work
    // on it; GEMM 1's consumer 1 still passes over half tiles (its column half would be 32
    // features: half a store box).
    const u64 a_desc0 = wgmma_desc_k128b(smem_u32(sm.a[0]) + c * 64 * BK);
    const u64 b_desc0 = wgmma_desc_k128b(smem_u32(sm.b[0]));
    const u32 full0 = smem_u32(&sm.full[0]), empty0 = smem_u32(&sm.empty[0]);
    const u32 as_row = smem_u32(&sm.as[0][r_tile]), bs0 = smem_u32(sm.bs[0]);
#if GEMM_STAGE == 2
    const u64 a_desc_half = wgmma_desc_k128b(smem_u32(sm.a[0]));
    const u64 b_desc_half = wgmma_desc_k128b(smem_u32(sm.b[0]) + c * 64 * BK);
    const u32 as_row_half = smem_u32(&sm.as[0][r_local]);
#endif
    float fin[64], p[64], p1[64];
    u32 boxes = 0;  // store boxes issued: buffers alternate across tiles too (GEMM 1 has one per tile)
    u32 it = 0;
    // One tile's k-loop into acc: N = 128 (a full tile: fin, p, p1) or 64 (a half tile's column
    // half: arrays of its own, N / 2 floats each), from descriptors a_d / b_d and A scales at
    // as_r. The half tile's sets are not fin's, p's and p1's first halves: with the two shapes
    // of wgmma writing the same arrays, ptxas (NVRTC's PTX, 13.0) ran short of registers for the
    // wgmma pipeline and serialized every QGMMA of the kernel (C7511), full tiles included.
    auto k_loop = [&](auto n, u64 a_d, u64 b_d, u32 as_r, auto& acc, auto& q0, auto& q1) {
      constexpr int N = decltype(n)::value;
#pragma unroll
      for (int i = 0; i < N / 2; ++i) acc[i] = 0.f;
      // The ring position, advanced by a compare instead of a division by STAGES per k-block.
      u32 s = it % STAGES, ph = (it / STAGES) & 1u;
      // Two partial sets, q0 and q1, for even and odd k-blocks: block kb + 1's group is issued
      // before block kb is promoted, so the tensor cores always hold this warpgroup's next group
      // while it promotes (with one set, both warpgroups waited on the same stage and promoted
      // at the same time, the tensor cores idle: ncu 49 % tensor-active at T = 8192).
      auto issue = [&](float (&q)[N / 2]) {
        mbar_wait(full0 + 8 * s, ph);
        const BlockScales block_scales(as_r, bs0, s);
        issue_block<N>(q, wgmma_desc_add(a_d, s * BM * BK), wgmma_desc_add(b_d, s * BN * BK));
        const InFlight f{PromoteScales(block_scales), s};
        if (++s == STAGES) s = 0, ph ^= 1u;
        return f;
      };
      // Once q's group completed (the wgmma_wait before): its stage back to the producer, then
      // the promotion. The stage's scales were read with generic loads; the proxy fence
      // completes them before the release, so the producer's next TMA into the stage cannot
      // overtake them whatever ptxas schedules (decode_gemm.cuh's A8 loop had exactly that race).
      auto retire = [&](float (&q)[N / 2], const InFlight& f) {
        fence_proxy_async_smem();
        if (lane == 0) mbar_arrive(empty0 + 8 * f.stage);
        promote<N>(acc, q, f.scales);
      };
      InFlight even = issue(q0);  // k_blocks >= 1 (K >= 128)
      int kb = 0;
      for (; kb + 2 < k_blocks; kb += 2) {
        const InFlight odd = issue(q1);
        wgmma_wait<1>();
        retire(q0, even);
        even = issue(q0);
        wgmma_wait<1>();
        retire(q1, odd);
      }
      if (kb + 1 < k_blocks) {  // an even number of blocks: the last pair
        const InFlight odd = issue(q1);
        wgmma_wait<1>();
        retire(q0, even);
        wgmma_wait<0>();
        retire(q1, odd);
      } else {
        wgmma_wait<0>();
        retire(q0, even);
      }
      it += k_blocks;
    };
    for (;;) {
      const int word = stage_word(sm.full, sm.tile, it);  // CTA-uniform
      if (word == sm90::kNoMoreTiles) break;
      const auto [mt, nt] = sm90::tile_mn(sm90::word_tile(word), n_tiles);
      const bool half = sm90::word_half(word);
#if GEMM_STAGE == 1
      if (c == 1 && half) {
        pass_stages(sm.full, sm.empty, it, k_blocks, lane);
        sm90::half_tile_wait();
        continue;
      }
      constexpr bool split = false;
      k_loop(Constant<128>{}, a_desc0, b_desc0, as_row, fin, p, p1);
#else
      const bool split = half;
      if (split) {
        float h_acc[32], h_p[32], h_p1[32];
        k_loop(Constant<64>{}, a_desc_half, b_desc_half, as_row_half, h_acc, h_p, h_p1);
#pragma unroll
        for (int i = 0; i < 32; ++i) fin[i] = h_acc[i];  // the epilogue's box 0 reads fin[0 .. 31]
      } else {
        k_loop(Constant<128>{}, a_desc0, b_desc0, as_row, fin, p, p1);
      }
#endif

      // ---- epilogue: 64 x 64 bf16 boxes through swizzled smem, TMA store: all kBoxes of the
      // consumer's rows, or on a split half tile the one box of its column half (rows 0-63).
      const int rows = split ? 0 : c;  // which 64 rows of the tile
      const int m_row0 = mt * BM + rows * 64;
      epi.begin_tile(mt, rows, r_local);
      // (nt passed in: C++17, which NVRTC compiles, cannot capture a structured binding.)
      auto box = [&](int j, int col_j, int n_tile) {
        sm90::store_box(epi, fin, j, col_j, reinterpret_cast<unsigned char*>(sm.d[c][boxes++ & 1]), &tm_d, n_tile,
                        m_row0, c, r_local, g, t, tid);
      };
      if (split) {
        box(0, c, nt);
      } else {
#pragma unroll
        for (int j = 0; j < Epilogue::kBoxes; ++j) box(j, j, nt);
      }
#if GEMM_STAGE == 1
      if (half) sm90::half_tile_done();
#endif
    }
    if (tid == 0) tma_store_wait_all<0>();  // smem must outlive the stores' reads
  };
  if (wg == 1) consume(Constant<0>{});
  else consume(Constant<1>{});
}
