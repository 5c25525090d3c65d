// Hopper FP8 x FP8 grouped GEMM (W8A8, QGMMA) over the expert-contiguous padded layout, for
// FP8 weights with FP8 activations (MoeSpec::activation_format = fp8): the layer as the CPU
// reference defines it, activations quantized in 1 x 128 groups before each GEMM.
//
//   GEMM_STAGE 1:  h[row, f] = act(gate, up), quantized   A = x quantized by the gather
//   GEMM_STAGE 2:  y[row, n] = scale[row] * (h[row] . W2[e]^T)   A = h, as GEMM 1 stored it (bf16 out [rows, H])
//
// Operands (K = H for GEMM 1, I for GEMM 2; K % 128 == 0):
//   A  the row-major buffer that held the bf16 rows (row stride 2K bytes): row r's e4m3 codes
//      in its first K bytes, the f32 group scales of each 32 rows transposed in the second half
//      of the first of them (sm90/quantize.cuh, SCALES_TILED): k-block kb's scale of row r at
//      float K/4 + 32 kb + r % 32 of row r - r % 32. TMA: codes box {128 B, 128 rows},
//      128B-swizzled; scales over the 32-row groups, box {32 floats, 4 groups}, which lands as
//      the tile's 128 scales in row order.
//   B  the portable prepared layout: e4m3 [E_TOTAL * N, KP], boxes {128 B, 256 rows},
//      128B-swizzled; f32 scales [E_TOTAL][KP/128][N] (one per row and 128 columns), box
//      {256, 1, 1}.
// Tile 128 x 256 (two consumer warpgroups of 64 rows), BK = 128 = one scale block, 4 stages.
// The 128 x 128 tile it replaced read 32 KB of L2 per 128 x 128 x 128 block; this one reads
// 48 KB for twice the work (a quarter fewer bytes a FLOP), with the same registers.
//
// Per k-block a consumer runs its 256 columns as two groups of 4 wgmma m64n128k32 (e4m3 x e4m3
// -> f32), one column half each, into one partial accumulator set: group, wait, "promote"
// (final += partial * a_scale[row] * b_scale[col], in f32: the scales change every 128
// columns of K, so the tensor cores cannot apply them), next group. While one warpgroup waits
// and promotes, the other's group keeps the tensor cores busy. B's scales are uniform over 128
// weight rows (FP8_Block128: one scale per 128 x 128 block): a column half of GEMM 2's tile is
// one block; GEMM 1's 256 rows are 128 gate and 128 up rows interleaved in chunks of 8
// (layout.cpp, I % 128 == 0), one block of each, the same for both halves. So a thread needs 4
// products a_scale x b_scale per group and one FFMA per accumulator. 128 final + 64 partial
// accumulator registers per thread: more than the 168 of the launch (384 threads), within the
// 232 that setmaxnreg gives the consumers, which ptxas honours only because no `trap` is
// reachable from them (sm90/wait.cuh). (The 128 x 128 tile held two partial sets to overlap
// within a warpgroup; at 256 columns two sets would need 256 registers.)
//
// Half tiles (tile_words.cuh: the tile's rows 64-127 are padding): both consumers on the first
// 64 rows, each one column half: one group a k-block, into two partial sets by turns (p and the
// accumulators' idle second half), so a consumer's next group runs while it promotes. Roles, persistence, tile order (claimed
// in order): as grouped_gemm.cuh. The epilogue stores straight from the accumulators, no
// shared-memory boxes (the stages use the shared memory the boxes had): GEMM 2 bf16 pairs;
// GEMM 1 quantizes h for GEMM 2 itself. Its tile's 256 interleaved rows give 128 features, one
// 1 x 128 group of each row, so the group's amax is the quad's (a half tile's, two consumers':
// exchanged through shared memory); the codes and scales land where sm90/quantize.cuh's
// in-place pass put them (SCALES_TILED), bit for bit as that pass made them from the bf16 h
// this epilogue stored before: no h quantizer kernel, h written once, in half the bytes.
//
// Defines: GEMM_STAGE, ACT, ACT_ALPHA, ACT_LIMIT (GEMM 1), SM90_FP8_SMEM_BYTES (the host's
// launch size, checked), optional WAIT_LIMIT_NS (sm90/wait.cuh).
#pragma once
#include "common/convert.cuh"
#include "common/grid_dependency.cuh"
#include "sm90/fp8_group.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/warpgroup.cuh"
#include "sm90/ptx/wgmma.cuh"
#include "sm90/ring.cuh"
#include "sm90/tiles.cuh"
#include "sm90/wait.cuh"

namespace sm90f8 {

constexpr int BM = 128, BN = 256, BK = 128, STAGES = 4;
constexpr int kHalfN = 128;  // a group's columns: one column half of the tile
constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr u32 kStageBytes = BM * BK + BN * BK + BM * 4 + BN * 4;  // A, B codes; A, B scales
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536, "register file");

struct Smem {
  alignas(1024) unsigned char a[STAGES][BM * BK];  // 16 KB
  alignas(1024) unsigned char b[STAGES][BN * BK];  // 32 KB
  alignas(128) float as[STAGES][BM];               // A scales of the block: row r's at [r]
  alignas(128) float bs[STAGES][BN];               // B scales of the block
  alignas(8) u64 full[STAGES];
  u64 empty[STAGES];
  int tile[STAGES];  // ring.cuh stage_word: the tile starting at this stage (tiles.cuh tile_word)
  // GEMM 1's half tiles: each consumer's amax patterns of rows 0-63, by half-tile parity.
  alignas(16) u32 amax[2][kConsumers][64];
};
constexpr unsigned kSmemBytes = sizeof(Smem) + 1024;
static_assert(kSmemBytes <= 232448, "exceeds the sm_90 opt-in shared memory per block (227 KB)");
static_assert(kSmemBytes == SM90_FP8_SMEM_BYTES, "the host's fp8 GEMM smem size must match");

// One group: 4 x m64n128k32 into p (fresh: the first ignores p's old value), from the stage's
// A rows and B column half (descriptors of their first k32 step).
__device__ __forceinline__ void issue_group(float (&p)[64], u64 a_desc, u64 b_desc) {
  wgmma_fence();
#pragma unroll
  for (int i = 0; i < 64; ++i) reg_fence(p[i]);
#pragma unroll
  for (int kk = 0; kk < BK / 32; ++kk)
    wgmma_m64n128k32_e4m3_ss(p, wgmma_desc_add(a_desc, kk * 32), wgmma_desc_add(b_desc, kk * 32), kk > 0 ? 1u : 0u);
  wgmma_commit();
}

// The B scale of n8 chunk q of a column half: GEMM 1 alternates gate (even q) and up (odd q)
// chunks, whose scales are those of the half's rows 0 and 8; GEMM 2's half is one block.
constexpr int kOddChunkRow = GEMM_STAGE == 1 ? 8 : 0;

// One group's combined scales [row r0, r0 + 8][even, odd chunk] from A's of this thread's rows
// and B's of the half's even and odd chunks.
struct GroupScales {
  float s[2][2];
  __device__ __forceinline__ GroupScales(float sa0, float sa1, float sb0, float sb1) {
    s[0][0] = sa0 * sb0, s[0][1] = sa0 * sb1, s[1][0] = sa1 * sb0, s[1][1] = sa1 * sb1;
  }
};

// fin[BASE ..] += p * scale for this thread's rows r0, r0 + 8 and the half's 16 chunks
// (BASE = 0 or 64: column half 0 or 1 of the tile's accumulators).
template <int BASE>
__device__ __forceinline__ void promote(float (&fin)[128], float (&p)[64], const GroupScales& sc) {
#pragma unroll
  for (int i = 0; i < 64; ++i) reg_fence(p[i]);
#pragma unroll
  for (int q = 0; q < 16; ++q) {
    fin[BASE + 4 * q + 0] = fmaf(p[4 * q + 0], sc.s[0][q & 1], fin[BASE + 4 * q + 0]);
    fin[BASE + 4 * q + 1] = fmaf(p[4 * q + 1], sc.s[0][q & 1], fin[BASE + 4 * q + 1]);
    fin[BASE + 4 * q + 2] = fmaf(p[4 * q + 2], sc.s[1][q & 1], fin[BASE + 4 * q + 2]);
    fin[BASE + 4 * q + 3] = fmaf(p[4 * q + 3], sc.s[1][q & 1], fin[BASE + 4 * q + 3]);
  }
}

#if GEMM_STAGE == 2
// GEMM 2's epilogue, from the accumulators straight to global memory: CHUNKS n8 chunks of fin
// (32: a full tile's 256 columns; 16: a column half), this thread's rows `row` and row + 8 of
// y [rows, out_cols] bf16, from column col0: y = s * acc (s the row's routing weight; 1 for
// shared experts, 0 for padding). A quad's 4 threads store 16 contiguous bytes of a row.
// Columns at or past out_cols (a partial last n-tile) are not stored: checked per chunk only
// when the tile reaches past them.
template <int CHUNKS>
__device__ __forceinline__ void store_rows(const float (&fin)[128], u16* __restrict__ out, i64 row, int col0,
                                           int out_cols, int t, float s0, float s1) {
  u16* r0 = out + row * out_cols + 2 * t;
  u16* r8 = r0 + 8 * (i64)out_cols;
  auto store = [&](int i) {
    *reinterpret_cast<u32*>(r0 + col0 + 8 * i) = pack_bf16x2(fin[4 * i + 0] * s0, fin[4 * i + 1] * s0);
    *reinterpret_cast<u32*>(r8 + col0 + 8 * i) = pack_bf16x2(fin[4 * i + 2] * s1, fin[4 * i + 3] * s1);
  };
  if (col0 + 8 * CHUNKS <= out_cols) {
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) store(i);
  } else {
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i)
      if (col0 + 8 * i < out_cols) store(i);
  }
}
#else
// GEMM 1's epilogue: h = act(gate, up) rounded to bf16 (what GEMM 2's A was quantized from
// before), quantized in 1 x 128 groups (fp8_group.cuh) into h's rows as sm90/quantize.cuh lays
// them out with SCALES_TILED: row r's codes in its first I bytes (row stride 2I), its scale of
// group `group` (= nt) at float I/4 + 32 group + r % 32 of row r - r % 32. PAIRS chunk pairs of
// fin: 16 (a full tile: the group's 128 features) or 8 (a column half: 64 features; the other
// consumer holds the rest of the rows' group). Chunk pair (2j, 2j + 1) holds gate and up of
// features 8j .. 8j + 7; this thread's are 8j + 2t, 8j + 2t + 1 of rows `row`, row + 8.
// xchg (half tiles): this consumer's amax slots and the other's, for rows r_local, r_local + 8;
// both consumers pass named barrier kAmaxBar between writing theirs and reading the other's.
// store_scales: this consumer stores the rows' scales (a half tile's: consumer 0 only).
constexpr u32 kAmaxBar = 1;
template <int PAIRS>
__device__ __forceinline__ void quantize_h(const float (&fin)[128], unsigned char* __restrict__ h, i64 row,
                                           int feat0, int I, int group, int t, u32* xchg_mine,
                                           const u32* xchg_other, int r_local, bool store_scales) {
  u32 w[2][PAIRS];  // bf16 pairs of rows row (0) and row + 8 (1)
#pragma unroll
  for (int j = 0; j < PAIRS; ++j) {
    const float* gate = &fin[8 * j];
    const float* up = &fin[8 * j + 4];
    w[0][j] = pack_bf16x2(sm90::activate(gate[0], up[0]), sm90::activate(gate[1], up[1]));
    w[1][j] = pack_bf16x2(sm90::activate(gate[2], up[2]), sm90::activate(gate[3], up[3]));
  }
  u32 amax[2] = {sm90q::amax_bits(w[0]), sm90q::amax_bits(w[1])};
#pragma unroll
  for (int h8 = 0; h8 < 2; ++h8)
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) amax[h8] = max(amax[h8], __shfl_xor_sync(~0u, amax[h8], o));  // the quad
  if (xchg_other) {
    if (t == 0) xchg_mine[r_local] = amax[0], xchg_mine[r_local + 8] = amax[1];
    named_bar_sync(kAmaxBar, 256);
    amax[0] = max(amax[0], xchg_other[r_local]);
    amax[1] = max(amax[1], xchg_other[r_local + 8]);
  }
#pragma unroll
  for (int h8 = 0; h8 < 2; ++h8) {
    const i64 r = row + 8 * h8;
    const sm90q::GroupQuant q(amax[h8]);
    float x[2 * PAIRS];
#pragma unroll
    for (int j = 0; j < PAIRS; ++j) x[2 * j] = bf16_to_f32(w[h8][j] & 0xFFFFu), x[2 * j + 1] = bf16_to_f32(w[h8][j] >> 16);
    q.divide(x);
    unsigned char* codes = h + r * 2 * (i64)I + feat0 + 2 * t;
#pragma unroll
    for (int j = 0; j < PAIRS; ++j) *reinterpret_cast<unsigned short*>(codes + 8 * j) = (unsigned short)q.codes2(x[2 * j], x[2 * j + 1]);
    if (store_scales && t == 0)
      reinterpret_cast<float*>(h + (r - r % 32) * 2 * (i64)I)[I / 4 + 32 * group + r % 32] = q.scale;
  }
}
#endif

}  // namespace sm90f8

// grid = min(SMs, tile_bound * n_tiles) (persistent), block = 384, dynamic smem kSmemBytes.
// tm_a / tm_as: A codes / scales (see above); tm_b / tm_bs: W codes / scales; out: [rows,
// out_cols] bf16 (GEMM 1: h, I columns, written as its codes and scales; GEMM 2: y, H columns). counts / seg_off: the permute
// stage's (half tiles). tile_counter: this GEMM's claim counter, 0 at launch (tiles.cuh).
// n_per_expert: B rows an expert (GEMM 1: 2I, GEMM 2: H). k_scale0: the first A scale's column
// in tm_as (floats: K / 4, the codes' bytes; a multiple of 32). row_scale: GEMM 2 only (null
// for GEMM 1).
extern "C" __global__ void __launch_bounds__(sm90f8::kThreads, 1)
    moe_sm90_fp8_gemm(const __grid_constant__ TensorMap tm_a, const __grid_constant__ TensorMap tm_as,
                      const __grid_constant__ TensorMap tm_b, const __grid_constant__ TensorMap tm_bs,
                      u16* __restrict__ out, int out_cols, const int* __restrict__ tile_expert,
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
  // rebuilding each descriptor in vector registers and moving it over (R2UR) per k32 step.
  auto consume = [&](auto consumer) {
    constexpr int c = decltype(consumer)::value;
    const int g = lane >> 2, t = lane & 3;
    const int r_local = warp * 16 + g;  // within the consumer's 64 (second: + 8)
    // Stage 0's operand descriptors, barriers and scales, advanced per stage: no address is
    // rebuilt in the k-loop. A full tile: this consumer's 64 rows of A x both column halves of
    // B. A half tile: the first 64 rows of A x this consumer's column half.
    const u64 a_desc_full = wgmma_desc_k128b(smem_u32(sm.a[0]) + c * 64 * BK);
    const u64 a_desc_half = wgmma_desc_k128b(smem_u32(sm.a[0]));
    const u64 b_desc0 = wgmma_desc_k128b(smem_u32(sm.b[0]));
    const u32 full0 = smem_u32(&sm.full[0]), empty0 = smem_u32(&sm.empty[0]);
    const u32 as_full = smem_u32(&sm.as[0][c * 64 + r_local]), as_half = smem_u32(&sm.as[0][r_local]);
    const u32 bs0 = smem_u32(sm.bs[0]);
    float fin[128], p[64];
    u32 it = 0;
#if GEMM_STAGE == 1
    unsigned char* const h_out = reinterpret_cast<unsigned char*>(out);  // codes and scales, not bf16
    u32 half_tiles = 0;  // the amax exchange's buffer parity (both consumers see every half tile)
#endif
    // A full tile's k-loop: column halves 0 and 1 into fin[0 ..] and fin[64 ..], each k-block
    // two groups into the one partial set p (group, wait, promote, next group).
    auto k_loop = [&]() {
#pragma unroll
      for (int i = 0; i < 128; ++i) fin[i] = 0.f;
      // The ring position, advanced by a compare instead of a division by STAGES per k-block.
      u32 s = it % STAGES, ph = (it / STAGES) & 1u;
      for (int kb = 0; kb < k_blocks; ++kb) {
        mbar_wait(full0 + 8 * s, ph);
        // Scales read before the group is issued (volatile asm: kept ahead of the group's), so
        // their latency has passed when the products are formed.
        const u32 a_sc = as_full + s * (BM * 4), b_sc = bs0 + s * (BN * 4);
        const float sa0 = ld_shared_f32(a_sc), sa1 = ld_shared_f32(a_sc + 8 * 4);
        const float sb0 = ld_shared_f32(b_sc), sb1 = kOddChunkRow ? ld_shared_f32(b_sc + kOddChunkRow * 4) : sb0;
        const u64 a_s = wgmma_desc_add(a_desc_full, s * BM * BK), b_s = wgmma_desc_add(b_desc0, s * BN * BK);
        issue_group(p, a_s, b_s);
        const GroupScales first(sa0, sa1, sb0, sb1);
        // Column half 1: GEMM 2's next scale block (row 128 of the tile); GEMM 1's blocks are
        // the same for both halves.
        const float sc0 = GEMM_STAGE == 2 ? ld_shared_f32(b_sc + kHalfN * 4) : sb0;
        wgmma_wait<0>();
        promote<0>(fin, p, first);
        issue_group(p, a_s, wgmma_desc_add(b_s, kHalfN * BK));
        const GroupScales second(sa0, sa1, sc0, GEMM_STAGE == 2 ? sc0 : sb1);
        wgmma_wait<0>();
        // The stage back to the producer, then the promotion. The scales were read with
        // generic loads; the proxy fence completes them before the release, so the producer's
        // next TMA into the stage cannot overtake them whatever ptxas schedules
        // (decode_gemm.cuh's A8 loop had exactly that race).
        fence_proxy_async_smem();
        if (lane == 0) mbar_arrive(empty0 + 8 * s);
        promote<64>(fin, p, second);
        if (++s == STAGES) s = 0, ph ^= 1u;
      }
      it += k_blocks;
    };
    // A half tile's k-loop (column half half0 into fin[0 ..]): one group a k-block, so two
    // partial sets alternate, p and fin's second half (idle on half tiles): block kb + 1's group
    // is issued before block kb is promoted, and the tensor cores hold this warpgroup's next
    // group while it promotes (with one set each consumer waits on its own group every k-block).
    auto half_loop = [&](u64 a_d, u32 as_r, int half0) {
      float(&q)[64] = *reinterpret_cast<float(*)[64]>(&fin[64]);
#pragma unroll
      for (int i = 0; i < 64; ++i) fin[i] = 0.f;
      const u64 b_d = wgmma_desc_add(b_desc0, half0 * kHalfN * BK);
      const u32 bs_r = bs0 + half0 * kHalfN * 4;
      u32 s = it % STAGES, ph = (it / STAGES) & 1u;
      struct InFlight {
        GroupScales scales;
        u32 stage;
      };
      auto issue = [&](float(&acc)[64]) {
        mbar_wait(full0 + 8 * s, ph);
        const u32 a_sc = as_r + s * (BM * 4), b_sc = bs_r + s * (BN * 4);
        const float sa0 = ld_shared_f32(a_sc), sa1 = ld_shared_f32(a_sc + 8 * 4);
        const float sb0 = ld_shared_f32(b_sc), sb1 = kOddChunkRow ? ld_shared_f32(b_sc + kOddChunkRow * 4) : sb0;
        issue_group(acc, wgmma_desc_add(a_d, s * BM * BK), wgmma_desc_add(b_d, s * BN * BK));
        const InFlight f{GroupScales(sa0, sa1, sb0, sb1), s};
        if (++s == STAGES) s = 0, ph ^= 1u;
        return f;
      };
      // Once acc's group completed (the wgmma_wait before): its stage back (after the proxy
      // fence, as in k_loop), then the promotion.
      auto retire = [&](float(&acc)[64], const InFlight& f) {
        fence_proxy_async_smem();
        if (lane == 0) mbar_arrive(empty0 + 8 * f.stage);
        promote<0>(fin, acc, f.scales);
      };
      InFlight even = issue(p);  // k_blocks >= 1
      int kb = 0;
      for (; kb + 2 < k_blocks; kb += 2) {
        const InFlight odd = issue(q);
        wgmma_wait<1>();
        retire(p, even);
        even = issue(p);
        wgmma_wait<1>();
        retire(q, odd);
      }
      if (kb + 1 < k_blocks) {  // an even number of blocks: the last pair
        const InFlight odd = issue(q);
        wgmma_wait<1>();
        retire(p, even);
        wgmma_wait<0>();
        retire(q, odd);
      } else {
        wgmma_wait<0>();
        retire(p, even);
      }
      it += k_blocks;
    };
    for (;;) {
      const int word = stage_word(sm.full, sm.tile, it);  // CTA-uniform
      if (word == sm90::kNoMoreTiles) break;
      const auto [mt, nt] = sm90::tile_mn(sm90::word_tile(word), n_tiles);
      const bool half = sm90::word_half(word);
      const int rows = half ? 0 : c;  // which 64 rows of the tile
      const i64 row = (i64)mt * BM + rows * 64 + r_local;
#if GEMM_STAGE == 2
      const float s0 = row_scale[row], s1 = row_scale[row + 8];  // read before the k-loop: its latency hides there
#endif
      constexpr int kTileCols = GEMM_STAGE == 1 ? BN / 2 : BN;  // output columns a tile (GEMM 1: features)
      if (half) {
        half_loop(a_desc_half, as_half, c);
#if GEMM_STAGE == 1
        u32(&xchg)[kConsumers][64] = sm.amax[half_tiles++ & 1];
        sm90f8::quantize_h<8>(fin, h_out, row, nt * kTileCols + c * (kTileCols / 2), out_cols, nt, t, xchg[c],
                              xchg[1 - c], r_local, c == 0);
#else
        sm90f8::store_rows<16>(fin, out, row, nt * kTileCols + c * (kTileCols / 2), out_cols, t, s0, s1);
#endif
      } else {
        k_loop();
#if GEMM_STAGE == 1
        sm90f8::quantize_h<16>(fin, h_out, row, nt * kTileCols, out_cols, nt, t, nullptr, nullptr, r_local, true);
#else
        sm90f8::store_rows<32>(fin, out, row, nt * kTileCols, out_cols, t, s0, s1);
#endif
      }
    }
  };
  if (wg == 1) consume(Constant<0>{});
  else consume(Constant<1>{});
}
