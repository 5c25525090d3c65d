// The sm90 backend's internals (host side): Hopper (sm_90a) TMA + wgmma grouped GEMMs
// plugged into the portable pipeline (portable.hpp: routing, permute, combine): the wide
// (128-row token tile) GEMMs above the measured crossover, the decode (weight-streaming)
// GEMMs below it.
//
// File map (kernel source <-> host code):
//   kernels/sm90/grouped_gemm.cuh, tiles.cuh, ring.cuh, wait.cuh, ptx/  <-> kernel_specs.cpp
//   kernels/sm90/w4a16.cuh, w8a16.cuh, w4_format.cuh (dequantizing)     <-> kernel_specs.cpp
//   kernels/sm90/fp8_gemm.cuh, quantize.cuh (W8A8: FP8 x FP8)            <-> kernel_specs.cpp
//   kernels/sm90/decode_gemm.cuh, activation.cuh                        <-> kernel_specs.cpp
//   kernels/sm90/gather.cuh                                             <-> kernel_specs.cpp
//   tensor maps (host encode, once per buffer)       <-> tensor_map.cpp
//   the planner's crossover table                    <-> plan.cpp
//   GemmPlugin implementation, Backend                <-> backend.cpp
#pragma once
#include <cuda.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "moeforge/spec.hpp"
#include "runtime/jit.hpp"

namespace moeforge::portable {
struct PreparedMatrix;
}

namespace moeforge::sm90 {

// Mirrors of the kernel's constants (grouped_gemm.cuh); the kernel static_asserts the
// shared-memory size against SM90_SMEM_BYTES, so a drift fails to compile.
constexpr int kBM = 128, kBN = 256, kBK = 64, kThreads = 384, kEpiBox = 64;
constexpr int kSmemBytes = 231424;  // 4 x (16 + 32) KB stages + 2 x 2 x 8 KB boxes + barriers, + 1 KB align
// How the sm90 GEMMs read the weights: bf16 tiles by TMA, or codes dequantized on the chip
// (W4: NVFP4, sm90/w4a16.cuh; W8: FP8 e4m3 with 128-column f32 scales, sm90/w8a16.cuh).
// W8A8: FP8 weights with FP8 activations (MoeSpec::activation_format), QGMMA (sm90/fp8_gemm.cuh).
enum class Codes { BF16, W4, W8, W8A8 };
Codes codes(const MoeSpec& spec);
// The spec the portable pipeline (routing, permute, combine) sees: activations' format is the
// GEMMs' business.
MoeSpec pipeline_spec(const MoeSpec& spec);
// NVFP4 (W4): 3 x (16 + 32 + 8 + 1) KB stages (A, dequantized B, codes, scales) + boxes + barriers.
constexpr int kSmemBytesW4 = 209920;
// FP8 (W8): 3 x (16 + 16 + 1) KB stages (A, codes, scales) + 2 dequantized B tiles + boxes + barriers.
constexpr int kSmemBytesW8 = 201728;
// FP8 x FP8 (W8A8, fp8_gemm.cuh): 4 x (16 + 32 + 0.5 + 1) KB stages + barriers + 1 KB of amax
// slots, + 1 KB align.
constexpr int kSmemBytesW8A8 = 205824;
constexpr int wide_smem_bytes(Codes c) {
  return c == Codes::W4 ? kSmemBytesW4 : c == Codes::W8 ? kSmemBytesW8 : c == Codes::W8A8 ? kSmemBytesW8A8 : kSmemBytes;
}
constexpr int kBNW8A8 = 256;  // the W8A8 GEMMs' tile is 128 x 256
constexpr int kGatherThreads = 256, kGatherWarps = kGatherThreads / 32;  // gather: a token a warp
// The h quantizer splits each 128-row tile over this many blocks (grid.y): 8 warps a block,
// 32 rows: more rows in flight than one block a tile (it is latency-bound, not bandwidth-bound,
// with a warp working through 16 rows in turn).
constexpr unsigned kGatherSplit = 4;
static_assert(kGatherSplit * 32 == kBM, "the quantizer's blocks are the 32 rows that share a scale row");
// Decode GEMMs (decode_gemm.cuh): 128 weight rows per CTA, token tiles of 16, 32, 64 (two
// CTAs per SM) or 128 (one); bf16 weights: 4 stages of 64 K (16 KB; 6 at 128); NVFP4 (W4):
// stages of 256 K (16 KB codes + 2 KB scales), 4 / 3 / 2 / 2 of them at token tiles 16 / 32 /
// 64 / 128; FP8 (W8): stages of 128 K (16 KB codes + 512 B scales), 4 / 4 / 3 / 4 of them;
// W8A8: the same weights with e4m3 token tiles (and a 16-byte scale group per token), 5 / 5 / 4 / 6.
constexpr int kDecodeRows = 128;
constexpr int decode_ctas_per_sm(int bt) { return bt == 128 ? 1 : 2; }
constexpr int decode_stage_k(Codes c) {
  return c == Codes::W4 ? 4 * kBK : (c == Codes::W8 || c == Codes::W8A8) ? 2 * kBK : kBK;
}
constexpr int decode_stages(int bt, Codes c) {
  return c == Codes::W4     ? (bt == 16 ? 4 : bt == 32 ? 3 : 2)
         : c == Codes::W8   ? (bt == 64 ? 3 : 4)
         : c == Codes::W8A8 ? (bt == 64 ? 4 : bt == 128 ? 6 : 5)
                            : (bt == 128 ? 6 : 4);
}
// experts: E + S (the kernel lists the experts with rows and their running work-unit counts in
// shared memory: 2 + 4 bytes each).
constexpr int decode_smem_bytes(int bt, Codes c, int experts) {
  const int k = decode_stage_k(c);
  const int weights = c == Codes::W4                       ? kDecodeRows * k / 2 + (k / 32) * kDecodeRows * 2
                      : (c == Codes::W8 || c == Codes::W8A8) ? kDecodeRows * k + kDecodeRows * 4
                                                             : kDecodeRows * k * 2;
  // Token tile: bf16, or (W8A8) e4m3 codes and a 16-byte scale group per token.
  const int tokens = c == Codes::W8A8 ? bt * k + bt * 16 : bt * k * 2;
  const int stages = decode_stages(bt, c);
  return (stages * (weights + tokens) + 16 * stages + 4 + 6 * experts + 1023) / 1024 * 1024 + 1024;
}
// Shared memory of one sm_90a SM (H100, H200, GH200: 228 KiB; why_not checks the device's) and
// the driver's reservation per resident block.
inline constexpr int kSmemPerSm = 233472, kSmemReservedPerBlock = 1024;
// The decode GEMMs' launch size: their layout's, or more so that no more than
// decode_ctas_per_sm(bt) of them fit an SM. Their units are strided over a grid of exactly that
// many CTAs per SM; bf16 at 16-token tiles needs 75 KB and 37 registers, so three would fit,
// and a grid launched while other kernels hold some SMs (programmatic dependent launch) was
// placed three to an SM on some and one on others: +20-27 % at T = 8-128 (H200, d58ebfc).
constexpr int decode_launch_smem_bytes(int bt, Codes c, int experts) {
  const int need = decode_smem_bytes(bt, c, experts);
  const int one_too_many = kSmemPerSm / (decode_ctas_per_sm(bt) + 1) - kSmemReservedPerBlock + 1;
  return need >= one_too_many ? need : (one_too_many + 1023) / 1024 * 1024;
}
inline constexpr const char* kTarget = "sm_90a";

// Spec-only reasons the sm90 GEMMs cannot serve spec ("" if they can).
std::string spec_unsupported(const MoeSpec& spec);

rt::KernelSpec gemm_kernel(const MoeSpec& spec, int stage);
// How the gather stores x rows: as they are (the wide GEMMs, bf16 or dequantized B tiles), in
// the W4A16 / W8A16 decode GEMMs' K order (sm90/w4_format.cuh), or quantized to FP8 (W8A8),
// each row's scales in the row (the decode GEMMs) or transposed per 128-row tile (the wide
// GEMMs: sm90/quantize.cuh).
enum class GatherOrder { Natural, PermutedK, QuantFp8, QuantFp8Tiled };
rt::KernelSpec gather_kernel(const MoeSpec& spec, GatherOrder order = GatherOrder::Natural);
// W8A8, sm90/quantize.cuh, in place on k-column rows: quantized to codes + scales (h between
// the decode QGMMA GEMMs), the scales in the rows, or per 32 rows (the wide path's layout, which
// its gather and GEMM 1 write; this mode of the kernel is left for the layout's bit-exact test).
// Launched on a grid (tile bound, kGatherSplit) of kGatherThreads.
rt::KernelSpec quantize_kernel(int64_t k, bool tiled_scales);
// stream_k: the decode GEMM that cuts its (unit, k-block) tasks into equal ranges per CTA
// (decode_gemm.cuh), for calls of at most kStreamKTokens tokens; decode_fixup_kernel adds up
// the units it split.
rt::KernelSpec decode_kernel(const MoeSpec& spec, int stage, int bt, bool stream_k = false);
rt::KernelSpec decode_fixup_kernel(const MoeSpec& spec, int stage);
// Stream-K runs at the 16-token tile for calls that fit one tile (every expert one chunk, so no
// tile is streamed twice). Its workspace: two partial-sum slots per CTA of the grid (f32, the
// tile's 128 rows x 16 tokens) and a 16-byte split entry per CTA.
inline constexpr int kStreamKTokens = 16;
constexpr int64_t stream_k_grid(int sm_count) { return int64_t(decode_ctas_per_sm(kStreamKTokens)) * sm_count; }
constexpr int64_t stream_k_partial_bytes(int sm_count) {
  return stream_k_grid(sm_count) * 2 * kDecodeRows * kStreamKTokens * 4;
}
constexpr int64_t stream_k_scratch_bytes(int sm_count) {
  return stream_k_partial_bytes(sm_count) + stream_k_grid(sm_count) * 16;
}
// Whether stream-K pays for a decode GEMM of at most `units` (expert, 128-row tile) units: only
// when whole units would fill the SMs' last round less than 4 / 5 full. Measured on the H200
// (records 9db8e4b-*-streamk-ab): it gains 3-12 % where the fill is 0.55-0.79 (T = 1-3 of
// Mistral-Small-4, GEMM 1 of DeepSeek-V3 at T = 1) and loses 2-9 % from 0.82 up, where the fixup
// and the partial sums cost more than the idle SMs (two CTAs per SM share the issue slots, so a
// round of whole units is already partly self-balancing).
constexpr bool stream_k_pays(int64_t units, int sm_count) {
  const int64_t rounds = (units + sm_count - 1) / sm_count;
  return units > 0 && units * 5 < rounds * sm_count * 4;
}
// NVFP4 and FP8 weights: the decode GEMMs dequantize them in registers (W4A16 / W8A16), the wide
// ones into their shared-memory B tiles; the planner switches at each format's crossover.
// The decode GEMMs' K order: permuted in 64-column blocks for dequantized weights (w4_format.cuh).
inline bool permuted_k(Codes c) { return c == Codes::W4 || c == Codes::W8; }
inline constexpr int kDecodeTiles[] = {16, 32, 64, 128};
// The kernels this backend adds to the portable pipeline's: gather, the bf16-y combine, the
// wide and the decode GEMMs; and all of them, the portable ones included.
std::vector<rt::KernelSpec> own_kernels(const MoeSpec& spec);
std::vector<rt::KernelSpec> all_kernels(const MoeSpec& spec);

// ---- NVFP4 layout (w4_layout.cpp) ----
// Rewrites an NVFP4 prepared matrix into the layout the sm90 W4 kernels read (w4::pack_word
// on every 32-bit word of codes, w4::scale_byte for every scale, its sign and zero moved into
// the codes): the layer's PrepareHook for NVFP4 weights. The values it dequantizes to are
// unchanged, bit for bit.
void pack_w4(portable::PreparedMatrix& m);

// ---- planner (plan.cpp) ----
// Which GEMM pair runs a chunk of `tokens` tokens: the decode (weight-streaming, token tile
// bt) GEMMs below the crossover in average routed rows per expert (T * k / E), the wide
// (128 x 256 tile) GEMMs from it on.
struct Plan {
  bool wide = true;
  int bt = 0;  // decode token tile
};
double crossover_rows(const MoeSpec& spec);
// Average routed rows per expert from which the decode GEMMs take the 128-token tile (one CTA
// per SM) instead of the rule's 16 / 32 / 64 (infinite where it never does).
double large_tile_rows(const MoeSpec& spec);
Plan plan(const MoeSpec& spec, int64_t tokens);

// ---- tensor maps (tensor_map.cpp) ----
// A 2-D bf16 tensor map over [rows, cols] (row stride in bytes), 128-byte swizzle, box
// {64 columns, box_rows}. Throws InvalidArgument naming `what` when the driver's rules
// (16-byte aligned base and stride, box limits) are not met, Unsupported when the driver
// refuses it.
CUtensorMap encode_bf16_2d(CUdeviceptr base, uint64_t cols, uint64_t rows, uint64_t row_stride_bytes,
                           uint32_t box_rows, const char* what);
// A dense 2-D or 3-D byte tensor map (NVFP4 and FP8 codes, NVFP4 scales): dims and box in
// bytes, innermost first; strides follow from the dims. swizzle128: the 128-byte swizzle (box
// rows of exactly 128 bytes), else none.
CUtensorMap encode_u8(CUdeviceptr base, std::initializer_list<uint64_t> dims_bytes,
                      std::initializer_list<uint32_t> box_bytes, bool swizzle128, const char* what);
// The same over f32 elements (FP8 scales), dims and box in elements, no swizzle.
CUtensorMap encode_f32(CUdeviceptr base, std::initializer_list<uint64_t> dims, std::initializer_list<uint32_t> box,
                       const char* what);

}  // namespace moeforge::sm90
