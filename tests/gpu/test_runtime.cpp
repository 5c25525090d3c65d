// The exact-architecture kernel runtime on a real GPU: compile -> load -> launch
// -> verify; other-target cubins refused before the driver; the driver's own 209;
// a fault attributed to the stage that caused it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "fault_child.hpp"
#include "moeforge/errors.hpp"
#include "runtime/breadcrumbs.hpp"
#include "runtime/cache.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit.hpp"
#include "runtime/selftest.hpp"

using namespace moeforge;
using namespace moeforge::rt;

namespace {

#define REQUIRE_DEVICE()                                                             \
  do {                                                                               \
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";                        \
    if (context_lost()) GTEST_SKIP() << "context already lost in this process";      \
  } while (0)

std::string cubin_for(const std::string& target) {
  const KernelSpec k = selftest_kernel_spec();
  return compile({k.source, k.entry, k.defines, k.options, target}).cubin;
}

// A supported target whose SM number differs from the device's.
std::vector<std::string> foreign_targets(const std::string& mine) {
  std::vector<std::string> out;
  for (const std::string t : {"sm_100a", "sm_121a", "sm_120a", "sm_90a", "sm_80"})
    if (target_sm_number(t) != target_sm_number(mine)) out.push_back(t);
  return out;
}

void expect_selftest_ok(const char* when) {
  SelftestResult r = run_selftest(0);
  EXPECT_TRUE(r.ok) << when << ": " << r.message;
  EXPECT_EQ(r.mismatches, 0u) << when;
}

}  // namespace

TEST(RuntimeGpu, SelftestCompilesLoadsRunsAndVerifies) {
  REQUIRE_DEVICE();
  const DeviceInfo& info = cached_device_info(0);
  SelftestResult r = run_selftest(0);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.target, info.target);
  EXPECT_EQ(r.binary_version, target_sm_number(info.target));
  EXPECT_EQ(r.cuda_arch, target_sm_number(info.target) * 10);
  if (info.cc_major == 9 && info.cc_minor == 0) {
    EXPECT_EQ(info.target, "sm_90a");
    EXPECT_EQ(r.binary_version, 90);
  }
  RecordProperty("target", info.target);
  RecordProperty("binary_version", r.binary_version);
  RecordProperty("cuda_arch", r.cuda_arch);
  RecordProperty("registers", r.registers);
  RecordProperty("values_checked", int(r.n));
  // The loaded kernel is memoized: same object on the second call.
  EXPECT_EQ(&load_kernel(0, selftest_kernel_spec()), &load_kernel(0, selftest_kernel_spec()));
}

TEST(RuntimeGpu, OtherTargetCubinsAreRefusedBeforeTheDriver) {
  REQUIRE_DEVICE();
  const std::string mine = cached_device_info(0).target;
  expect_selftest_ok("before");
  std::vector<std::string> tried = foreign_targets(mine);
  // Same SM, other variant: sm_90 (no 'a') on an sm_90a device.
  if (mine.back() == 'a') tried.push_back(mine.substr(0, mine.size() - 1));
  for (const std::string& t : tried) {
    const std::string bytes = cubin_for(t);
    try {
      load_cubin(0, bytes, "moeforge_selftest", "planted-" + t + ".cubin");
      ADD_FAILURE() << t << " cubin was loaded on a " << mine << " device";
    } catch (const Unsupported& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("expected target is " + mine), std::string::npos) << m;
      EXPECT_NE(m.find("planted-" + t + ".cubin"), std::string::npos) << m;
      EXPECT_NE(m.find("built for sm_" + std::to_string(target_sm_number(t))), std::string::npos) << m;
    }
    expect_selftest_ok(("after refusing " + t).c_str());
  }
  RecordProperty("refused_targets", int(tried.size()));
}

TEST(RuntimeGpu, DriverItselfRejectsAWrongTargetWith209AndTheContextSurvives) {
  REQUIRE_DEVICE();
  const std::string mine = cached_device_info(0).target;
  const std::string other = foreign_targets(mine).front();
  const std::string bytes = cubin_for(other);
  const Driver& d = driver();
  use_device(0);
  CUmodule m = nullptr;
  const CUresult r = d.cuModuleLoadData(&m, bytes.data());  // deliberately unchecked: what we would otherwise see
  EXPECT_EQ(int(r), int(CUDA_ERROR_NO_BINARY_FOR_GPU)) << error_name(r);
  if (r == CUDA_SUCCESS) d.cuModuleUnload(m);
  RecordProperty("driver_error", int(r));
  RecordProperty("foreign_target", other);
  expect_selftest_ok("after the driver's own rejection");
}

TEST(RuntimeGpu, BudgetOverTheDeviceLimitIsRejectedBeforeCompiling) {
  REQUIRE_DEVICE();
  const DeviceInfo& info = cached_device_info(0);
  KernelSpec k = selftest_kernel_spec();
  k.smem_bytes = info.smem_optin_per_block + 1;
  try {
    load_kernel(0, k);
    FAIL() << "over-budget kernel loaded";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(info.smem_optin_per_block)), std::string::npos) << e.what();
  }
  RecordProperty("smem_optin_per_block", info.smem_optin_per_block);
}

TEST(RuntimeGpu, DynamicSharedMemoryOptInAbove48KiB) {
  REQUIRE_DEVICE();
  const DeviceInfo& info = cached_device_info(0);
  KernelSpec k = selftest_kernel_spec();
  k.smem_bytes = std::min(info.smem_optin_per_block, 100 * 1024);
  const LoadedKernel& lk = load_kernel(0, k);
  uint32_t n = 1024, seed = 7;
  CUdeviceptr out = 0, arch = 0;
  const Driver& d = driver();
  check(d.cuMemAlloc(&out, n * 4), "cuMemAlloc");
  check(d.cuMemAlloc(&arch, 4), "cuMemAlloc");
  void* args[] = {&out, &n, &seed, &arch};
  EXPECT_NO_THROW(launch(lk, {n / 256, 1, 1}, {256, 1, 1}, unsigned(k.smem_bytes), nullptr, args, "selftest-smem"));
  check(d.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  std::vector<uint32_t> host(n);
  check(d.cuMemcpyDtoH(host.data(), out, n * 4), "cuMemcpyDtoH");
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(host[i], selftest_expected(i, seed, 256)) << i;
  d.cuMemFree(out);
  d.cuMemFree(arch);
}

// Fault attribution, in a child process (the fault kills the context).
TEST(RuntimeGpuFault, InjectedFaultIsAttributedToItsStage) {
  REQUIRE_DEVICE();
  auto r = moeforge::testing::run_fault_child("RuntimeGpuFault.SelftestStageChild", "selftest");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("device context lost after 'selftest'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[  PASSED  ] 1 test"), std::string::npos) << r.output;
}

TEST(RuntimeGpuFault, SelftestStageChild) {
  if (!moeforge::testing::in_fault_child()) GTEST_SKIP() << "child of InjectedFaultIsAttributedToItsStage";
  REQUIRE_DEVICE();
  // The self-test launches stage "selftest"; the injected trap follows it on the stream.
  SelftestResult r = run_selftest(0);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("device context lost after 'selftest'"), std::string::npos) << r.message;
  EXPECT_TRUE(context_lost());
  // Every later load and launch fails fast with the same attribution...
  KernelSpec other = selftest_kernel_spec();
  other.defines[0].second = "3u";
  try {
    load_kernel(0, other);
    ADD_FAILURE() << "load after a lost context succeeded";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("device context lost after 'selftest'"), std::string::npos) << e.what();
  }
  // ...and an unrelated driver call reports the same first cause, not itself.
  CUdeviceptr p = 0;
  try {
    check(driver().cuMemAlloc(&p, 256), "cuMemAlloc(unrelated)");
    ADD_FAILURE() << "cuMemAlloc after a lost context succeeded";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("device context lost after 'selftest'"), std::string::npos) << e.what();
    std::printf("unrelated call reported: %s\n", e.what());
  }
}

// The sm90 watchdog (sm90/wait.cuh): a wait that never completes faults after WAIT_LIMIT_NS
// (1 ms here) instead of hanging, and the fault is attributed to the stage that launched it;
// the same kernel whose barrier completes returns. In a child process (the fault kills the
// context).
TEST(RuntimeGpuFault, Sm90WatchdogFaultsAStuckWait) {
  REQUIRE_DEVICE();
  if (cached_device_info(0).target != "sm_90a") GTEST_SKIP() << "the sm90 waits are built for sm_90a";
  auto r = moeforge::testing::run_fault_child("RuntimeGpuFault.Sm90WatchdogChild", "");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[  PASSED  ] 1 test"), std::string::npos) << r.output;
}

TEST(RuntimeGpuFault, Sm90WatchdogChild) {
  if (!moeforge::testing::in_fault_child()) GTEST_SKIP() << "child of Sm90WatchdogFaultsAStuckWait";
  REQUIRE_DEVICE();
  KernelSpec k;
  k.source = "sm90/wait_probe.cuh";
  k.entry = "moe_sm90_wait_probe";
  k.defines = {{"WAIT_LIMIT_NS", "1000000ull"}};
  k.targets = {"sm_90a"};
  k.threads = 32;
  const LoadedKernel& lk = load_kernel(0, k);
  const Driver& d = driver();
  CUdeviceptr done = 0;
  check(d.cuMemAlloc(&done, 4), "cuMemAlloc");
  uint32_t host = 0;
  check(d.cuMemcpyHtoD(done, &host, 4), "cuMemcpyHtoD");
  uint32_t arrive = 1;
  void* args[] = {&arrive, &done};
  launch(lk, {1, 1, 1}, {32, 1, 1}, 0, nullptr, args, "wait-probe-completes");
  check(d.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  check(d.cuMemcpyDtoH(&host, done, 4), "cuMemcpyDtoH");
  EXPECT_EQ(host, 1u) << "the completed wait returned";
  arrive = 0;
  launch(lk, {1, 1, 1}, {32, 1, 1}, 0, nullptr, args, "wait-probe-stuck");
  try {
    check(d.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
    ADD_FAILURE() << "a wait on a barrier nobody arrives at returned";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("device context lost after 'wait-probe-stuck'"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(context_lost());
}
