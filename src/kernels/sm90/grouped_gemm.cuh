// Hopper grouped GEMM over the expert-contiguous padded layout: TMA + wgmma, warp-specialized,
// persistent. Graduated from dev/sm90 step 02/03 (NOTES.md there has the design record and
// the measured ladder: 650 TFLOP/s on the Mistral-Small-4 GEMM2 shape, 93.8 % of cuBLAS at
// the same dense shape).
//
//   GEMM_STAGE 1:  h[row, f] = act(gate, up),  gate/up = A[row] . W13[e]^T  (bf16 out [rows, I])
//   GEMM_STAGE 2:  y[row, n] = scale[row] * (h[row] . W2[e]^T)               (bf16 out [rows, H])
// A [rows, K] bf16: GEMM 1 reads x gathered into expert order (sm90/gather.cuh), GEMM 2 reads
// h. Segments are padded to BM = 128 rows; tile m covers rows [128 m, 128 m + 128) of expert
// tile_expert[m]; *num_tiles m-tiles exist this call (read on the device: no host sync).
// Padding rows of A hold whatever the workspace held (sm90/gather.cuh): each output row
// depends on its own A row only and nothing reads padding rows of h or y.
//
// Half tiles (sm90/tile_words.cuh, half_tile): on an expert's last tile holding at most 64 of
// its rows, rows 64-127 are all padding. Both consumers then work on rows 0-63, each on its
// column half (m64n128 wgmmas on B rows c*128 .., mma_tile<128>), so the tile takes about half
// a full tile's time on both warpgroups, where the second used to pass over it while the first
// ran m64n256 alone. The producer passes the tile's flag with the tile itself (tiles.cuh
// tile_word); both consumers take the same path, so their barriers and stage releases match.
//
// Weights are the portable backend's prepared layout (src/backends/portable/layout.cpp; NVFP4
// codes bit-permuted per 32-bit word, w4_format.cuh):
// [E_TOTAL * N, KP] bf16, K padded with zeros to KP (a multiple of 32); GEMM 1's W13 rows
// interleaved in blocks of 8 (8 gate rows, then the 8 matching up rows). The expert is a TMA
// row coordinate (e * N + n0). Tensor maps are encoded on the host once per buffer
// (src/backends/sm90/tensor_maps.cpp) and arrive as __grid_constant__ parameters; nothing
// on the device ever writes one. Out-of-bounds parts of a box read as zeros (K tails) and
// out-of-bounds parts of a store box are dropped (N tails), so any K % 8 == 0 works.
//
// Roles (384 threads, one CTA per SM): warpgroup 0 is the producer (one thread issues TMA,
// registers lowered to 40 with setmaxnreg); warpgroups 1 and 2 are consumers (232 registers),
// each owning 64 rows of the 128 x 256 tile: one m64n256k16 wgmma per k16 step, f32
// accumulators, one k-block's wgmma group kept in flight while the next is issued (dev/sm90
// ran wait_group 0 per k-block). A 4-stage full/empty mbarrier ring (48 KB per stage) connects them; tiles are
// claimed in order by the persistent CTAs, expert by expert, in bands of m-tiles walked n-tile
// major (tile_words.cuh claimed_tile: the ~132 tiles in flight share a few experts' weights,
// and the next read of a B slice is the next claim's). Epilogue: f32 -> bf16 into
// double-buffered 128B-swizzled 64 x 64 boxes in shared memory, TMA stores that overlap
// the next tile's main loop.
//
// GEMM 1's activation in registers: in the m64n256 accumulator fragment, n8-chunk 2p holds
// 8 gate columns and chunk 2p + 1 the matching 8 up columns (the block-of-8 interleave), in
// the same thread at the same fragment position, so each thread pairs d[8p + k] with
// d[8p + 4 + k]. One N tile of 256 prepared rows gives 128 outputs (two store boxes).
//
// NVFP4 weights (W4 = 1): TMA brings the stage's 256 rows x 64 K of e2m1 codes (8 KB) and
// their scale bytes (w4_format.cuh) instead of a bf16 B tile; the two consumer warpgroups
// dequantize it into the same 128B-swizzled bf16 B tile the bf16 path loads (each its half of
// the rows, exact: sm90/w4a16.cuh), meet at a named barrier, and run the unchanged wgmma loop. The next
// k-block is dequantized while this one's wgmma group runs, so the tensor pipe is not idle
// during dequantization. 3 stages (57 KB each). The expert's global scale (x 2^8) multiplies
// the accumulators before the epilogue. A is read in natural K order (no W4 permutation: that
// is the decode GEMMs' register-fragment order).
//
// FP8 weights (W8 = 1): the same with 256 rows x 64 bytes of e4m3 codes and the rows' f32
// scales of the 128-column block (sm90/w8a16.cuh: each product rounded once to bf16). 3 stages
// of 65 KB do not fit next to 3 bf16 B tiles, so the B tile is double-buffered instead (b[it % 2]):
// a warpgroup may rewrite B tile it + 1 only once both warpgroups' wgmma group it - 1 (which
// read the same buffer) has completed, hence a second named barrier per k-block.
//
// Defines: GEMM_STAGE, ACT (0 SwiGLU, 1 GeGLU tanh, 2 clamped SwiGLU), ACT_ALPHA, ACT_LIMIT
// (float literals; GEMM 1 only), W4 (1: NVFP4), W8 (1: FP8; both 0: bf16 weights), SM90_SMEM_BYTES (the host's
// launch size, checked), optional WAIT_LIMIT_NS (sm90/wait.cuh).
#pragma once
#include "common/convert.cuh"
#include "common/grid_dependency.cuh"
#include "sm90/ptx/math.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/warpgroup.cuh"
#include "sm90/ptx/wgmma.cuh"
#include "sm90/ring.cuh"
#include "sm90/tiles.cuh"
#include "sm90/wait.cuh"
#if W4
#include "sm90/w4a16.cuh"
#elif W8
#include "sm90/w8a16.cuh"
#endif
#if W4 && W8
#error "sm90/grouped_gemm.cuh: W4 and W8 exclude each other"
#endif

namespace sm90 {

constexpr int BM = 128, BN = 256, BK = 64;
#if W4
constexpr int STAGES = 3;
constexpr u32 kCodeBytes = BN * BK / 2;                           // 256 rows x 32 B
constexpr u32 kScaleBytes = 2 * (BK / 32) * 128 * 2;              // [row half][k tile][128 rows][2 groups]
constexpr u32 kStageBytes = BM * BK * 2 + kCodeBytes + kScaleBytes;  // TMA bytes per stage
#elif W8
constexpr int STAGES = 3;
constexpr u32 kCodeBytes = BN * BK;                                // 256 rows x 64 B
constexpr u32 kScaleBytes = BN * 4;                                // f32 per row, this 128-column block
constexpr u32 kStageBytes = BM * BK * 2 + kCodeBytes + kScaleBytes;  // TMA bytes per stage
#else
constexpr int STAGES = 4;
#endif
constexpr int kBTiles = W8 ? 2 : STAGES;  // bf16 B tiles (W8: double-buffered, see above)
constexpr int kConsumers = 2;                      // consumer warpgroups, 64 rows each
constexpr int kThreads = 128 * (1 + kConsumers);  // 384
constexpr int kEpiBox = 64;                        // TMA store box: 64 rows x 64 cols (128-B rows)
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
#if !W4 && !W8
constexpr u32 kStageBytes = (BM + BN) * BK * 2;    // 48 KB per stage
#endif
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536, "register file");
static_assert(BM == 64 * kConsumers, "each consumer warpgroup owns 64 rows");

// Operand tiles and store boxes on 1024-byte boundaries (the 128B-swizzle atom) so TMA's
// pattern and the wgmma descriptors (base offset 0) agree.
struct Smem {
  alignas(1024) u16 a[STAGES][BM * BK];              // 16 KB per stage
  alignas(1024) u16 b[kBTiles][BN * BK];             // 32 KB per stage (W8: per buffer)
  alignas(1024) u16 d[kConsumers][2][64 * kEpiBox];  // 8 KB per box buffer
#if W4 || W8
  alignas(128) unsigned char codes[STAGES][kCodeBytes];
  alignas(128) unsigned char scales[STAGES][kScaleBytes];
#endif
  alignas(8) u64 full[STAGES];
  u64 empty[STAGES];
  int tile[STAGES];  // ring.cuh stage_word: the tile starting at this stage (tiles.cuh tile_word)
};
static_assert(BK * 2 == 128 && kEpiBox * 2 == 128, "one 128-byte swizzle row per tile row");
// + 1024: slack to align the dynamic base. The host's kernel spec carries the same number.
constexpr unsigned kSmemBytes = sizeof(Smem) + 1024;
static_assert(kSmemBytes <= 232448, "exceeds the sm_90 opt-in shared memory per block (227 KB)");
static_assert(kSmemBytes == SM90_SMEM_BYTES, "the host's sm90::kSmemBytes (SM90_SMEM_BYTES) must match");

using Epilogue = TileEpilogue<BM, BN>;  // tiles.cuh

#if W4
// Consumer warpgroup c writes rows c*128 .. c*128+127 of stage s's bf16 B tile from its codes:
// thread tid handles 16-byte chunk q = tid % 8 (codes 8q .. 8q+7, one 16-group's half) of rows
// tid / 8 + 16 k. A warp reads 4 code rows (128 contiguous bytes) and writes 4 swizzled bf16
// rows (512 contiguous bytes): no bank conflicts.
__device__ __forceinline__ void dequant_b(Smem& sm, u32 s, int c, int tid) {
  const int q = tid & 7, grp = q >> 1;  // 16-group of the 64-K block
  unsigned char* b = reinterpret_cast<unsigned char*>(sm.b[s]);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int row = c * 128 + (tid >> 3) + 16 * k;
    const u32 w = *reinterpret_cast<const u32*>(&sm.codes[s][row * 32 + q * 4]);
    const u32 sb = sm.scales[s][c * 512 + (grp >> 1) * 256 + (row & 127) * 2 + (grp & 1)];
    const u32 sc = w4::scale_pair(sb);
    // pair_bits<J>: codes (J, J + 4); B wants them in order: (0,1) (2,3) (4,5) (6,7).
    const u32 p0 = w4::mul_bf16x2(w4::pair_bits<0>(w), sc), p1 = w4::mul_bf16x2(w4::pair_bits<1>(w), sc);
    const u32 p2 = w4::mul_bf16x2(w4::pair_bits<2>(w), sc), p3 = w4::mul_bf16x2(w4::pair_bits<3>(w), sc);
    *reinterpret_cast<uint4*>(b + row * 128 + ((q ^ (row & 7)) << 4)) =
        make_uint4(__byte_perm(p0, p1, 0x5410), __byte_perm(p2, p3, 0x5410), __byte_perm(p0, p1, 0x7632),
                   __byte_perm(p2, p3, 0x7632));
  }
}
#elif W8
// Consumer warpgroup c writes rows c*128 .. c*128+127 of B tile `buf` from stage s's codes:
// thread tid handles 8-byte chunk q = tid % 8 (codes 8q .. 8q+7) of rows tid / 8 + 16 k. A
// warp reads 4 code rows (256 contiguous bytes) and writes 4 swizzled bf16 rows.
__device__ __forceinline__ void dequant_b(Smem& sm, u32 s, u32 buf, int c, int tid) {
  const int q = tid & 7;
  unsigned char* b = reinterpret_cast<unsigned char*>(sm.b[buf]);
  const float* scale = reinterpret_cast<const float*>(sm.scales[s]);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int row = c * 128 + (tid >> 3) + 16 * k;
    const uint2 w = *reinterpret_cast<const uint2*>(&sm.codes[s][row * 64 + q * 8]);
    const float sc = scale[row];
    *reinterpret_cast<uint4*>(b + row * 128 + ((q ^ (row & 7)) << 4)) =
        make_uint4(w8::dequant_pair(w.x, sc), w8::dequant_pair(w.x >> 16, sc), w8::dequant_pair(w.y, sc),
                   w8::dequant_pair(w.y >> 16, sc));
  }
}
#endif

// The stage / phase of k-block counter `it` (over all tiles of this CTA).
__device__ __forceinline__ u32 stage_of(u32 it) { return it % STAGES; }
__device__ __forceinline__ u32 phase_of(u32 it) { return (it / STAGES) & 1u; }

#if W4
// A tile's first B (k-block counter it): TMA landed -> dequantized by both warpgroups -> barrier.
__device__ __forceinline__ void first_b(Smem& sm, u32 it, int c, int tid) {
  mbar_wait(smem_u32(&sm.full[stage_of(it)]), phase_of(it));
  dequant_b(sm, stage_of(it), c, tid);
  fence_proxy_async_smem();  // generic smem writes -> the wgmma (async proxy) reads
  named_bar_sync(3, 256);
}
// k-block it + 1's half of B, while k-block it's wgmma group runs (its stage was released by
// both warpgroups before the producer refilled it, and full[] says the refill landed). The
// barrier that completes the tile (named_bar_sync(3, 256)) is the caller's.
__device__ __forceinline__ void next_b(Smem& sm, u32 it, int c, int tid) {
  mbar_wait(smem_u32(&sm.full[stage_of(it + 1)]), phase_of(it + 1));
  dequant_b(sm, stage_of(it + 1), c, tid);
  fence_proxy_async_smem();
}
#elif W8
// k-block it's B, into the buffer both warpgroups' wgmma group it - 2 read: each warpgroup has
// waited for its group it - 2 (it - 1 is the one in flight), but the other may not have yet,
// hence the barrier first; the second one: both halves are written.
__device__ __forceinline__ void load_b(Smem& sm, u32 it, int c, int tid) {
  named_bar_sync(3, 256);
  mbar_wait(smem_u32(&sm.full[stage_of(it)]), phase_of(it));
  dequant_b(sm, stage_of(it), it % kBTiles, c, tid);
  fence_proxy_async_smem();
  named_bar_sync(3, 256);
}
#endif

// One tile's k-loop for consumer warpgroup c, into acc: kN = 256 on a full tile (its 64 rows,
// A rows c*64.., x the tile's 256 columns), 128 on a half tile (the tile's first 64 rows x
// columns c*128 .. c*128+127, B rows from c*128: acc[0 .. 63], the first 64 of the m64n256
// fragment layout). A separate instantiation per shape: a wgmma under a branch inside the
// k-loop makes ptxas serialize every wgmma of the loop.
//
// One wgmma group per k-block, kept one deep in flight: after issuing block kb, wait until at
// most one group is pending (block kb's), i.e. block kb - 1 finished reading its stage, and
// release that stage. The tensor pipe never drains between k-blocks. W4: gs, the expert's
// global scale, multiplies the result.
template <int kN>
__device__ __forceinline__ void mma_tile(Smem& sm, u32& it, int k_blocks, float (&acc)[128], float gs, int c,
                                         int tid, int lane) {
  static_assert(kN == 256 || kN == 128, "a full tile or a half tile's column half");
  const u32 a_off = kN == 256 ? c * 64 * 128 : 0, b_off = kN == 256 ? 0 : c * 128 * 128;  // bytes (128-B rows)
  u32 prev_s = 0;
#if W4
  if (k_blocks > 0) first_b(sm, it, c, tid);
#elif W8
  if (k_blocks > 0) load_b(sm, it, c, tid);
#endif
  for (int kb = 0; kb < k_blocks; ++kb, ++it) {
    const u32 s = stage_of(it);
#if !W4 && !W8
    mbar_wait(smem_u32(&sm.full[s]), phase_of(it));  // (W4, W8: waited before dequantizing this stage)
#endif
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < 128; ++i) reg_fence(acc[i]);
    const u32 a_addr = smem_u32(sm.a[s]) + a_off, b_addr = smem_u32(sm.b[it % kBTiles]) + b_off;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      const u64 da = wgmma_desc_k128b(a_addr + kk * 32), db = wgmma_desc_k128b(b_addr + kk * 32);
      const u32 accumulate = (kb > 0 || kk > 0) ? 1u : 0u;
      if constexpr (kN == 256)
        wgmma_m64n256k16_bf16_ss(acc, da, db, accumulate);
      else
        wgmma_m64n128k16_bf16_ss(acc, da, db, accumulate);  // acc[0 .. 63]
    }
    wgmma_commit();
#if W4
    const bool more = kb + 1 < k_blocks;
    if (more) next_b(sm, it, c, tid);  // while this k-block's group runs
#endif
    wgmma_wait<1>();
#pragma unroll
    for (int i = 0; i < 128; ++i) reg_fence(acc[i]);
    if (kb > 0 && lane == 0) mbar_arrive(smem_u32(&sm.empty[prev_s]));
    prev_s = s;
#if W4
    if (more) named_bar_sync(3, 256);  // both halves of the next B tile are written
#elif W8
    // While this k-block's group runs: the next one's B, into the buffer of group it - 1,
    // once both warpgroups have seen theirs complete (the wait just above).
    if (kb + 1 < k_blocks) load_b(sm, it + 1, c, tid);
#endif
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < 128; ++i) reg_fence(acc[i]);
  if (k_blocks > 0 && lane == 0) mbar_arrive(smem_u32(&sm.empty[prev_s]));
#if W4
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] *= gs;  // the expert's global scale (x 2^8), its columns only
#endif
}

__device__ __forceinline__ void gemm_body(const void* tm_a, const void* tm_b, const void* tm_d, const void* tm_s,
                                          const float* __restrict__ gscale, const int* __restrict__ tile_expert,
                                          const int* __restrict__ counts, const i64* __restrict__ seg_off,
                                          int* __restrict__ tile_counter, int m_tiles, int n_tiles, int n_per_expert,
                                          int k_blocks, Epilogue epi) {
  Smem& sm = aligned_smem<Smem>();
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  init_ring(sm.full, sm.empty, 4 * kConsumers);  // lane 0 of each consumer warp
  __syncthreads();

  if (wg == 0) {
    // ================= producer warpgroup
    setmaxnreg_dec<kProducerRegs>();
    if (warp == 0) {  // the producer warp (tiles.cuh produce_tiles)
      if (lane == 0) {
        tma_prefetch_desc(tm_a);
        tma_prefetch_desc(tm_b);
#if W4 || W8
        tma_prefetch_desc(tm_s);
#endif
      }
      // Stage s of k-block kb of tile (mt, nt) of expert e (the expert is a TMA coordinate).
      auto load = [&](u32 s, u32 full, int kb, int mt, int nt, int e) {
        const int b_row = e * n_per_expert + nt * BN;
        tma_load_2d(smem_u32(sm.a[s]), tm_a, kb * BK, mt * BM, full);
#if W4
        // Codes: byte columns; scales: {byte in the row pair, k tile, expert}, 128 rows a box.
        tma_load_2d(smem_u32(sm.codes[s]), tm_b, kb * BK / 2, b_row, full);
        tma_load_3d(smem_u32(sm.scales[s]), tm_s, nt * BN * 2, kb * (BK / 32), e, full);
        tma_load_3d(smem_u32(sm.scales[s]) + kScaleBytes / 2, tm_s, (nt * BN + 128) * 2, kb * (BK / 32), e, full);
#elif W8
        // Codes: byte columns = K; scales: {row, 128-column block, expert}, f32.
        tma_load_2d(smem_u32(sm.codes[s]), tm_b, kb * BK, b_row, full);
        tma_load_3d(smem_u32(sm.scales[s]), tm_s, nt * BN, kb * BK / 128, e, full);
#else
        tma_load_2d(smem_u32(sm.b[s]), tm_b, kb * BK, b_row, full);
#endif
      };
      produce_tiles<BM>(sm.full, sm.empty, sm.tile, tile_counter, m_tiles * n_tiles, n_tiles, k_blocks, tile_expert,
                        counts, seg_off, kStageBytes, lane, load);
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

    u32 it = 0;
    for (;;) {
      const int word = stage_word(sm.full, sm.tile, it);  // CTA-uniform
      if (word == kNoMoreTiles) break;
      const auto [mt, nt] = tile_mn(word_tile(word), n_tiles);
      // W4 runs half tiles as full ones (its second consumer's rows are padding, stored to
      // padding rows): with both shapes in the kernel ptxas serializes its wgmmas (C7515, the
      // dequantization's registers), and the planner never picks the W4 wide GEMMs (plan.cpp).
      const bool half = !W4 && word_half(word);
#if W4
      const float gs = gscale[tile_expert[mt]] * float(1 << w4::kEpilogueExp);  // global scale, 2^8
#else
      const float gs = 1.f;
#endif
      if (half)
        mma_tile<BN / 2>(sm, it, k_blocks, acc, gs, c, tid, lane);
      else
        mma_tile<BN>(sm, it, k_blocks, acc, gs, c, tid, lane);

      // ---- epilogue: 64 x 64 bf16 boxes through swizzled smem, TMA store: all kBoxes of its
      // 64 rows on a full tile; on a half tile the tile's first 64 rows, its column half's boxes.
      const int rows = half ? 0 : c;  // which 64 rows of the tile
      const int m_row0 = mt * BM + rows * 64;
      epi.begin_tile(mt, rows, r0);
      // (Two loops: a loop with an exit ptxas does not unroll, and acc indexed by a variable
      // lives in local memory.)
      // (nt passed in: C++17, which NVRTC compiles, cannot capture a structured binding.)
      auto box = [&](int j, int col_j, int n_tile) {
        store_box(epi, acc, j, col_j, reinterpret_cast<unsigned char*>(sm.d[c][j & 1]), tm_d, n_tile, m_row0, c, r0, g,
                  t, tid);
      };
      constexpr int kHalfBoxes = Epilogue::kBoxes / 2;
      if (half) {
#pragma unroll
        for (int j = 0; j < kHalfBoxes; ++j) box(j, c * kHalfBoxes + j, nt);
      } else {
#pragma unroll
        for (int j = 0; j < Epilogue::kBoxes; ++j) box(j, j, nt);
      }
    }
    if (tid == 0) tma_store_wait_all<0>();  // smem must outlive the stores' reads
  }
}

}  // namespace sm90

// grid = min(SMs, tile_bound * n_tiles) (persistent), block = 384, dynamic smem kSmemBytes.
// tm_a: A [rows, K]; tm_b: W [E_TOTAL * N, KP] (W4: its codes, [E_TOTAL * N, KP / 2] bytes);
// tm_d: out [rows, N_out] (GEMM 1: I, GEMM 2: H). W4: tm_s the scales' 3-D map, gscale the
// [E_TOTAL] global scales; W8: tm_s the f32 scales' 3-D map (gscale unused); bf16: any map,
// null. counts [E_TOTAL] / seg_off [E_TOTAL + 1]: the permute stage's (half tiles, above).
// tile_counter: this GEMM's claim counter, 0 at launch (tiles.cuh; the gather zeroes it).
// row_scale: GEMM 2 only (null for GEMM 1).
extern "C" __global__ void __launch_bounds__(sm90::kThreads, 1)
    moe_sm90_gemm(const __grid_constant__ TensorMap tm_a, const __grid_constant__ TensorMap tm_b,
                  const __grid_constant__ TensorMap tm_d, const __grid_constant__ TensorMap tm_s,
                  const float* __restrict__ gscale, const int* __restrict__ tile_expert,
                  const int* __restrict__ counts, const i64* __restrict__ seg_off, int* __restrict__ tile_counter,
                  const int* __restrict__ num_tiles, int tile_bound, const float* __restrict__ row_scale,
                  int n_tiles, int n_per_expert, int k_blocks) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "sm90/grouped_gemm.cuh must be compiled for sm_90a"
#endif
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  sm90::Epilogue epi;
#if GEMM_STAGE == 2
  epi.row_scale = row_scale;
#endif
  const int m_tiles = min(*num_tiles, tile_bound);  // tile_expert holds tile_bound entries
  sm90::gemm_body(&tm_a, &tm_b, &tm_d, &tm_s, gscale, tile_expert, counts, seg_off, tile_counter, m_tiles, n_tiles,
                  n_per_expert, k_blocks, epi);
}
