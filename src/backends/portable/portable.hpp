// The portable backend's internals (host side), shared by its .cpp files and the tests.
//
// File map (kernel source <-> host code, STYLE item 1):
//   kernels/portable/route.cuh         <-> route.cpp          (routing, validate_ids specs)
//   kernels/portable/validate_ids.cuh  <-> route.cpp
//   kernels/portable/permute.cuh       <-> permute.cpp
//   kernels/portable/grouped_gemm.cuh  <-> grouped_gemm.cpp   (tile configs, smem budgets)
//   kernels/portable/combine.cuh       <-> combine.cpp
//   prepare-time weight layout         <-> layout.cpp         (pure CPU, tested in tests/cpu)
//   Backend / PreparedLayer / forward  <-> backend.cpp
//
// Shared experts: appended after the routed experts as experts E .. E+S-1 that every
// token visits with weight 1 (one GEMM problem for all); this needs
// shared_intermediate == intermediate, otherwise why_not() says so.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "moeforge/spec.hpp"
#include "moeforge/tensor.hpp"
#include "moeforge/weights.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace moeforge::portable {

constexpr int kBK = 32;           // GEMM K tile (the prepared K is padded to a multiple)
constexpr int kPermuteChunk = 1024;  // entries per count/scatter chunk (permute.cuh)
constexpr int kScatterWarps = 8;
constexpr int kRouteWarps = 4;
constexpr int kMaxExperts = 1024;
constexpr int kMaxTopk = 32;
constexpr int kMaxGroups = 64;

// ---- GEMM tile configurations (grouped_gemm.cpp) ----
struct TileConfig {
  const char* name;
  int bm, bn, warps_m, warps_n, stages;
  int threads() const { return 32 * warps_m * warps_n; }
};
// Small per-expert M (decode): 16 rows, 4 warps side by side along N.
inline constexpr TileConfig kSmallTile{"m16n128", 16, 128, 1, 4, 4};
// Large M (prefill): 128x128x32, 8 warps (2 x 4), warp tile 64x32, 3 stages.
inline constexpr TileConfig kLargeTile{"m128n128", 128, 128, 2, 4, 3};
std::ostream& operator<<(std::ostream& os, const TileConfig& c);

// Dynamic shared memory of grouped_gemm.cuh for (config, weight format): mirrors gg::Smem.
int gemm_smem_bytes(const TileConfig& c, WeightFormat f);
// Which config forward() uses for a chunk of `tokens` tokens (the other one if the
// preferred one does not fit the device; null device: no check).
const TileConfig& choose_tile(const MoeSpec& spec, int64_t tokens, const rt::DeviceInfo* device);

// ---- kernel specs ----
// The ACT define of every GEMM-1 kernel: 0 SwiGLU, 1 GeGLU (tanh), 2 clamped SwiGLU.
int activation_code(const MoeSpec& spec);
rt::KernelSpec route_kernel(const MoeSpec& spec, DType logits);
// Routing and the one-chunk permutation in one launch (route_permute.cuh), for calls of at most
// kRoutePermuteTokens tokens with router logits: one token per warp of its one block. With 4
// tokens per warp (T = 32) the block's routing took 20.9 us against 5.4 for moe_route's 8 blocks
// plus 6.1 for the permutation (ncu, H200, NVFP4 Mistral-Small-4, 89b4fce); at T = 1 it is 8.5
// against 10.9.
inline constexpr int kRoutePermuteTokens = 8;
// Programmatic dependent launch (rt::PdlScope) for calls of at most this many tokens: there the
// next kernel's launch and prologue overlap a short predecessor (NVFP4 Mistral-Small-4 at T = 1:
// 4.05 -> 3.85x the floor, d58ebfc); at T = 2048 the same layer took 1421 us with it and 1373
// without, three repetitions each, bf16 and T = 8192 within noise (H200, 9f34da8).
inline constexpr int64_t kPdlMaxTokens = 1024;
rt::KernelSpec route_permute_kernel(const MoeSpec& spec, DType logits);
rt::KernelSpec validate_ids_kernel(const MoeSpec& spec, DType ids);
// moe_count | moe_scan | moe_scatter | moe_permute_small (the three, one chunk)
rt::KernelSpec permute_kernel(const MoeSpec& spec, const char* entry);
rt::KernelSpec gemm_kernel(const MoeSpec& spec, int stage, const TileConfig& c);
// y_bf16: GEMM 2 wrote y in bf16 (the sm90 GEMMs) instead of f32.
rt::KernelSpec combine_kernel(const MoeSpec& spec, DType out, bool y_bf16 = false);
// The combine's column slices per token (its grid.y): one pass of 256 x 4 columns each while the
// tokens alone would not fill the device (sm_count blocks), else 1.
unsigned combine_slices(int64_t tokens, int64_t hidden, int sm_count);
std::vector<rt::KernelSpec> all_kernels(const MoeSpec& spec);

// Spec-only reasons this backend cannot serve spec ("" if it can).
std::string spec_unsupported(const MoeSpec& spec);

// ---- prepare-time layout (layout.cpp) ----
int64_t padded_k(int64_t k);  // multiple of kBK
// W13 row interleave: prepared row n holds original row interleaved_source_row(n, I):
// blocks of 16 rows = 8 gate rows (8b..8b+7) then the 8 matching up rows (I+8b..).
int64_t interleaved_source_row(int64_t n, int64_t I);

// One matrix in the kernels' layout (see grouped_gemm.cuh): rows possibly interleaved,
// K padded to padded_k(cols) with zeros, per-row scales laid out per k-tile.
struct PreparedMatrix {
  WeightFormat format = WeightFormat::BF16;
  int64_t rows = 0, cols = 0, kp = 0;
  std::vector<uint8_t> data;    // bf16 [rows][kp] | e4m3 [rows][kp] | e2m1x2 [rows][kp/2]
  std::vector<uint8_t> scales;  // fp8 f32 [ceil(kp/128)][rows] | nvfp4 e4m3 [kp/32][rows][2] | mxfp4 [kp/32][rows]
  float global_scale = 1.0f;    // nvfp4
};
PreparedMatrix prepare_matrix(const QuantMatrix& m, bool interleave_gate_up);
// b13 [2I] in the interleaved row order.
std::vector<float> interleave_bias(const std::vector<float>& b13, int64_t I);
// The values the kernel multiplies by, prepared rows [r0, r1), columns [0, cols):
// exactly QuantMatrix::dequantize_rows of the source rows (FP16 weights: their bf16
// rounding, the one lossy step of this backend). For tests.
void decode_prepared_rows(const PreparedMatrix& p, int64_t r0, int64_t r1, double* out);

// ---- workspace plan (backend.cpp) ----
struct ChunkPlan {
  int64_t tokens = 0;       // tokens per chunk (last chunk may be shorter)
  int64_t rows_bound = 0;   // padded rows upper bound
  int64_t tile_bound = 0;   // M tiles upper bound
};
// Workspace bytes one call may use: 1/16 of the device's memory, clamped to [1, 16] GiB.
int64_t workspace_budget(const rt::DeviceInfo& device);
constexpr int64_t kDefaultWorkspaceBudget = int64_t(4) << 30;  // planning without a device
// row_bytes: workspace bytes per padded row (the GEMM intermediates and the row maps).
ChunkPlan plan_chunk(const MoeSpec& spec, int64_t tokens, int bm, int64_t row_bytes,
                     int64_t budget = kDefaultWorkspaceBudget);
// The portable GEMMs' chunk: h bf16 + y f32 + row maps per row.
ChunkPlan plan_chunk(const MoeSpec& spec, int64_t tokens, const TileConfig& c,
                     int64_t budget = kDefaultWorkspaceBudget);
// Testing hook (process-wide): every forward's workspace, which the allocator hands over holding
// whatever earlier calls left, is first filled with this byte (0-255); -1, the default, leaves it
// so. An output that changes with the byte reads workspace nothing of its call wrote
// (tests/gpu/test_layer.cpp, Sm90Layer.OutputsDependOnlyOnTheirInput).
void set_workspace_fill(int byte);

// ---- GEMM plugin: another kernel family's GEMM pair inside this pipeline ----
// The sm90 backend (src/backends/sm90/) is this layer with its TMA/wgmma GEMMs plugged in:
// weights, routing, permutation, combine, workspace and chunking stay the portable ones, so
// the two backends cannot drift apart.
struct LayerWeights {  // the prepared layout of layout.cpp, experts 0..E+S-1, on the device
  CUdeviceptr w13 = 0, w2 = 0;
  CUdeviceptr w13_scales = 0, w2_scales = 0;  // fp8 / nvfp4 / mxfp4 (0 otherwise)
  CUdeviceptr g13 = 0, g2 = 0;                // [E+S] f32 NVFP4 global scales (1 otherwise)
};
// One chunk's buffers (call workspace, except x): permute outputs for segments padded to
// bm(), and what the GEMM pair writes: y [rows, H] bf16, its rows scaled by the routing weight.
// y and xg are the same buffer: the gathered x is dead once GEMM 1 has run.
struct PluginChunk {
  CUdeviceptr x = 0;  // [n, H] bf16
  // The permutation's (portable/permute.cuh): row_of [n * topk] is each (token, slot)'s row.
  CUdeviceptr counts = 0, seg_off = 0, num_tiles = 0, tile_expert = 0, row_of = 0, row_weight = 0;
  CUdeviceptr xg = 0, scale = 0, h = 0, y = 0;  // [rows, H] bf16, [rows] f32, [rows, I] bf16, [rows, H] bf16
  CUdeviceptr scratch = 0;  // GemmPlugin::scratch_bytes() of this call's own, content undefined on entry
  int64_t tokens = 0, rows_bound = 0, tile_bound = 0;  // tokens: this chunk's
  CUstream stream = nullptr;
};
class GemmPlugin {
 public:
  virtual ~GemmPlugin() = default;
  // PluginChunk::scratch's size (e.g. the GEMMs' tile counters, the decode GEMMs' partial sums).
  virtual int64_t scratch_bytes() const { return 256; }
  virtual int bm() const = 0;                            // M tile = segment padding
  virtual void run(const PluginChunk& chunk) const = 0;  // gather, GEMM 1, GEMM 2
};
// Workspace bytes per padded row when a plugin runs the GEMMs: xg (= y), h, scale, row maps.
int64_t plugin_row_bytes(const MoeSpec& spec);
using GemmPluginFactory = std::function<std::unique_ptr<GemmPlugin>(const LayerWeights&)>;
// A plugin's own code layout: rewrites one prepared matrix (w13 or w2 of one expert) in place
// before it is uploaded. Called from the upload workers, several at once: a pure function of
// its argument. Only together with a plugin (the portable GEMMs read the plain layout).
using PrepareHook = std::function<void(PreparedMatrix&)>;
// The portable layer; `plugin`, if given, is called once after the weights are on the device.
std::unique_ptr<PreparedLayer> make_layer(const MoeSpec& spec, const WeightSource& weights, int device,
                                          const GemmPluginFactory& plugin = nullptr,
                                          const PrepareHook& repack = nullptr);

}  // namespace moeforge::portable
