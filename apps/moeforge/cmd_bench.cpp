// `moeforge bench`: time the whole layer per batch size against the device's
// own ceilings measured in the same run, and write a bench record (DESIGN.md,
// "Result records"). --checkpoint DIR --layer L times one layer of a Hugging Face checkpoint
// instead of a preset (router logits = x . router weight^T when the checkpoint has a router).
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>

#include "backends/backend.hpp"
#include "backends/device_buffer.hpp"
#include "backends/portable/portable.hpp"  // kPdlMaxTokens
#include "bench/ceilings.hpp"
#include "bench/record.hpp"
#include "bench/timing.hpp"
#include "commands.hpp"
#include "core/inputs.hpp"
#include "moeforge/checkpoint.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/layer.hpp"
#include "moeforge/reference.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "runtime/graph.hpp"
#include "runtime/settings.hpp"

namespace moeforge::cli {
namespace {

struct BenchOptions {
  std::string model = "mistral-small-4";
  std::vector<int64_t> tokens = {1, 8, 32, 128, 512, 2048, 8192, 36308};
  std::string backend = "auto";
  FormatOptions formats;
  int device = 0;
  int runs = 20;
  uint64_t seed = 0;
  std::string json_path;
  std::string checkpoint;
  int layer = 0;
  bool model_given = false;
  std::string l2_flush = "read";
  std::string launch = "graph";
};

bench::L2Flush parse_l2_flush(const std::string& v) {
  if (v == "read") return bench::L2Flush::Read;
  if (v == "write") return bench::L2Flush::Write;
  throw InvalidArgument("--l2-flush", fmt::format("must be read or write, got '{}'", v));
}

// --launch: graph (the forward captured once, each timed run one graph replay, as engines run
// decode) or stream (each timed run enqueues the forward's launches directly).
bool parse_launch_graph(const std::string& v) {
  if (v == "graph") return true;
  if (v == "stream") return false;
  throw InvalidArgument("--launch", fmt::format("must be graph or stream, got '{}'", v));
}

// Bytes of one expert's weights as stored (values + scales + biases).
double expert_bytes(const MoeSpec& s, int64_t inter, bool bias) {
  const double params = 3.0 * double(s.hidden) * double(inter);
  double per = 2.0;
  switch (s.weight_format) {
    case WeightFormat::BF16:
    case WeightFormat::FP16: per = 2.0; break;
    case WeightFormat::FP8_Block128: per = 1.0 + 4.0 / (128.0 * 128.0); break;
    case WeightFormat::NVFP4: per = 0.5 + 1.0 / 16.0; break;
    case WeightFormat::MXFP4: per = 0.5 + 1.0 / 32.0; break;
  }
  return params * per + (bias ? 4.0 * (2.0 * double(inter) + double(s.hidden)) : 0.0);
}


int bench(const BenchOptions& o) {
  // The options first, so that a bad one says so on any machine.
  if (o.runs < 1) throw InvalidArgument("--runs", fmt::format("must be >= 1, got {}", o.runs));
  const bench::L2Flush l2_flush = parse_l2_flush(o.l2_flush);
  const bool graph = parse_launch_graph(o.launch);
  for (int64_t t : o.tokens)
    if (t < 1) throw InvalidArgument("--tokens", fmt::format("every T must be >= 1, got {}", t));
  std::shared_ptr<const CheckpointWeights> ckpt;
  MoeSpec spec;
  if (!o.checkpoint.empty()) {
    // Before the GPU check: a bad checkpoint (or flag) says so anywhere.
    ckpt = open_checkpoint(o.checkpoint, o.layer, o.model_given ? "--model" : "", o.formats);
    spec = ckpt->spec();
  } else {
    spec = presets::get(o.model);
    o.formats.apply(spec);
    spec.validate();
  }
  std::string why;
  if (!rt::driver_or_null(&why)) throw Unsupported("bench needs a GPU: no CUDA driver (" + why + ")");

  const rt::DeviceInfo dev = rt::device_info(o.device);
  // Wall times on stderr: where a bench process's time goes (GPU calls are budgeted by the second).
  using wall_clock = std::chrono::steady_clock;
  auto seconds_since = [](wall_clock::time_point t0) {
    return std::chrono::duration<double>(wall_clock::now() - t0).count();
  };
  fmt::print(stderr, "measuring ceilings on {} ({})...\n", dev.name, dev.target);
  const wall_clock::time_point ceil0 = wall_clock::now();
  const bench::Ceilings ceil = bench::measure_ceilings(o.device);
  fmt::print(stderr, "preparing {} ({} weights; ceilings took {:.1f} s)...\n", spec.name,
             to_string(spec.weight_format), seconds_since(ceil0));
  const wall_clock::time_point prep0 = wall_clock::now();
  std::shared_ptr<const WeightSource> weights = ckpt ? std::shared_ptr<const WeightSource>(ckpt)
                                                     : std::shared_ptr<const WeightSource>(make_synthetic_weights(spec, o.seed));
  const MoeLayer layer = MoeLayer::create(spec, weights, {.backend = o.backend, .device = o.device});
  fmt::print(stderr, "prepared in {:.1f} s\n", seconds_since(prep0));
  const Backend& backend = find_backend(layer.backend_name());
  const std::vector<float> bias = weights->correction_bias();

  CUstream stream;
  rt::check(rt::driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t T : o.tokens) {
    const wall_clock::time_point t_start = wall_clock::now();
    HostInputs in = make_inputs(spec, T, o.seed * 1000003 + uint64_t(T));
    if (ckpt && !ckpt->router_weight().empty()) in.logits = ckpt->router_logits(in.x_view());
    const reference::Routing r = reference::route(spec, in.logits.data(), T, bias);
    const std::set<int32_t> touched(r.ids.begin(), r.ids.end());
    DeviceBuffer x = DeviceBuffer::from_host(o.device, in.x), l = DeviceBuffer::from_host(o.device, in.logits);
    DeviceBuffer out(o.device, size_t(T * spec.hidden * 2));
    const TensorView xv = x.view(DType::bf16, {T, spec.hidden}), lv = l.view(DType::f32, {T, spec.num_experts}),
                     ov = out.view(DType::bf16, {T, spec.hidden});
    auto forward = [&](CUstream s) { layer.forward(xv, lv, ov, s); };
    std::optional<rt::Graph> captured;
    if (graph) {
      forward(stream);  // compiles and loads outside the capture
      rt::check(rt::driver().cuStreamSynchronize(stream), "warm-up before capture");
      captured.emplace(rt::Graph::capture(stream, forward));
    }
    const bench::Timing t = bench::time_on_stream(
        o.device, stream, [&](CUstream s) { captured ? captured->launch(s) : forward(s); }, 3, o.runs, l2_flush);

    const double bytes = double(touched.size()) * expert_bytes(spec, spec.intermediate, spec.expert_bias) +
                         spec.num_shared_experts * expert_bytes(spec, spec.shared_intermediate, false) +
                         double(T) * spec.hidden * 2 * 2 + double(T) * spec.num_experts * 4;
    const double flops = 2.0 * double(T) * spec.topk * 3.0 * double(spec.hidden) * double(spec.intermediate) +
                         2.0 * double(T) * spec.num_shared_experts * 3.0 * double(spec.hidden) *
                             double(spec.shared_intermediate);
    const double mem_us = bytes / (ceil.read_GBps * 1e3);
    // FP8 activations make the GEMMs FP8 x FP8: their compute floor is the FP8 GEMM rate.
    const double peak = spec.activation_format == ActivationFormat::FP8_Group128 ? ceil.fp8_TFLOPs : ceil.bf16_TFLOPs;
    const double math_us = peak > 0 ? flops / (peak * 1e6) : 0;
    const double floor_us = std::max(mem_us, math_us);
    rows.push_back({{"model", spec.name},
                    {"backend", layer.backend_name()},
                    {"gemms", backend.gemm_plan(spec, T)},
                    {"weights", to_string(spec.weight_format)},
                    {"activations", to_string(spec.activation_format)},
                    {"T", T},
                    {"us", t.median_us},
                    {"min_us", t.min_us},
                    {"max_us", t.max_us},
                    {"runs", t.runs},
                    {"floor_us", floor_us},
                    {"floor_bound", mem_us >= math_us ? "memory" : "compute"},
                    {"ratio", t.median_us / floor_us},
                    {"TFLOPs", flops / (t.median_us * 1e6)},
                    {"GBps", bytes / (t.median_us * 1e3)},
                    {"experts_touched", touched.size()},
                    {"bytes", bytes},
                    {"flops", flops}});
    fmt::print(stderr, "T={} done: {:.1f} us ({:.1f} s with inputs, compiles, capture)\n", T, t.median_us,
               seconds_since(t_start));
  }
  rt::driver().cuStreamDestroy(stream);

  nlohmann::json record = bench::record_header("bench", o.device);
  record.update({{"ceilings",
                  {{"read_GBps", ceil.read_GBps},
                   {"bf16_TFLOPs", ceil.bf16_TFLOPs},
                   {"gemm", ceil.gemm_note},
                   {"fp8_TFLOPs", ceil.fp8_TFLOPs},
                   {"fp8_gemm", ceil.fp8_gemm_note}}},
                 {"spec", spec.describe()},
                 {"checkpoint", ckpt ? nlohmann::json(ckpt->describe()) : nlohmann::json(nullptr)},
                 {"backend_reason", layer.backend_reason()},
                 {"l2_flush", bench::to_string(l2_flush)},
                 {"launch", graph ? "graph" : "stream"},
                 {"pdl", rt::settings().pdl},  // MOEFORGE_PDL (programmatic dependent launch)
                 {"pdl_max_tokens", portable::kPdlMaxTokens},  // with it, for calls of at most this many
                 {"rows", rows}});
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    if (!f) throw IoError("--json: cannot write " + o.json_path);
    f << record.dump(2) << "\n";
  }

  fmt::print("{} on {} ({}), backend {}, {} weights, {} activations\n", spec.name, dev.name, dev.target,
             layer.backend_name(), to_string(spec.weight_format), to_string(spec.activation_format));
  fmt::print("ceilings: read {:.0f} GB/s, bf16 GEMM {:.0f} TFLOP/s ({}), fp8 GEMM {:.0f} TFLOP/s ({})\n",
             ceil.read_GBps, ceil.bf16_TFLOPs, ceil.gemm_note, ceil.fp8_TFLOPs, ceil.fp8_gemm_note);
  fmt::print("L2 emptied before each run by a {} of 2x its size; each run {}\n",
             l2_flush == bench::L2Flush::Read ? "clean read" : "memset",
             graph ? "one replay of the forward captured in a CUDA graph" : "the forward's launches, enqueued directly");
  fmt::print("{:>7} {:>10} {:>10} {:>7} {:>8} {:>8} {:>8}  {:<7} {}\n", "T", "us", "floor_us", "ratio", "TFLOP/s",
             "GB/s", "experts", "bound", "gemms");
  for (const auto& r : rows)
    fmt::print("{:>7} {:>10.1f} {:>10.1f} {:>7.2f} {:>8.1f} {:>8.0f} {:>8}  {:<7} {}\n", r["T"].get<int64_t>(),
               r["us"].get<double>(), r["floor_us"].get<double>(), r["ratio"].get<double>(),
               r["TFLOPs"].get<double>(), r["GBps"].get<double>(), r["experts_touched"].get<size_t>(),
               r["floor_bound"].get<std::string>(), r["gemms"].get<std::string>());
  return 0;
}

}  // namespace

Registered register_bench(CLI::App& root) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = root.add_subcommand(
      "bench", "Time the layer per batch size against the device's read bandwidth and cuBLAS GEMM rate");
  cmd->add_option("--model", o->model, "Preset")->capture_default_str()->each([o](const std::string&) {
    o->model_given = true;
  });
  cmd->add_option("--tokens", o->tokens, "Batch sizes T, comma separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--backend", o->backend, "auto or a GPU backend name")->capture_default_str();
  o->formats.add_to(cmd);
  cmd->add_option("--device", o->device, "CUDA device ordinal")->capture_default_str();
  cmd->add_option("--runs", o->runs, "Timed runs per T (median reported)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of weights and inputs")->capture_default_str();
  cmd->add_option("--json", o->json_path, "Write the bench record (JSON) to this file");
  cmd->add_option("--checkpoint", o->checkpoint, "Time one layer of this Hugging Face checkpoint directory instead of a preset");
  cmd->add_option("--layer", o->layer, "Layer of --checkpoint")->capture_default_str();
  cmd->add_option("--l2-flush", o->l2_flush,
                  "How the L2 is emptied before each timed run: read (a clean 2x-L2 read; nothing left to write "
                  "back, as the floor assumes) or write (a 2x-L2 memset, whose dirty lines the run writes back)")
      ->capture_default_str();
  cmd->add_option("--launch", o->launch,
                  "How each timed run is launched: graph (one replay of the forward captured in a CUDA graph, as "
                  "inference engines run decode) or stream (the forward's kernels enqueued one by one)")
      ->capture_default_str();
  return {cmd, [o] { return bench(*o); }};
}

}  // namespace moeforge::cli
