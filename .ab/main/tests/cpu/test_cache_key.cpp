// The cache key changes when any single input changes, and only then.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "runtime/cache.hpp"
#include "runtime/jit.hpp"

using namespace moeforge::rt;

namespace {
CompileRequest selftest_request(const std::string& target) {
  KernelSpec k = selftest_kernel_spec();
  return {k.source, k.entry, k.defines, k.options, target};
}
}  // namespace

TEST(CacheKey, SameInputsSameKey) {
  EXPECT_EQ(cache_key(key_inputs(selftest_request("sm_90a"))), cache_key(key_inputs(selftest_request("sm_90a"))));
  EXPECT_EQ(cache_key(key_inputs(selftest_request("sm_90a"))).size(), 64u);
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(CacheKey, EverySingleInputChangesIt) {
  const CacheKeyInputs base = key_inputs(selftest_request("sm_90a"));
  ASSERT_GE(base.sources.size(), 2u) << "selftest.cuh includes common/types.cuh";
  const std::string k0 = cache_key(base);
  std::vector<std::pair<std::string, std::function<void(CacheKeyInputs&)>>> changes = {
      {"source text", [](CacheKeyInputs& i) { i.sources[0].second += " "; }},
      {"included file text", [](CacheKeyInputs& i) { i.sources[1].second += "\n"; }},
      {"source path", [](CacheKeyInputs& i) { i.sources[0].first = "common/selftest2.cuh"; }},
      {"entry", [](CacheKeyInputs& i) { i.entry += "_"; }},
      {"option", [](CacheKeyInputs& i) { i.options.push_back("-lineinfo"); }},
      {"define value", [](CacheKeyInputs& i) { i.defines[0].second = "3u"; }},
      {"define name", [](CacheKeyInputs& i) { i.defines[0].first = "SELFTEST_MUX"; }},
      {"nvrtc version", [](CacheKeyInputs& i) { i.nvrtc_version = "13.1"; }},
      {"target", [](CacheKeyInputs& i) { i.target = "sm_121a"; }},
      {"moeforge version", [](CacheKeyInputs& i) { i.moeforge_version += ".1"; }},
      // Boundaries between fields cannot be shifted to collide.
      {"text moved across a boundary", [](CacheKeyInputs& i) {
         i.sources[0].second += i.sources[1].second.substr(0, 1);
         i.sources[1].second.erase(0, 1);
       }},
  };
  std::set<std::string> keys = {k0};
  for (auto& [what, change] : changes) {
    CacheKeyInputs in = base;
    change(in);
    const std::string k = cache_key(in);
    EXPECT_NE(k, k0) << what;
    EXPECT_TRUE(keys.insert(k).second) << what << " collides with another change";
  }
}

TEST(CacheKey, RequestsMapToTheirInputs) {
  CompileRequest a = selftest_request("sm_90a");
  CompileRequest b = a;
  b.target = "sm_121a";
  EXPECT_NE(cache_key(key_inputs(a)), cache_key(key_inputs(b)));
  b = a;
  b.defines[0].second = "7u";
  EXPECT_NE(cache_key(key_inputs(a)), cache_key(key_inputs(b)));
  b = a;
  b.options.push_back("-lineinfo");
  EXPECT_NE(cache_key(key_inputs(a)), cache_key(key_inputs(b)));
  const CacheKeyInputs in = key_inputs(a);
  EXPECT_EQ(in.options.front(), "-arch=sm_90a");
  EXPECT_EQ(in.target, "sm_90a");
  EXPECT_EQ(in.moeforge_version, MOEFORGE_VERSION);
  EXPECT_FALSE(in.nvrtc_version.empty());
}
