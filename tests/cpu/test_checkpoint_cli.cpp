// `moeforge run --checkpoint DIR --layer L` as a user runs it (fixtures: MOEFORGE_FIXTURES_DIR).
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "moeforge/checkpoint.hpp"
#include "test_runtime_support.hpp"

namespace {

std::string fixtures() {
  const char* d = std::getenv("MOEFORGE_FIXTURES_DIR");
  return d ? d : "";
}

TEST(CheckpointCli, RunChecksEveryLayoutOnTheCpu) {
  if (fixtures().empty()) GTEST_SKIP() << "MOEFORGE_FIXTURES_DIR is not set: tools/test.d/10-checkpoints.sh sets it";
  for (const char* name : {"bf16-mixtral", "fp8-deepseek", "nvfp4-ct", "nvfp4-modelopt", "mxfp4-gptoss", "fp8-ct-channel"}) {
    const std::string layer = std::string(name) == "fp8-deepseek" ? "1" : "0";
    int code = -1;
    const std::string out = moeforge::testing::run_capture(
        std::string(MOEFORGE_CLI_PATH) + " run --checkpoint " + fixtures() + "/" + name + " --layer " + layer +
            " --tokens 5 --backend cpu --check --json 2>/dev/null",
        &code);
    ASSERT_EQ(code, 0) << name << ": " << out;
    const auto j = nlohmann::json::parse(out.substr(out.find('{')));
    EXPECT_EQ(j["backend"], "cpu");
    EXPECT_EQ(j["layer"].get<int>(), std::stoi(layer));
    EXPECT_EQ(j["routing"], "x . router weight^T") << name;
    EXPECT_EQ(j["unwritten"], 0);
    EXPECT_TRUE(j["check"]["passed"].get<bool>()) << name;
    EXPECT_NE(j["layout"].get<std::string>().find("layer " + layer), std::string::npos);
  }
}

TEST(CheckpointCli, ErrorsNameTheProblemWithTheIoExitCode) {
  int code = -1;
  std::string out = moeforge::testing::run_capture(
      std::string(MOEFORGE_CLI_PATH) + " run --checkpoint /nonexistent/ckpt --tokens 2 2>&1", &code);
  EXPECT_EQ(code, 7) << out;
  EXPECT_NE(out.find("/nonexistent/ckpt: not a checkpoint directory"), std::string::npos) << out;
  if (fixtures().empty()) return;
  out = moeforge::testing::run_capture(std::string(MOEFORGE_CLI_PATH) + " run --checkpoint " + fixtures() +
                                           "/hostile/truncated --tokens 2 2>&1", &code);
  EXPECT_EQ(code, 7) << out;
  EXPECT_NE(out.find("truncated"), std::string::npos) << out;
  out = moeforge::testing::run_capture(std::string(MOEFORGE_CLI_PATH) + " run --checkpoint " + fixtures() +
                                           "/bf16-qwen3 --model deepseek-v3 --tokens 2 2>&1", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--model"), std::string::npos) << out;
}

// `moeforge precompile --checkpoint DIR --layer L` compiles what that layer loads: the kernels of
// its shape in its formats (the NVFP4 fixture: the portable backend's NVFP4 kernels at sm_80, the
// cheapest target to compile for), and names the checkpoint in its summary.
TEST(CheckpointCli, PrecompileCompilesTheLayersKernels) {
  if (fixtures().empty()) GTEST_SKIP() << "MOEFORGE_FIXTURES_DIR is not set: tools/test.d/10-checkpoints.sh sets it";
  moeforge::testing::TempDir tmp;
  const std::string dir = fixtures() + "/nvfp4-ct";
  int code = -1;
  const std::string out = moeforge::testing::run_capture(
      "MOEFORGE_CACHE_DIR=" + tmp.path + "/cache " + std::string(MOEFORGE_CLI_PATH) + " precompile --target sm_80 " +
          "--checkpoint " + dir + " --layer 0 2>&1",
      &code);
  ASSERT_EQ(code, 0) << out;
  const auto ckpt = moeforge::CheckpointWeights::open(dir, 0);
  EXPECT_EQ(ckpt->spec().weight_format, moeforge::WeightFormat::NVFP4);
  EXPECT_NE(out.find(ckpt->describe()), std::string::npos) << out;
  EXPECT_GT(moeforge::testing::expect_precompiled(tmp.path + "/cache", ckpt->spec(), "sm_80").checked, 0);
}

}  // namespace
