// Device model, settings, ELF checks on real NVRTC output, every kernel x every target.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "backends/backend.hpp"
#include "backends/portable/portable.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/spec.hpp"
#include "runtime/breadcrumbs.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "runtime/elf.hpp"
#include "runtime/jit.hpp"
#include "runtime/settings.hpp"
#include "test_runtime_support.hpp"

using namespace moeforge;
using namespace moeforge::rt;

TEST(RuntimeDevice, ExactTargetTable) {
  EXPECT_EQ(exact_target(8, 0), "sm_80");
  EXPECT_EQ(exact_target(8, 6), "sm_86");
  EXPECT_EQ(exact_target(8, 7), "sm_87");
  EXPECT_EQ(exact_target(8, 9), "sm_89");
  EXPECT_EQ(exact_target(9, 0), "sm_90a");
  EXPECT_EQ(exact_target(10, 0), "sm_100a");
  EXPECT_EQ(exact_target(10, 3), "sm_103a");
  EXPECT_EQ(exact_target(11, 0), "sm_110a");
  EXPECT_EQ(exact_target(12, 0), "sm_120a");
  EXPECT_EQ(exact_target(12, 1), "sm_121a");
  // Known capabilities are exact even when family fallback is allowed.
  bool fam = true;
  EXPECT_EQ(exact_target(12, 1, true, &fam), "sm_121a");
  EXPECT_FALSE(fam);
  EXPECT_EQ(exact_target(10, 3, true, &fam), "sm_103a");
  EXPECT_FALSE(fam);
}

TEST(RuntimeDevice, UnknownCapabilityIsAnError) {
  try {
    exact_target(12, 2);
    FAIL() << "12.2 resolved";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("12.2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MOEFORGE_ALLOW_FAMILY"), std::string::npos) << e.what();
  }
  EXPECT_THROW(exact_target(7, 5), Unsupported);
  EXPECT_THROW(exact_target(13, 0), Unsupported);
  EXPECT_THROW(exact_target(13, 0, true), Unsupported);  // no lower target of that major
}

TEST(RuntimeDevice, FamilyOptIn) {
  std::vector<std::string> warnings;
  WarningSink old = set_warning_sink([&](std::string_view w) { warnings.emplace_back(w); });
  bool fam = false;
  EXPECT_EQ(exact_target(12, 2, true, &fam), "sm_121a");
  EXPECT_TRUE(fam);
  EXPECT_EQ(exact_target(12, 2, true, &fam), "sm_121a");
  EXPECT_EQ(exact_target(10, 7, true, &fam), "sm_103a");
  EXPECT_EQ(exact_target(9, 4, true, &fam), "sm_90a");
  set_warning_sink(old);
  ASSERT_EQ(warnings.size(), 3u) << "logged once per capability";
  EXPECT_NE(warnings[0].find("family fallback"), std::string::npos);
}

TEST(RuntimeDevice, TargetSmNumbers) {
  EXPECT_EQ(target_sm_number("sm_90a"), 90);
  EXPECT_EQ(target_sm_number("sm_121a"), 121);
  EXPECT_EQ(target_sm_number("sm_86"), 86);
  EXPECT_EQ(target_sm_number("sm_100f"), 100);
  EXPECT_THROW(target_sm_number("compute_90"), InvalidArgument);
  EXPECT_THROW(target_sm_number("sm_90ab"), InvalidArgument);
  EXPECT_THROW(target_sm_number("sm_"), InvalidArgument);
}

TEST(RuntimeDevice, SupportedTargetsAreAcceptedByNvrtc) {
  std::set<int> sms;
  for (int s : nvrtc_supported_sms()) sms.insert(s);
  for (const std::string& t : supported_targets()) EXPECT_TRUE(sms.count(target_sm_number(t))) << t;
  EXPECT_EQ(supported_targets().front(), "sm_80");
  EXPECT_EQ(supported_targets().back(), "sm_121a");
}

TEST(RuntimeDriver, NoDriverIsReportedPlainly) {
  std::string why;
  if (driver_or_null(&why)) GTEST_SKIP() << "a CUDA driver is present";
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(device_count(), 0);
  try {
    driver();
    FAIL();
  } catch (const DeviceError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("no CUDA driver: ", 0), 0u) << e.what();
  }
  EXPECT_THROW(device_info(0), DeviceError);
  EXPECT_THROW(load_kernel(0, selftest_kernel_spec()), DeviceError);
}

TEST(RuntimeSettings, ReadFromEnvironmentOnce) {
  auto env = [](std::map<std::string, std::string> m) {
    return [m](const char* k) -> const char* {
      auto it = m.find(k);
      return it == m.end() ? nullptr : it->second.c_str();
    };
  };
  Settings s = settings_from(env({{"MOEFORGE_CACHE_DIR", "/c"}, {"XDG_CACHE_HOME", "/x"}, {"HOME", "/h"}}));
  EXPECT_EQ(s.cache_root, "/c");
  s = settings_from(env({{"XDG_CACHE_HOME", "/x"}, {"HOME", "/h"}}));
  EXPECT_EQ(s.cache_root, "/x/moeforge");
  s = settings_from(env({{"HOME", "/h"}, {"MOEFORGE_ALLOW_FAMILY", "1"}, {"MOEFORGE_SYNC_CHECK", "1"},
                         {"MOEFORGE_FAULT_STAGE", "gemm1"}}));
  EXPECT_EQ(s.cache_root, "/h/.cache/moeforge");
  EXPECT_TRUE(s.allow_family);
  EXPECT_TRUE(s.sync_check);
  EXPECT_EQ(s.fault_stage, "gemm1");
  s = settings_from(env({{"HOME", "/h"}, {"MOEFORGE_ALLOW_FAMILY", "0"}}));
  EXPECT_FALSE(s.allow_family);
  EXPECT_LT(s.sm90_crossover, 0);  // unset: the tuned table
  EXPECT_EQ(&settings(), &settings());
  // The sm90 planner knob: a number >= 0, else a warning naming it and the table.
  s = settings_from(env({{"HOME", "/h"}, {"MOEFORGE_SM90_CROSSOVER", "1e9"}}));
  EXPECT_EQ(s.sm90_crossover, 1e9);
  std::vector<std::string> warned;
  WarningSink old = set_warning_sink([&](std::string_view w) { warned.emplace_back(w); });
  for (const char* bad : {"-1", "two", "3x"}) {
    s = settings_from(env({{"HOME", "/h"}, {"MOEFORGE_SM90_CROSSOVER", bad}}));
    EXPECT_LT(s.sm90_crossover, 0) << bad;
  }
  // The decode token tile: 16, 32, 64 or 128, else a warning naming it and the rule.
  EXPECT_EQ(s.sm90_decode_bt, 0);  // unset: the planner's rule
  s = settings_from(env({{"HOME", "/h"}, {"MOEFORGE_SM90_DECODE_BT", "32"}}));
  EXPECT_EQ(s.sm90_decode_bt, 32);
  s = settings_from(env({{"HOME", "/h"}, {"MOEFORGE_SM90_DECODE_BT", "128"}}));
  EXPECT_EQ(s.sm90_decode_bt, 128);
  for (const char* bad : {"0", "48", "16x", "-16"}) {
    s = settings_from(env({{"HOME", "/h"}, {"MOEFORGE_SM90_DECODE_BT", bad}}));
    EXPECT_EQ(s.sm90_decode_bt, 0) << bad;
  }
  // Stream-K: the rule unless 0 or 1.
  EXPECT_EQ(s.sm90_stream_k, -1);
  EXPECT_EQ(settings_from(env({{"HOME", "/h"}, {"MOEFORGE_SM90_STREAM_K", "1"}})).sm90_stream_k, 1);
  EXPECT_EQ(settings_from(env({{"HOME", "/h"}, {"MOEFORGE_SM90_STREAM_K", "0"}})).sm90_stream_k, 0);
  EXPECT_EQ(settings_from(env({{"HOME", "/h"}, {"MOEFORGE_SM90_STREAM_K", "on"}})).sm90_stream_k, -1);
  // Programmatic dependent launch: on unless MOEFORGE_PDL=0.
  EXPECT_TRUE(s.pdl);
  EXPECT_TRUE(settings_from(env({{"HOME", "/h"}, {"MOEFORGE_PDL", "1"}})).pdl);
  EXPECT_FALSE(settings_from(env({{"HOME", "/h"}, {"MOEFORGE_PDL", "0"}})).pdl);
  EXPECT_TRUE(settings_from(env({{"HOME", "/h"}, {"MOEFORGE_PDL", "yes"}})).pdl);
  set_warning_sink(old);
  ASSERT_EQ(warned.size(), 9u);
  EXPECT_NE(warned[0].find("MOEFORGE_SM90_CROSSOVER='-1'"), std::string::npos) << warned[0];
  EXPECT_NE(warned[3].find("MOEFORGE_SM90_DECODE_BT='0' is not 16, 32, 64 or 128"), std::string::npos) << warned[3];
  EXPECT_NE(warned[7].find("MOEFORGE_SM90_STREAM_K='on' is not 0 or 1"), std::string::npos) << warned[7];
  EXPECT_NE(warned[8].find("MOEFORGE_PDL='yes' is not 0 or 1"), std::string::npos) << warned[8];
}

TEST(RuntimeBudget, ConfigsOverTheDeviceLimitsAreRejectedWithNumbers) {
  DeviceInfo gb10;
  gb10.name = "NVIDIA GB10";
  gb10.target = "sm_121a";
  gb10.max_threads_per_block = 1024;
  gb10.smem_optin_per_block = 101376;
  gb10.smem_per_sm = 102400;
  KernelSpec k;
  k.entry = "gemm";
  k.threads = 384;
  k.smem_bytes = 101376;
  EXPECT_EQ(budget_violation(k, gb10), "");
  k.smem_bytes = 101377;
  std::string v = budget_violation(k, gb10);
  EXPECT_NE(v.find("101377 > 101376"), std::string::npos) << v;
  EXPECT_NE(v.find("GB10"), std::string::npos) << v;
  k.smem_bytes = 1000;
  k.threads = 2048;
  EXPECT_NE(budget_violation(k, gb10).find("threads 2048 > 1024"), std::string::npos);
  k.threads = 256;
  k.smem_bytes = 60000;
  k.min_blocks_per_sm = 2;
  EXPECT_NE(budget_violation(k, gb10).find("shared memory per SM"), std::string::npos);
}

TEST(RuntimeBreadcrumbs, StickyErrorNamesTheFirstStageSinceTheLastCheck) {
  // Only the bookkeeping (no GPU here); the GPU suite runs it for real in a child process.
  if (context_lost()) GTEST_SKIP();
  EXPECT_TRUE(is_sticky_error(CUresult(715)));
  EXPECT_TRUE(is_sticky_error(CUresult(700)));
  EXPECT_TRUE(is_sticky_error(CUresult(719)));
  EXPECT_FALSE(is_sticky_error(CUresult(209)));
  record_launch("route", "moe_route", {1, 1, 1}, {256, 1, 1}, nullptr, 0);
  mark_checked();
  record_launch("gemm1", "gemm<A>", {132, 1, 1}, {384, 1, 1}, nullptr, 0);
  record_launch("gemm2", "gemm<B>", {132, 1, 1}, {384, 1, 1}, nullptr, 0);
  auto crumbs = recent_breadcrumbs();
  ASSERT_GE(crumbs.size(), 3u);
  EXPECT_EQ(crumbs.back().stage, "gemm2");
  EXPECT_EQ(crumbs.back().thread_seq, crumbs[crumbs.size() - 2].thread_seq + 1);
  // note_context_lost is process-wide and permanent: exercise it in a child.
  pid_t pid = fork();
  if (pid == 0) {
    std::string m = note_context_lost(715, "cuMemAlloc: CUDA_ERROR_ILLEGAL_INSTRUCTION (715)");
    bool ok = m.find("device context lost after 'gemm1'") != std::string::npos &&
              m.find("gemm1 -> gemm2") != std::string::npos && context_lost();
    try {
      throw_if_context_lost();
      ok = false;
    } catch (const DeviceError& e) {
      ok = ok && e.cuda_code() == 715 && std::string(e.what()) == m;
    }
    _exit(ok ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

// Every embedded kernel the backends declare (for every preset), plus the runtime's
// own, compiles for every supported target, and each cubin carries its target.
// One test per target, each compiling on every core: run serially, the ~500 compiles
// outlasted CTest's 600 s limit on a slow CI machine.
class RuntimeCompileTarget : public ::testing::TestWithParam<std::string> {};

namespace {

std::map<std::string, KernelSpec> every_declared_kernel() {
  std::map<std::string, KernelSpec> specs;
  auto add = [&](const KernelSpec& k) {
    std::string id = k.source + "|" + k.entry;
    for (auto& [a, b] : k.defines) id += "|" + a + "=" + b;
    specs.emplace(id, k);
  };
  add(selftest_kernel_spec());
  add(fault_kernel_spec());
  for (const std::string& p : presets::names())
    for (const Backend* b : all_backends())
      if (b->needs_gpu()) {
        for (const KernelSpec& k : b->kernels(presets::get(p))) add(k);
        if (b->name() == "sm90")  // its NVFP4 (W4A16) and FP8 (W8A16) variants too
          for (WeightFormat f : {WeightFormat::NVFP4, WeightFormat::FP8_Block128}) {
            MoeSpec q = presets::get(p);
            q.weight_format = f;
            for (const KernelSpec& k : b->kernels(q)) add(k);
            if (f == WeightFormat::FP8_Block128) {  // and with FP8 activations (W8A8)
              q.activation_format = ActivationFormat::FP8_Group128;
              for (const KernelSpec& k : b->kernels(q)) add(k);
            }
          }
      }
  return specs;
}

}  // namespace

TEST_P(RuntimeCompileTarget, EveryKernel) {
  const std::string target = GetParam();
  struct Job {
    std::string id;
    CompileRequest req;
    CompileResult result;
    std::string error;
  };
  std::vector<Job> jobs;
  // Each as load_kernel asks for it with MOEFORGE_PDL=1: with the PDL proof where it launches with PDL.
  for (const auto& [id, k] : every_declared_kernel())
    if (built_for(k, target))
      jobs.push_back({id, {k.source, k.entry, k.defines, k.options, target, launches_with_pdl(k, target, true)}, {}, {}});
  moeforge::testing::parallel_for(jobs.size(), [&](size_t i) {
    try {
      jobs[i].result = compile(jobs[i].req);
    } catch (const std::exception& e) {
      jobs[i].error = e.what();
    }
  });
  for (const Job& j : jobs) {
    ASSERT_EQ(j.error, "") << j.id << " for " << target;
    CubinInfo info = parse_cubin(j.result.cubin, j.id);
    EXPECT_EQ(info.sm, target_sm_number(target)) << j.id;
    // sm_8x cubins carry no .nv.compat arch-specific attribute; sm_90 and later do.
    if (info.sm >= 90) {
      EXPECT_TRUE(info.has_compat) << j.id << " " << target;
      EXPECT_EQ(info.arch_specific, target.back() == 'a') << j.id << " " << target;
    }
    EXPECT_NO_THROW(verify_cubin(j.result.cubin, target, j.id));
    // ptxas's performance advisories (C7509-C7520: "wgmma.mma_async instructions are
    // serialized ...") mean a fast path that compiled and runs, slowly: fp8_gemm.cuh's GEMM 2
    // ran its QGMMAs one at a time (C7511) for sessions, in NVRTC's build only (nvcc's was fine).
    EXPECT_EQ(j.result.log.find("Potential Performance Loss"), std::string::npos)
        << j.id << " for " << target << ":\n" << j.result.log;
    for (const std::string& other : supported_targets()) {
      if (other == target) continue;
      EXPECT_THROW(verify_cubin(j.result.cubin, other, j.id), Unsupported) << target << " as " << other;
    }
  }
  EXPECT_GE(jobs.size(), 2u) << "the runtime's own kernels build for every target";
  RecordProperty("kernels", int(jobs.size()));
}

INSTANTIATE_TEST_SUITE_P(All, RuntimeCompileTarget, ::testing::ValuesIn(supported_targets()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(ElfVerify, MeasuredFlagsAndTheArchSpecificBit) {
  CompileRequest req{"common/fault.cuh", "moeforge_fault", {}, {}, "sm_121a"};
  const std::string c121a = compile(req).cubin;
  req.target = "sm_120a";
  const std::string c120a = compile(req).cubin;
  req.target = "sm_90a";
  const std::string c90a = compile(req).cubin;
  req.target = "sm_90";
  const std::string c90 = compile(req).cubin;
  EXPECT_EQ(parse_cubin(c121a, "x").e_flags, 0x06007902u);
  EXPECT_EQ(parse_cubin(c120a, "x").e_flags, 0x06007802u);
  EXPECT_EQ(parse_cubin(c90a, "x").e_flags, 0x06005a04u);
  // sm_90 and sm_90a share e_flags; .nv.compat tells them apart.
  EXPECT_EQ(parse_cubin(c90, "x").e_flags, parse_cubin(c90a, "x").e_flags);
  EXPECT_TRUE(parse_cubin(c90a, "x").arch_specific);
  EXPECT_FALSE(parse_cubin(c90, "x").arch_specific);
  EXPECT_EQ(parse_cubin(c90a, "x").tool_arch, "-arch sm_90a");
  try {
    verify_cubin(c90, "sm_90a", "/cache/sm_90a/k.cubin");
    FAIL() << "sm_90 accepted as sm_90a";
  } catch (const Unsupported& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("sm_90 "), std::string::npos) << m;
    EXPECT_NE(m.find("sm_90a"), std::string::npos) << m;
    EXPECT_NE(m.find("/cache/sm_90a/k.cubin"), std::string::npos) << m;
  }
  try {
    verify_cubin(c121a, "sm_120a", "f.cubin");
    FAIL() << "sm_121a accepted as sm_120a";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("sm_121a"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected target is sm_120a"), std::string::npos) << e.what();
  }
  EXPECT_THROW(verify_cubin(c120a, "sm_121a", "f"), Unsupported);
  EXPECT_THROW(verify_cubin(c121a.substr(0, 40), "sm_121a", "f"), CacheError);
  EXPECT_THROW(verify_cubin(c121a.substr(0, c121a.size() / 2), "sm_121a", "f"), CacheError);
  std::string not_elf = c121a;
  not_elf[1] = 'X';
  EXPECT_THROW(verify_cubin(not_elf, "sm_121a", "f"), CacheError);
}

// A kernel declared for programmatic dependent launch compiles only if its PTX waits on the prior
// grid; the proof is asked for on sm_90 and later only (griddepcontrol does not exist before).
TEST(RuntimeCompile, PdlNeedsTheWaitCompiledIn) {
  CompileRequest req{"common/selftest.cuh", "moeforge_selftest", {{"SELFTEST_MUL", "3u"}}, {}, "sm_90a", true};
  try {
    compile(req);
    FAIL() << "a kernel without griddepcontrol.wait passed the PDL proof";
  } catch (const CompileError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("moeforge_selftest"), std::string::npos) << m;
    EXPECT_NE(m.find("griddepcontrol.wait"), std::string::npos) << m;
  }
  EXPECT_NE(std::find(compile_options(req).begin(), compile_options(req).end(), "-DMOE_PDL=1"),
            compile_options(req).end());
  req.grid_wait = false;
  EXPECT_NO_THROW(compile(req));

  KernelSpec combine = portable::combine_kernel(presets::get("mistral-small-4"), DType::bf16, true);
  ASSERT_TRUE(combine.pdl);
  EXPECT_TRUE(launches_with_pdl(combine, "sm_90a", true));
  EXPECT_FALSE(launches_with_pdl(combine, "sm_90a", false));  // MOEFORGE_PDL=0
  EXPECT_FALSE(launches_with_pdl(combine, "sm_89", true));
  EXPECT_NO_THROW(compile({combine.source, combine.entry, combine.defines, combine.options, "sm_90a", true}));
  EXPECT_FALSE(launches_with_pdl(selftest_kernel_spec(), "sm_90a", true));
}

// A forward turns PDL off for calls where it measured slower (portable.hpp, kPdlMaxTokens):
// the scope is per thread, nests, and restores what it found.
TEST(RuntimeSettings, PdlScopeNestsPerThread) {
  EXPECT_TRUE(pdl_allowed_on_this_thread());
  {
    const PdlScope off(false);
    EXPECT_FALSE(pdl_allowed_on_this_thread());
    bool other_thread = false;
    std::thread([&] { other_thread = pdl_allowed_on_this_thread(); }).join();
    EXPECT_TRUE(other_thread);
    {
      const PdlScope on(true);
      EXPECT_TRUE(pdl_allowed_on_this_thread());
    }
    EXPECT_FALSE(pdl_allowed_on_this_thread());
  }
  EXPECT_TRUE(pdl_allowed_on_this_thread());
}

TEST(RuntimeCompile, CompileErrorCarriesLogAndOptions) {
  CompileRequest req{"common/selftest.cuh", "moeforge_selftest", {}, {}, "sm_90a"};  // SELFTEST_MUL missing
  try {
    compile(req);
    FAIL();
  } catch (const CompileError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("SELFTEST_MUL must be defined"), std::string::npos) << m;
    EXPECT_NE(m.find("-arch=sm_90a"), std::string::npos) << m;
  }
  auto closure = source_closure("common/selftest.cuh");
  ASSERT_EQ(closure.size(), 2u);
  EXPECT_EQ(closure[1].first, "common/types.cuh");
}
