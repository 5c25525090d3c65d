// Backend self-tests: a small layer shaped like the caller's spec (same routing,
// activation, weight format, biases, shared experts), run on the device and
// compared with the CPU reference. `auto` only chooses backends that passed.
#pragma once
#include <string>

#include "backends/backend.hpp"

namespace moeforge {

struct SelfTestResult {
  bool passed = false;
  double rel_err = 0;  // ||out - ref|| / ||ref||
  double us = 0;       // median forward time on the small problem
  std::string detail;  // why it failed, or a one-line summary
};

// A small spec with the same kinds and formats as `like` (E=16, H=256, I=128).
MoeSpec self_test_spec(const MoeSpec& like);

// Runs once per (backend, device, spec kinds) per process; later calls return the memo.
SelfTestResult self_test(const Backend& backend, const MoeSpec& like, int device);

}  // namespace moeforge
