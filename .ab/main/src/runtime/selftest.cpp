#include "runtime/selftest.hpp"

#include <fmt/format.h>

#include <chrono>
#include <vector>

#include "runtime/driver.hpp"
#include "runtime/jit.hpp"

namespace moeforge::rt {

uint32_t selftest_expected(uint32_t i, uint32_t seed, uint32_t block_dim) {
  uint32_t x = i * 2654435761u + seed;  // SELFTEST_MUL in selftest_kernel_spec()
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x ^ ((i / block_dim) << 10) ^ (i % block_dim);
}

SelftestResult run_selftest(int device, uint32_t n, uint32_t seed) {
  SelftestResult r;
  r.n = n;
  const auto t0 = std::chrono::steady_clock::now();
  CUdeviceptr out = 0, arch = 0;
  const Driver* d = nullptr;
  try {
    d = &driver();
    const KernelSpec spec = selftest_kernel_spec();
    const LoadedKernel& k = load_kernel(device, spec);
    r.target = k.target;
    r.key = k.key;
    r.registers = k.registers;
    check(d->cuFuncGetAttribute(&r.binary_version, CU_FUNC_ATTRIBUTE_BINARY_VERSION, k.function),
          "cuFuncGetAttribute(BINARY_VERSION)");
    use_device(device);
    check(d->cuMemAlloc(&out, size_t(n) * 4), "cuMemAlloc(selftest out)");
    check(d->cuMemAlloc(&arch, 4), "cuMemAlloc(selftest arch)");
    check(d->cuMemsetD32Async(out, 0xdeadbeefu, n, nullptr), "cuMemsetD32Async(poison)");
    check(d->cuMemsetD32Async(arch, 0, 1, nullptr), "cuMemsetD32Async(arch)");
    const unsigned block = unsigned(spec.threads);
    void* args[] = {&out, &n, &seed, &arch};
    launch(k, {(n + block - 1) / block, 1, 1}, {block, 1, 1}, 0, nullptr, args, "selftest");
    check(d->cuStreamSynchronize(nullptr), "cuStreamSynchronize(selftest)");
    std::vector<uint32_t> host(n);
    uint32_t host_arch = 0;
    check(d->cuMemcpyDtoH(host.data(), out, size_t(n) * 4), "cuMemcpyDtoH(selftest out)");
    check(d->cuMemcpyDtoH(&host_arch, arch, 4), "cuMemcpyDtoH(selftest arch)");
    r.cuda_arch = int(host_arch);
    uint32_t first_bad = n;
    for (uint32_t i = 0; i < n; ++i)
      if (host[i] != selftest_expected(i, seed, block)) {
        if (first_bad == n) first_bad = i;
        ++r.mismatches;
      }
    const int want_arch = r.binary_version * 10;
    if (r.mismatches)
      r.message = fmt::format("{} of {} values wrong (first at {}: got 0x{:08x}, expected 0x{:08x})", r.mismatches, n,
                              first_bad, host[first_bad], selftest_expected(first_bad, seed, block));
    else if (r.cuda_arch != want_arch)
      r.message = fmt::format("device ran __CUDA_ARCH__ {}, expected {}", r.cuda_arch, want_arch);
    else {
      r.ok = true;
      r.message = fmt::format("{} values and __CUDA_ARCH__ {} as expected", n, r.cuda_arch);
    }
  } catch (const std::exception& e) {
    r.ok = false;
    r.message = e.what();
  }
  if (d && out) d->cuMemFree(out);
  if (d && arch) d->cuMemFree(arch);
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace moeforge::rt
