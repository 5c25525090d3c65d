// The portable GPU backend: mma.sync kernels compiled for the exact target of any
// GPU from sm_80 up. The GPU reference for the fast paths and the fallback everywhere.
//
// forward() per call (everything stream-ordered on call.stream, no host sync unless the
// caller passed precomputed ids and the stream is not capturing):
//   workspace = cuMemAllocAsync (one block, carved), freed by cuMemFreeAsync at the end
//   for each chunk of tokens (chunks bound the workspace: 1/16 of the device's memory, 1-16 GiB):
//     route | validate_ids  -> ids [Tc, k] i32 (+ weights)
//     permute               -> counts, padded segment offsets, tile list, row maps
//                              (Tc <= 8 with router logits: route and permute in one launch)
//     gemm1                 -> h [rows, I] bf16 (gated activation fused; x rows gathered by token)
//     gemm2                 -> y [rows, H] f32 (bias, routing weight fused)
//     combine               -> out rows in slot order (+ shared experts), x's dtype
// With a GEMM plugin (the sm90 backend), the two GEMMs are its own (gather -> gemm1 ->
// gemm2, y in bf16, its planner choosing per chunk) on segments padded to its M tile.
// y is kept in f32: the only roundings after the f32 accumulators are h -> bf16 (needed
// as the next GEMM operand) and out -> bf16; a bf16 y would add a third rounding of the
// same size (~2^-9 relative) before the k-way sum.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "backends/backend.hpp"
#include "backends/device_buffer.hpp"
#include "backends/portable/portable.hpp"
#include "moeforge/errors.hpp"
#include "runtime/driver.hpp"

namespace moeforge {
namespace portable {

std::string spec_unsupported(const MoeSpec& spec) {
  if (spec.activation_format != ActivationFormat::BF16)
    return fmt::format("activation format {} (the portable backend computes with bf16 activations)",
                       to_string(spec.activation_format));
  if (spec.num_experts > kMaxExperts) return fmt::format("{} experts (at most {})", spec.num_experts, kMaxExperts);
  if (spec.topk > kMaxTopk) return fmt::format("top-{} routing (at most {})", spec.topk, kMaxTopk);
  if (spec.routing.kind != RoutingKind::Softmax && spec.routing.n_groups > kMaxGroups)
    return fmt::format("{} expert groups (at most {})", spec.routing.n_groups, kMaxGroups);
  if (spec.num_shared_experts > 0 && spec.shared_intermediate != spec.intermediate)
    return fmt::format("shared_intermediate {} != intermediate {} (shared experts run as extra experts)",
                       spec.shared_intermediate, spec.intermediate);
  if (spec.hidden % 8 != 0 || spec.intermediate % 8 != 0) return "hidden and intermediate must be multiples of 8";
  if (spec.num_experts + spec.num_shared_experts + spec.topk > 4096) return "too many experts";
  return "";
}

ChunkPlan plan_chunk(const MoeSpec& spec, int64_t tokens, int bm, int64_t row_bytes, int64_t budget) {
  const int64_t k = spec.topk, S = spec.num_shared_experts;
  const int64_t e_total = spec.num_experts + S;
  const int64_t fixed = e_total * (bm - 1) * row_bytes;
  const int64_t per_token = (k + S) * row_bytes + k * 12;
  int64_t tc = std::max<int64_t>(4096, (budget - fixed) / per_token);
  tc = std::min<int64_t>(tc, (int64_t(1) << 30) / (k + S));  // rows stay far below 2^31
  ChunkPlan p;
  p.tokens = std::min(tokens, tc);
  // Each segment pads to bm, and only experts with rows have a segment: at most T * k routed
  // ones (and E) plus the S shared ones. At T = 1 that is 5 tiles, not E + S (the gather and
  // GEMM grids are this bound).
  const int64_t with_rows = std::min(e_total, p.tokens * k + S);
  p.rows_bound = p.tokens * (k + S) + with_rows * (bm - 1);
  p.tile_bound = (p.rows_bound + bm - 1) / bm;
  return p;
}

ChunkPlan plan_chunk(const MoeSpec& spec, int64_t tokens, const TileConfig& c, int64_t budget) {
  return plan_chunk(spec, tokens, c.bm, spec.intermediate * 2 + spec.hidden * 4 + 8, budget);
}

int64_t workspace_budget(const rt::DeviceInfo& device) {
  return std::clamp<int64_t>(device.total_mem / 16, int64_t(1) << 30, int64_t(16) << 30);
}

int64_t plugin_row_bytes(const MoeSpec& spec) { return spec.hidden * 2 + spec.intermediate * 2 + 4 + 8; }

namespace {


// Bytes of one prepared [rows, cols] matrix and of its scales (mirrors layout.cpp).
std::pair<int64_t, int64_t> prepared_bytes(WeightFormat f, int64_t rows, int64_t cols) {
  const int64_t kp = padded_k(cols);
  switch (f) {
    case WeightFormat::BF16:
    case WeightFormat::FP16: return {rows * kp * 2, 0};
    case WeightFormat::FP8_Block128: return {rows * kp, (cols + 127) / 128 * rows * 4};
    case WeightFormat::NVFP4: return {rows * kp / 2, kp / kBK * rows * 2};
    case WeightFormat::MXFP4: return {rows * kp / 2, kp / kBK * rows};
  }
  return {0, 0};
}

unsigned u32_of(int64_t v) { return static_cast<unsigned>(v); }

class PortableLayer final : public PreparedLayer {
 public:
  PortableLayer(const MoeSpec& spec, const WeightSource& weights, int device, const GemmPluginFactory& plugin,
                const PrepareHook& repack)
      : spec_(spec), device_(device) {
    if (repack && !plugin) throw InternalError("make_layer: a prepare hook without a GEMM plugin");
    rt::use_device(device);
    info_ = rt::cached_device_info(device);
    load_kernels();
    upload(weights, repack);
    if (plugin) {
      plugin_ = plugin(LayerWeights{w13_.ptr(), w2_.ptr(), w13s_.ptr(), w2s_.ptr(), g13_.ptr(), g2_.ptr()});
      combine_y_bf16_ = &rt::load_kernel(device_, combine_kernel(spec_, DType::bf16, true));
    }
  }

  void forward(const ForwardCall& call) const override;

 private:
  void load_kernels();
  void upload(const WeightSource& weights, const PrepareHook& repack);

  MoeSpec spec_;
  int device_;
  rt::DeviceInfo info_;
  // Weights in the kernels' layout, experts 0..E-1 then the shared experts.
  DeviceBuffer w13_, w13s_, w2_, w2s_, g13_, g2_, b13_, b2_, corr_;
  const rt::LoadedKernel* route_[2] = {};     // logits f32, bf16
  const rt::LoadedKernel* route_permute_[2] = {};  // route_ and permute_small_ in one launch
  const rt::LoadedKernel* validate_[2] = {};  // ids i32, i64
  const rt::LoadedKernel *count_ = nullptr, *scan_ = nullptr, *scatter_ = nullptr, *combine_ = nullptr;
  const rt::LoadedKernel* permute_small_ = nullptr;  // the three above in one launch, one chunk
  const rt::LoadedKernel* gemm_[2][2] = {};   // [small, large][gemm1, gemm2]; null = does not fit
  std::unique_ptr<GemmPlugin> plugin_;         // null: portable GEMMs only
  const rt::LoadedKernel* combine_y_bf16_ = nullptr;
};

void PortableLayer::load_kernels() {
  route_[0] = &rt::load_kernel(device_, route_kernel(spec_, DType::f32));
  route_[1] = &rt::load_kernel(device_, route_kernel(spec_, DType::bf16));
  route_permute_[0] = &rt::load_kernel(device_, route_permute_kernel(spec_, DType::f32));
  route_permute_[1] = &rt::load_kernel(device_, route_permute_kernel(spec_, DType::bf16));
  validate_[0] = &rt::load_kernel(device_, validate_ids_kernel(spec_, DType::i32));
  validate_[1] = &rt::load_kernel(device_, validate_ids_kernel(spec_, DType::i64));
  count_ = &rt::load_kernel(device_, permute_kernel(spec_, "moe_count"));
  scan_ = &rt::load_kernel(device_, permute_kernel(spec_, "moe_scan"));
  scatter_ = &rt::load_kernel(device_, permute_kernel(spec_, "moe_scatter"));
  permute_small_ = &rt::load_kernel(device_, permute_kernel(spec_, "moe_permute_small"));
  combine_ = &rt::load_kernel(device_, combine_kernel(spec_, DType::bf16));
  const TileConfig* cfgs[2] = {&kSmallTile, &kLargeTile};
  for (int c = 0; c < 2; ++c) {
    const rt::KernelSpec k1 = gemm_kernel(spec_, 1, *cfgs[c]), k2 = gemm_kernel(spec_, 2, *cfgs[c]);
    if (!rt::budget_violation(k1, info_).empty() || !rt::budget_violation(k2, info_).empty()) continue;
    gemm_[c][0] = &rt::load_kernel(device_, k1);
    gemm_[c][1] = &rt::load_kernel(device_, k2);
  }
  if (!gemm_[0][0] && !gemm_[1][0]) throw Unsupported("portable: no GEMM tile configuration fits " + info_.name);
}

void PortableLayer::upload(const WeightSource& weights, const PrepareHook& repack) {
  const int64_t E = spec_.num_experts, S = spec_.num_shared_experts, et = E + S;
  const int64_t H = spec_.hidden, I = spec_.intermediate;
  const WeightFormat f = spec_.weight_format;
  const auto [d13, s13] = prepared_bytes(f, 2 * I, H);
  const auto [d2, s2] = prepared_bytes(f, H, I);
  w13_ = DeviceBuffer(device_, size_t(et * d13));
  w2_ = DeviceBuffer(device_, size_t(et * d2));
  if (s13) w13s_ = DeviceBuffer(device_, size_t(et * s13));
  if (s2) w2s_ = DeviceBuffer(device_, size_t(et * s2));
  std::vector<float> g13(size_t(et), 1.0f), g2(size_t(et), 1.0f);
  std::vector<float> b13, b2;
  if (spec_.expert_bias) {
    b13.assign(size_t(et * 2 * I), 0.0f);
    b2.assign(size_t(et * H), 0.0f);
  }

  auto check = [&](const QuantMatrix& m, const char* name, int64_t rows, int64_t cols) {
    if (m.format != f || m.rows != rows || m.cols != cols)
      throw InvalidArgument(name, fmt::format("expected {} [{}, {}], got {} [{}, {}]", to_string(f), rows, cols,
                                              to_string(m.format), m.rows, m.cols));
  };
  // Experts are fetched, transformed and uploaded by a few workers, one expert each at a
  // time: the host never holds more than `workers` experts.
  std::atomic<int64_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  auto work = [&] {
    try {
      rt::use_device(device_);
      for (int64_t e; (e = next.fetch_add(1)) < et;) {
        {
          std::lock_guard<std::mutex> lk(mu);
          if (error) return;
        }
        const ExpertWeights ew = e < E ? weights.expert(e) : weights.shared_expert(int(e - E));
        check(ew.w13, e < E ? "w13" : "shared w13", 2 * I, H);
        check(ew.w2, e < E ? "w2" : "shared w2", H, I);
        PreparedMatrix p13 = prepare_matrix(ew.w13, true), p2 = prepare_matrix(ew.w2, false);
        if (repack) {
          repack(p13);
          repack(p2);
        }
        if (int64_t(p13.data.size()) != d13 || int64_t(p13.scales.size()) != s13 ||
            int64_t(p2.data.size()) != d2 || int64_t(p2.scales.size()) != s2)
          throw InternalError("portable: prepared layout size mismatch");
        w13_.upload(p13.data.data(), size_t(d13), size_t(e * d13));
        w2_.upload(p2.data.data(), size_t(d2), size_t(e * d2));
        if (s13) w13s_.upload(p13.scales.data(), size_t(s13), size_t(e * s13));
        if (s2) w2s_.upload(p2.scales.data(), size_t(s2), size_t(e * s2));
        g13[size_t(e)] = p13.global_scale;
        g2[size_t(e)] = p2.global_scale;
        if (spec_.expert_bias && e < E) {
          if (int64_t(ew.b13.size()) != 2 * I || int64_t(ew.b2.size()) != H)
            throw InvalidArgument("bias", fmt::format("expert {}: expected b13 [{}] and b2 [{}]", e, 2 * I, H));
          const std::vector<float> bi = interleave_bias(ew.b13, I);
          std::copy(bi.begin(), bi.end(), b13.begin() + e * 2 * I);
          std::copy(ew.b2.begin(), ew.b2.end(), b2.begin() + e * H);
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      if (!error) error = std::current_exception();
    }
  };
  const int64_t workers = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::min<int64_t>(8, et));
  std::vector<std::thread> pool;
  for (int64_t i = 1; i < workers; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);

  g13_ = DeviceBuffer::from_host(device_, g13);
  g2_ = DeviceBuffer::from_host(device_, g2);
  if (spec_.expert_bias) {
    b13_ = DeviceBuffer::from_host(device_, b13);
    b2_ = DeviceBuffer::from_host(device_, b2);
  }
  if (spec_.routing.kind == RoutingKind::SigmoidBiasGrouped) {
    const std::vector<float> cb = weights.correction_bias();
    if (!cb.empty()) {
      if (int64_t(cb.size()) != E)
        throw InvalidArgument("correction_bias", fmt::format("expected {} values, got {}", E, cb.size()));
      corr_ = DeviceBuffer::from_host(device_, cb);
    }
  }
}

std::atomic<int> g_workspace_fill{-1};  // set_workspace_fill

// A stream-ordered workspace: one cuMemAllocAsync, carved in 256-byte aligned pieces,
// released by cuMemFreeAsync on the same stream (also when a launch throws).
class Workspace {
 public:
  Workspace(size_t bytes, CUstream s) : stream_(s) {
    const size_t n = std::max<size_t>(bytes, 256);
    rt::check(rt::driver().cuMemAllocAsync(&base_, n, s), "cuMemAllocAsync (workspace)");
    if (const int fill = g_workspace_fill.load(std::memory_order_relaxed); fill >= 0)
      rt::check(rt::driver().cuMemsetD8Async(base_, static_cast<unsigned char>(fill), n, s), "workspace fill");
  }
  ~Workspace() {
    if (base_) rt::driver().cuMemFreeAsync(base_, stream_);
  }
  void release() {
    rt::check(rt::driver().cuMemFreeAsync(base_, stream_), "cuMemFreeAsync (workspace)");
    base_ = 0;
  }
  CUdeviceptr base() const { return base_; }

 private:
  CUdeviceptr base_ = 0;
  CUstream stream_;
};

struct Carver {
  size_t used = 0;
  size_t take(size_t bytes) {
    const size_t at = used;
    used += (bytes + 255) / 256 * 256;
    return at;
  }
};

void PortableLayer::forward(const ForwardCall& call) const {
  const TensorView& x = *call.x;
  const int64_t T = x.shape[0];
  if (T == 0) return;
  rt::use_device(device_);
  if (x.dtype != DType::bf16)
    throw Unsupported(fmt::format("portable: x must be bf16, got {}", dtype_name(x.dtype)));
  if (call.out->dtype != DType::bf16)
    throw InvalidArgument("out", fmt::format("expected dtype bf16 (x's dtype), got {}", dtype_name(call.out->dtype)));
  for (const TensorView* t : {call.x, call.router_logits, call.topk_ids, call.topk_weights, call.out})
    if (t && !t->is_contiguous()) throw InvalidArgument("tensor", "the portable backend needs contiguous tensors, got " + t->describe());
  const bool precomputed = call.router_logits == nullptr;
  if (!precomputed && call.router_logits->dtype != DType::f32 && call.router_logits->dtype != DType::bf16)
    throw InvalidArgument("router_logits", "expected f32 or bf16");
  if (precomputed && call.topk_ids->dtype != DType::i32 && call.topk_ids->dtype != DType::i64)
    throw InvalidArgument("topk_ids", "expected i32 or i64");

  const rt::Driver& d = rt::driver();
  const CUstream stream = call.stream;
  const rt::PdlScope pdl_scope(T <= kPdlMaxTokens);
  const int64_t E = spec_.num_experts, S = spec_.num_shared_experts, et = E + S, k = spec_.topk;
  const int64_t H = spec_.hidden, I = spec_.intermediate;

  const bool plugged = plugin_ != nullptr;
  const TileConfig& cfg = choose_tile(spec_, T, &info_);
  const int ci = &cfg == &kSmallTile ? 0 : 1;
  const rt::LoadedKernel* g1 = gemm_[ci][0];
  const rt::LoadedKernel* g2 = gemm_[ci][1];
  if (!g1 || !g2) throw InternalError("portable: chosen tile config was not loaded");
  const unsigned gsmem = unsigned(gemm_smem_bytes(cfg, spec_.weight_format));
  const int bm = plugged ? plugin_->bm() : cfg.bm;
  const int64_t budget = workspace_budget(info_);
  const ChunkPlan plan =
      plugged ? plan_chunk(spec_, T, bm, plugin_row_bytes(spec_), budget) : plan_chunk(spec_, T, cfg, budget);
  const int64_t tc = plan.tokens;
  const int64_t max_chunks = (tc * k + kPermuteChunk - 1) / kPermuteChunk;
  if (plan.tile_bound > info_.max_grid_x || (2 * I + cfg.bn - 1) / cfg.bn > info_.max_grid_y ||
      (H + cfg.bn - 1) / cfg.bn > info_.max_grid_y)
    throw Unsupported("portable: grid over the device's limits");

  Carver cv;
  const size_t o_ids = cv.take(size_t(tc * k * 4)), o_wts = cv.take(size_t(tc * k * 4)),
               o_row_of = cv.take(size_t(tc * k * 4)), o_cc = cv.take(size_t(max_chunks * E * 4)),
               o_counts = cv.take(size_t(et * 4)), o_seg = cv.take(size_t((et + 1) * 8)), o_ntiles = cv.take(4),
               o_bad = cv.take(8), o_tiles = cv.take(size_t(plan.tile_bound * 4)),
               o_rtok = cv.take(size_t(plan.rows_bound * 4)), o_rw = cv.take(size_t(plan.rows_bound * 4)),
               o_h = cv.take(size_t(plan.rows_bound * I * 2)),
               // plugged: y (bf16) reuses the gathered x, dead once GEMM 1 has run (stream order)
               o_y = cv.take(size_t(plan.rows_bound * H * (plugged ? 2 : 4))),
               o_scale = plugged ? cv.take(size_t(plan.rows_bound * 4)) : 0,
               o_scratch = plugged ? cv.take(size_t(plugin_->scratch_bytes())) : 0;
  Workspace ws(cv.used, stream);
  const CUdeviceptr b = ws.base();
  const CUdeviceptr ids = b + o_ids, wts = b + o_wts, row_of = b + o_row_of, cc = b + o_cc, counts = b + o_counts,
                    seg = b + o_seg, ntiles = b + o_ntiles, bad = b + o_bad, tiles = b + o_tiles, rtok = b + o_rtok,
                    rw = b + o_rw, hbuf = b + o_h, ybuf = b + o_y;
  if (precomputed) rt::check(d.cuMemsetD32Async(bad, 0xFFFFFFFFu, 2, stream), "cuMemsetD32Async");

  const CUdeviceptr xp = CUdeviceptr(x.data), outp = CUdeviceptr(call.out->data);
  const CUdeviceptr corr = corr_.ptr();
  const CUdeviceptr null = 0;
  for (int64_t t0 = 0; t0 < T; t0 += tc) {
    const int64_t n = std::min(tc, T - t0), entries = n * k;
    const int64_t nch = (entries + kPermuteChunk - 1) / kPermuteChunk;
    CUdeviceptr w_src = wts;
    const int nch_i = int(nch), n_i = int(n), tb = int(plan.tile_bound);
    // Decode-sized with router logits: routing and permutation in one launch (stage "route").
    const bool route_permutes = !precomputed && nch == 1 && n <= kRoutePermuteTokens;
    if (!precomputed) {
      const TensorView& lg = *call.router_logits;
      const int li = lg.dtype == DType::bf16 ? 1 : 0;
      const CUdeviceptr lp = CUdeviceptr(lg.data) + CUdeviceptr(t0 * E * int64_t(dtype_size(lg.dtype)));
      if (route_permutes)
        rt::launch_with(*route_permute_[li], {1}, {256}, 0, stream, "route", lp, n_i, corr, ids, wts, bm, counts, seg,
                        ntiles, tiles, tb, row_of, rtok, rw);
      else
        rt::launch_with(*route_[li], {u32_of((n + kRouteWarps - 1) / kRouteWarps)}, {unsigned(32 * kRouteWarps)}, 0,
                        stream, "route", lp, n, corr, ids, wts);
    } else {
      const TensorView& ti = *call.topk_ids;
      const int vi = ti.dtype == DType::i64 ? 1 : 0;
      const CUdeviceptr ip = CUdeviceptr(ti.data) + CUdeviceptr(t0 * k * int64_t(dtype_size(ti.dtype)));
      const int64_t base = t0 * k;
      rt::launch_with(*validate_[vi], {u32_of((entries + 255) / 256)}, {256}, 0, stream, "validate_ids", ip, entries, base, ids,
             bad);
      w_src = CUdeviceptr(call.topk_weights->data) + CUdeviceptr(t0 * k * 4);
    }
    if (nch == 1) {  // decode-sized: one launch, or none when the routing's launch permuted too
      if (!route_permutes)
        rt::launch_with(*permute_small_, {1}, {1024}, 0, stream, "permute", ids, w_src, entries, n_i, bm, counts, seg,
                        ntiles, tiles, tb, row_of, rtok, rw);
    } else {
      rt::launch_with(*count_, {u32_of(nch)}, {256}, 0, stream, "permute", ids, entries, cc);
      rt::launch_with(*scan_, {1}, {1024}, 0, stream, "permute", cc, nch_i, n_i, bm, counts, seg, ntiles, tiles, tb);
      rt::launch_with(*scatter_, {u32_of(nch)}, {unsigned(32 * kScatterWarps)}, 0, stream, "permute", ids, w_src,
                      entries, cc, seg, row_of, rtok, rw);
    }
    const CUdeviceptr xa = xp + CUdeviceptr(t0 * H * 2);
    if (plugged) {
      plugin_->run({.x = xa, .counts = counts, .seg_off = seg, .num_tiles = ntiles, .tile_expert = tiles,
                  .row_of = row_of, .row_weight = rw, .xg = ybuf, .scale = b + o_scale, .h = hbuf, .y = ybuf,
                  .scratch = b + o_scratch,
                  .tokens = n, .rows_bound = plan.rows_bound, .tile_bound = plan.tile_bound, .stream = stream});
    } else {
      rt::launch_with(*g1, {u32_of(plan.tile_bound), u32_of((2 * I + cfg.bn - 1) / cfg.bn)}, {unsigned(cfg.threads())}, gsmem,
             stream, "gemm1", xa, w13_.ptr(), w13s_.ptr(), g13_.ptr(), spec_.expert_bias ? b13_.ptr() : null, seg,
             counts, tiles, ntiles, rtok, rw, hbuf);
      rt::launch_with(*g2, {u32_of(plan.tile_bound), u32_of((H + cfg.bn - 1) / cfg.bn)}, {unsigned(cfg.threads())}, gsmem,
             stream, "gemm2", hbuf, w2_.ptr(), w2s_.ptr(), g2_.ptr(), spec_.expert_bias ? b2_.ptr() : null, seg,
             counts, tiles, ntiles, rtok, rw, ybuf);
    }
    const CUdeviceptr op = outp + CUdeviceptr(t0 * H * 2);
    rt::launch_with(plugged ? *combine_y_bf16_ : *combine_, {u32_of(n), combine_slices(n, H, info_.sm_count)}, {256}, 0,
                    stream, "combine", ybuf, row_of, seg, op);
  }

  if (!precomputed) {
    ws.release();
    return;
  }
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  rt::check(d.cuStreamIsCapturing(stream, &capturing), "cuStreamIsCapturing");
  if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
    ws.release();  // captured: the NaN rows are the only signal
    return;
  }
  uint64_t first_bad = ~uint64_t(0);
  rt::check(d.cuMemcpyDtoHAsync(&first_bad, bad, 8, stream), "cuMemcpyDtoHAsync (id check)");
  ws.release();
  rt::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  if (first_bad == ~uint64_t(0)) return;
  const TensorView& ti = *call.topk_ids;
  int64_t value = 0;
  if (ti.dtype == DType::i64) {
    rt::check(d.cuMemcpyDtoH(&value, CUdeviceptr(ti.data) + first_bad * 8, 8), "cuMemcpyDtoH (bad id)");
  } else {
    int32_t v32 = 0;
    rt::check(d.cuMemcpyDtoH(&v32, CUdeviceptr(ti.data) + first_bad * 4, 4), "cuMemcpyDtoH (bad id)");
    value = v32;
  }
  throw InvalidArgument("topk_ids", fmt::format("token {} slot {}: id {} out of range [0, {})", int64_t(first_bad) / k,
                                                int64_t(first_bad) % k, value, E));
}

class PortableBackend final : public Backend {
 public:
  std::string_view name() const override { return "portable"; }
  bool needs_gpu() const override { return true; }

  std::string why_not(const MoeSpec& spec, const rt::DeviceInfo* device) const override {
    if (device == nullptr) return "no CUDA device";
    if (device->cc_major < 8)
      return fmt::format("{} is compute capability {}.{}; mma.sync bf16 needs 8.0 or newer", device->name,
                         device->cc_major, device->cc_minor);
    if (std::string r = spec_unsupported(spec); !r.empty()) return r;
    bool any_gemm = false;
    for (const TileConfig* c : {&kSmallTile, &kLargeTile}) {
      const rt::KernelSpec k1 = gemm_kernel(spec, 1, *c), k2 = gemm_kernel(spec, 2, *c);
      if (rt::budget_violation(k1, *device).empty() && rt::budget_violation(k2, *device).empty() &&
          (2 * spec.intermediate + c->bn - 1) / c->bn <= device->max_grid_y &&
          (spec.hidden + c->bn - 1) / c->bn <= device->max_grid_y)
        any_gemm = true;
    }
    if (!any_gemm)
      return fmt::format("no GEMM tile configuration fits {} (opt-in shared memory {} B)", device->name,
                         device->smem_optin_per_block);
    for (const rt::KernelSpec& k : all_kernels(spec))
      if (k.entry != "moe_grouped_gemm")
        if (std::string v = rt::budget_violation(k, *device); !v.empty()) return v;
    return "";
  }

  std::unique_ptr<PreparedLayer> prepare(const MoeSpec& spec, const std::shared_ptr<const WeightSource>& weights,
                                         int device) const override {
    spec.validate();
    if (std::string r = spec_unsupported(spec); !r.empty()) throw Unsupported("portable: " + r);
    if (!weights) throw InvalidArgument("weights", "null weight source");
    return make_layer(spec, *weights, device);
  }

  std::vector<rt::KernelSpec> kernels(const MoeSpec& spec) const override {
    if (!spec_unsupported(spec).empty()) return {};
    return all_kernels(spec);
  }

  std::string gemm_plan(const MoeSpec& spec, int64_t tokens) const override {
    return fmt::format("{} GEMMs", choose_tile(spec, tokens, nullptr).name);  // before device fallbacks
  }
};

}  // namespace

std::unique_ptr<PreparedLayer> make_layer(const MoeSpec& spec, const WeightSource& weights, int device,
                                          const GemmPluginFactory& plugin, const PrepareHook& repack) {
  return std::make_unique<PortableLayer>(spec, weights, device, plugin, repack);
}

void set_workspace_fill(int byte) {
  if (byte < -1 || byte > 255) throw InvalidArgument("byte", fmt::format("expected -1 or 0..255, got {}", byte));
  g_workspace_fill.store(byte, std::memory_order_relaxed);
}

}  // namespace portable

const Backend& portable_backend() {
  static const portable::PortableBackend backend;
  return backend;
}

}  // namespace moeforge
