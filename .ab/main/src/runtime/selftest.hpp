// The runtime self-test: compile, load, launch and check common/selftest.cuh on one device.
#pragma once
#include <cstdint>
#include <string>

namespace moeforge::rt {

struct SelftestResult {
  bool ok = false;
  std::string message;  // what failed, or "n values and __CUDA_ARCH__ 900 as expected"
  std::string target;
  std::string key;
  int binary_version = 0;  // CU_FUNC_ATTRIBUTE_BINARY_VERSION
  int cuda_arch = 0;       // __CUDA_ARCH__ the device reported
  int registers = 0;
  uint32_t n = 0, mismatches = 0;
  double ms = 0;  // compile (or cache) + load + run
};

// The value thread i writes (mirrors moeforge_selftest).
uint32_t selftest_expected(uint32_t i, uint32_t seed, uint32_t block_dim);

// Throws nothing: failures are in the result (with the error's message).
SelftestResult run_selftest(int device, uint32_t n = 100003, uint32_t seed = 0x5eed1234u);

}  // namespace moeforge::rt
