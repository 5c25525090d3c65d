// moeforge doctor: what this machine is, exactly, and what moeforge will do on it.
// The data comes from rt::doctor_report (one JSON object); --json prints it as is.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "moeforge/errors.hpp"
#include "runtime/doctor.hpp"

namespace moeforge::cli {
namespace {

using json = nlohmann::json;

struct Options {
  bool json_out = false;
  bool no_selftest = false;
  std::string model = "mistral-small-4";
};

std::string mib(int64_t b) { return fmt::format("{:.0f} MiB", double(b) / (1024.0 * 1024.0)); }

void print_human(const json& r) {
  fmt::print("moeforge {}\n", r["moeforge"].get<std::string>());
  const json& drv = r["driver"];
  if (drv["available"].get<bool>())
    fmt::print("CUDA driver   {} ({})\n", drv["version_str"].get<std::string>(), drv["version"].get<int>());
  else
    fmt::print("CUDA driver   {}\n", drv["message"].get<std::string>());
  std::string sms;
  for (int v : r["nvrtc"]["supported_sms"]) sms += fmt::format(" {}", v);
  fmt::print("NVRTC         {} (sm:{})\n", r["nvrtc"]["version"].get<std::string>(), sms);
  std::string tg;
  for (const auto& t : r["supported_targets"]) tg += " " + t.get<std::string>();
  fmt::print("targets       {}\n", tg.substr(1));

  fmt::print("\ndevices\n");
  if (r["devices"].empty()) fmt::print("  none{}\n", drv["available"].get<bool>() ? "" : " (no CUDA driver)");
  for (const json& d : r["devices"]) {
    if (d.contains("error")) {
      fmt::print("  [{}] error: {}\n", d["ordinal"].get<int>(), d["error"].get<std::string>());
      continue;
    }
    fmt::print("  [{}] {}  cc {}  target {}{}\n", d["ordinal"].get<int>(), d["name"].get<std::string>(),
               d["compute_capability"].get<std::string>(), d["target"].get<std::string>(),
               d["family_fallback"].get<bool>() ? "  (FAMILY FALLBACK: not the exact target)" : "  (exact)");
    fmt::print("      {} SMs, smem opt-in {} B/block, {} B/SM, {} regs/block, L2 {}, memory {}\n",
               d["sm_count"].get<int>(), d["smem_optin_per_block"].get<int>(), d["smem_per_sm"].get<int>(),
               d["regs_per_block"].get<int>(), mib(d["l2_bytes"].get<int64_t>()), mib(d["total_mem"].get<int64_t>()));
    if (d.contains("selftest"))
      fmt::print("      self-test {}: {} (binary version {}, {:.1f} ms)\n",
                 d["selftest"]["ok"].get<bool>() ? "passed" : "FAILED", d["selftest"]["message"].get<std::string>(),
                 d["selftest"]["binary_version"].get<int>(), d["selftest"]["ms"].get<double>());
  }

  const json& c = r["cache"];
  fmt::print("\nkernel cache  {} (from {})\n", c["root"].get<std::string>(),
             r["settings"]["cache_root_source"].get<std::string>());
  fmt::print("  permissions {}\n", c["verdict"].get<std::string>());
  if (c["targets"].empty()) fmt::print("  no entries\n");
  for (const auto& [target, t] : c["targets"].items()) {
    fmt::print("  {}: {} entries, {}\n", target, t["entries"].size(), t["note"].get<std::string>());
    if (t.contains("verdict")) fmt::print("    {}\n", t["verdict"].get<std::string>());
    for (const json& e : t["entries"])
      fmt::print("    {}  {}:{}  {} B  {}{}\n", e["key"].get<std::string>().substr(0, 16), e["source"].get<std::string>(),
                 e["entry"].get<std::string>(), e["bytes"].get<size_t>(), e["created"].get<std::string>(),
                 e["ok"].get<bool>() ? "" : "  INVALID: " + e["problem"].get<std::string>());
  }

  const json& b = r["budget"];
  fmt::print("\nresource budget: {} kernel configs checked, {} rejected\n", b["checked"].get<int>(),
             b["rejections"].size());
  if (b.contains("note")) fmt::print("  {}\n", b["note"].get<std::string>());
  for (const json& x : b["rejections"])
    fmt::print("  device {} {} {}: {}\n", x["device"].get<int>(), x["preset"].get<std::string>(),
               x["backend"].get<std::string>(), x["why"].get<std::string>());

  const json& be = r["backend"];
  fmt::print("\nbackend for {}: ", be["model"].get<std::string>());
  if (be.contains("error"))
    fmt::print("error: {}\n", be["error"].get<std::string>());
  else if (be.contains("chosen")) {
    fmt::print("{} ({})\n", be["chosen"].get<std::string>(), be["reason"].get<std::string>());
    for (const auto& x : be["rejected"]) fmt::print("  rejected {}\n", x.get<std::string>());
  } else
    fmt::print("not evaluated\n");

  if (!r["problems"].empty()) {
    fmt::print("\nproblems\n");
    for (const auto& p : r["problems"]) fmt::print("  - {}\n", p.get<std::string>());
  }
}

}  // namespace

Registered register_doctor(CLI::App& root) {
  auto opt = std::make_shared<Options>();
  auto* cmd = root.add_subcommand("doctor", "Report devices, exact targets, driver/NVRTC, the kernel cache, "
                                            "resource-budget rejections and the backend `auto` would choose");
  cmd->add_flag("--json", opt->json_out, "Print one JSON object instead of text");
  cmd->add_flag("--no-selftest", opt->no_selftest, "Skip the per-GPU runtime self-test and the backend choice");
  cmd->add_option("--model", opt->model, "Preset for the backend choice")->capture_default_str();
  return {cmd, [opt]() -> int {
            rt::DoctorOptions o;
            o.model = opt->model;
            o.run_selftest = !opt->no_selftest;
            o.choose_backend = !opt->no_selftest;
            const nlohmann::json r = rt::doctor_report(o);
            if (opt->json_out)
              std::printf("%s\n", r.dump(2).c_str());
            else
              print_human(r);
            bool failed = false;
            for (const auto& d : r["devices"])
              if (d.contains("error") || (d.contains("selftest") && !d["selftest"]["ok"].get<bool>())) failed = true;
            return failed ? int(ErrorKind::Device) : 0;
          }};
}

}  // namespace moeforge::cli
