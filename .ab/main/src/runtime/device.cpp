#include "runtime/device.hpp"

#include <fmt/format.h>

#include <mutex>
#include <set>

#include "moeforge/errors.hpp"
#include "runtime/driver.hpp"
#include "runtime/settings.hpp"

namespace moeforge::rt {
namespace {

struct Known {
  int major, minor;
  const char* target;
};
// Exact targets. Arch-specific ("a") variants wherever the chip has features that
// only the exact target exposes (wgmma/TMA multicast on 9.0, tcgen05 on 10.x, ...).
constexpr Known kKnown[] = {
    {8, 0, "sm_80"},    {8, 6, "sm_86"},    {8, 7, "sm_87"},    {8, 9, "sm_89"},    {9, 0, "sm_90a"},
    {10, 0, "sm_100a"}, {10, 3, "sm_103a"}, {11, 0, "sm_110a"}, {12, 0, "sm_120a"}, {12, 1, "sm_121a"},
};

}  // namespace

const std::vector<std::string>& supported_targets() {
  // What CI compiles every kernel for. All accepted by NVRTC 13.0 (nvrtcGetSupportedArchs:
  // 75 80 86 87 88 89 90 100 103 110 120 121). sm_87 (Orin) is exact-known but not in CI.
  static const std::vector<std::string> t = {"sm_80",   "sm_86",   "sm_89",   "sm_90a", "sm_100a",
                                             "sm_103a", "sm_110a", "sm_120a", "sm_121a"};
  return t;
}

std::string exact_target(int major, int minor, bool allow_family, bool* family_used) {
  if (family_used) *family_used = false;
  for (const Known& k : kKnown)
    if (k.major == major && k.minor == minor) return k.target;
  const Known* best = nullptr;
  for (const Known& k : kKnown)
    if (k.major == major && k.minor < minor && (!best || k.minor > best->minor)) best = &k;
  if (!allow_family || !best)
    throw Unsupported(fmt::format(
        "compute capability {}.{} has no known exact target{}; moeforge does not alias chips{}", major, minor,
        best ? fmt::format(" (nearest lower of the family: {})", best->target) : "",
        best ? "; set MOEFORGE_ALLOW_FAMILY=1 to use the family target at your own risk" : ""));
  if (family_used) *family_used = true;
  static std::mutex& m = *new std::mutex;  // immortal
  static auto& logged = *new std::set<std::pair<int, int>>;
  std::lock_guard lock(m);
  if (logged.insert({major, minor}).second)
    warn(fmt::format("compute capability {}.{} is unknown; MOEFORGE_ALLOW_FAMILY=1 selects {} (family fallback, "
                     "not an exact target)",
                     major, minor, best->target));
  return best->target;
}

int target_sm_number(const std::string& target) {
  // "sm_90a" -> 90, "sm_121a" -> 121, "sm_86" -> 86
  if (target.rfind("sm_", 0) != 0) throw InvalidArgument("target", "expected sm_<N>[a|f], got '" + target + "'");
  int n = 0;
  size_t i = 3;
  for (; i < target.size() && target[i] >= '0' && target[i] <= '9'; ++i) n = n * 10 + (target[i] - '0');
  if (i == 3 || (i < target.size() && !(i + 1 == target.size() && (target[i] == 'a' || target[i] == 'f'))))
    throw InvalidArgument("target", "expected sm_<N>[a|f], got '" + target + "'");
  return n;
}

int device_count() {
  const Driver* d = driver_or_null();
  if (!d) return 0;
  int n = 0;
  if (d->cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
  return n;
}

DeviceInfo device_info(int ordinal) {
  const Driver& d = driver();
  int n = 0;
  check(d.cuDeviceGetCount(&n), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= n)
    throw InvalidArgument("device", fmt::format("ordinal {} out of range ({} CUDA devices)", ordinal, n));
  CUdevice dev;
  check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  check(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
  info.name = name;
  auto attr = [&](CUdevice_attribute a, const char* what) {
    int v = 0;
    check(d.cuDeviceGetAttribute(&v, a, dev), what);
    return v;
  };
  info.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cuDeviceGetAttribute(CC_MAJOR)");
  info.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cuDeviceGetAttribute(CC_MINOR)");
  info.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "cuDeviceGetAttribute(SM_COUNT)");
  info.smem_optin_per_block =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "cuDeviceGetAttribute(SMEM_OPTIN)");
  info.smem_per_sm =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, "cuDeviceGetAttribute(SMEM_PER_SM)");
  info.regs_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, "cuDeviceGetAttribute(REGS_PER_BLOCK)");
  info.regs_per_sm =
      attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, "cuDeviceGetAttribute(REGS_PER_SM)");
  info.max_threads_per_block =
      attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "cuDeviceGetAttribute(MAX_THREADS_PER_BLOCK)");
  info.max_grid_x = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, "cuDeviceGetAttribute(GRID_X)");
  info.max_grid_y = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, "cuDeviceGetAttribute(GRID_Y)");
  info.max_grid_z = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, "cuDeviceGetAttribute(GRID_Z)");
  info.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "cuDeviceGetAttribute(L2_CACHE_SIZE)");
  size_t total = 0;
  check(d.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  info.total_mem = int64_t(total);
  info.driver_version = d.version;
  info.target = exact_target(info.cc_major, info.cc_minor, settings().allow_family, &info.family_fallback);
  return info;
}

}  // namespace moeforge::rt
