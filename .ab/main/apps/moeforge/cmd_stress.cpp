// `moeforge stress`: many threads on many streams calling one layer with
// random, long-tailed batch sizes; every output is compared bit for bit with
// the same batch run alone on an idle GPU.
//
// Phase 1 builds a pool of batches and runs each one alone (one stream,
// synchronized) to record the SHA-256 of its output. Phase 2 runs the pool
// concurrently for --minutes and compares every output's hash.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "backends/device_buffer.hpp"
#include "bench/record.hpp"
#include "commands.hpp"
#include "core/inputs.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/layer.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"

namespace moeforge::cli {
namespace {

struct StressOptions {
  std::string model = "mistral-small-4";
  std::string backend = "auto";
  FormatOptions formats;
  int threads = 8;
  int streams = 8;
  double minutes = 1;
  uint64_t seed = 1;
  int pool = 48;
  int64_t max_tokens = 36308;
  int device = 0;
  std::string json_path;
};

// Long-tailed batch sizes like real traffic: mostly decodes (1..64), some
// medium prefills, a few long ones up to max_tokens.
int64_t draw_tokens(std::mt19937_64& rng, int64_t max_tokens) {
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  if (u < 0.6) return std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(64, max_tokens))(rng);
  if (u < 0.9) return std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(2048, max_tokens))(rng);
  // log-uniform tail, always including the longest
  if (u > 0.98) return max_tokens;
  const double l = std::uniform_real_distribution<double>(std::log(2048.0), std::log(double(max_tokens)))(rng);
  return std::clamp<int64_t>(int64_t(std::exp(l)), 1, max_tokens);
}

struct Batch {
  HostInputs in;
  std::string hash;  // of the output run alone
};

std::string run_once(const MoeLayer& layer, const MoeSpec& spec, Batch& b, CUstream stream, int device) {
  const int64_t T = b.in.tokens;
  DeviceBuffer x = DeviceBuffer::from_host(device, b.in.x), l = DeviceBuffer::from_host(device, b.in.logits);
  DeviceBuffer out(device, size_t(T * spec.hidden * 2));
  rt::check(rt::driver().cuMemsetD8Async(out.ptr(), 0xFF, out.bytes(), stream), "poison");
  layer.forward(x.view(DType::bf16, {T, spec.hidden}), l.view(DType::f32, {T, spec.num_experts}),
                out.view(DType::bf16, {T, spec.hidden}), stream);
  rt::check(rt::driver().cuStreamSynchronize(stream), "stress call");
  const std::vector<uint16_t> host = out.to_host<uint16_t>();
  return checksum_hex(host.data(), host.size() * 2);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

int stress(const StressOptions& o) {
  MoeSpec spec = presets::get(o.model);
  o.formats.apply(spec);
  if (o.threads < 1) throw InvalidArgument("--threads", fmt::format("must be >= 1, got {}", o.threads));
  if (o.streams < 1) throw InvalidArgument("--streams", fmt::format("must be >= 1, got {}", o.streams));
  if (o.pool < 1) throw InvalidArgument("--pool", fmt::format("must be >= 1, got {}", o.pool));
  if (o.max_tokens < 1) throw InvalidArgument("--max-tokens", fmt::format("must be >= 1, got {}", o.max_tokens));
  if (!(o.minutes > 0)) throw InvalidArgument("--minutes", fmt::format("must be > 0, got {}", o.minutes));
  std::string why;
  if (!rt::driver_or_null(&why)) throw Unsupported("stress needs a GPU: no CUDA driver (" + why + ")");

  std::shared_ptr<const WeightSource> weights = make_synthetic_weights(spec, o.seed);
  const MoeLayer layer = MoeLayer::create(spec, weights, {.backend = o.backend, .device = o.device});
  const rt::Driver& d = rt::driver();
  rt::use_device(o.device);

  // Phase 1: the pool, each batch alone on an idle GPU.
  std::mt19937_64 rng(o.seed);
  std::vector<Batch> pool(size_t(o.pool));
  CUstream solo;
  rt::check(d.cuStreamCreate(&solo, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  for (int i = 0; i < o.pool; ++i) {
    pool[i].in = make_inputs(spec, i == 0 ? o.max_tokens : draw_tokens(rng, o.max_tokens), o.seed * 7919 + i);
    pool[i].hash = run_once(layer, spec, pool[i], solo, o.device);
    fmt::print(stderr, "\rreference runs {}/{}", i + 1, o.pool);
  }
  fmt::print(stderr, "\n");
  d.cuStreamDestroy(solo);

  // Phase 2: concurrent load.
  std::vector<CUstream> streams(size_t(o.streams));
  for (auto& s : streams) rt::check(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  std::atomic<int64_t> calls{0}, tokens{0}, errors{0}, mismatches{0};
  std::mutex mu;
  std::vector<double> latencies;
  std::vector<std::string> first_errors;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.minutes * 60.0);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      rt::use_device(o.device);
      std::mt19937_64 r(o.seed * 1000 + t);
      int64_t n = 0;
      while (std::chrono::steady_clock::now() < deadline) {
        Batch& b = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(r)];
        CUstream s = streams[size_t(t + n++) % streams.size()];
        const auto t0 = std::chrono::steady_clock::now();
        try {
          const std::string h = run_once(layer, spec, b, s, o.device);
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          calls++;
          tokens += b.in.tokens;
          std::lock_guard<std::mutex> lock(mu);
          latencies.push_back(ms);
          if (h != b.hash) {
            mismatches++;
            if (first_errors.size() < 5)
              first_errors.push_back(fmt::format("mismatch at T={}: {} != {}", b.in.tokens, h, b.hash));
          }
        } catch (const std::exception& e) {
          errors++;
          std::lock_guard<std::mutex> lock(mu);
          if (first_errors.size() < 5) first_errors.push_back(e.what());
          if (errors > 100) break;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (auto& s : streams) d.cuStreamDestroy(s);

  nlohmann::json rec = bench::record_header("stress", o.device);
  rec.update({{"model", spec.name},
                        {"backend", layer.backend_name()},
                        {"weights", to_string(spec.weight_format)},
                        {"activations", to_string(spec.activation_format)},
                        {"threads", o.threads},
                        {"streams", o.streams},
                        {"minutes", o.minutes},
                        {"pool", o.pool},
                        {"calls", calls.load()},
                        {"tokens", tokens.load()},
                        {"errors", errors.load()},
                        {"mismatches", mismatches.load()},
                        {"p50_ms", percentile(latencies, 0.5)},
                        {"p99_ms", percentile(latencies, 0.99)},
                        {"first_errors", first_errors}});
  if (!o.json_path.empty()) std::ofstream(o.json_path) << rec.dump(2) << "\n";
  fmt::print("stress {} ({}, {} weights, {} activations) {} threads x {} streams, {:.1f} min: {} calls, {} tokens, "
             "{} errors, {} mismatches, p50 {:.2f} ms, p99 {:.2f} ms\n",
             spec.name, layer.backend_name(), to_string(spec.weight_format), to_string(spec.activation_format),
             o.threads, o.streams, o.minutes,
             calls.load(), tokens.load(), errors.load(), mismatches.load(), percentile(latencies, 0.5),
             percentile(latencies, 0.99));
  for (const auto& e : first_errors) fmt::print("  {}\n", e);
  return errors == 0 && mismatches == 0 && calls > 0 ? 0 : 1;
}

}  // namespace

Registered register_stress(CLI::App& root) {
  auto o = std::make_shared<StressOptions>();
  auto* cmd = root.add_subcommand("stress", "Concurrent load: threads x streams, outputs checked bit for bit");
  cmd->add_option("--model", o->model, "Preset")->capture_default_str();
  cmd->add_option("--backend", o->backend, "auto or a GPU backend")->capture_default_str();
  o->formats.add_to(cmd);
  cmd->add_option("--threads", o->threads, "Host threads")->capture_default_str();
  cmd->add_option("--streams", o->streams, "CUDA streams")->capture_default_str();
  cmd->add_option("--minutes", o->minutes, "Duration of the concurrent phase")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of weights, batches and schedule")->capture_default_str();
  cmd->add_option("--pool", o->pool, "Distinct batches (each run alone first)")->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Longest batch")->capture_default_str();
  cmd->add_option("--device", o->device, "CUDA device ordinal")->capture_default_str();
  cmd->add_option("--json", o->json_path, "Write the stress record (JSON) here");
  return {cmd, [o] { return stress(*o); }};
}

}  // namespace moeforge::cli
