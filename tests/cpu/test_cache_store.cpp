// The on-disk cache: publish, verify on read, rebuild what fails, refuse unsafe
// directories, fall back to memory, and compile once under an 8-process race.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "moeforge/errors.hpp"
#include "runtime/cache.hpp"
#include "runtime/jit.hpp"
#include "runtime/settings.hpp"
#include "test_runtime_support.hpp"

using namespace moeforge;
using namespace moeforge::rt;
using moeforge::testing::TempDir;

namespace {

CompileRequest req_for(const std::string& target) {
  KernelSpec k = selftest_kernel_spec();
  return {k.source, k.entry, k.defines, k.options, target};
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
void spit(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

struct Warnings {
  std::vector<std::string> lines;
  WarningSink old;
  Warnings() { old = set_warning_sink([this](std::string_view w) { lines.emplace_back(w); }); }
  ~Warnings() { set_warning_sink(old); }
};

}  // namespace

TEST(CacheStore, PublishesThenServesFromDiskAndMemory) {
  TempDir tmp;
  const std::string root = tmp.path + "/cache";
  KernelCache c1(root);
  CacheResult a = c1.get(req_for("sm_90a"));
  EXPECT_EQ(a.from, CacheResult::From::Compiled);
  EXPECT_EQ(a.path, root + "/sm_90a/" + a.key + ".cubin");
  EXPECT_TRUE(std::filesystem::exists(root + "/sm_90a/" + a.key + ".json"));
  EXPECT_EQ(std::filesystem::status(root).permissions() & std::filesystem::perms::all, std::filesystem::perms::owner_all);
  EXPECT_EQ(c1.get(req_for("sm_90a")).from, CacheResult::From::Memory);
  KernelCache c2(root);
  CacheResult b = c2.get(req_for("sm_90a"));
  EXPECT_EQ(b.from, CacheResult::From::Disk);
  EXPECT_EQ(*a.cubin, *b.cubin);
  EXPECT_EQ(c2.compiles(), 0);
  auto meta = nlohmann::json::parse(slurp(root + "/sm_90a/" + a.key + ".json"));
  EXPECT_EQ(meta["target"], "sm_90a");
  EXPECT_EQ(meta["cubin_sha256"], sha256_hex(*a.cubin));
  EXPECT_EQ(meta["sources"].size(), 2u);
  EXPECT_TRUE(meta.contains("compile_ms"));
  EXPECT_TRUE(meta.contains("created"));
  // No leftover temp files.
  for (auto& e : std::filesystem::directory_iterator(root + "/sm_90a"))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  auto entries = c2.list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].problem, "");
}

// Damaged entries are detected (one warning line each), rebuilt, and never served.
TEST(CacheStore, TruncatedBitFlippedAndWrongTargetEntriesAreRebuilt) {
  TempDir tmp;
  const std::string root = tmp.path + "/cache";
  const CacheResult good = KernelCache(root).get(req_for("sm_121a"));
  const std::string cubin_path = root + "/sm_121a/" + good.key + ".cubin";
  const std::string meta_path = root + "/sm_121a/" + good.key + ".json";
  const std::string meta_text = slurp(meta_path);
  const std::string other = *KernelCache(tmp.path + "/other").get(req_for("sm_120a")).cubin;

  struct Damage {
    std::string name, expect;
    std::function<void()> apply;
  };
  std::vector<Damage> damages = {
      {"truncated", "content hash mismatch", [&] { spit(cubin_path, good.cubin->substr(0, good.cubin->size() / 3)); }},
      {"bit flip", "content hash mismatch",
       [&] {
         std::string b = *good.cubin;
         b[b.size() / 2] ^= 0x10;
         spit(cubin_path, b);
       }},
      // A cubin for another chip under the right name, with matching metadata hash:
      // only the ELF check can catch it.
      {"planted sm_120a cubin", "built for sm_120a",
       [&] {
         spit(cubin_path, other);
         auto m = nlohmann::json::parse(meta_text);
         m["cubin_sha256"] = sha256_hex(other);
         spit(meta_path, m.dump());
       }},
      {"garbage metadata", "not valid JSON", [&] { spit(meta_path, "{not json"); }},
      // Valid JSON with a field of another type: rejected as a mismatch (it used to escape as
      // nlohmann's type_error and fail the load).
      {"metadata key not a string", "key differs",
       [&] {
         auto m = nlohmann::json::parse(meta_text);
         m["key"] = 42;
         spit(meta_path, m.dump());
       }},
      {"metadata hash not a string", "content hash mismatch",
       [&] {
         auto m = nlohmann::json::parse(meta_text);
         m["cubin_sha256"] = nlohmann::json::array({1});
         spit(meta_path, m.dump());
       }},
  };
  for (const Damage& d : damages) {
    spit(cubin_path, *good.cubin);
    spit(meta_path, meta_text);
    d.apply();
    Warnings w;
    KernelCache c(root);
    CacheResult r = c.get(req_for("sm_121a"));
    EXPECT_EQ(r.from, CacheResult::From::Compiled) << d.name;
    EXPECT_EQ(*r.cubin, *good.cubin) << d.name;
    EXPECT_EQ(c.compiles(), 1) << d.name;
    ASSERT_EQ(w.lines.size(), 1u) << d.name;
    EXPECT_NE(w.lines[0].find(d.expect), std::string::npos) << d.name << ": " << w.lines[0];
    EXPECT_NE(w.lines[0].find(cubin_path), std::string::npos) << w.lines[0];
    EXPECT_NE(w.lines[0].find("rebuilding"), std::string::npos) << w.lines[0];
    EXPECT_EQ(slurp(cubin_path), *good.cubin) << d.name << ": rebuilt entry published";
    EXPECT_EQ(KernelCache(root).get(req_for("sm_121a")).from, CacheResult::From::Disk) << d.name;
  }
}

TEST(CacheStore, RefusesDirectoriesOthersCanWrite) {
  TempDir tmp;
  const std::string root = tmp.path + "/cache";
  KernelCache(root).get(req_for("sm_90a"));
  ::chmod(root.c_str(), 0777);
  try {
    KernelCache(root).get(req_for("sm_90a"));
    FAIL() << "world-writable root accepted";
  } catch (const CacheError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(root), std::string::npos) << m;
    EXPECT_NE(m.find("0777"), std::string::npos) << m;
    EXPECT_NE(m.find("every user"), std::string::npos) << m;
  }
  ::chmod(root.c_str(), 0770);
  EXPECT_THROW(KernelCache(root).get(req_for("sm_90a")), CacheError);
  ::chmod(root.c_str(), 0700);
  ::chmod((root + "/sm_90a").c_str(), 0722);
  EXPECT_THROW(KernelCache(root).get(req_for("sm_90a")), CacheError);
  ::chmod((root + "/sm_90a").c_str(), 0700);
  EXPECT_NO_THROW(KernelCache(root).get(req_for("sm_90a")));
  if (::geteuid() != 0) GTEST_SKIP() << "chown to another uid needs root";
  ASSERT_EQ(::chown(root.c_str(), 12345, 12345), 0);
  try {
    KernelCache(root).get(req_for("sm_90a"));
    FAIL() << "foreign-owned root accepted";
  } catch (const CacheError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("owned by another user"), std::string::npos) << m;
    EXPECT_NE(m.find("uid 12345"), std::string::npos) << m;
  }
  ASSERT_EQ(::chown(root.c_str(), 0, 0), 0);
  // A foreign-owned entry inside our directory is rejected and rebuilt.
  const std::string key = KernelCache(root).get(req_for("sm_90a")).key;
  ASSERT_EQ(::chown((root + "/sm_90a/" + key + ".cubin").c_str(), 12345, 12345), 0);
  Warnings w;
  KernelCache c(root);
  EXPECT_EQ(c.get(req_for("sm_90a")).from, CacheResult::From::Compiled);
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_NE(w.lines[0].find("owned by uid 12345"), std::string::npos) << w.lines[0];
}

// Covered: a root that cannot be created (a file stands where the directory should
// be) -> memory only. A read-only directory (next test): as non-root via mode bits; as
// root (which ignores mode bits) via a read-only bind mount in a private mount
// namespace, skipped where the container does not allow that.
TEST(CacheStore, UnwritableRootFallsBackToMemoryWithOneWarning) {
  TempDir tmp;
  const std::string root = tmp.path + "/cache";
  spit(root, "a file, not a directory");
  Warnings w;
  KernelCache c(root);
  CacheResult a = c.get(req_for("sm_90a"));
  CacheResult b = c.get(req_for("sm_121a"));
  EXPECT_EQ(a.from, CacheResult::From::Compiled);
  EXPECT_EQ(a.path, "<memory>");
  EXPECT_EQ(c.get(req_for("sm_90a")).from, CacheResult::From::Memory);
  EXPECT_EQ(c.mode(), "memory");
  ASSERT_EQ(w.lines.size(), 1u) << "one warning, not one per target or entry";
  EXPECT_NE(w.lines[0].find(root), std::string::npos) << w.lines[0];
  EXPECT_NE(w.lines[0].find("memory"), std::string::npos) << w.lines[0];
}

TEST(CacheStore, ReadOnlyDirectoryServesVerifiedEntriesAndKeepsNewBuildsInMemory) {
  if (::geteuid() == 0) {
    // Root bypasses mode bits; a read-only bind mount needs privileges we may not have.
    if (std::system("unshare -m true 2>/dev/null") != 0) GTEST_SKIP() << "root without mount namespaces: not simulated";
  }
  TempDir tmp;
  const std::string root = tmp.path + "/cache";
  KernelCache(root).get(req_for("sm_90a"));
  if (::geteuid() != 0) {
    ::chmod((root + "/sm_90a").c_str(), 0500);
    Warnings w;
    KernelCache c(root);
    EXPECT_EQ(c.get(req_for("sm_90a")).from, CacheResult::From::Disk);
    CompileRequest r2 = req_for("sm_90a");
    r2.defines[0].second = "3u";
    EXPECT_EQ(c.get(r2).from, CacheResult::From::Compiled);
    EXPECT_EQ(c.mode(), "read-only");
    EXPECT_EQ(w.lines.size(), 1u);
    ::chmod((root + "/sm_90a").c_str(), 0700);
    return;
  }
  // As root: re-run this test's body in a private mount namespace with the target dir bound read-only.
  int status = 0;
  const std::string cmd = fmt::format(
      "unshare -m sh -c 'mount --bind {0}/sm_90a {0}/sm_90a && mount -o remount,bind,ro {0}/sm_90a && "
      "MOEFORGE_TEST_RO_CACHE={0} /proc/{1}/exe --gtest_filter=CacheStore.ReadOnlyChild' 2>&1",
      root, ::getpid());
  std::string out = moeforge::testing::run_capture(cmd, &status);
  if (out.find("mount:") != std::string::npos) GTEST_SKIP() << "cannot bind-mount here: " << out;
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}

TEST(CacheStore, ReadOnlyChild) {
  const char* root = std::getenv("MOEFORGE_TEST_RO_CACHE");
  if (!root) GTEST_SKIP() << "helper for ReadOnlyDirectory...";
  Warnings w;
  KernelCache c(root);
  EXPECT_EQ(c.get(req_for("sm_90a")).from, CacheResult::From::Disk);
  CompileRequest r2 = req_for("sm_90a");
  r2.defines[0].second = "3u";
  EXPECT_EQ(c.get(r2).from, CacheResult::From::Compiled);
  EXPECT_EQ(c.mode(), "read-only");
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_NE(w.lines[0].find("not writable"), std::string::npos) << w.lines[0];
}

// 8 processes racing on one key: one compile, identical bytes everywhere.
TEST(CacheStore, EightProcessesCompileOnce) {
  TempDir tmp;
  const std::string root = tmp.path + "/cache";
  const std::string results = tmp.path + "/results";
  std::filesystem::create_directory(results);
  std::vector<FILE*> children;
  const std::string cmd = fmt::format(
      "MOEFORGE_TEST_RACE_ROOT={} MOEFORGE_TEST_RACE_OUT={} /proc/{}/exe --gtest_filter=CacheStore.RaceChild "
      ">/dev/null 2>&1",
      root, results, ::getpid());
  for (int i = 0; i < 8; ++i) children.push_back(::popen(cmd.c_str(), "r"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let all 8 reach the barrier
  spit(results + "/../go", "go");
  for (FILE* f : children) {
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(::pclose(f), 0);
  }
  int compiled = 0, n = 0;
  std::set<std::string> hashes;
  for (auto& e : std::filesystem::directory_iterator(results)) {
    std::istringstream in(slurp(e.path()));
    std::string from, hash;
    in >> from >> hash;
    compiled += from == "compiled";
    hashes.insert(hash);
    ++n;
  }
  EXPECT_EQ(n, 8);
  EXPECT_EQ(compiled, 1);
  EXPECT_EQ(hashes.size(), 1u);
}

TEST(CacheStore, RaceChild) {
  const char* root = std::getenv("MOEFORGE_TEST_RACE_ROOT");
  const char* out = std::getenv("MOEFORGE_TEST_RACE_OUT");
  if (!root || !out) GTEST_SKIP() << "helper for EightProcessesCompileOnce";
  for (int i = 0; i < 5000 && !std::filesystem::exists(std::string(out) + "/../go"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  KernelCache c(root);
  CacheResult r = c.get(req_for("sm_103a"));
  spit(fmt::format("{}/{}", out, ::getpid()),
       fmt::format("{} {}\n", r.from == CacheResult::From::Compiled ? "compiled" : "loaded", sha256_hex(*r.cubin)));
}
