// The device model: what the running GPU is, exactly, and what it allows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moeforge::rt {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  std::string target;          // exact NVRTC target: "sm_90a", "sm_121a", "sm_86"
  bool family_fallback = false;  // target chosen by MOEFORGE_ALLOW_FAMILY (reported everywhere)
  int sm_count = 0;
  int smem_optin_per_block = 0;  // bytes a block may opt in to
  int smem_per_sm = 0;
  int regs_per_block = 0;
  int regs_per_sm = 0;
  int max_threads_per_block = 0;
  int max_grid_x = 0, max_grid_y = 0, max_grid_z = 0;
  int64_t l2_bytes = 0;
  int64_t total_mem = 0;
  int driver_version = 0;
};

// Every target moeforge compiles for, in order.
const std::vector<std::string>& supported_targets();

// Exact target for a compute capability: 9.0 -> sm_90a, 12.1 -> sm_121a, 8.6 -> sm_86.
// An unknown capability throws Unsupported unless allow_family, in which case the
// nearest lower known target of the same major is returned and *family_used set.
std::string exact_target(int major, int minor, bool allow_family = false, bool* family_used = nullptr);
// The SM number a target's cubin carries in its ELF e_flags (sm_90a -> 90, sm_121a -> 121).
int target_sm_number(const std::string& target);

int device_count();  // 0 when there is no driver or no device
DeviceInfo device_info(int ordinal);  // throws DeviceError

}  // namespace moeforge::rt
