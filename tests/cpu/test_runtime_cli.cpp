// The built CLI: `moeforge doctor --json` and `moeforge precompile` with a temp cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "moeforge/spec.hpp"
#include "runtime/device.hpp"
#include "runtime/doctor.hpp"
#include "runtime/driver.hpp"
#include "runtime/settings.hpp"
#include "test_runtime_support.hpp"

using moeforge::testing::run_capture;
using moeforge::testing::TempDir;

TEST(DoctorCli, PrecompileThenDoctorJson) {
  TempDir tmp;
  const std::string env = "MOEFORGE_CACHE_DIR=" + tmp.path + "/cache ";
  int status = -1;
  std::string out = run_capture(env + MOEFORGE_CLI_PATH " precompile --target sm_90a,sm_121a 2>&1", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("sm_90a: compiled"), std::string::npos) << out;
  EXPECT_NE(out.find("sm_121a: compiled"), std::string::npos) << out;
  EXPECT_NE(out.find("cached 0"), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::is_directory(tmp.path + "/cache/sm_90a"));
  EXPECT_TRUE(std::filesystem::is_directory(tmp.path + "/cache/sm_121a"));
  // What it built is what load_kernel asks for on an sm_90a device: every GPU backend's kernels
  // for the default model, each with the PDL proof where it launches with PDL (another key).
  // (Until session 21 precompile built every kernel without it: its entries were never hit.)
  {
    const moeforge::MoeSpec spec = moeforge::presets::get("mistral-small-4");
    const auto c = moeforge::testing::expect_precompiled(tmp.path + "/cache", spec, "sm_90a");
    EXPECT_GT(c.checked, 0);
    if (moeforge::rt::settings().pdl) {  // the forward's kernels all wait on the prior grid
      EXPECT_GT(c.with_pdl, 0);
    }
  }
  // Second run: everything from the cache.
  out = run_capture(env + MOEFORGE_CLI_PATH " precompile --target sm_90a,sm_121a 2>&1", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("compiled 0,"), std::string::npos) << out;

  out = run_capture(env + MOEFORGE_CLI_PATH " doctor --json --no-selftest 2>/dev/null", &status);
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  for (const char* k : {"moeforge", "driver", "nvrtc", "supported_targets", "settings", "devices", "cache", "budget",
                        "backend", "problems"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["cache"]["root"], tmp.path + "/cache");
  EXPECT_EQ(j["cache"]["verdict"], "ok");
  ASSERT_TRUE(j["cache"]["targets"].contains("sm_121a"));
  EXPECT_GE(j["cache"]["targets"]["sm_90a"]["entries"].size(), 2u);  // selftest + fault
  EXPECT_EQ(j["cache"]["invalid_entries"], 0);
  std::string why;
  if (!moeforge::rt::driver_or_null(&why)) {
    EXPECT_EQ(status, 0);
    EXPECT_FALSE(j["driver"]["available"].get<bool>());
    EXPECT_EQ(j["driver"]["message"].get<std::string>().rfind("no CUDA driver: ", 0), 0u);
    EXPECT_TRUE(j["devices"].empty());
    EXPECT_EQ(j["cache"]["targets"]["sm_121a"]["used_here"], false);
    EXPECT_NE(j["cache"]["targets"]["sm_121a"]["note"].get<std::string>().find("never loaded"), std::string::npos);
  }
  // Human-readable form.
  out = run_capture(env + MOEFORGE_CLI_PATH " doctor --no-selftest 2>/dev/null", &status);
  EXPECT_NE(out.find("kernel cache  " + tmp.path + "/cache"), std::string::npos) << out;
  if (!moeforge::rt::driver_or_null()) {
    EXPECT_NE(out.find("no CUDA driver: "), std::string::npos) << out;
  }
}

TEST(DoctorCli, UnsafeCacheIsReportedAndPrecompileRefuses) {
  TempDir tmp;
  const std::string root = tmp.path + "/cache";
  std::filesystem::create_directory(root);
  std::filesystem::permissions(root, std::filesystem::perms::all);
  int status = -1;
  std::string out =
      run_capture("MOEFORGE_CACHE_DIR=" + root + " " MOEFORGE_CLI_PATH " precompile --target sm_90a 2>&1", &status);
  EXPECT_EQ(status, 6) << out;  // ErrorKind::Cache
  EXPECT_NE(out.find("writable by every user"), std::string::npos) << out;
  out = run_capture("MOEFORGE_CACHE_DIR=" + root + " " MOEFORGE_CLI_PATH " doctor --json --no-selftest 2>/dev/null",
                    &status);
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["cache"]["verdict"].get<std::string>().rfind("refused: ", 0), 0u);
}

TEST(DoctorReport, CompleteWithoutADevice) {
  moeforge::rt::DoctorOptions o;
  o.choose_backend = true;
  auto j = moeforge::rt::doctor_report(o);
  EXPECT_TRUE(j["nvrtc"]["supported_sms"].is_array());
  EXPECT_EQ(j["supported_targets"].size(), moeforge::rt::supported_targets().size());
  EXPECT_TRUE(j["backend"].contains("chosen") || j["backend"].contains("error"));
  if (moeforge::rt::device_count() == 0) {
    EXPECT_TRUE(j["budget"].contains("note"));
    EXPECT_EQ(j["budget"]["checked"], 0);
  }
}

TEST(DoctorCli, PrecompileRejectsUnknownTargets) {
  int status = -1;
  std::string out = run_capture(MOEFORGE_CLI_PATH " precompile --target sm_91x 2>&1", &status);
  EXPECT_EQ(status, 2) << out;
  out = run_capture(MOEFORGE_CLI_PATH " precompile --target sm_70 2>&1", &status);
  EXPECT_EQ(status, 3) << out;
  EXPECT_NE(out.find("cannot compile for sm_70"), std::string::npos) << out;
}

// --weights / --activations select the presets' formats: what an NVFP4 deployment loads is what
// gets compiled (sm_80: the portable backend's kernels, the cheapest target to compile for).
TEST(DoctorCli, PrecompileCompilesTheFormatsAsked) {
  TempDir tmp;
  int status = -1;
  const std::string out = run_capture("MOEFORGE_CACHE_DIR=" + tmp.path + "/cache " MOEFORGE_CLI_PATH
                                      " precompile --target sm_80 --weights nvfp4 2>&1", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("nvfp4 weights"), std::string::npos) << out;
  moeforge::MoeSpec spec = moeforge::presets::get("mistral-small-4");
  spec.weight_format = moeforge::WeightFormat::NVFP4;
  EXPECT_GT(moeforge::testing::expect_precompiled(tmp.path + "/cache", spec, "sm_80").checked, 0);
}
