// moeforge precompile: fill the kernel cache ahead of time for given exact
// targets (container images, air-gapped hosts, CI). NVRTC only: no GPU needed. The kernels
// are those of presets in given formats (--model, --all-presets, --weights, --activations) or
// of one checkpoint's layer (--checkpoint DIR --layer L: its shape and formats, e.g. an NVFP4
// model's W4A16 kernels).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "commands.hpp"
#include "moeforge/checkpoint.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/spec.hpp"
#include "runtime/cache.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"
#include "runtime/settings.hpp"

namespace moeforge::cli {
namespace {

struct Options {
  std::string targets;
  std::vector<std::string> models;
  bool all_presets = false;
  FormatOptions formats;
  std::string checkpoint;
  int layer = 0;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::string spec_id(const rt::KernelSpec& k) {
  std::string id = k.source + "|" + k.entry + "|";
  for (auto& [a, b] : k.defines) id += a + "=" + b + ";";
  for (auto& o : k.options) id += "|" + o;
  return id;
}

// One line, rewritten in place, when stderr is a terminal.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(::isatty(2)) {}
  void update(size_t done, const std::string& what) {
    if (!tty_) return;
    const int width = 30;
    const int filled = total_ ? int(width * done / total_) : width;
    std::string what_short = what.size() > 50 ? what.substr(0, 47) + "..." : what;
    std::fprintf(stderr, "\r[%s%s] %zu/%zu %-50s", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, total_, what_short.c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (tty_) std::fprintf(stderr, "\r%*s\r", 100, "");
  }

 private:
  size_t total_;
  bool tty_;
};

int run(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  // Targets: each must be a moeforge target name and accepted by this NVRTC.
  std::vector<std::string> targets = split(o.targets);
  if (targets.empty()) throw InvalidArgument("--target", "expected a comma-separated list such as sm_90a,sm_121a");
  const std::vector<int> nvrtc_sms = rt::nvrtc_supported_sms();
  for (const std::string& t : targets) {
    const int sm = rt::target_sm_number(t);
    bool ok = false;
    for (int s : nvrtc_sms) ok |= s == sm;
    if (!ok) throw Unsupported(fmt::format("--target {}: NVRTC {} cannot compile for sm_{}", t, rt::nvrtc_version(), sm));
  }
  // The layers: one checkpoint's, or presets in the given formats.
  std::vector<MoeSpec> specs;
  std::string what;
  if (!o.checkpoint.empty()) {
    const char* preset_flag = o.all_presets ? "--all-presets" : !o.models.empty() ? "--model" : "";
    const auto ckpt = open_checkpoint(o.checkpoint, o.layer, preset_flag, o.formats);
    specs.push_back(ckpt->spec());
    what = ckpt->describe();
  } else {
    std::vector<std::string> models = o.models;
    if (o.all_presets) models = presets::names();
    if (models.empty()) models = {"mistral-small-4"};
    for (const std::string& m : models) {
      MoeSpec spec = presets::get(m);
      o.formats.apply(spec);
      spec.validate();
      specs.push_back(spec);
      if (!what.empty()) what += ", ";
      what += m;
    }
    what += fmt::format(" ({} weights, {} activations)", o.formats.weights, o.formats.activations);
  }

  // Every kernel of every GPU backend that serves each layer, once; plus the runtime's own.
  std::map<std::string, rt::KernelSpec> kernels;
  kernels.emplace(spec_id(rt::selftest_kernel_spec()), rt::selftest_kernel_spec());
  kernels.emplace(spec_id(rt::fault_kernel_spec()), rt::fault_kernel_spec());
  for (const MoeSpec& spec : specs) {
    size_t served = 0;
    for (const Backend* b : all_backends())
      if (b->needs_gpu())
        for (const rt::KernelSpec& k : b->kernels(spec)) {
          kernels.emplace(spec_id(k), k);
          ++served;
        }
    if (served == 0) throw Unsupported(fmt::format("no GPU backend serves {}: nothing to compile", spec.describe()));
  }

  rt::KernelCache& cache = rt::default_cache();
  size_t jobs = 0;  // kernels built only for some targets (sm90) are skipped for the others
  for (const std::string& t : targets)
    for (const auto& [id, k] : kernels) jobs += rt::built_for(k, t);
  Progress progress(jobs);
  size_t done = 0, compiled = 0, cached = 0;
  std::map<std::string, std::pair<size_t, size_t>> per_target;
  for (const std::string& t : targets)
    for (const auto& [id, k] : kernels) {
      if (!rt::built_for(k, t)) continue;
      progress.update(done, t + " " + k.entry);
      // The variant load_kernel will ask for: with the PDL proof where the kernel launches with
      // PDL (MOEFORGE_PDL, on by default, at sm_90 and later), a different cache key.
      const bool pdl = rt::launches_with_pdl(k, t, rt::settings().pdl);
      rt::CompileRequest req{k.source, k.entry, k.defines, k.options, t, pdl};
      rt::CacheResult r;
      try {
        r = cache.get(req);
      } catch (...) {
        progress.finish();
        throw;
      }
      if (r.from == rt::CacheResult::From::Compiled) {
        ++compiled;
        ++per_target[t].first;
      } else {
        ++cached;
        ++per_target[t].second;
      }
      ++done;
    }
  progress.finish();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("precompile: {} kernels x {} targets for {} into {} ({})\n", kernels.size(), targets.size(), what,
             cache.root(), cache.mode());
  for (const auto& [t, n] : per_target) fmt::print("  {}: compiled {}, cached {}\n", t, n.first, n.second);
  fmt::print("compiled {}, cached {}, {:.1f} s\n", compiled, cached, s);
  return 0;
}

}  // namespace

Registered register_precompile(CLI::App& root) {
  auto opt = std::make_shared<Options>();
  auto* cmd = root.add_subcommand("precompile", "Compile every kernel into the cache for exact targets (no GPU needed)");
  cmd->add_option("--target", opt->targets, "Comma-separated exact targets, e.g. sm_90a,sm_121a")->required();
  cmd->add_option("--model", opt->models, "Preset(s) whose kernels to compile (default: mistral-small-4)");
  cmd->add_flag("--all-presets", opt->all_presets, "Compile the kernels of every preset");
  opt->formats.add_to(cmd);
  cmd->add_option("--checkpoint", opt->checkpoint,
                  "Compile the kernels of one layer of this Hugging Face checkpoint directory instead of presets");
  cmd->add_option("--layer", opt->layer, "Layer of --checkpoint")->capture_default_str();
  return {cmd, [opt]() -> int { return run(*opt); }};
}

}  // namespace moeforge::cli
