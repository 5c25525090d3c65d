// Host-side concurrency: the process-wide state that many serving threads share.
//
// These tests are written for ThreadSanitizer (tools/test.d/30-sanitizers.sh builds the
// CPU suite with -fsanitize=thread and fails on any report), but they also check
// results, so a plain build catches lost updates and wrong memos too:
//   * one MoeLayer ("cpu" backend) called from many threads at once, forward and
//     forward_topk interleaved, each result bit-identical to a serial run;
//   * the kernel cache: several threads ask one fresh KernelCache for the same and
//     different kernels at once (NVRTC compile -> publish -> memory), one compile per key;
//   * choose_backend("auto") / the self-test memo / the driver loader / settings, first
//     touched from many threads at once;
//   * the breadcrumb ring written, read and checkpointed from many threads; the
//     "first call wins" context-lost record raced in a forked child (it is permanent).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <map>
#include <set>
#include <thread>

#include "backends/backend.hpp"
#include "backends/selftest.hpp"
#include "core/inputs.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/layer.hpp"
#include "moeforge/reference.hpp"
#include "support/specs.hpp"
#include "runtime/breadcrumbs.hpp"
#include "runtime/cache.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit.hpp"
#include "runtime/settings.hpp"
#include "test_runtime_support.hpp"

using namespace moeforge;

namespace {


// Runs fn(i) on n threads released together (a barrier), joins them all.
template <class Fn>
void on_threads(int n, Fn fn) {
  std::barrier start(n);
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&, i] {
      start.arrive_and_wait();
      fn(i);
    });
  for (auto& t : ts) t.join();
}

}  // namespace

TEST(Concurrency, ManyThreadsCallOneCpuLayer) {
  const MoeSpec spec = moeforge::testing::tiny_layer_spec("concurrency");
  std::shared_ptr<const WeightSource> w = make_synthetic_weights(spec, 11);
  const MoeLayer layer = MoeLayer::create(spec, w, {.backend = "cpu"});
  constexpr int kThreads = 8, kCalls = 6;
  constexpr int64_t T = 5, H = 64, k = 2;
  // Serial answers first: per thread its own inputs (seed = thread), routed and precomputed.
  std::vector<HostInputs> in(kThreads);
  std::vector<std::vector<int32_t>> ids(kThreads);
  std::vector<std::vector<float>> wts(kThreads);
  std::vector<std::vector<uint16_t>> want(kThreads), want_topk(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    in[i] = make_inputs(spec, T, 100 + i);
    const reference::Routing r = reference::route(spec, in[i].logits.data(), T, w->correction_bias());
    ids[i] = r.ids;
    wts[i].assign(r.weights.begin(), r.weights.end());
    want[i].assign(T * H, 0);
    want_topk[i].assign(T * H, 0);
    layer.forward(in[i].x_view(), in[i].logits_view(), TensorView::contiguous(want[i].data(), DType::bf16, {T, H}));
    layer.forward_topk(in[i].x_view(), TensorView::contiguous(ids[i].data(), DType::i32, {T, k}),
                       TensorView::contiguous(wts[i].data(), DType::f32, {T, k}),
                       TensorView::contiguous(want_topk[i].data(), DType::bf16, {T, H}));
  }
  std::atomic<int> mismatches{0}, errors{0};
  on_threads(kThreads, [&](int i) {
    for (int c = 0; c < kCalls; ++c) {
      std::vector<uint16_t> out(T * H, 0xFFFF);
      try {
        if ((c + i) % 2 == 0) {
          layer.forward(in[i].x_view(), in[i].logits_view(), TensorView::contiguous(out.data(), DType::bf16, {T, H}));
          mismatches += out != want[i];
        } else {
          layer.forward_topk(in[i].x_view(), TensorView::contiguous(ids[i].data(), DType::i32, {T, k}),
                             TensorView::contiguous(wts[i].data(), DType::f32, {T, k}),
                             TensorView::contiguous(out.data(), DType::bf16, {T, H}));
          mismatches += out != want_topk[i];
        }
      } catch (const std::exception&) {
        ++errors;
      }
    }
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0) << "a concurrent call differed from the serial result";
}

TEST(Concurrency, SeveralLayersCreatedAndUsedAtOnce) {
  // create() (choose_backend, prepare) from several threads, each then using its own layer.
  const MoeSpec spec = moeforge::testing::tiny_layer_spec("concurrency");
  std::shared_ptr<const WeightSource> w = make_synthetic_weights(spec, 12);
  HostInputs in = make_inputs(spec, 3, 7);
  std::vector<uint16_t> want(3 * 64);
  MoeLayer::create(spec, w, {.backend = "cpu"})
      .forward(in.x_view(), in.logits_view(), TensorView::contiguous(want.data(), DType::bf16, {3, 64}));
  std::atomic<int> bad{0};
  on_threads(6, [&](int i) {
    try {
      const MoeLayer l = MoeLayer::create(spec, w, {.backend = i % 2 ? "cpu" : "auto"});
      std::vector<uint16_t> out(3 * 64, 0xFFFF);
      HostInputs mine = in;  // inputs are read-only, but each thread keeps its own views
      l.forward(mine.x_view(), mine.logits_view(), TensorView::contiguous(out.data(), DType::bf16, {3, 64}));
      // Without a GPU "auto" is the cpu backend; with one, only check it ran.
      if (l.backend_name() == "cpu") bad += out != want;
    } catch (const std::exception&) {
      ++bad;
    }
  });
  EXPECT_EQ(bad.load(), 0);
}

TEST(Concurrency, KernelCacheCompilesEachKeyOnceUnderConcurrentGets) {
  moeforge::testing::TempDir tmp;
  rt::KernelCache cache(tmp.path + "/cache");
  const rt::KernelSpec k = rt::selftest_kernel_spec();
  auto req = [&](int variant) {
    rt::CompileRequest r{k.source, k.entry, k.defines, k.options, "sm_90a"};
    if (variant == 1) r.defines[0].second = "3u";  // another key, same source
    return r;
  };
  constexpr int kThreads = 6;
  std::vector<rt::CacheResult> got(kThreads);
  std::atomic<int> errors{0};
  on_threads(kThreads, [&](int i) {
    try {
      got[i] = cache.get(req(i % 2));
    } catch (const std::exception& e) {
      ++errors;
      ADD_FAILURE() << e.what();
    }
  });
  ASSERT_EQ(errors.load(), 0);
  EXPECT_EQ(cache.compiles(), 2) << "each key must compile exactly once";
  std::map<std::string, std::string> bytes_by_key;
  for (const auto& r : got) {
    ASSERT_TRUE(r.cubin);
    auto [it, fresh] = bytes_by_key.emplace(r.key, *r.cubin);
    if (!fresh) {
      EXPECT_EQ(it->second, *r.cubin) << "two threads got different bytes for key " << r.key;
    }
  }
  EXPECT_EQ(bytes_by_key.size(), 2u);
  // A second wave on a fresh object over the same root reads from disk, concurrently.
  rt::KernelCache again(tmp.path + "/cache");
  on_threads(kThreads, [&](int i) {
    const rt::CacheResult r = again.get(req(i % 2));
    EXPECT_NE(r.from, rt::CacheResult::From::Compiled);
    EXPECT_EQ(*r.cubin, bytes_by_key[r.key]);
  });
  EXPECT_EQ(again.compiles(), 0);
}

TEST(Concurrency, BackendChoiceSelfTestMemoAndSettingsFromManyThreads) {
  const MoeSpec spec = moeforge::testing::tiny_layer_spec("concurrency");
  constexpr int kThreads = 8;
  std::vector<BackendChoice> choices(kThreads);
  std::vector<SelfTestResult> selftests(kThreads);
  std::vector<const rt::Settings*> settings(kThreads);
  std::vector<const rt::Driver*> drivers(kThreads);
  on_threads(kThreads, [&](int i) {
    settings[i] = &rt::settings();
    drivers[i] = rt::driver_or_null();
    choices[i] = choose_backend(spec, "auto", 0);
    // The self-test memo: every caller gets the memoized result, whoever ran it.
    selftests[i] = self_test(cpu_backend(), spec, 0);
  });
  for (int i = 1; i < kThreads; ++i) {
    EXPECT_EQ(settings[i], settings[0]);
    EXPECT_EQ(drivers[i], drivers[0]);
    EXPECT_EQ(choices[i].backend, choices[0].backend);
    EXPECT_EQ(choices[i].reason, choices[0].reason);
    EXPECT_EQ(selftests[i].detail, selftests[0].detail);
    EXPECT_EQ(selftests[i].us, selftests[0].us) << "memo must hand every caller the same result";
  }
  EXPECT_TRUE(selftests[0].passed) << selftests[0].detail;
}

TEST(Concurrency, WarningsFromManyThreadsWhileTheSinkChanges) {
  std::atomic<int> seen{0};
  rt::WarningSink old = rt::set_warning_sink([&](std::string_view) { ++seen; });
  on_threads(6, [&](int i) {
    for (int j = 0; j < 200; ++j) {
      if (i == 0 && j % 50 == 0) rt::set_warning_sink([&](std::string_view) { ++seen; });
      rt::warn("concurrency test warning");
    }
  });
  rt::set_warning_sink(std::move(old));
  EXPECT_EQ(seen.load(), 6 * 200);
}

TEST(Concurrency, BreadcrumbRingUnderManyWritersAndReaders) {
  if (rt::context_lost()) GTEST_SKIP() << "context marked lost in this process";
  constexpr int kThreads = 8, kLaunches = 2000;
  std::atomic<int> torn{0};
  on_threads(kThreads, [&](int i) {
    const std::string stage = "thread" + std::to_string(i);
    for (int j = 0; j < kLaunches; ++j) {
      const uint64_t seq = rt::record_launch(stage, "k" + std::to_string(i), {unsigned(j), 1, 1}, {32, 1, 1},
                                             nullptr, 0);
      if (seq == 0) ++torn;
      if (j % 97 == 0) rt::mark_checked();
      if (j % 101 == 0) {
        // A reader sees whole breadcrumbs in strictly increasing seq order, and this
        // thread's own crumbs with strictly increasing thread_seq.
        uint64_t prev = 0, prev_mine = 0;
        for (const rt::Breadcrumb& b : rt::recent_breadcrumbs()) {
          if (b.seq <= prev) ++torn;
          prev = b.seq;
          if (b.stage.rfind("thread", 0) == 0 && b.kernel != "k" + b.stage.substr(6)) ++torn;
          if (b.stage == stage) {
            if (b.thread_seq <= prev_mine) ++torn;
            prev_mine = b.thread_seq;
          }
        }
      }
    }
  });
  EXPECT_EQ(torn.load(), 0);
  const std::vector<rt::Breadcrumb> ring = rt::recent_breadcrumbs();
  ASSERT_EQ(ring.size(), 256u);
  for (size_t i = 1; i < ring.size(); ++i) EXPECT_EQ(ring[i].seq, ring[i - 1].seq + 1);
}

TEST(Concurrency, ContextLostIsRecordedOnceWhenThreadsRaceToReportIt) {
  if (rt::context_lost()) GTEST_SKIP() << "context marked lost in this process";
  // Permanent and process-wide: race it in a child. Exit status: 0 ok, 1 wrong answer
  // (a sanitizer report exits the child with its own non-zero code).
  rt::record_launch("gemm1", "gemm<A>", {1, 1, 1}, {128, 1, 1}, nullptr, 0);
  const pid_t pid = fork();
  if (pid == 0) {
    constexpr int kThreads = 8;
    std::vector<std::string> msgs(kThreads);
    std::atomic<int> wrong{0};
    {
      std::barrier start(kThreads);
      std::vector<std::thread> ts;
      for (int i = 0; i < kThreads; ++i)
        ts.emplace_back([&, i] {
          start.arrive_and_wait();
          rt::record_launch("late" + std::to_string(i), "k", {}, {}, nullptr, 0);
          msgs[i] = rt::note_context_lost(715, "driver message " + std::to_string(i));
          try {
            rt::throw_if_context_lost();
            ++wrong;
          } catch (const DeviceError& e) {
            if (e.cuda_code() != 715) ++wrong;
          }
        });
      for (auto& t : ts) t.join();
    }
    // One first message; every other caller got it back with "(again: ...)".
    int firsts = 0;
    std::string first;
    for (const std::string& m : msgs) {
      if (m.find("(again: ") == std::string::npos) {
        ++firsts;
        first = m;
      }
    }
    if (firsts != 1) ++wrong;
    for (const std::string& m : msgs)
      if (m.rfind(first, 0) != 0) ++wrong;
    if (!rt::context_lost()) ++wrong;
    _exit(wrong.load() ? 1 : 0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
}
