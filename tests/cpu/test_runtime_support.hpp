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

}  // namespace moeforge::testing
