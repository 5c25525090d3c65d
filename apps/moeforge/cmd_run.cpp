// `moeforge run`: build a preset layer with deterministic synthetic weights (or one layer of a
// Hugging Face checkpoint: --checkpoint DIR --layer L), run one batch, print what ran (backend
// and why), the time and a checksum.
//
// With --checkpoint, x is the usual synthetic batch and the router logits are x times the
// checkpoint's router weight (realistic routing: the experts the model would pick for such
// inputs); --routing random uses the synthetic logits instead (also the fallback, with a note,
// when the checkpoint has no router weight).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "backends/backend.hpp"
#include "backends/device_buffer.hpp"
#include "commands.hpp"
#include "core/inputs.hpp"
#include "moeforge/checkpoint.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "moeforge/layer.hpp"
#include "moeforge/reference.hpp"
#include "runtime/driver.hpp"

namespace moeforge::cli {
namespace {

struct RunOptions {
  std::string model = "mistral-small-4";
  int64_t tokens = 64;
  std::string backend = "auto";
  FormatOptions formats;
  uint64_t seed = 0;
  int device = 0;
  bool check = false;
  int64_t check_rows = 0;
  bool json = false;
  std::string checkpoint;  // a Hugging Face checkpoint directory (replaces --model/--weights)
  int layer = 0;
  std::string routing = "router";  // router | random (checkpoints only)
  bool model_given = false;
};

struct Timed {
  std::vector<uint16_t> out;
  double us = 0;
};

// Runs the layer where it lives; GPU time is the second of two runs (the first
// compiles/loads kernels), measured with device events.
Timed execute(const MoeLayer& layer, HostInputs& in) {
  const MoeSpec& spec = layer.spec();
  const int64_t T = in.tokens;
  Timed t;
  t.out.assign(size_t(T * spec.hidden), 0xFFFF);  // NaN poison: every element must be written
  if (layer.device().kind == DeviceKind::CPU) {
    TensorView o = TensorView::contiguous(t.out.data(), DType::bf16, {T, spec.hidden});
    const auto t0 = std::chrono::steady_clock::now();
    layer.forward(in.x_view(), in.logits_view(), o);
    t.us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    return t;
  }
  const int dev = layer.device().index;
  const rt::Driver& d = rt::driver();
  DeviceBuffer x = DeviceBuffer::from_host(dev, in.x), l = DeviceBuffer::from_host(dev, in.logits);
  DeviceBuffer out = DeviceBuffer::from_host(dev, t.out);
  const TensorView xv = x.view(DType::bf16, {T, spec.hidden}), lv = l.view(DType::f32, {T, spec.num_experts}),
                   ov = out.view(DType::bf16, {T, spec.hidden});
  CUstream stream;
  rt::check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUevent start, stop;
  rt::check(d.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  rt::check(d.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  layer.forward(xv, lv, ov, stream);  // warm-up: kernels compiled, loaded, pools sized
  rt::check(d.cuEventRecord(start, stream), "cuEventRecord");
  layer.forward(xv, lv, ov, stream);
  rt::check(d.cuEventRecord(stop, stream), "cuEventRecord");
  rt::check(d.cuEventSynchronize(stop), "forward");
  float ms = 0;
  rt::check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
  t.us = ms * 1000.0;
  t.out = out.to_host<uint16_t>();
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  d.cuStreamDestroy(stream);
  return t;
}

int run(const RunOptions& o) {
  if (o.tokens < 0) throw InvalidArgument("--tokens", fmt::format("must be >= 0, got {}", o.tokens));
  MoeSpec spec;
  std::shared_ptr<const WeightSource> weights;
  std::shared_ptr<const CheckpointWeights> ckpt;
  if (!o.checkpoint.empty()) {
    if (o.routing != "router" && o.routing != "random")
      throw InvalidArgument("--routing", fmt::format("expected router or random, got '{}'", o.routing));
    ckpt = open_checkpoint(o.checkpoint, o.layer, o.model_given ? "--model" : "", o.formats);
    spec = ckpt->spec();
    weights = ckpt;
  } else {
    spec = presets::get(o.model);
    o.formats.apply(spec);
    spec.validate();
  }

  std::string no_driver;
  const bool have_driver = rt::driver_or_null(&no_driver) != nullptr;
  if (!weights) weights = make_synthetic_weights(spec, o.seed);
  HostInputs in = make_inputs(spec, o.tokens, o.seed);
  std::string routing = "synthetic logits";
  if (ckpt && o.routing == "router" && o.tokens > 0) {
    if (ckpt->router_weight().empty()) {
      routing = "synthetic logits (the checkpoint has no router weight)";
    } else {
      in.logits = ckpt->router_logits(in.x_view());
      routing = "x . router weight^T";
    }
  }
  if (!o.json && !have_driver && (o.backend == "auto" || o.backend == "cpu")) {
    fmt::print("no GPU: running the CPU reference ({})\n", no_driver);
    std::fflush(stdout);  // before the library's own log line on stderr
  }
  const MoeLayer layer = MoeLayer::create(spec, weights, {.backend = o.backend, .device = o.device});

  const Timed t = execute(layer, in);
  size_t written = 0;
  double abs_sum = 0;
  for (uint16_t b : t.out) {
    const float v = formats::bf16_to_float(b);
    written += b != 0xFFFF;
    abs_sum += std::fabs(v);
  }
  const std::string checksum = checksum_hex(t.out.data(), t.out.size() * 2);

  nlohmann::json j = {{"model", spec.name},
                      {"spec", spec.describe()},
                      {"weights", to_string(spec.weight_format)},
                      {"tokens", o.tokens},
                      {"seed", o.seed},
                      {"backend", layer.backend_name()},
                      {"reason", layer.backend_reason()},
                      {"device", layer.device().kind == DeviceKind::CPU ? "cpu" : fmt::format("cuda:{}", o.device)},
                      {"time_us", t.us},
                      {"checksum", checksum},
                      {"mean_abs", t.out.empty() ? 0.0 : abs_sum / double(t.out.size())},
                      {"unwritten", t.out.size() - written}};
  if (ckpt) {
    j["checkpoint"] = o.checkpoint;
    j["layer"] = o.layer;
    j["layout"] = ckpt->describe();
    j["routing"] = routing;
    j["warnings"] = ckpt->warnings();
  }

  int status = 0;
  if (o.check && o.tokens > 0) {
    reference::Options ro;
    ro.rows = reference::even_rows(o.tokens, o.check_rows > 0 ? o.check_rows : (o.tokens <= 512 ? o.tokens : 256));
    const std::vector<double> ref = reference::forward(spec, *weights, in.x_view(), in.logits_view(), ro);
    const double err = reference::rel_err(t.out, ref, spec.hidden, ro.rows);
    const bool nan = std::isnan(err);
    const double bound = reference::error_bound(spec);
    const bool ok = !nan && err < bound;
    j["check"] = {{"rows", ro.rows.empty() ? o.tokens : int64_t(ro.rows.size())},
                  {"rel_err", nan ? nlohmann::json(nullptr) : nlohmann::json(err)},
                  {"bound", bound},
                  {"passed", ok}};
    status = ok ? 0 : 1;
  }

  if (o.json) {
    fmt::print("{}\n", j.dump());
    return status;
  }
  if (ckpt) {
    fmt::print("checkpoint {}\n", ckpt->describe());
    fmt::print("routing  {}\n", routing);
  }
  fmt::print("model    {}\n", spec.describe());
  fmt::print("backend  {} on {} ({})\n", layer.backend_name(), j["device"].get<std::string>(), layer.backend_reason());
  fmt::print("tokens   {}  seed {}\n", o.tokens, o.seed);
  const std::string human = t.us < 1e4 ? fmt::format("{:.1f} us", t.us)
                            : t.us < 1e7 ? fmt::format("{:.2f} ms", t.us / 1e3)
                                         : fmt::format("{:.2f} s", t.us / 1e6);
  fmt::print("time     {}{}\n", human,
             layer.device().kind == DeviceKind::CPU ? " (wall clock, CPU reference)" : " (device events, warm)");
  fmt::print("checksum {}  mean|out| {:.6f}  unwritten {}\n", checksum, j["mean_abs"].get<double>(),
             j["unwritten"].get<size_t>());
  if (j.contains("check")) {
    const auto& c = j["check"];
    fmt::print("check    {} rows vs CPU reference (double): rel_err {} (bound {}) {}\n", c["rows"].get<int64_t>(),
               c["rel_err"].is_null() ? "NaN" : fmt::format("{:.3e}", c["rel_err"].get<double>()),
               c["bound"].get<double>(), c["passed"].get<bool>() ? "PASSED" : "FAILED");
  }
  return status;
}

}  // namespace

Registered register_run(CLI::App& root) {
  auto opts = std::make_shared<RunOptions>();
  auto* cmd = root.add_subcommand(
      "run", "Run one batch through a preset layer with synthetic weights, or one layer of a checkpoint");
  cmd->add_option("--model", opts->model, "Preset: " + fmt::format("{}", fmt::join(presets::names(), ", ")))
      ->capture_default_str()
      ->each([opts](const std::string&) { opts->model_given = true; });
  cmd->add_option("--checkpoint", opts->checkpoint,
                  "A Hugging Face checkpoint directory (config.json + safetensors): run its MoE layer --layer");
  cmd->add_option("--layer", opts->layer, "Layer of --checkpoint")->capture_default_str();
  cmd->add_option("--routing", opts->routing,
                  "With --checkpoint: router (logits = x . router weight^T) or random (synthetic logits)")
      ->capture_default_str();
  cmd->add_option("--tokens", opts->tokens, "Tokens in the batch (T)")->capture_default_str();
  cmd->add_option("--backend", opts->backend, "auto, cpu or a GPU backend (portable, ...)")->capture_default_str();
  opts->formats.add_to(cmd);
  cmd->add_option("--seed", opts->seed, "Seed of the synthetic weights and inputs")->capture_default_str();
  cmd->add_option("--device", opts->device, "CUDA device ordinal")->capture_default_str();
  cmd->add_flag("--check", opts->check, "Compare with the CPU reference in double precision (exit 1 if over the bound)");
  cmd->add_option("--check-rows", opts->check_rows,
                  "Rows to compare with --check (default: all up to 512 tokens, else 256 sampled)");
  cmd->add_flag("--json", opts->json, "Print one JSON object instead of text");
  return {cmd, [opts] { return run(*opts); }};
}

}  // namespace moeforge::cli
