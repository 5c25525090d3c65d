// dev/sm90 ladder, step 03: GEMM1 with the gated activation fused into the epilogue.
//
// h = act(X W13_gate[e]^T, X W13_up[e]^T), bf16 in, f32 accumulate, bf16 out; per N tile j:
//   gate[m, c] = sum_k X[m, k] * W13[e*2I +     128 j + c, k]    (c = 0..127)
//   up[m, c]   = sum_k X[m, k] * W13[e*2I + I + 128 j + c, k]
//   h[m, 128 j + c] = act(gate[m, c], up[m, c])   on routed rows, 0 on padding rows
// X = x_perm [M_total, H] (expert-contiguous, segments padded to 128 rows), W13 in the plain
// checkpoint layout [E * 2I, H] (gate rows then up rows per expert), h [M_total, I] bf16.
// act (template parameter, gated.cuh): SwiGLU, GeGLU-tanh, or gpt-oss clamped SwiGLU.
//
// The kernel is 02's (ws_gemm.cuh: 128 x 256 tile, 4-stage TMA ring, 1 producer + 2 consumer
// warpgroups, setmaxnreg, persistent grid, double-buffered TMA-store boxes) reading the
// PREPARED W13 (gated.cuh, w13_prepare_interleave): every 256-row B tile holds 128 gate rows
// and the matching 128 up rows, so accumulator column c (n8-chunk i < 16) and column c + 128
// (chunk i + 16) of the same thread are a (gate, up) pair: register fragment position
// d[4i + k] pairs with d[4(i + 16) + k] (same row, same column offset). The activation runs
// in registers on those pairs; each consumer stores 64 rows x 128 output columns = two
// 64 x 64 boxes (02 stores four), at output column 128 nt + 64 j.
//
// Padding rows: tile_rows[mt] = routed rows of m-tile mt; rows at or past it are stored as 0
// by a select (not a multiply), so non-finite garbage in padding rows of X cannot leak.
// GEMM1 carries no routing weight (it is applied in GEMM2's epilogue).
//
// Epilogue cost (per consumer thread and tile: 64 outputs from 128 accumulators):
//   SwiGLU         FMUL, MUFU.EX2, FADD, MUFU.RCP, 2 FMUL                        (2 MUFU / output)
//   GeGLU-tanh     cubic (FMUL, FFMA, FMUL), then as SwiGLU on 2z                 (2 MUFU / output;
//                  not MUFU.TANH: 1 + tanh cancels its error for negative inputs, gated.cuh)
//   clamped        FMNMX x 3, FMUL, MUFU.EX2, FADD, MUFU.RCP, FADD, 2 FMUL        (2 MUFU / output)
// then bf16 pack and 32 4-byte shared stores (02: 64), 2 TMA stores (02: 4).
#include "ws_gemm.cuh"
#include "gated.cuh"
#include "harness.cuh"

#include <algorithm>
#include <cstddef>
#include <vector>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "03_gemm1_swiglu.cu must be compiled for sm_90a (-gencode=arch=compute_90a,code=sm_90a)"
#endif

namespace v03 {

using ws::BM;
using ws::BN;
using ws::BK;
using ws::kEpiBox;
using ws::kSmemBytes;
using ws::kThreads;
constexpr int kHalf = BN / 2;  // 128 gate + 128 up columns per N tile -> 128 output columns
static_assert(kHalf == gated::kHalfTile, "the prepare permutation's block must be half the N tile");

template <int A>
struct GatedEpi {
  static constexpr int kBoxes = kHalf / kEpiBox;  // 2
  const int* __restrict__ tile_rows;
  bool v0, v1;  // this thread's rows r0, r0 + 8 are routed rows (not padding)
  __device__ __forceinline__ void begin_tile(int mt, int c, int r0) {
    const int routed = tile_rows[mt] - c * 64;  // routed rows within this consumer's 64
    v0 = r0 < routed;
    v1 = r0 + 8 < routed;
  }
  __device__ __forceinline__ void fill(const float (&acc)[128], int j, unsigned char* box, int r0, int g, int t) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int ig = j * 8 + q;        // gate n8-chunk (accumulator columns 0..127)
      const int iu = ig + kHalf / 8;   // its up partner (columns 128..255)
      const u32 off = ws::store_offset(r0, q, g, t);
      const float h0 = gated::gated_act_fast<A>(acc[4 * ig + 0], acc[4 * iu + 0]);
      const float h1 = gated::gated_act_fast<A>(acc[4 * ig + 1], acc[4 * iu + 1]);
      const float h2 = gated::gated_act_fast<A>(acc[4 * ig + 2], acc[4 * iu + 2]);
      const float h3 = gated::gated_act_fast<A>(acc[4 * ig + 3], acc[4 * iu + 3]);
      const __nv_bfloat162 p0 = __floats2bfloat162_rn(v0 ? h0 : 0.f, v0 ? h1 : 0.f);
      const __nv_bfloat162 p1 = __floats2bfloat162_rn(v1 ? h2 : 0.f, v1 ? h3 : 0.f);
      *reinterpret_cast<__nv_bfloat162*>(box + off) = p0;
      *reinterpret_cast<__nv_bfloat162*>(box + off + 8 * 128) = p1;
    }
  }
  __device__ __forceinline__ int col(int nt, int j) const { return nt * kHalf + j * kEpiBox; }
};

// tm_b: the prepared W13 [E * 2I, K]; tm_d: h [M_total, I]; N_b = 2I.
template <int A>
__global__ void __launch_bounds__(kThreads, 1)
    gemm03(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
           const __grid_constant__ CUtensorMap tm_d, const int* __restrict__ tile_rows,
           const int* __restrict__ tile_expert, int m_tiles, int n_tiles, int N_b, int k_blocks) {
  GatedEpi<A> epi;
  epi.tile_rows = tile_rows;
  ws::gemm_body(&tm_a, &tm_b, &tm_d, tile_expert, m_tiles, n_tiles, N_b, k_blocks, epi);
}

// Host prepare, applied in place to the device copy of W13 one expert at a time (the
// permutation never crosses experts): download, gated::w13_prepare_interleave, upload.
inline void prepare_w13_device(h::bf16* w13, int E, int I, int K) {
  const size_t n = (size_t)2 * I * K;
  std::vector<uint16_t> plain(n), prep(n);
  for (int e = 0; e < E; ++e) {
    h::bf16* slice = w13 + (size_t)e * n;
    CK(cudaMemcpy(plain.data(), slice, n * 2, cudaMemcpyDeviceToHost));
    if (!gated::w13_prepare_interleave(plain.data(), prep.data(), 1, I, K, 2)) {
      std::fprintf(stderr, "w13 prepare: I = %d is not a multiple of %d\n", I, gated::kHalfTile);
      std::exit(3);
    }
    CK(cudaMemcpy(slice, prep.data(), n * 2, cudaMemcpyHostToDevice));
  }
}

template <int A>
struct Version {
  static constexpr const char* kName = A == gated::kSwiGLU      ? "03_swiglu"
                                       : A == gated::kGeGLUTanh ? "03_geglu"
                                                                : "03_clampswiglu";
  static constexpr int kAct = A;
  static constexpr int kBM = BM, kBN = BN, kBK = BK;
  static const void* func() { return reinterpret_cast<const void*>(&gemm03<A>); }
  static size_t smem_bytes() { return kSmemBytes; }
  CUtensorMap ta, tb, td;
  int grid = 0;
  void setup(const h::Problem& p, const h::DevInfo& dev) {
    const int I = p.s.N / 2;
    prepare_w13_device(p.B, p.s.E, I, p.s.K);  // after the reference was computed from the plain layout
    ta = h::tmap_bf16_2d(p.A, p.s.K, p.M_total, BK, BM);
    tb = h::tmap_bf16_2d(p.B, p.s.K, (uint64_t)p.s.E * p.s.N, BK, BN);
    td = h::tmap_bf16_2d(p.D, I, p.M_total, kEpiBox, 64);
    CK(cudaFuncSetAttribute(gemm03<A>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmemBytes));
    const long long tiles = (long long)p.m_tiles * (p.s.N / BN);
    grid = (int)std::min<long long>(dev.sms, tiles);
  }
  void launch(const h::Problem& p, cudaStream_t st) {
    gemm03<A><<<grid, kThreads, kSmemBytes, st>>>(ta, tb, td, p.tile_rows, p.tile_expert, p.m_tiles, p.s.N / BN,
                                                  p.s.N, p.s.K / BK);
  }
};

// CPU check of the prepare permutation on a tiny W13 whose elements name their plain row.
inline bool prepare_selftest() {
  const int E = 2, I = 256, K = 3;
  std::vector<uint16_t> plain((size_t)E * 2 * I * K), prep(plain.size());
  for (size_t r = 0; r < (size_t)E * 2 * I; ++r)
    for (int k = 0; k < K; ++k) plain[r * K + k] = (uint16_t)(r * 4 + k);
  if (!gated::w13_prepare_interleave(plain.data(), prep.data(), E, I, K, 2)) return false;
  // expected plain row of prepared row p in expert e: explicit, not via w13_plain_row
  auto expect = [&](int e, int p) {
    const int base = e * 2 * I;
    if (p < 128) return base + p;              // tile 0: gate 0..127
    if (p < 256) return base + I + p - 128;    //         up   0..127
    if (p < 384) return base + p - 128;        // tile 1: gate 128..255
    return base + I + p - 256;                 //         up   128..255
  };
  for (int e = 0; e < E; ++e)
    for (int p = 0; p < 2 * I; ++p)
      for (int k = 0; k < K; ++k)
        if (prep[((size_t)e * 2 * I + p) * K + k] != (uint16_t)(expect(e, p) * 4 + k)) {
          std::printf("FAIL: w13 prepare: expert %d prepared row %d holds plain row %d, expected %d\n", e, p,
                      prep[((size_t)e * 2 * I + p) * K] / 4, expect(e, p));
          return false;
        }
  return !gated::w13_prepare_interleave(plain.data(), prep.data(), E, 200, K, 2);  // I % 128 != 0 refused
}

}  // namespace v03

int main(int argc, char** argv) {
  if (!v03::prepare_selftest()) return 1;
  std::printf("== w13 prepare permutation: CPU self-test PASS\n");
  int rc = 0;
  rc |= h::run_main<v03::Version<gated::kSwiGLU>>(argc, argv);
  rc |= h::run_main<v03::Version<gated::kGeGLUTanh>>(argc, argv);
  rc |= h::run_main<v03::Version<gated::kClampedSwiGLU>>(argc, argv);
  return rc;
}
