#include "runtime/doctor.hpp"

#include <fmt/format.h>

#include <set>

#include "backends/backend.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/spec.hpp"
#include "runtime/cache.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit.hpp"
#include "runtime/selftest.hpp"
#include "runtime/settings.hpp"

namespace moeforge::rt {
namespace {

using json = nlohmann::json;

std::string driver_version_str(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

json device_json(const DeviceInfo& d) {
  return {{"ordinal", d.ordinal},
          {"name", d.name},
          {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
          {"target", d.target},
          {"family_fallback", d.family_fallback},
          {"sm_count", d.sm_count},
          {"smem_optin_per_block", d.smem_optin_per_block},
          {"smem_per_sm", d.smem_per_sm},
          {"regs_per_block", d.regs_per_block},
          {"regs_per_sm", d.regs_per_sm},
          {"max_threads_per_block", d.max_threads_per_block},
          {"max_grid", {d.max_grid_x, d.max_grid_y, d.max_grid_z}},
          {"l2_bytes", d.l2_bytes},
          {"total_mem", d.total_mem}};
}

}  // namespace

json doctor_report(const DoctorOptions& opt) {
  json r;
  json problems = json::array();
  r["moeforge"] = MOEFORGE_VERSION;

  std::string why;
  const Driver* drv = driver_or_null(&why);
  r["driver"] = drv ? json{{"available", true}, {"version", drv->version}, {"version_str", driver_version_str(drv->version)}}
                    : json{{"available", false}, {"message", "no CUDA driver: " + why}};
  if (!drv) problems.push_back("no CUDA driver: " + why);
  r["nvrtc"] = {{"version", nvrtc_version()}, {"supported_sms", nvrtc_supported_sms()}};
  r["supported_targets"] = supported_targets();
  const Settings& s = settings();
  r["settings"] = {{"cache_root", s.cache_root},
                   {"cache_root_source", s.cache_root_source},
                   {"allow_family", s.allow_family},
                   {"sync_check", s.sync_check},
                   {"fault_stage", s.fault_stage},
                   {"sm90_crossover", s.sm90_crossover},
                   {"sm90_decode_bt", s.sm90_decode_bt},
                   {"sm90_stream_k", s.sm90_stream_k}};

  // Devices, each with its exact target and a self-test.
  std::vector<DeviceInfo> devices;
  json devs = json::array();
  const int n = device_count();
  for (int i = 0; i < n; ++i) {
    json dj;
    try {
      DeviceInfo d = cached_device_info(i);
      dj = device_json(d);
      if (d.family_fallback)
        problems.push_back(fmt::format("device {} ({}) uses family fallback target {} (MOEFORGE_ALLOW_FAMILY=1)", i,
                                       d.name, d.target));
      if (opt.run_selftest) {
        SelftestResult st = run_selftest(i);
        dj["selftest"] = {{"ok", st.ok},           {"message", st.message},     {"binary_version", st.binary_version},
                          {"cuda_arch", st.cuda_arch}, {"registers", st.registers}, {"key", st.key},
                          {"ms", st.ms}};
        if (!st.ok) problems.push_back(fmt::format("device {} self-test failed: {}", i, st.message));
      }
      devices.push_back(d);
    } catch (const std::exception& e) {
      dj = {{"ordinal", i}, {"error", e.what()}};
      problems.push_back(fmt::format("device {}: {}", i, e.what()));
    }
    devs.push_back(dj);
  }
  r["devices"] = devs;

  // Cache: root, permission verdict, entries by target.
  std::set<std::string> here;
  for (auto& d : devices) here.insert(d.target);
  json cache = {{"root", s.cache_root}};
  std::string unsafe = KernelCache::unsafe_reason(s.cache_root);
  cache["verdict"] = unsafe.empty() ? "ok" : "refused: " + unsafe;
  if (!unsafe.empty()) problems.push_back(unsafe);
  json by_target = json::object();
  size_t bad = 0;
  for (const CacheEntryInfo& e : KernelCache(s.cache_root).list()) {
    json& t = by_target[e.target];
    if (!t.contains("entries")) {
      if (std::string u = KernelCache::unsafe_reason(s.cache_root + "/" + e.target); !u.empty()) {
        t["verdict"] = "refused: " + u;
        problems.push_back(u);
      }
      t["used_here"] = here.count(e.target) > 0;
      t["note"] = here.count(e.target) ? "exact target of a device here"
                                       : "unused here, never loaded (no device here has this exact target)";
      t["entries"] = json::array();
    }
    json ej = {{"key", e.key},     {"source", e.source},   {"entry", e.entry},          {"bytes", e.bytes},
               {"created", e.created}, {"compile_ms", e.compile_ms}, {"ok", e.problem.empty()}};
    if (!e.problem.empty()) {
      ej["problem"] = e.problem;
      ++bad;
    }
    t["entries"].push_back(ej);
  }
  cache["targets"] = by_target;
  cache["invalid_entries"] = bad;
  r["cache"] = cache;

  // Resource budget: kernels of every GPU backend for every preset, against each device.
  json budget = {{"checked", 0}, {"rejections", json::array()}};
  if (devices.empty()) budget["note"] = "no device here: budgets are checked against a running device's limits";
  int checked = 0;
  for (const DeviceInfo& d : devices)
    for (const std::string& preset : presets::names()) {
      MoeSpec spec = presets::get(preset);
      for (const Backend* b : all_backends()) {
        if (!b->needs_gpu()) continue;
        std::vector<KernelSpec> ks;
        try {
          ks = b->kernels(spec);
        } catch (const std::exception& e) {
          budget["rejections"].push_back(
              {{"device", d.ordinal}, {"preset", preset}, {"backend", b->name()}, {"why", e.what()}});
          continue;
        }
        for (const KernelSpec& k : ks) {
          ++checked;
          if (std::string v = budget_violation(k, d); !v.empty())
            budget["rejections"].push_back({{"device", d.ordinal},
                                            {"preset", preset},
                                            {"backend", std::string(b->name())},
                                            {"kernel", k.entry},
                                            {"why", v}});
        }
      }
    }
  budget["checked"] = checked;
  r["budget"] = budget;

  // The backend `auto` would choose.
  json be = {{"model", opt.model}};
  if (opt.choose_backend) {
    try {
      MoeSpec spec = presets::get(opt.model);
      BackendChoice c = choose_backend(spec, "auto", 0);
      be["chosen"] = c.backend ? std::string(c.backend->name()) : "";
      be["reason"] = c.reason;
      be["rejected"] = c.rejected;
    } catch (const std::exception& e) {
      be["error"] = e.what();
      problems.push_back(std::string("backend choice: ") + e.what());
    }
  }
  r["backend"] = be;
  r["problems"] = problems;
  return r;
}

}  // namespace moeforge::rt
