// The kernel runtime's surface for backends: describe a kernel, get a loaded,
// verified function for a device, launch it with a breadcrumb.
//
//   rt::KernelSpec spec{.source = "portable/route.cuh", .entry = "moe_route",
//                       .defines = {{"E", "128"}, {"TOPK", "4"}},
//                       .threads = 256, .smem_bytes = 0};
//   const rt::LoadedKernel& k = rt::load_kernel(device, spec);   // compile/cache/verify/load once
//   rt::launch(k, grid, block, smem, stream, args, "route");
//
// Kernels are `extern "C" __global__` functions in embedded sources
// (src/kernels/**.cuh); problem constants arrive as -D defines, so every
// distinct shape is its own exact binary.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/device.hpp"

namespace moeforge::rt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct KernelSpec {
  std::string source;  // embedded path, e.g. "portable/grouped_gemm.cuh"
  std::string entry;   // extern "C" kernel name
  std::vector<std::pair<std::string, std::string>> defines;  // compile-time constants
  std::vector<std::string> options;  // extra NVRTC options (rare)
  // The only targets this kernel exists for (e.g. {"sm_90a"} for wgmma code); empty = every
  // target. Checked before compiling: another device gets Unsupported, naming both.
  std::vector<std::string> targets;
  // Resource budget the planner checks against the device before launching.
  int threads = 0;          // threads per block the kernel is launched with
  int smem_bytes = 0;       // dynamic shared memory per block
  int min_blocks_per_sm = 0;
  // Programmatic dependent launch (common/grid_dependency.cuh): on sm_90 and up, with
  // MOEFORGE_PDL=1, the kernel is compiled with MOE_PDL=1, its compile fails unless its PTX holds
  // griddepcontrol.wait, and it is launched to start while its stream's previous kernel runs.
  bool pdl = false;
};

// Whether load_kernel compiles spec with its PDL proof and launches it with PDL on target:
// spec.pdl, sm_90 or later, and enabled (settings().pdl: MOEFORGE_PDL, on unless 0).
bool launches_with_pdl(const KernelSpec& spec, const std::string& target, bool enabled);

// Programmatic dependent launch per call: while a PdlScope(false) lives on this thread, its
// launches go without the attribute, also those of kernels built with the wait (which is then a
// no-op), so a caller can keep it where it measured faster. Scopes nest; each restores the state
// it found.
class PdlScope {
 public:
  explicit PdlScope(bool allowed);
  ~PdlScope();
  PdlScope(const PdlScope&) = delete;
  PdlScope& operator=(const PdlScope&) = delete;

 private:
  bool previous_;
};
// Whether this thread's launches may use PDL now (no PdlScope(false) is open on it).
bool pdl_allowed_on_this_thread();

// Whether spec exists for target (its `targets` list is empty or names it).
inline bool built_for(const KernelSpec& spec, const std::string& target) {
  if (spec.targets.empty()) return true;
  for (const std::string& t : spec.targets)
    if (t == target) return true;
  return false;
}

// A compiled, verified function in the device's primary context.
struct LoadedKernel {
  CUfunction function = nullptr;
  int device = -1;
  std::string name;    // entry + defines, for messages
  std::string key;     // cache key (SHA-256 hex)
  std::string target;  // e.g. "sm_90a"
  int registers = 0;   // per thread, from the driver
  int static_smem = 0;
  bool pdl = false;    // launched with programmatic stream serialization (KernelSpec::pdl, proven)
};

// Compile (through the cache), verify the ELF target, load, verify the driver's
// binary version, set the dynamic smem attribute. Memoized per (device, key);
// thread-safe. Throws CompileError / CacheError / DeviceError / Unsupported
// (budget over the device's limits, with the numbers).
const LoadedKernel& load_kernel(int device, const KernelSpec& spec);

// Launch with a breadcrumb naming `stage` (see breadcrumbs.hpp). Throws
// DeviceError naming the stage if the launch itself fails; with
// MOEFORGE_SYNC_CHECK=1 it also synchronizes the stream and checks.
void launch(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned smem_bytes, CUstream stream,
            void** args, const char* stage);

// launch() with the kernel's arguments listed in order (each passed by address, as
// cuLaunchKernel takes them): rt::launch_with(k, grid, block, smem, stream, "gemm1", a, b, n).
template <class... Args>
void launch_with(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned smem_bytes, CUstream stream,
                 const char* stage, Args... args) {
  void* ptrs[] = {static_cast<void*>(&args)...};
  launch(kernel, grid, block, smem_bytes, stream, ptrs, stage);
}

// "" when spec fits the device's limits; else why not, with the numbers
// ("smem_bytes 200000 > 101376, the opt-in shared memory per block of NVIDIA GB10").
// load_kernel applies it before compiling; planners call it to skip configs.
std::string budget_violation(const KernelSpec& spec, const DeviceInfo& device);

// The device's info, read once per process (device_info is many driver calls).
const DeviceInfo& cached_device_info(int device);

// Loads given cubin bytes into the device's primary context after verifying that
// the ELF is built for the device's exact target (Unsupported otherwise, before the
// bytes reach the driver). For tests and tools that plant binaries; the module
// stays loaded for the life of the process.
LoadedKernel load_cubin(int device, std::string_view cubin, const std::string& entry, const std::string& label);

// The self-test and fault-injection kernels (src/kernels/common/).
KernelSpec selftest_kernel_spec();
KernelSpec fault_kernel_spec();

}  // namespace moeforge::rt
