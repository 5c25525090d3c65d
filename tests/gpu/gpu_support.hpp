// Helpers shared by the GPU suites.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/breadcrumbs.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"

namespace moeforge::testing {

// One seed per process: $MOEFORGE_TEST_SEED, else the clock (printed once, so a
// failing run can be replayed). Every case derives fresh inputs from it.
inline uint64_t run_seed() {
  static const uint64_t seed = [] {
    const char* s = std::getenv("MOEFORGE_TEST_SEED");
    const uint64_t v = s && *s ? std::strtoull(s, nullptr, 10)
                               : uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    std::printf("gpu tests: MOEFORGE_TEST_SEED=%llu\n", (unsigned long long)v);
    return v;
  }();
  return seed;
}

// The backend the robustness suite runs: $MOEFORGE_TEST_BACKEND, else "portable".
// run_all.sh runs that suite once per GPU backend, sm90 twice (MOEFORGE_SM90_CROSSOVER=0:
// its wide GEMMs at every batch size; =1e9: its decode GEMMs at every batch size).
inline const std::string& test_backend() {
  static const std::string b = [] {
    const char* s = std::getenv("MOEFORGE_TEST_BACKEND");
    return std::string(s && *s ? s : "portable");
  }();
  return b;
}

// A new seed for each case drawn in this process.
inline uint64_t next_case_seed() {
  static uint64_t counter = 0;
  return run_seed() * 1000003ull + ++counter;
}

// Device 0 is an sm_90a GPU (the sm90 backend's kernels are built for that target only).
inline bool on_sm90a() { return rt::device_count() > 0 && rt::cached_device_info(0).target == "sm_90a"; }

// A non-blocking stream of the test's own, destroyed with it.
struct Stream {
  CUstream s = nullptr;
  Stream() { rt::check(rt::driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
  ~Stream() {
    if (s) rt::driver().cuStreamDestroy(s);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void sync() const { rt::check(rt::driver().cuStreamSynchronize(s), "cuStreamSynchronize"); }
};

}  // namespace moeforge::testing

// Skip when there is no GPU, or when an earlier test in this process lost the context.
#define REQUIRE_GPU()                                                                                   \
  do {                                                                                                  \
    if (::moeforge::rt::device_count() == 0) GTEST_SKIP() << "no CUDA device";                          \
    if (::moeforge::rt::context_lost()) GTEST_SKIP() << "context already lost in this process";         \
  } while (0)
