// Shared helpers for the runtime/cache CPU tests.
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.hpp"
#include "moeforge/spec.hpp"
#include "runtime/cache.hpp"
#include "runtime/jit.hpp"
#include "runtime/settings.hpp"

namespace moeforge::testing {

// A fresh directory under /tmp, removed at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/moeforge-rt-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

inline std::string run_capture(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// f(i) for every i in [0, n), on every core: the tests that NVRTC-compile hundreds of kernels
// would otherwise outlast CTest's limit on a slow machine. f must not use gtest assertions
// (they are not thread-safe): record results, check them after.
template <class F>
void parallel_for(size_t n, F&& f) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool(std::max(2u, std::thread::hardware_concurrency()));
  for (auto& t : pool)
    t = std::thread([&] {
      for (size_t i = next++; i < n; i = next++) f(i);
    });
  for (auto& t : pool) t.join();
}

// Checks that every kernel the GPU backends would load for spec on target is in the kernel cache
// at cache_root: each with the PDL proof where it launches with PDL (MOEFORGE_PDL: another cache
// key), as load_kernel asks for it.
struct PrecompiledCheck {
  int checked = 0;   // kernels looked up
  int with_pdl = 0;  // of them, under the key with the PDL proof
};
inline PrecompiledCheck expect_precompiled(const std::string& cache_root, const MoeSpec& spec,
                                           const std::string& target) {
  PrecompiledCheck c;
  for (const Backend* b : all_backends()) {
    if (!b->needs_gpu()) continue;
    for (const rt::KernelSpec& k : b->kernels(spec)) {
      if (!rt::built_for(k, target)) continue;
      const bool pdl = rt::launches_with_pdl(k, target, rt::settings().pdl);
      const rt::CompileRequest req{k.source, k.entry, k.defines, k.options, target, pdl};
      const std::string key = rt::cache_key(rt::key_inputs(req));
      EXPECT_TRUE(std::filesystem::exists(cache_root + "/" + target + "/" + key + ".cubin"))
          << k.entry << " for " << spec.describe();
      ++c.checked;
      c.with_pdl += pdl;
    }
  }
  return c;
}

}  // namespace moeforge::testing
