// The kernel runtime: budget check -> cache (compile) -> ELF verify -> load ->
// driver-side verification -> memoized LoadedKernel; and launch with breadcrumbs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <memory>
#include <mutex>

#include "moeforge/errors.hpp"
#include "runtime/breadcrumbs.hpp"
#include "runtime/cache.hpp"
#include "runtime/driver.hpp"
#include "runtime/elf.hpp"
#include "runtime/jit.hpp"
#include "runtime/settings.hpp"

namespace moeforge::rt {
namespace {

constexpr int kDefaultSmemLimit = 48 * 1024;  // above this a kernel must opt in
constexpr int kReservedSmemPerBlock = 1024;   // the driver's per-block reservation (sm_80+)

std::string spec_label(const KernelSpec& s) {
  std::string l = s.entry;
  if (!s.defines.empty()) {
    l += '<';
    for (size_t i = 0; i < s.defines.size(); ++i)
      l += (i ? "," : "") + s.defines[i].first + (s.defines[i].second.empty() ? "" : "=" + s.defines[i].second);
    l += '>';
  }
  return l;
}

std::string memo_key(int device, const KernelSpec& s) {
  // Embedded sources are immutable in a process, so the spec determines the cache key.
  std::string k = fmt::format("{}|{}|{}|{}|{}|{}|", device, s.source, s.entry, s.threads, s.smem_bytes, s.pdl);
  for (auto& [a, b] : s.defines) k += a + "=" + b + ";";
  k += "|";
  for (auto& o : s.options) k += o + ";";
  return k;
}

struct Slot {
  std::once_flag once;
  LoadedKernel kernel;
};

// Loads verified bytes, checks what the driver says about the function.
LoadedKernel load_verified(int device, const DeviceInfo& info, std::string_view cubin, const std::string& entry,
                           const std::string& label, const std::string& path, int smem_bytes, int threads) {
  verify_cubin(cubin, info.target, path);  // before the bytes reach the driver
  const Driver& d = driver();
  use_device(device);
  CUmodule module = nullptr;
  check(d.cuModuleLoadData(&module, cubin.data()), fmt::format("cuModuleLoadData({})", label).c_str());
  LoadedKernel k;
  k.device = device;
  k.name = label;
  k.target = info.target;
  try {
    check(d.cuModuleGetFunction(&k.function, module, entry.c_str()),
          fmt::format("cuModuleGetFunction({}, '{}')", label, entry).c_str());
    int binary = 0;
    check(d.cuFuncGetAttribute(&binary, CU_FUNC_ATTRIBUTE_BINARY_VERSION, k.function),
          "cuFuncGetAttribute(BINARY_VERSION)");
    const int want = target_sm_number(info.target);
    if (binary != want)
      throw Unsupported(fmt::format("{}: the driver reports binary version {} for {}, expected {} ({})", label, binary,
                                    path, want, info.target));
    check(d.cuFuncGetAttribute(&k.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, k.function), "cuFuncGetAttribute(NUM_REGS)");
    check(d.cuFuncGetAttribute(&k.static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k.function),
          "cuFuncGetAttribute(SHARED_SIZE_BYTES)");
    if (threads > 0 && int64_t(k.registers) * threads > info.regs_per_block)
      throw Unsupported(fmt::format("{} on {}: {} registers/thread x {} threads = {} > {} registers per block", label,
                                    info.name, k.registers, threads, int64_t(k.registers) * threads,
                                    info.regs_per_block));
    if (smem_bytes + k.static_smem > info.smem_optin_per_block)
      throw Unsupported(fmt::format("{} on {}: dynamic {} + static {} bytes of shared memory > {}, the opt-in limit", label,
                                    info.name, smem_bytes, k.static_smem, info.smem_optin_per_block));
    if (smem_bytes > kDefaultSmemLimit)
      check(d.cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
            fmt::format("cuFuncSetAttribute({}, MAX_DYNAMIC_SHARED_SIZE_BYTES={})", label, smem_bytes).c_str());
  } catch (...) {
    d.cuModuleUnload(module);
    throw;
  }
  return k;
}

}  // namespace

bool launches_with_pdl(const KernelSpec& s, const std::string& target, bool enabled) {
  return s.pdl && enabled && target_sm_number(target) >= 90;
}

std::string budget_violation(const KernelSpec& s, const DeviceInfo& dev) {
  std::vector<std::string> why;
  if (!built_for(s, dev.target))
    why.push_back(fmt::format("{} is built only for {}, not {}", s.entry, fmt::join(s.targets, ", "), dev.target));
  if (s.threads > dev.max_threads_per_block)
    why.push_back(fmt::format("threads {} > {}, the maximum per block", s.threads, dev.max_threads_per_block));
  if (s.smem_bytes > dev.smem_optin_per_block)
    why.push_back(fmt::format("smem_bytes {} > {}, the opt-in shared memory per block", s.smem_bytes,
                              dev.smem_optin_per_block));
  if (s.min_blocks_per_sm > 0 &&
      int64_t(s.min_blocks_per_sm) * (s.smem_bytes + kReservedSmemPerBlock) > dev.smem_per_sm)
    why.push_back(fmt::format("{} blocks/SM x ({} + {} reserved) bytes = {} > {}, the shared memory per SM",
                              s.min_blocks_per_sm, s.smem_bytes, kReservedSmemPerBlock,
                              int64_t(s.min_blocks_per_sm) * (s.smem_bytes + kReservedSmemPerBlock), dev.smem_per_sm));
  if (why.empty()) return "";
  std::string out = fmt::format("{} does not fit {} ({}): ", spec_label(s), dev.name, dev.target);
  for (size_t i = 0; i < why.size(); ++i) out += (i ? "; " : "") + why[i];
  return out;
}

const DeviceInfo& cached_device_info(int device) {
  static std::mutex& m = *new std::mutex;  // immortal: usable from other statics' destructors
  static auto& infos = *new std::map<int, std::unique_ptr<DeviceInfo>>;
  std::lock_guard lock(m);
  auto& p = infos[device];
  if (!p) p = std::make_unique<DeviceInfo>(device_info(device));
  return *p;
}

const LoadedKernel& load_kernel(int device, const KernelSpec& spec) {
  throw_if_context_lost();
  static std::mutex& m = *new std::mutex;  // immortal: modules stay loaded until the process ends
  static auto& memo = *new std::map<std::string, std::unique_ptr<Slot>>;
  Slot* slot;
  {
    std::lock_guard lock(m);
    auto& p = memo[memo_key(device, spec)];
    if (!p) p = std::make_unique<Slot>();
    slot = p.get();
  }
  std::call_once(slot->once, [&] {  // an exception leaves the slot empty for a retry
    const DeviceInfo& info = cached_device_info(device);
    if (std::string why = budget_violation(spec, info); !why.empty()) throw Unsupported(why);
    const bool pdl = launches_with_pdl(spec, info.target, settings().pdl);
    CompileRequest req{spec.source, spec.entry, spec.defines, spec.options, info.target, pdl};
    CacheResult got = default_cache().get(req);
    LoadedKernel k = load_verified(device, info, *got.cubin, spec.entry, spec_label(spec), got.path, spec.smem_bytes,
                                   spec.threads);
    k.key = got.key;
    k.pdl = pdl;
    slot->kernel = std::move(k);
  });
  return slot->kernel;
}

LoadedKernel load_cubin(int device, std::string_view cubin, const std::string& entry, const std::string& label) {
  throw_if_context_lost();
  const DeviceInfo& info = cached_device_info(device);
  return load_verified(device, info, cubin, entry, label, label, 0, 0);
}

KernelSpec selftest_kernel_spec() {
  KernelSpec s;
  s.source = "common/selftest.cuh";
  s.entry = "moeforge_selftest";
  s.defines = {{"SELFTEST_MUL", "2654435761u"}};
  s.threads = 256;
  return s;
}

KernelSpec fault_kernel_spec() {
  KernelSpec s;
  s.source = "common/fault.cuh";
  s.entry = "moeforge_fault";
  s.threads = 1;
  return s;
}

namespace {
thread_local bool t_pdl_allowed = true;  // PdlScope
}  // namespace

PdlScope::PdlScope(bool allowed) : previous_(t_pdl_allowed) { t_pdl_allowed = allowed; }
PdlScope::~PdlScope() { t_pdl_allowed = previous_; }
bool pdl_allowed_on_this_thread() { return t_pdl_allowed; }

void launch(const LoadedKernel& k, Dim3 grid, Dim3 block, unsigned smem_bytes, CUstream stream, void** args,
            const char* stage) {
  throw_if_context_lost();
  const Driver& d = driver();
  use_device(k.device);
  record_launch(stage, k.name, grid, block, stream, k.device);
  CUresult r;
  // Its compile proved the wait (compiler.cpp): it may start before its predecessor ends.
  if (k.pdl && t_pdl_allowed) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = grid.x, cfg.gridDimY = grid.y, cfg.gridDimZ = grid.z;
    cfg.blockDimX = block.x, cfg.blockDimY = block.y, cfg.blockDimZ = block.z;
    cfg.sharedMemBytes = smem_bytes;
    cfg.hStream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    r = d.cuLaunchKernelEx(&cfg, k.function, args, nullptr);
  } else {
    r = d.cuLaunchKernel(k.function, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem_bytes, stream, args,
                         nullptr);
  }
  check(r,
        fmt::format("launch of stage '{}' (kernel {}, grid ({},{},{}), block ({},{},{}), {} B smem)", stage, k.name,
                    grid.x, grid.y, grid.z, block.x, block.y, block.z, smem_bytes)
            .c_str());
  const Settings& s = settings();
  if (!s.fault_stage.empty() && s.fault_stage == stage) {
    const LoadedKernel& f = load_kernel(k.device, fault_kernel_spec());
    record_launch(std::string(stage) + "+injected-fault", f.name, {}, {}, stream, k.device);
    check(d.cuLaunchKernel(f.function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr),
          fmt::format("launch of the injected fault after stage '{}'", stage).c_str());
  }
  if (s.sync_check)
    check(d.cuStreamSynchronize(stream),
          fmt::format("cuStreamSynchronize after stage '{}' (MOEFORGE_SYNC_CHECK)", stage).c_str());
}

}  // namespace moeforge::rt
