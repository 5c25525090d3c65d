// The sm90 backend: the portable pipeline (weights, routing, permutation, combine) with
// Hopper TMA + wgmma GEMMs for every batch size. Per chunk, all stream-ordered, no host
// synchronization (CUDA-graph capturable):
//   gather  (stage "permute") x rows into expert order + per-row epilogue scale
//   gemm1   h = act(xg W13^T)      activation fused
//   gemm2   y = scale * (h W2^T)   routing weight fused, bf16
// with, per the planner (plan.cpp), either the wide GEMMs (grouped_gemm.cuh: persistent,
// 128 x 256 tiles) or the decode GEMMs (decode_gemm.cuh: weights streamed once per 16-64 tokens).
// Tensor maps: the weights' at prepare (once), the workspace's per chunk (host encode, by
// value into the launch); see tensor_map.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "backends/backend.hpp"
#include "backends/portable/portable.hpp"
#include "backends/sm90/sm90.hpp"
#include "moeforge/errors.hpp"
#include "runtime/driver.hpp"
#include "runtime/settings.hpp"

namespace moeforge {
namespace sm90 {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class Sm90Gemms final : public portable::GemmPlugin {
 public:
  Sm90Gemms(const MoeSpec& spec, int device, const portable::LayerWeights& w) : spec_(spec), codes_(codes(spec)) {
    const rt::DeviceInfo& info = rt::cached_device_info(device);
    sm_count_ = info.sm_count;
    const bool w8a8 = codes_ == Codes::W8A8;
    gather_ = &rt::load_kernel(device, gather_kernel(spec, w8a8 ? GatherOrder::QuantFp8 : GatherOrder::Natural));
    gather_permuted_ =
        permuted_k(codes_) ? &rt::load_kernel(device, gather_kernel(spec, GatherOrder::PermutedK)) : gather_;
    if (w8a8) {
      quantize_ = &rt::load_kernel(device, quantize_kernel(spec.intermediate, false));
      gather_tiled_ = &rt::load_kernel(device, gather_kernel(spec, GatherOrder::QuantFp8Tiled));
    }
    gemm1_ = &rt::load_kernel(device, gemm_kernel(spec, 1));
    gemm2_ = &rt::load_kernel(device, gemm_kernel(spec, 2));
    for (size_t i = 0; i < std::size(kDecodeTiles); ++i)
      for (int stage : {1, 2})
        decode_[i][stage - 1] = &rt::load_kernel(device, decode_kernel(spec, stage, kDecodeTiles[i]));
    for (int stage : {1, 2}) {
      stream_k_[stage - 1] = &rt::load_kernel(device, decode_kernel(spec, stage, kStreamKTokens, true));
      fixup_[stage - 1] = &rt::load_kernel(device, decode_fixup_kernel(spec, stage));
    }
    const uint64_t et = uint64_t(spec.num_experts + spec.num_shared_experts);
    const uint64_t H = uint64_t(spec.hidden), I = uint64_t(spec.intermediate);
    const uint64_t kp13 = uint64_t(portable::padded_k(int64_t(H))), kp2 = uint64_t(portable::padded_k(int64_t(I)));
    if (codes_ == Codes::W8 || w8a8) {
      // Codes [E+S][N][KP] bytes; scales [E+S][KP/128][N] f32 (layout.cpp). Decode: boxes of 128
      // rows x 128 K (128B-swizzled codes) and 128 scales; wide: 256 rows and 256 scales, the
      // codes 64 K plain (W8A16, w8a16.cuh) or 128 K 128B-swizzled (W8A8, fp8_gemm.cuh).
      const uint32_t k = decode_stage_k(codes_), rows = kDecodeRows;
      const uint64_t kb13 = (kp13 + 127) / 128, kb2 = (kp2 + 127) / 128;
      w13_rows_map_ = encode_u8(w.w13, {kp13, et * 2 * I}, {k, rows}, true, "w13 codes");
      w2_rows_map_ = encode_u8(w.w2, {kp2, et * H}, {k, rows}, true, "w2 codes");
      w13_scales_map_ = encode_f32(w.w13_scales, {2 * I, kb13, et}, {rows, 1, 1}, "w13 scales");
      w2_scales_map_ = encode_f32(w.w2_scales, {H, kb2, et}, {rows, 1, 1}, "w2 scales");
      const uint32_t wide_k = w8a8 ? 128 : kBK;
      w13_map_ = encode_u8(w.w13, {kp13, et * 2 * I}, {wide_k, kBN}, w8a8, "w13 codes");
      w2_map_ = encode_u8(w.w2, {kp2, et * H}, {wide_k, kBN}, w8a8, "w2 codes");
      w13_wide_scales_map_ = encode_f32(w.w13_scales, {2 * I, kb13, et}, {kBN, 1, 1}, "w13 scales");
      w2_wide_scales_map_ = encode_f32(w.w2_scales, {H, kb2, et}, {kBN, 1, 1}, "w2 scales");
      return;
    }
    if (codes_ == Codes::W4) {
      // Codes [E+S][N][K/2] bytes; scales [E+S][K/32][N][2] bytes (layout.cpp). Decode: boxes
      // of 128 rows x 256 K (128B-swizzled codes); wide: 256 rows x 64 K (scales in two boxes
      // of 128 rows).
      const uint32_t k = decode_stage_k(codes_), rows = kDecodeRows, scale_box = 2 * 128;
      w13_rows_map_ = encode_u8(w.w13, {kp13 / 2, et * 2 * I}, {k / 2, rows}, true, "w13 codes");
      w2_rows_map_ = encode_u8(w.w2, {kp2 / 2, et * H}, {k / 2, rows}, true, "w2 codes");
      w13_scales_map_ =
          encode_u8(w.w13_scales, {2 * 2 * I, kp13 / 32, et}, {scale_box, k / 32, 1}, false, "w13 scales");
      w2_scales_map_ = encode_u8(w.w2_scales, {2 * H, kp2 / 32, et}, {scale_box, k / 32, 1}, false, "w2 scales");
      w13_map_ = encode_u8(w.w13, {kp13 / 2, et * 2 * I}, {kBK / 2, kBN}, false, "w13 codes");
      w2_map_ = encode_u8(w.w2, {kp2 / 2, et * H}, {kBK / 2, kBN}, false, "w2 codes");
      w13_wide_scales_map_ = encode_u8(w.w13_scales, {2 * 2 * I, kp13 / 32, et}, {scale_box, kBK / 32, 1}, false,
                                       "w13 scales");
      w2_wide_scales_map_ = encode_u8(w.w2_scales, {2 * H, kp2 / 32, et}, {scale_box, kBK / 32, 1}, false, "w2 scales");
      g13_ = w.g13;
      g2_ = w.g2;
      return;
    }
    w13_map_ = encode_bf16_2d(w.w13, kp13, et * 2 * I, kp13 * 2, kBN, "w13");
    w2_map_ = encode_bf16_2d(w.w2, kp2, et * H, kp2 * 2, kBN, "w2");
    w13_rows_map_ = encode_bf16_2d(w.w13, kp13, et * 2 * I, kp13 * 2, kDecodeRows, "w13");
    w2_rows_map_ = encode_bf16_2d(w.w2, kp2, et * H, kp2 * 2, kDecodeRows, "w2");
    // Unused by the bf16 kernels (any valid map).
    w13_scales_map_ = w13_wide_scales_map_ = w13_rows_map_;
    w2_scales_map_ = w2_wide_scales_map_ = w2_rows_map_;
  }

  int bm() const override { return kBM; }
  // The tile counters (256 bytes), then the stream-K slots and split entries.
  int64_t scratch_bytes() const override { return 256 + stream_k_scratch_bytes(sm_count_); }

  void run(const portable::PluginChunk& c) const override {
    const Plan p = plan(spec_, c.tokens);
    if (codes_ == Codes::W8A8 && p.wide) return run_w8a8(c);
    // The W4A16 / W8A16 decode GEMMs read x in their permuted K order, the rest in natural order.
    const rt::LoadedKernel& gather = (permuted_k(codes_) && !p.wide) ? *gather_permuted_ : *gather_;
    launch_gather(gather, c);
    if (p.wide) run_wide(c);
    else run_decode(c, p.bt);
  }

 private:
  void run_decode(const portable::PluginChunk& c, int bt) const {
    const uint64_t H = uint64_t(spec_.hidden), I = uint64_t(spec_.intermediate), rows = uint64_t(c.rows_bound);
    int ti = 0;
    while (kDecodeTiles[ti] != bt) ++ti;
    // Token operands: bf16 rows, or (W8A8) the quantized rows' codes (box {128 B, bt rows},
    // swizzled) and scales (box {4 floats, bt rows}, from float k_scale0 = K / 4 of each row).
    const bool a8 = codes_ == Codes::W8A8;
    struct TokenMaps {
      CUtensorMap x, xs;
      int k_scale0;
    };
    auto token_maps = [&](CUdeviceptr p, uint64_t k, const char* what, const char* what_scales) {
      if (!a8) {
        const CUtensorMap x = encode_bf16_2d(p, k, rows, k * 2, uint32_t(bt), what);
        return TokenMaps{x, x, 0};
      }
      return TokenMaps{encode_u8(p, {2 * k, rows}, {128, uint32_t(bt)}, true, what),
                       encode_f32(p, {k / 2, rows}, {4, uint32_t(bt)}, what_scales), int(k / 4)};
    };
    const TokenMaps xg = token_maps(c.xg, H, "gathered x", "gathered x scales");
    const TokenMaps h = token_maps(c.h, I, "h", "h scales");
    // Persistent grid: as many CTAs as fit the SMs at once (two or one each), fewer when there
    // are fewer (expert with rows, weight tile) items; at most T * k + S experts have rows.
    const int64_t et = spec_.num_experts + spec_.num_shared_experts;
    const int64_t experts = std::clamp<int64_t>(c.tokens * spec_.topk + spec_.num_shared_experts, 1, et);
    const int64_t slots = int64_t(decode_ctas_per_sm(bt)) * sm_count_;
    auto grid = [&](int64_t n) {
      return rt::Dim3{unsigned(std::min<int64_t>(slots, experts * ceil_div(n, kDecodeRows)))};
    };
    const unsigned smem = unsigned(decode_launch_smem_bytes(bt, codes_, int(et)));
    const int64_t ks = decode_stage_k(codes_);
    // Stream-K (decode_gemm.cuh) when the call fits one 16-token tile and whole units would leave
    // the SMs unevenly filled (stream_k_pays): every slot takes an equal range of the (unit,
    // k-block) tasks, then the fixup stores the units it split. Its slots and split entries follow
    // the tile counters in the call's scratch (scratch_bytes).
    const int k1 = int(ceil_div(int64_t(H), ks)), k2 = int(ceil_div(int64_t(I), ks));
    auto use_stream_k = [&](int n, int k_blocks) {
      const int64_t units = experts * ceil_div(int64_t(n), kDecodeRows);
      const int forced = rt::settings().sm90_stream_k;  // -1: the rule (a measuring knob)
      return bt == kStreamKTokens && c.tokens <= kStreamKTokens && units * k_blocks < (int64_t(1) << 31) &&
             (forced < 0 ? stream_k_pays(units, sm_count_) : forced == 1);
    };
    const CUdeviceptr partial = c.scratch + 256;
    const CUdeviceptr split = partial + CUdeviceptr(stream_k_partial_bytes(sm_count_));
    const rt::Dim3 sk_grid{unsigned(slots)};
    auto gemm = [&](int g, const CUtensorMap& w, const CUtensorMap& s, const TokenMaps& x, CUdeviceptr gscale,
                    CUdeviceptr row_scale, CUdeviceptr out, int n, int k_blocks, const char* stage) {
      const bool stream_k = use_stream_k(n, k_blocks);
      const rt::LoadedKernel& k = stream_k ? *stream_k_[g] : *decode_[ti][g];
      rt::launch_with(k, stream_k ? sk_grid : grid(n), {unsigned(kThreads)}, smem, c.stream, stage, w, s, x.x, x.xs,
                      gscale, c.counts, c.seg_off, row_scale, out, n, k_blocks, x.k_scale0, partial, split);
      if (stream_k)
        rt::launch_with(*fixup_[g], sk_grid, {256}, 0, c.stream, stage, partial, split, gscale, c.counts, c.seg_off,
                        row_scale, out);
    };
    gemm(0, w13_rows_map_, w13_scales_map_, xg, g13_, CUdeviceptr(0), c.h, int(2 * I), k1, "gemm1");
    if (a8)  // h quantized in place for GEMM 2, as between the wide QGMMA GEMMs
      rt::launch_with(*quantize_, {unsigned(c.tile_bound), kGatherSplit}, {unsigned(kGatherThreads)}, 0, c.stream,
                      "gemm2", c.h, c.counts, c.seg_off, c.num_tiles, c.tile_expert);
    gemm(1, w2_rows_map_, w2_scales_map_, h, g2_, c.scale, c.y, int(H), k2, "gemm2");
  }

  void run_wide(const portable::PluginChunk& c) const {
    const uint64_t H = uint64_t(spec_.hidden), I = uint64_t(spec_.intermediate), rows = uint64_t(c.rows_bound);
    const int tile_bound = int(c.tile_bound);

    const CUtensorMap xg = encode_bf16_2d(c.xg, H, rows, H * 2, kBM, "gathered x");
    const CUtensorMap h_in = encode_bf16_2d(c.h, I, rows, I * 2, kBM, "h");
    const CUtensorMap h_out = encode_bf16_2d(c.h, I, rows, I * 2, kEpiBox, "h");
    const CUtensorMap y_out = encode_bf16_2d(c.y, H, rows, H * 2, kEpiBox, "y");
    const CUdeviceptr no_scale = 0;

    const int n1 = int(ceil_div(int64_t(2 * I), kBN)), n2 = int(ceil_div(int64_t(H), kBN));
    const int kb1 = int(ceil_div(int64_t(H), kBK)), kb2 = int(ceil_div(int64_t(I), kBK));
    const unsigned smem = unsigned(wide_smem_bytes(codes_));
    rt::launch_with(*gemm1_, {grid(tile_bound, n1)}, {unsigned(kThreads)}, smem, c.stream, "gemm1", xg, w13_map_, h_out,
                    w13_wide_scales_map_, g13_, c.tile_expert, c.counts, c.seg_off, counter(c, 0), c.num_tiles,
                    tile_bound, no_scale, n1, int(2 * I), kb1);
    rt::launch_with(*gemm2_, {grid(tile_bound, n2)}, {unsigned(kThreads)}, smem, c.stream, "gemm2", h_in, w2_map_,
                    y_out, w2_wide_scales_map_, g2_, c.tile_expert, c.counts, c.seg_off, counter(c, 1), c.num_tiles,
                    tile_bound, c.scale, n2, int(H), kb2);
  }

  // FP8 x FP8 (fp8_gemm.cuh): x quantized by the gather into the gathered-x buffer, h by GEMM 1's
  // epilogue into the h buffer; each row's codes in its bf16 row's first half, the scales of
  // each 32 rows transposed in the second half of the first of them (sm90/quantize.cuh).
  void run_w8a8(const portable::PluginChunk& c) const {
    const uint64_t H = uint64_t(spec_.hidden), I = uint64_t(spec_.intermediate), rows = uint64_t(c.rows_bound);
    const int tile_bound = int(c.tile_bound);
    launch_gather(*gather_tiled_, c);
    // A operands: codes box {128 B, 128 rows} (swizzled); scales over the 32-row groups (a map
    // row: 32 bf16 rows of k values, 16 k floats), a tile's k-block a box {32 floats, 4 groups}
    // (sm90/quantize.cuh, SCALES_TILED; rows is a multiple of 128).
    auto codes_map = [&](CUdeviceptr p, uint64_t k, const char* what) {
      return encode_u8(p, {2 * k, rows}, {128, 128}, true, what);
    };
    auto scales_map = [&](CUdeviceptr p, uint64_t k, const char* what) {
      return encode_f32(p, {16 * k, rows / 32}, {32, 4}, what);
    };
    const CUtensorMap xq = codes_map(c.xg, H, "x codes"), xs = scales_map(c.xg, H, "x scales");
    const CUtensorMap hq = codes_map(c.h, I, "h codes"), hs = scales_map(c.h, I, "h scales");
    // The epilogues store h (its codes and scales) and y from the accumulators (no store maps).
    const int n1 = int(ceil_div(int64_t(2 * I), kBNW8A8)), n2 = int(ceil_div(int64_t(H), kBNW8A8));
    const int kb1 = int(H / 128), kb2 = int(I / 128);
    const unsigned smem = unsigned(kSmemBytesW8A8);
    const CUdeviceptr no_scale = 0;
    rt::launch_with(*gemm1_, {grid(tile_bound, n1)}, {unsigned(kThreads)}, smem, c.stream, "gemm1", xq, xs,
                    w13_map_, w13_wide_scales_map_, c.h, int(I), c.tile_expert, c.counts, c.seg_off, counter(c, 0),
                    c.num_tiles, tile_bound, no_scale, n1, int(2 * I), kb1, int(H / 4));
    rt::launch_with(*gemm2_, {grid(tile_bound, n2)}, {unsigned(kThreads)}, smem, c.stream, "gemm2", hq, hs,
                    w2_map_, w2_wide_scales_map_, c.y, int(H), c.tile_expert, c.counts, c.seg_off, counter(c, 1), c.num_tiles,
                    tile_bound, c.scale, n2, int(H), kb2, int(I / 4));
  }

  // sm90/gather.cuh: token-major blocks, then one block per tile for the rows' scales.
  static void launch_gather(const rt::LoadedKernel& gather, const portable::PluginChunk& c) {
    const unsigned token_blocks = unsigned(ceil_div(c.tokens, kGatherWarps));
    rt::launch_with(gather, {token_blocks + unsigned(c.tile_bound)}, {unsigned(kGatherThreads)}, 0, c.stream,
                    "permute", c.x, int(c.tokens), c.row_of, c.counts, c.seg_off, c.num_tiles, c.tile_expert,
                    c.row_weight, c.xg, c.scale, c.scratch);
  }

  // GEMM g's tile claim counter (sm90/tiles.cuh) in the call's scratch, zeroed by the gather.
  static CUdeviceptr counter(const portable::PluginChunk& c, int g) { return c.scratch + CUdeviceptr(4 * g); }

  // Persistent: one CTA per SM at most (the tile count is only known on the device).
  unsigned grid(int tile_bound, int n_tiles) const {
    return unsigned(std::max<int64_t>(1, std::min<int64_t>(sm_count_, int64_t(tile_bound) * n_tiles)));
  }

  MoeSpec spec_;
  Codes codes_ = Codes::BF16;  // NVFP4 / FP8: W4A16 / W8A16 decode GEMMs, dequantizing wide GEMMs
  int sm_count_ = 0;
  const rt::LoadedKernel *gather_ = nullptr, *gather_permuted_ = nullptr, *gemm1_ = nullptr, *gemm2_ = nullptr;
  const rt::LoadedKernel* quantize_ = nullptr;  // W8A8: h in place between the QGMMA GEMMs
  // W8A8's wide path: the gather that stores the scales tiled (quantize.cuh; GEMM 1 quantizes h).
  const rt::LoadedKernel* gather_tiled_ = nullptr;
  const rt::LoadedKernel* decode_[std::size(kDecodeTiles)][2] = {};  // [kDecodeTiles index][gemm1, gemm2]
  const rt::LoadedKernel* stream_k_[2] = {};  // the 16-token tile's stream-K decode GEMMs
  const rt::LoadedKernel* fixup_[2] = {};     // and their fixups
  CUtensorMap w13_map_{}, w2_map_{};           // boxes of 256 weight rows (wide; w4, w8: their codes)
  CUtensorMap w13_wide_scales_map_{}, w2_wide_scales_map_{};  // w4, w8: the wide GEMMs' scale boxes
  CUtensorMap w13_rows_map_{}, w2_rows_map_{}; // boxes of 128 weight rows (decode; w4, w8: their codes)
  CUtensorMap w13_scales_map_{}, w2_scales_map_{};  // w4: the codes' e4m3 scales; w8: f32 scales
  CUdeviceptr g13_ = 0, g2_ = 0;                     // w4: the global scales
};

class Sm90Backend final : public Backend {
 public:
  std::string_view name() const override { return "sm90"; }
  bool needs_gpu() const override { return true; }
  int priority() const override { return 2; }

  std::string why_not(const MoeSpec& spec, const rt::DeviceInfo* device) const override {
    if (device == nullptr) return "no CUDA device";
    if (device->target != kTarget)
      return fmt::format("{} is {}; the TMA/wgmma kernels are built for {} only", device->name, device->target,
                         kTarget);
    if (device->smem_per_sm != kSmemPerSm)
      return fmt::format("{} has {} bytes of shared memory per SM; the decode GEMMs' occupancy is set for {}",
                         device->name, device->smem_per_sm, kSmemPerSm);
    if (std::string r = spec_unsupported(spec); !r.empty()) return r;
    if (std::string r = portable_backend().why_not(pipeline_spec(spec), device); !r.empty())
      return "portable pipeline: " + r;
    for (const rt::KernelSpec& k : own_kernels(spec))  // the portable ones: checked just above
      if (std::string v = rt::budget_violation(k, *device); !v.empty()) return v;
    return "";
  }

  std::unique_ptr<PreparedLayer> prepare(const MoeSpec& spec, const std::shared_ptr<const WeightSource>& weights,
                                         int device) const override {
    spec.validate();
    if (std::string r = spec_unsupported(spec); !r.empty()) throw Unsupported("sm90: " + r);
    if (!weights) throw InvalidArgument("weights", "null weight source");
    // NVFP4 codes and scales are uploaded in the W4 kernels' own layout (w4_layout.cpp).
    const portable::PrepareHook repack = codes(spec) == Codes::W4 ? portable::PrepareHook(pack_w4) : nullptr;
    return portable::make_layer(
        spec, *weights, device,
        [&](const portable::LayerWeights& w) { return std::make_unique<Sm90Gemms>(spec, device, w); }, repack);
  }

  std::vector<rt::KernelSpec> kernels(const MoeSpec& spec) const override {
    if (!spec_unsupported(spec).empty()) return {};
    return all_kernels(spec);
  }

  std::string gemm_plan(const MoeSpec& spec, int64_t tokens) const override {
    const Plan p = plan(spec, tokens);
    const Codes c = codes(spec);
    const char* w = c == Codes::W4     ? "nvfp4 W4A16, "
                    : c == Codes::W8   ? "fp8 W8A16, "
                    : c == Codes::W8A8 ? "fp8 W8A8 QGMMA, "
                                       : "";
    // Every wide GEMM's tile is kBM x 256 (the W8A8 ones since 9c89ab3: kBNW8A8).
    static_assert(kBN == kBNW8A8, "the label names one wide tile for every format");
    return p.wide ? fmt::format("wide GEMMs ({}{}x{} tiles)", w, kBM, kBN)
                  : fmt::format("decode GEMMs ({}{}-token tiles)", w, p.bt);
  }

  std::vector<int64_t> self_test_tokens(const MoeSpec& test_spec) const override {
    // A size in each of the planner's ranges (in rows per expert: the decode GEMMs' rule tiles
    // below l, their 128-token tile from l, the wide GEMMs from the crossover c; either may be
    // infinite): about min(c, l) / 2 (odd, at most 37 tokens), l + 17 where l < c, and c + 17
    // (at most 8193 tokens), the first timed.
    const double per_row = double(test_spec.num_experts) / test_spec.topk;
    const double c = crossover_rows(test_spec), l = large_tile_rows(test_spec);
    auto tokens = [&](double rows) { return std::min<int64_t>(8193, int64_t(rows * per_row)) | 1; };
    std::vector<int64_t> t;
    if (c > 0) t.push_back(std::min<int64_t>(37, std::max<int64_t>(1, int64_t(std::min(c, l) / 2 * per_row)) | 1));
    if (l < c) t.push_back(tokens(l + 17));
    if (std::isfinite(c)) t.push_back(tokens(c + 17));
    return t;
  }
};

}  // namespace
}  // namespace sm90

const Backend& sm90_backend() {
  static const sm90::Sm90Backend backend;
  return backend;
}

}  // namespace moeforge
