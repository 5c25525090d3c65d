// Hopper decode GEMMs: weight streaming with the operands swapped. When experts see a few
// tokens each, the 128-row token tile of grouped_gemm.cuh is mostly padding: its tensor
// work is wasted and, worse, only (experts x N / 256) CTAs pull weights (80 of 132 SMs at
// T = 1 on Mistral-Small-4). Here the weights are the M side of wgmma and the tokens the N
// side (D^T = W . X^T): a CTA owns 128 weight rows of one expert and streams them once per
// BT tokens, for every token of that expert:
//
//   GEMM_STAGE 1:  h[row, f] = act(gate, up)           (rows of expert e, f < I)
//   GEMM_STAGE 2:  y[row, n] = scale[row] * (h[row] . W2[e][n])
//
// Persistent: grid = min(2 x SMs, Y x N / 128) CTAs (two per SM; BT = 128: one), block = 384. Work units
// are (expert with rows, 128-row weight tile, BT-token chunk of that expert), the experts and
// their unit counts listed on the device from counts (a ballot and a scan per 32 experts; the
// host bounds their number by Y = min(E_TOTAL, T * k + S)). Every unit streams one weight tile
// over K once, so units cost the same and striding over them balances the SMs: with whole
// experts as items, the shared expert's items (T / BT chunks each) made the busiest SM run
// 1.4-1.6x the average at T = 512 / 2048 (ncu SMmax/avg, 9a9ea1b). Chunks of one tile are
// consecutive units, so they run on neighbouring CTAs at the same time and the tile comes from
// DRAM once. A grid of one CTA per (tile, expert) was 97 % CTAs that exit at once at T = 1, and
// at T = 128 it paid a pipeline fill per 16 k-blocks. Each CTA strides over the units with the
// stage ring running on, so only its first unit fills the pipeline. Warpgroup 0 is the producer
// (one thread issues TMA: the 128 x 64 weight tile and the BT x 64 token tile of each
// k-block into a 4-stage ring), warpgroups 1 and 2 each own 64 of the 128 weight rows: one
// m64nBTk16 wgmma per k16 step (A = weights, B = tokens, both K-major 128B-swizzled smem, the
// descriptors of grouped_gemm.cuh), one group in flight. Two CTAs per SM at BT <= 64 (96 KB of smem each
// at BT = 64), so 384 KB of weights are in flight per SM. An expert with more than BT tokens
// has a unit per chunk, each re-streaming the tile (from L2 for all but the first: the planner
// keeps BT >= 2x the average rows per expert; past its crossover the 128-row-tile kernels run).
//
// Epilogue straight from registers (the outputs are small): in the m64nBT fragment a thread
// holds weight rows r and r + 8 for tokens 2t, 2t + 1 of each n8 chunk. With W13's
// block-of-8 interleave (8 gate rows, then their 8 up rows) rows r and r + 8 of a 16-row
// group are the gate and up of one feature, so GEMM 1's activation pairs d[4i] with d[4i+2]
// and d[4i+1] with d[4i+3] in the same thread. Rows past the expert's count and features /
// outputs past N are not stored.
//
// Inputs: x rows in expert order (sm90/gather.cuh) or h, segments from the portable permute
// (seg_off, counts); weights in the portable prepared layout (src/backends/portable/layout.cpp;
// NVFP4 codes bit-permuted per 32-bit word, w4_format.cuh).
// NVFP4 weights (W4 = 1, W4A16): a stage covers 256 of K: 128 rows x 128 bytes of e2m1
// codes (full 128-byte lines: 32-byte row pieces halved the DRAM rate, H200 95a6c03), TMA
// 128B-swizzled so the 8 rows a warp reads at once fall in distinct banks, plus their
// 8 x 256 bytes of scale bytes (w4_format.cuh; a 3-D box: 128 rows x 2 groups, 8 k tiles) and 4 token boxes
// of 64 columns. Per 64-column sub-block each consumer thread reads its 16 codes of rows r
// and r + 8 (two 64-bit shared loads), dequantizes them into wgmma A fragments
// (sm90/w4a16.cuh: K permuted inside 64-column blocks, the activations stored in the same
// order) and issues 4 register-A wgmmas; two fragment sets alternate so one group stays in
// flight (at every BT: the consumers take 96 registers from the producer, setmaxnreg). The
// epilogue applies the expert's global scale (times 2^8, see w4a16.cuh); GEMM 1 stores h in
// the permuted order GEMM 2 reads.
//
// FP8 weights (W8 = 1, W8A16): a stage covers one 128-column scale block: 128 rows x 128 bytes
// of e4m3 codes (128B-swizzled, as W4's) plus the 128 rows' f32 scales of that block (a 3-D
// box of 512 bytes) and 2 token boxes; per 64-column sub-block each consumer thread reads its
// 16 codes of rows r and r + 8 (two 128-bit shared loads) and dequantizes them with the
// row's scale into the same register A fragments (sm90/w8a16.cuh, the W4 K order).
//
// FP8 weights with FP8 activations (W8 = 1, A8 = 1; W8A8): no dequantization. The token tile is
// e4m3 too (the quantized gather's rows: K codes, then the row's K / 128 f32 group scales in
// the same 2K bytes, sm90/quantize.cuh), so both operands go to QGMMA from swizzled shared
// memory: per stage (one 128-column scale block) 4 x m64nBTk32 into a fresh partial, then
// promoted as in fp8_gemm.cuh: acc += partial * weight-row scale * token scale (both per block).
// The token codes come as one box of BT rows x 128 B, their scales as a box of BT rows x 4
// floats (the 16-byte group holding the block's: float kb % 4). GEMM 1 stores h in natural K
// order (quantized in place before GEMM 2, as for the wide QGMMA GEMMs).
//
// Stream-K (STREAM_K = 1, for calls of at most BT tokens: every expert one chunk, the units few):
// instead of whole units strided over the grid, each CTA takes an equal contiguous range of
// the (unit, k-block) tasks (decode_units.cuh, for_each_piece). At T = 1 on Mistral-Small-4
// the 160 units of GEMM 1 on 132 SMs left 28 SMs streaming two and the rest one (ncu: the
// busiest SM 25 % above the average, SMs active 68 % of the time, 9f34da8); now every CTA
// streams the same number of k-blocks. A unit cut across CTAs leaves f32 partial sums in a
// per-CTA workspace slot ([grid][2][BT / 2][256], the consumers' fragment order) and its owner
// (the CTA with its k-block 0) records it in split[]; moe_sm90_decode_fixup, launched next,
// adds the pieces in k order and stores the unit: deterministic, and no CTA ever waits for
// another (concurrent streams cannot deadlock it).
//
// Defines: GEMM_STAGE, BT (16, 32, 64, 128), GEMM_N_OUT (I for GEMM 1, H for GEMM 2), E_TOTAL,
// W4 (1: NVFP4), W8 (1: FP8 e4m3 with 128-column f32 scales; both 0: bf16 weights), A8 (1 with
// W8: FP8 activations, QGMMA), ACT,
// ACT_ALPHA, ACT_LIMIT (GEMM 1), SM90_DECODE_SMEM_BYTES (the host's launch size, checked),
// STREAM_K (0 or 1).
#pragma once
#include "common/convert.cuh"
#include "common/grid_dependency.cuh"
#include "sm90/decode_units.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/warpgroup.cuh"
#include "sm90/ptx/wgmma.cuh"
#include "sm90/ring.cuh"
#include "sm90/wait.cuh"
#if GEMM_STAGE == 1
#include "sm90/activation.cuh"
#endif
#if W4
#include "sm90/w4a16.cuh"
#elif W8 && !A8
#include "sm90/w8a16.cuh"
#endif
#if W4 && W8
#error "sm90/decode_gemm.cuh: W4 and W8 exclude each other"
#endif
#if A8 && !W8
#error "sm90/decode_gemm.cuh: A8 (FP8 activations) needs W8 (FP8 weights)"
#endif

namespace sm90dec {

constexpr int WM = 128, BK = 64, kConsumers = 2, kThreads = 128 * (1 + kConsumers);
// Token tiles up to 64 run two CTAs per SM; 128 (the larger batches of the dequantizing
// formats: half the dequantization per multiply of 64) one, for its 64 accumulators.
constexpr int kCtasPerSm = BT == 128 ? 1 : 2;
#if W4
constexpr int SUB = 4;                                  // 64-column sub-blocks per stage
constexpr int STAGES = BT == 16 ? 4 : BT == 32 ? 3 : 2;  // BT = 128: 82 KB stages, one CTA
constexpr u32 kWBytes = WM * BK * SUB / 2;              // codes: 128 rows x 128 B
constexpr u32 kSBytes = SUB * 2 * WM * 2;               // scales [8 k tiles][WM rows][2 groups]
#elif W8
constexpr int SUB = 2;                         // a stage is one 128-column scale block
#if A8
constexpr int STAGES = BT == 64 ? 4 : BT == 128 ? 6 : 5;  // e4m3 token tiles: half the bytes
#else
constexpr int STAGES = BT == 64 ? 3 : 4;       // BT = 128: 48.5 KB stages, one CTA
#endif
constexpr u32 kWBytes = WM * BK * SUB;         // codes: 128 rows x 128 B
constexpr u32 kSBytes = WM * 4;                // the rows' f32 scales of this block
#else
constexpr int SUB = 1, STAGES = BT == 128 ? 6 : 4;
constexpr u32 kWBytes = WM * BK * 2, kSBytes = 0;
#endif
constexpr int KS = BK * SUB;  // K per stage
#if W4 || W8
// Registers per thread after the split (setmaxnreg): two CTAs per SM launch with 80 each
// (384 x 80 per CTA); the producer needs few, so the consumers take 96 and hold two A
// fragment sets next to BT / 2 accumulators (BT = 64: 32 + 32), letting the dequantization
// of one 64-column sub-block overlap the wgmma group of the previous one. 128 x 40 + 256 x 96
// = 29696 <= 30720: the increase never waits for registers the CTA does not have. One CTA
// per SM (BT = 128) launches with 168 and splits 40 / 232 (64512 of 65536).
constexpr int kProducerRegs = 40, kConsumerRegs = kCtasPerSm == 1 ? 232 : 96;
#endif
#if A8
constexpr u32 kXBytes = BT * KS + BT * 16;  // e4m3 codes, and a 16-byte scale group per token
#else
constexpr u32 kXBytes = BT * KS * 2;  // bf16
#endif
constexpr u32 kStageBytes = kWBytes + kSBytes + kXBytes;
static_assert(BT == 16 || BT == 32 || BT == 64 || BT == 128, "token tile");

struct Smem {
#if A8
  alignas(1024) unsigned char x8[STAGES][BT * KS];  // one box of BT x 128 B (e4m3)
#else
  alignas(1024) u16 x[STAGES][SUB][BT * BK];       // SUB boxes of BT x 128 B (multiples of the 1024-B atom)
#endif
  alignas(1024) unsigned char w[STAGES][kWBytes];  // 128B-swizzled rows (bf16: 64 values, W4: 256, W8: 128 codes)
#if W4 || W8
  alignas(128) unsigned char s[STAGES][kSBytes];
#endif
#if A8
  alignas(16) float xs[STAGES][BT * 4];  // token n's scale group at [4 n] (after the 1024-aligned tiles: no padding)
#endif
  alignas(8) u64 full[STAGES];
  u64 empty[STAGES];
  int num_active;
  int unit_end[E_TOTAL];  // units of active[0 .. y], inclusive prefix (n_tiles x chunks each)
  u16 active[E_TOTAL];    // the experts with rows, in index order
};
static_assert(BT * BK * 2 % 1024 == 0, "token tiles keep the 1024-byte swizzle alignment");
constexpr unsigned kSmemBytes = sizeof(Smem) + 1024;
static_assert(kSmemBytes == SM90_DECODE_SMEM_BYTES, "the host's decode smem size must match");

// One warp lists the experts with rows into active[] (ballot + prefix count), in index order,
// with the running total of their work units (n_tiles x BT-token chunks each) in unit_end[].
__device__ __forceinline__ void list_active_experts(const int* __restrict__ counts, int n_tiles, Smem& sm) {
  const int lane = threadIdx.x & 31;
  int n = 0, units = 0;
  for (int base = 0; base < E_TOTAL; base += 32) {
    const int i = base + lane, rows = i < E_TOTAL ? counts[i] : 0;
    const bool has = rows > 0;
    const unsigned m = __ballot_sync(~0u, has);
    int u = decode_units::units_of(rows, BT, n_tiles);  // inclusive scan over the warp
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(~0u, u, d);
      if (lane >= d) u += v;
    }
    if (has) {
      const int y = n + __popc(m & ((1u << lane) - 1u));
      sm.active[y] = (u16)i;
      sm.unit_end[y] = units + u;
    }
    units += __shfl_sync(~0u, u, 31);
    n += __popc(m);
  }
  if (lane == 0) sm.num_active = n;
}

// Calls f(piece) for the pieces this CTA works through, in order (decode_units.cuh): whole
// units strided over the grid, or (STREAM_K) its contiguous range of (unit, k-block) tasks.
template <class F>
__device__ __forceinline__ void for_each_piece(int n_units, int k_blocks, F&& f) {
#if STREAM_K
  const int tasks = n_units * k_blocks;
  const int grid = decode_units::stream_k_grid(tasks, (int)gridDim.x);
  if ((int)blockIdx.x >= grid) return;
  const int end = decode_units::range_begin(tasks, grid, (int)blockIdx.x + 1);
  for (int t = decode_units::range_begin(tasks, grid, (int)blockIdx.x); t < end;) {
    const decode_units::Piece p = decode_units::piece_at(t, end, k_blocks);
    f(p);
    t += p.k1 - p.k0;
  }
#else
  for (int u = blockIdx.x; u < n_units; u += gridDim.x) f(decode_units::Piece{u, 0, k_blocks});
#endif
}

// A finished unit's outputs from its accumulators: this thread's weight rows r0 (and r0 + 8) of
// tile nt, tokens 8i + 2t (+1) of chunk c (cw: its consumer warpgroup, warp: its warp in it).
// W4: the expert's global scale first (times 2^8, see w4a16.cuh).
__device__ __forceinline__ void store_unit(float (&acc)[BT / 2], int e, int nt, int c, int cw, int warp, int lane,
                                           const float* __restrict__ gscale, const int* __restrict__ counts,
                                           const i64* __restrict__ seg_off, const float* __restrict__ row_scale,
                                           u16* __restrict__ out) {
  const int g = lane >> 2, t = lane & 3;
  const int count = counts[e];
  const i64 seg = seg_off[e];
#if W4
  const float gs = gscale[e] * float(1 << w4::kEpilogueExp);  // the 2^-8 of the dequantized codes
#pragma unroll
  for (int i = 0; i < BT / 2; ++i) acc[i] *= gs;
#endif
  const int r0 = nt * WM + cw * 64 + warp * 16 + g;  // weight row within the expert
#pragma unroll
  for (int i = 0; i < BT / 8; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int tok = c * BT + i * 8 + 2 * t + j;
      if (tok >= count) continue;
      const i64 row = seg + tok;
#if GEMM_STAGE == 1
      const int f = r0 / 16 * 8 + g;  // feature of the (gate r0, up r0 + 8) pair
#if (W4 || W8) && !A8
      const int col = f / w4::kBlock * w4::kBlock + w4::logical_k(f % w4::kBlock);  // GEMM 2's K order
#else
      const int col = f;
#endif
      if (f < GEMM_N_OUT)
        out[row * GEMM_N_OUT + col] = f32_to_bf16(sm90::activate(acc[4 * i + j], acc[4 * i + 2 + j]));
#else
      const float sc = row_scale[row];
      if (r0 < GEMM_N_OUT) out[row * GEMM_N_OUT + r0] = f32_to_bf16(acc[4 * i + j] * sc);
      if (r0 + 8 < GEMM_N_OUT) out[row * GEMM_N_OUT + r0 + 8] = f32_to_bf16(acc[4 * i + 2 + j] * sc);
#endif
    }
}

// STREAM_K: CTA b's partial-sum slot s (decode_units::piece_slot), element i of the thread
// (cw, tid) of its consumers: [b][s][i][256 threads], so each warp's stores are contiguous.
__device__ __forceinline__ i64 slot_index(int b, int s, int i, int thread) {
  return ((i64)(2 * b + s) * (BT / 2) + i) * 256 + thread;
}

}  // namespace sm90dec

// W4: tm_s = the scales' 3-D map, gscale = [E_TOTAL] global scales. W8: tm_s = the scales'
// 3-D map (gscale unused). bf16: both unused (any map, null). A8: tm_x = the token codes
// (bytes, box {128, BT}), tm_xs = their scales (f32, box {4, BT}), k_scale0 = the first scale's
// float column (K / 4); otherwise tm_xs and k_scale0 are unused. STREAM_K: partial = the slots,
// split = [gridDim.x] entries for the fixup (both unused, may be null, otherwise).
extern "C" __global__ void __launch_bounds__(sm90dec::kThreads, sm90dec::kCtasPerSm)
    moe_sm90_decode(const __grid_constant__ TensorMap tm_w, const __grid_constant__ TensorMap tm_s,
                    const __grid_constant__ TensorMap tm_x, const __grid_constant__ TensorMap tm_xs,
                    const float* __restrict__ gscale, const int* __restrict__ counts, const i64* __restrict__ seg_off,
                    const float* __restrict__ row_scale, u16* __restrict__ out, int n_per_expert, int k_blocks,
                    int k_scale0, float* __restrict__ partial, int4* __restrict__ split) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "sm90/decode_gemm.cuh must be compiled for sm_90a"
#endif
  using namespace sm90dec;
  Smem& sm = aligned_smem<Smem>();
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  init_ring(sm.full, sm.empty, 4 * kConsumers);  // lane 0 of each consumer warp
  // Before the PDL wait (common/grid_dependency.cuh): the expert list and the first STAGES
  // k-blocks' weight boxes. counts is written by the routing, at least two launches back (the
  // gather always runs between it and GEMM 1, and GEMM 1 between it and GEMM 2), and every
  // kernel of the chain lets its dependents launch only after its own wait: so by the time this
  // grid runs at all, the routing has completed and its writes are visible. The weights are
  // written by no kernel. The token boxes of those stages follow the wait. So the ring fills
  // while the kernel before still runs (the gather before GEMM 1; GEMM 1's tail or its fixup
  // before GEMM 2), instead of after it: the first TMA round trip leaves the critical path.
  const int n_tiles = (n_per_expert + WM - 1) / WM;
  if (threadIdx.x / 32 == 1) list_active_experts(counts, n_tiles, sm);
  __syncthreads();
  // Work units (see the top), walked in pieces (for_each_piece); the stage ring runs on across
  // them, so only the first fills the pipeline.
  const int n_units = sm.num_active > 0 ? sm.unit_end[sm.num_active - 1] : 0;
  // Stage s's weight boxes (and W4 / W8: their scales) of k-block kb, tile nt of expert e.
  auto load_weights = [&](u32 s, int kb, int e, int nt, u32 full) {
    const int w_row = e * n_per_expert + nt * WM;  // the expert is a TMA coordinate
#if W4
    tma_load_2d(smem_u32(sm.w[s]), &tm_w, kb * KS / 2, w_row, full);  // byte columns
    tma_load_3d(smem_u32(sm.s[s]), &tm_s, nt * WM * 2, kb * (KS / 32), e, full);
#elif W8
    tma_load_2d(smem_u32(sm.w[s]), &tm_w, kb * KS, w_row, full);  // byte columns = K
    tma_load_3d(smem_u32(sm.s[s]), &tm_s, nt * WM, kb, e, full);  // f32 [e][128-block][row]
#else
    tma_load_2d(smem_u32(sm.w[s]), &tm_w, kb * KS, w_row, full);
#endif
  };
  u32 early = 0;  // thread 0: the ring steps whose weights are in flight before the wait
  if (threadIdx.x == 0) {
    tma_prefetch_desc(&tm_w);
#if W4 || W8
    tma_prefetch_desc(&tm_s);
#endif
    for_each_piece(n_units, k_blocks, [&](const decode_units::Piece& p) {
      if (early == STAGES) return;
      const decode_units::Unit u = decode_units::unit_at(sm, counts, BT, p.u);
      for (int kb = p.k0; kb < p.k1 && early < STAGES; ++kb, ++early) {
        const u32 full = smem_u32(&sm.full[early]);  // first pass over the ring: every stage free
        mbar_arrive_expect_tx(full, kStageBytes);     // the token bytes land after the wait
        load_weights(early, kb, u.e, u.nt, full);
      }
    });
  }
  pdl_begin();  // before any access to the tokens, h, the outputs or the scratch

  if (wg == 0) {
    // ================= producer
#if W4 || W8
    setmaxnreg_dec<kProducerRegs>();
#endif
    if (tid == 0) {
      tma_prefetch_desc(&tm_x);
#if A8
      tma_prefetch_desc(&tm_xs);
#endif
      u32 it = 0;
      for_each_piece(n_units, k_blocks, [&](const decode_units::Piece& p) {
        const auto [e, nt, c] = decode_units::unit_at(sm, counts, BT, p.u);
        const i64 seg = seg_off[e];
        for (int kb = p.k0; kb < p.k1; ++kb, ++it) {
          const u32 s = it % STAGES, ph = (it / STAGES) & 1u;
          const u32 full = smem_u32(&sm.full[s]);
          if (it >= early) {
            mbar_wait(smem_u32(&sm.empty[s]), ph ^ 1u);
            mbar_arrive_expect_tx(full, kStageBytes);
            load_weights(s, kb, e, nt, full);
          }
#if A8
          tma_load_2d(smem_u32(sm.x8[s]), &tm_x, kb * KS, (int)(seg + (i64)c * BT), full);  // byte columns = K
          tma_load_2d(smem_u32(sm.xs[s]), &tm_xs, k_scale0 + (kb & ~3), (int)(seg + (i64)c * BT), full);
#else
#pragma unroll
          for (int j = 0; j < SUB; ++j)
            tma_load_2d(smem_u32(sm.x[s][j]), &tm_x, kb * KS + j * BK, (int)(seg + (i64)c * BT), full);
#endif
        }
      });
    }
    return;
  }

  // ================= consumers: weight rows cw*64 .. cw*64+63 of the tile
  const int cw = wg - 1;
#if W4 || W8
  setmaxnreg_inc<kConsumerRegs>();
#endif
  const int g = lane >> 2, t = lane & 3;
  // Descriptors advance with the address (bits 0-13 hold address / 16, no carry below 256 KB):
  // computed once, offset per stage / sub-block / k16 step.
#if A8
  const u64 w_desc0 = wgmma_desc_k128b(smem_u32(sm.w[0]) + cw * 64 * 128);
  const u64 x_desc0 = wgmma_desc_k128b(smem_u32(sm.x8[0]));
#else
  const u64 x_desc0 = wgmma_desc_k128b(smem_u32(sm.x[0][0]));
  constexpr u32 kXStage = SUB * BT * BK * 2, kXSub = BT * BK * 2;  // bytes
#endif
  u32 it = 0;
  [[maybe_unused]] int4 owned = make_int4(-1, 0, 0, 0);  // STREAM_K: the split unit whose first piece is here
  for_each_piece(n_units, k_blocks, [&](const decode_units::Piece& p) {
    const auto [e, nt, c] = decode_units::unit_at(sm, counts, BT, p.u);
    float acc[BT / 2];
    [[maybe_unused]] u32 prev_s = 0;  // (A8 releases each stage in its loop)
#if A8
    // Rows ra and ra + 8 of the tile: this thread's weight rows; tokens 8i + 2t (+1) of chunk i.
    const int ra = cw * 64 + warp * 16 + g;
    float part[BT / 2];
#pragma unroll
    for (int i = 0; i < BT / 2; ++i) acc[i] = 0.f;
    for (int kb = p.k0; kb < p.k1; ++kb, ++it) {
      const u32 s = it % STAGES, ph = (it / STAGES) & 1u;
      mbar_wait(smem_u32(&sm.full[s]), ph);
      const float* w_scale = reinterpret_cast<const float*>(sm.s[s]);  // one per row and stage
      const float ws0 = w_scale[ra], ws1 = w_scale[ra + 8];
      wgmma_fence();
#pragma unroll
      for (int i = 0; i < BT / 2; ++i) reg_fence(part[i]);
#pragma unroll
      for (int kk = 0; kk < KS / 32; ++kk)
        wgmma_m64nk32_e4m3_ss<BT>(part, wgmma_desc_add(w_desc0, s * kWBytes + kk * 32),
                                  wgmma_desc_add(x_desc0, s * (BT * KS) + kk * 32), kk > 0 ? 1u : 0u);
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < BT / 2; ++i) reg_fence(part[i]);
      const float* xs = &sm.xs[s][kb & 3];  // token n's scale of this block: xs[4 n]
#pragma unroll
      for (int i = 0; i < BT / 8; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float sx = xs[4 * (8 * i + 2 * t + j)];
          acc[4 * i + j] = fmaf(part[4 * i + j], ws0 * sx, acc[4 * i + j]);
          acc[4 * i + 2 + j] = fmaf(part[4 * i + 2 + j], ws1 * sx, acc[4 * i + 2 + j]);
        }
      // The stage's token scales were read just above by generic loads whose results ptxas
      // does not wait for before the release (it hoisted the arrive above the FFMAs: no data
      // dependency), so the producer's next TMA into this stage could overtake them. The
      // proxy fence (MEMBAR + FENCE.VIEW.ASYNC) completes them first, as the PTX memory model
      // asks between generic accesses and async-proxy writes to the same memory. (fp8_gemm.cuh's
      // scale reads are fenced the same way; the other kernels' generic reads of a stage feed a
      // wgmma, whose fence waits for them.)
      fence_proxy_async_smem();
      if (lane == 0) mbar_arrive(smem_u32(&sm.empty[s]));  // codes and scales consumed
    }
#elif W4 || W8
    // Rows ra and ra + 8 of the tile: this thread's A rows (ra % 8 == g: the swizzle phase).
    // W4: its 16 codes of sub-block j are the 16-group 4j + t of the stage: 16-byte chunk
    // 2j + t/2 of the row, half t % 2; scales k tile 2j + t/2, group t % 2. W8: its 16
    // codes of sub-block j are 16-byte chunk 4j + t of the row; one scale per row and stage.
    const int ra = cw * 64 + warp * 16 + g;
    u32 a[2][4][4];  // two A fragment sets, alternating by sub-block: one wgmma group in flight
    for (int kb = p.k0; kb < p.k1; ++kb, ++it) {
      const u32 s = it % STAGES, ph = (it / STAGES) & 1u;
      mbar_wait(smem_u32(&sm.full[s]), ph);
#pragma unroll
      for (int j = 0; j < SUB; ++j) {
        u32(&aj)[4][4] = a[j % 2];
#if W4
        const int chunk = ((2 * j + (t >> 1)) ^ g) << 4, half = (t & 1) * 8;
        const uint2 wa = *reinterpret_cast<const uint2*>(&sm.w[s][ra * 128 + chunk + half]);
        const uint2 wb = *reinterpret_cast<const uint2*>(&sm.w[s][(ra + 8) * 128 + chunk + half]);
        const unsigned char* sc = &sm.s[s][(2 * j + (t >> 1)) * WM * 2 + (t & 1)];
        w4::dequant_block(wa, wb, w4::scale_pair(sc[ra * 2]), w4::scale_pair(sc[(ra + 8) * 2]), aj);
#else
        const int chunk = ((4 * j + t) ^ g) << 4;
        const float* scale = reinterpret_cast<const float*>(sm.s[s]);  // one per row and stage
        w8::dequant_row<0>(*reinterpret_cast<const uint4*>(&sm.w[s][ra * 128 + chunk]), scale[ra], aj);
        w8::dequant_row<1>(*reinterpret_cast<const uint4*>(&sm.w[s][(ra + 8) * 128 + chunk]), scale[ra + 8], aj);
#endif
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < BT / 2; ++i) reg_fence(acc[i]);
        const u64 x_desc = x_desc0 + ((s * kXStage + j * kXSub) >> 4);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
          wgmma_m64nk16_bf16_rs<BT>(acc, aj[kk], x_desc + kk * 2, (kb > p.k0 || j > 0 || kk > 0) ? 1u : 0u);
        wgmma_commit();
        // The fragment set used one sub-block ago is rewritten next: wait until at most this
        // sub-block's group is pending.
        wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < BT / 2; ++i) reg_fence(acc[i]);
        // Every group of the previous stage has completed: release it.
        if (j == 0 && kb > p.k0 && lane == 0) mbar_arrive(smem_u32(&sm.empty[prev_s]));
      }
      prev_s = s;
    }
#else
    for (int kb = p.k0; kb < p.k1; ++kb, ++it) {
      const u32 s = it % STAGES, ph = (it / STAGES) & 1u;
      mbar_wait(smem_u32(&sm.full[s]), ph);
      wgmma_fence();
#pragma unroll
      for (int i = 0; i < BT / 2; ++i) reg_fence(acc[i]);
      const u32 w_addr = smem_u32(sm.w[s]) + cw * 64 * 128, x_addr = smem_u32(sm.x[s][0]);
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)
        wgmma_m64nk16_bf16_ss<BT>(acc, wgmma_desc_k128b(w_addr + kk * 32), wgmma_desc_k128b(x_addr + kk * 32),
                                  (kb > p.k0 || kk > 0) ? 1u : 0u);
      wgmma_commit();
      wgmma_wait<1>();
#pragma unroll
      for (int i = 0; i < BT / 2; ++i) reg_fence(acc[i]);
      if (kb > p.k0 && lane == 0) mbar_arrive(smem_u32(&sm.empty[prev_s]));
      prev_s = s;
    }
#endif
#if !A8  // (A8: every stage released in the loop, its group waited for there)
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BT / 2; ++i) reg_fence(acc[i]);
    if (lane == 0) mbar_arrive(smem_u32(&sm.empty[prev_s]));  // a piece has at least one k-block
#endif
    if (p.k0 == 0 && p.k1 == k_blocks) {
      store_unit(acc, e, nt, c, cw, warp, lane, gscale, counts, seg_off, row_scale, out);
      return;
    }
#if STREAM_K
    // Part of a split unit: its partial sums into this CTA's slot, added up in k order by
    // moe_sm90_decode_fixup (the owner, holding k-block 0, records where the pieces are).
    const int slot = decode_units::piece_slot(p);
#pragma unroll
    for (int i = 0; i < BT / 2; ++i) partial[slot_index(blockIdx.x, slot, i, threadIdx.x - 128)] = acc[i];
    if (p.k0 == 0) {
      const int tasks = n_units * k_blocks;
      const int grid = decode_units::stream_k_grid(tasks, (int)gridDim.x);
      owned = make_int4(e, nt, c, decode_units::pieces_of_unit(tasks, grid, blockIdx.x, p.u, k_blocks));
    }
#endif
  });
#if STREAM_K
  if (threadIdx.x == 128) split[blockIdx.x] = owned;  // every CTA, every launch: no stale entry
#endif
}

#if STREAM_K
// After a STREAM_K decode GEMM, one block per CTA of it (grid = its grid, block = 256, the
// consumers' thread layout): the split unit CTA b owns (split[b] = {expert, tile, chunk, pieces},
// or expert -1: none; written by that GEMM), its
// pieces' partial sums added in k order (slot 1 of b, then slot 0 of b + 1 .. b + w - 1) and
// stored as the GEMM stores a whole unit. The same sums in the same order on every run.
extern "C" __global__ void __launch_bounds__(256)
    moe_sm90_decode_fixup(const float* __restrict__ partial, const int4* __restrict__ split,
                          const float* __restrict__ gscale, const int* __restrict__ counts,
                          const i64* __restrict__ seg_off, const float* __restrict__ row_scale,
                          u16* __restrict__ out) {
  using namespace sm90dec;
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  const int4 own = split[blockIdx.x];
  if (own.x < 0) return;
  const int b = blockIdx.x, thread = threadIdx.x, cw = thread / 128, tid = thread % 128;
  float acc[BT / 2];
#pragma unroll
  for (int i = 0; i < BT / 2; ++i) acc[i] = partial[slot_index(b, 1, i, thread)];
  for (int q = 1; q < own.w; ++q)
#pragma unroll
    for (int i = 0; i < BT / 2; ++i) acc[i] += partial[slot_index(b + q, 0, i, thread)];
  store_unit(acc, own.x, own.y, own.z, cw, tid / 32, tid % 32, gscale, counts, seg_off, row_scale, out);
}
#endif
