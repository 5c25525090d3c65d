// Running a test body in a child process with a fault injected after one stage.
//
// A sticky error (715, 719, ...) kills the CUDA context for the rest of the
// process, so fault-attribution tests run their body in a child: the parent
// test re-executes this binary with --gtest_filter=<child test> and
// MOEFORGE_FAULT_STAGE=<stage>; the child test (which skips unless
// in_fault_child()) runs the pipeline and checks the attribution.
//
//   TEST(MyGpu, Gemm1FaultIsAttributed) {
//     auto r = moeforge::testing::run_fault_child("MyGpu.Gemm1FaultChild", "gemm1");
//     EXPECT_EQ(r.status, 0) << r.output;
//     EXPECT_NE(r.output.find("device context lost after 'gemm1'"), std::string::npos) << r.output;
//   }
//   TEST(MyGpu, Gemm1FaultChild) {
//     if (!moeforge::testing::in_fault_child()) GTEST_SKIP() << "child of Gemm1FaultIsAttributed";
//     ... run a forward; expect DeviceError whose message names 'gemm1' ...
//   }
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace moeforge::testing {

struct ChildResult {
  int status = -1;  // exit status of the child test binary
  std::string output;
};

inline bool in_fault_child() { return std::getenv("MOEFORGE_TEST_FAULT_CHILD") != nullptr; }

inline ChildResult run_fault_child(const std::string& gtest_filter, const std::string& stage,
                                   const std::string& extra_env = "") {
  ChildResult r;
  char exe[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return r;
  // The child runs its one test whole: a parent that is one shard of a sharded run
  // (run_all.sh MOEFORGE_TEST_SHARDS) must not hand it its shard, which would select no test.
  const std::string cmd = "env -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX MOEFORGE_TEST_FAULT_CHILD=1 "
                          "MOEFORGE_FAULT_STAGE='" + stage + "' " + extra_env + " '" + std::string(exe, size_t(n)) +
                          "' --gtest_filter='" + gtest_filter + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, got);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return r;
}

}  // namespace moeforge::testing
