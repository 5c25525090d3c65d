// The moeforge CLI as a user runs it: `run` on the CPU path, flags and errors.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/driver.hpp"

namespace {

struct Result {
  int code;
  std::string out;
};

// stdout and stderr together, unless stdout_only (the library logs on stderr).
Result cli(const std::string& args, bool stdout_only = false) {
  const std::string cmd = std::string(MOEFORGE_CLI_PATH) + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool have_gpu() { return moeforge::rt::driver_or_null() != nullptr; }

// `moeforge args` exits with `code` and says `needle` (a bad flag: 2, naming it).
void expect_exit(const std::string& args, int code, const std::string& needle) {
  const Result r = cli(args);
  EXPECT_EQ(r.code, code) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\n" << r.out;
}

}  // namespace

TEST(CliRun, HelpDocumentsEveryFlag) {
  const Result r = cli("run --help");
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--model", "--tokens", "--backend", "--weights", "--seed", "--device", "--check", "--json"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  const Result top = cli("--help");
  for (const char* sub : {"run", "doctor", "precompile", "bench"}) EXPECT_NE(top.out.find(sub), std::string::npos);
}

TEST(CliRun, CpuJsonIsDeterministicAndChecked) {
  const std::string args = "run --model qwen3-30b-a3b --tokens 3 --backend cpu --seed 7 --json --check";
  const Result a = cli(args), b = cli(args);
  ASSERT_EQ(a.code, 0) << a.out;
  const auto ja = nlohmann::json::parse(a.out.substr(a.out.find('{')));
  const auto jb = nlohmann::json::parse(b.out.substr(b.out.find('{')));
  EXPECT_EQ(ja["backend"], "cpu");
  EXPECT_EQ(ja["tokens"], 3);
  EXPECT_EQ(ja["unwritten"], 0);
  EXPECT_EQ(ja["checksum"], jb["checksum"]);
  EXPECT_GT(ja["mean_abs"].get<double>(), 0.0);
  EXPECT_TRUE(ja["check"]["passed"].get<bool>());
  const Result c = cli("run --model qwen3-30b-a3b --tokens 3 --backend cpu --seed 8 --json");
  EXPECT_NE(nlohmann::json::parse(c.out.substr(c.out.find('{')))["checksum"], ja["checksum"]);
}

TEST(CliRun, WithoutGpuSaysSoInOneLine) {
  if (have_gpu()) GTEST_SKIP() << "this machine has a CUDA driver";
  const Result r = cli("run --model qwen3-30b-a3b --tokens 2", /*stdout_only=*/true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("no GPU: running the CPU reference", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("checksum"), std::string::npos);
}

TEST(CliRun, BadFlagsNameTheArgument) {
  expect_exit("run --model llama --tokens 2", 2, "model: unknown preset 'llama'");
  expect_exit("run --tokens -4 --backend cpu", 2, "--tokens");
  expect_exit("run --weights int3 --tokens 1", 2, "--weights");
  if (!have_gpu()) expect_exit("run --backend portable --tokens 1 --model qwen3-30b-a3b", 3, "no CUDA driver");
}

// bench's own flags are checked before it looks for a GPU: the same error on every machine.
TEST(CliBench, BadFlagsNameTheArgument) {
  expect_exit("bench --l2-flush sideways --tokens 1", 2, "--l2-flush: must be read or write, got 'sideways'");
  expect_exit("bench --launch eagerly --tokens 1", 2, "--launch: must be graph or stream, got 'eagerly'");
  expect_exit("bench --runs 0", 2, "--runs");
  expect_exit("bench --tokens 0", 2, "--tokens");
  // A checkpoint gives the spec and the formats: flags that would contradict it are refused,
  // not silently ignored.
  expect_exit("bench --checkpoint /nonexistent --model deepseek-v3", 2, "--model: cannot be combined with --checkpoint");
  expect_exit("bench --checkpoint /nonexistent --weights nvfp4", 2, "--weights/--activations: cannot be combined");
}

// precompile's flags: refused before anything compiles, naming the flag.
TEST(CliPrecompile, BadFlagsNameTheArgument) {
  expect_exit("precompile --target sm_90a --weights fp9", 2, "--weights: unknown weight format 'fp9'");
  expect_exit("precompile --target sm_90a --activations int4", 2, "--activations");
  expect_exit("precompile --target sm_90a --checkpoint /nonexistent --model deepseek-v3", 2,
              "--model: cannot be combined with --checkpoint");
  expect_exit("precompile --target sm_90a --checkpoint /nonexistent --all-presets", 2,
              "--all-presets: cannot be combined with --checkpoint");
  expect_exit("precompile --target sm_90a --checkpoint /nonexistent --activations fp8", 2,
              "--weights/--activations: cannot be combined");
  expect_exit("precompile --target sm_90a --checkpoint /nonexistent", 7, "not a checkpoint directory");
  // No GPU backend serves MXFP4 weights with FP8 activations: nothing to compile, and it says so.
  expect_exit("precompile --target sm_90a --weights mxfp4 --activations fp8", 3, "no GPU backend serves");
}
