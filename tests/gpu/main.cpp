// moeforge_gpu_tests entry point: runs every test, then writes a result record
// (DESIGN.md "Result records", kind "gpu-tests") to the path given by --json FILE.
// Tests record numbers with RecordProperty(name, value); they land in the case.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/record.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit.hpp"
#include "runtime/settings.hpp"

namespace {

using json = nlohmann::json;

class RecordListener : public ::testing::EmptyTestEventListener {
 public:
  json cases = json::array();
  int passed = 0, failed = 0, skipped = 0;

  void OnTestEnd(const ::testing::TestInfo& t) override {
    const ::testing::TestResult* r = t.result();
    json c = {{"name", fmt::format("{}.{}", t.test_suite_name(), t.name())}, {"ms", r->elapsed_time()}};
    if (r->Skipped()) {
      c["status"] = "skipped";
      ++skipped;
    } else if (r->Failed()) {
      c["status"] = "failed";
      ++failed;
    } else {
      c["status"] = "passed";
      ++passed;
    }
    json numbers = json::object();
    for (int i = 0; i < r->test_property_count(); ++i) {
      const ::testing::TestProperty& p = r->GetTestProperty(i);
      numbers[p.key()] = p.value();
    }
    if (!numbers.empty()) c["numbers"] = numbers;
    json failures = json::array();
    for (int i = 0; i < r->total_part_count(); ++i) {
      const ::testing::TestPartResult& part = r->GetTestPartResult(i);
      if (part.failed() || part.skipped())
        failures.push_back(fmt::format("{}:{}: {}", part.file_name() ? part.file_name() : "?", part.line_number(),
                                       part.message()));
    }
    if (!failures.empty()) c["messages"] = failures;
    cases.push_back(c);
    if (after_each) after_each();
  }
  std::function<void()> after_each;
};

// The record as it stands: rewritten after every test (write, then rename), so that a run cut
// off by a time limit still leaves every finished case, with "complete": false.
void write_record(const std::string& path, const RecordListener& l, bool complete) {
  json rec = moeforge::bench::record_header("gpu-tests");
  // The knobs that change which kernels ran (run_all.sh runs the suite more than once); the
  // planner's are in the header's "planner", sm90_crossover also here as earlier records have it.
  const char* tb = std::getenv("MOEFORGE_TEST_BACKEND");
  rec["test_backend"] = tb && *tb ? tb : "default";
  rec["sm90_crossover"] = moeforge::rt::settings().sm90_crossover;
  rec["pdl"] = moeforge::rt::settings().pdl;
  rec["complete"] = complete;
  // One of several processes of a pass (run_all.sh MOEFORGE_TEST_SHARDS; tools/merge_test_records.py
  // joins their records): which share of the tests this record holds.
  if (const char* n = std::getenv("GTEST_TOTAL_SHARDS"); n && *n) {
    const char* i = std::getenv("GTEST_SHARD_INDEX");
    rec["shard"] = {{"index", std::atoi(i ? i : "0")}, {"total", std::atoi(n)}};
  }
  rec["passed"] = l.passed;
  rec["failed"] = l.failed;
  rec["skipped"] = l.skipped;
  rec["cases"] = l.cases;
  const std::string tmp = path + ".partial";
  {
    std::ofstream f(tmp);
    f << rec.dump(2) << "\n";
    if (!f) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a.rfind("--json=", 0) == 0) json_path = a.substr(7);
  }
  auto* listener = new RecordListener;
  listener->after_each = [&] {
    if (!json_path.empty()) write_record(json_path, *listener, false);
  };
  ::testing::UnitTest::GetInstance()->listeners().Append(listener);  // gtest owns it
  const int rc = RUN_ALL_TESTS();
  if (!json_path.empty()) {
    try {
      write_record(json_path, *listener, true);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moeforge_gpu_tests: %s\n", e.what());
      return rc ? rc : 7;
    }
  }
  return rc;
}
