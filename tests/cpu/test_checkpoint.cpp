// Checkpoint loading: fixtures written by tests/fixtures/make_fixtures.py (safetensors + numpy,
// independent of moeforge) in every supported layout, plus hostile files.
// The fixture tests need MOEFORGE_FIXTURES_DIR (tools/test.d/10-checkpoints.sh sets it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "io/hf_config.hpp"
#include "io/safetensors.hpp"
#include "moeforge/checkpoint.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "moeforge/reference.hpp"
#include "test_runtime_support.hpp"

namespace {

namespace fs = std::filesystem;
using moeforge::CheckpointWeights;

#define NEED_FIXTURES()                                                                                  \
  if (!std::getenv("MOEFORGE_FIXTURES_DIR"))                                                             \
    GTEST_SKIP() << "MOEFORGE_FIXTURES_DIR is not set: tools/test.d/10-checkpoints.sh generates the "  \
                    "fixtures (tests/fixtures/make_fixtures.py) and sets it";

std::string fixture(const std::string& name) { return std::string(std::getenv("MOEFORGE_FIXTURES_DIR")) + "/" + name; }

template <class T>
std::vector<T> read_bin(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  f.seekg(0, std::ios::end);
  std::vector<T> v(size_t(f.tellg()) / sizeof(T));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
  return v;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

std::unique_ptr<CheckpointWeights> open_quiet(const std::string& dir, int layer, bool fallback = true) {
  return CheckpointWeights::open(dir, layer, {.allow_bf16_fallback = fallback, .warn = [](const std::string&) {}});
}

// Every value of m equals expected (bit for bit as doubles).
void expect_values(const moeforge::QuantMatrix& m, const std::vector<double>& expected, const std::string& what) {
  ASSERT_EQ(int64_t(expected.size()), m.rows * m.cols) << what << ": expected file size";
  std::vector<double> got(expected.size());
  m.dequantize_rows(0, m.rows, got.data());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == expected[i])) {
      if (bad++ < 3)
        ADD_FAILURE() << what << " [" << i / size_t(m.cols) << ", " << i % size_t(m.cols) << "]: got " << got[i]
                      << ", numpy wrote " << expected[i];
    }
  EXPECT_EQ(bad, 0) << what << ": mismatching values";
}

const std::vector<std::string> kLayouts = {"bf16-mixtral",   "bf16-qwen3",      "fp8-deepseek", "fp8-ct-tensor",
                          "fp8-ct-channel", "nvfp4-ct",        "nvfp4-ct-unfused", "nvfp4-modelopt",
                          "mxfp4-gptoss",   "bf16-gptoss"};

class CheckpointLayout : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return fixture(GetParam()); }
  nlohmann::json expect() const { return read_json(dir() + "/expected/expect.json"); }
};

TEST_P(CheckpointLayout, SpecFromConfigJson) {
  NEED_FIXTURES();
  const auto x = expect();
  const auto w = open_quiet(dir(), x["layer"].get<int>());
  const moeforge::MoeSpec& s = w->spec();
  EXPECT_EQ(s.num_experts, x["E"].get<int64_t>());
  EXPECT_EQ(s.hidden, x["H"].get<int64_t>());
  EXPECT_EQ(s.intermediate, x["I"].get<int64_t>());
  EXPECT_EQ(s.topk, x["k"].get<int>());
  EXPECT_EQ(s.num_shared_experts, x["shared"].get<int>());
  if (s.num_shared_experts) {
    EXPECT_EQ(s.shared_intermediate, x["I"].get<int64_t>());
  }
  EXPECT_EQ(std::string(moeforge::to_string(s.weight_format)), x["weight_format"].get<std::string>()) << w->describe();
  EXPECT_EQ(w->dequantized_to_bf16(), x["fallback"].get<bool>()) << w->describe();
  EXPECT_EQ(s.expert_bias, x.value("bias", false));
  if (x.value("bias", false)) {
    EXPECT_EQ(s.activation.kind, moeforge::ActivationKind::ClampedSwiGLU);
  }
  if (x.contains("renormalize")) {
    EXPECT_EQ(s.routing.renormalize, x["renormalize"].get<bool>());
  }
  if (x.contains("routing")) {
    EXPECT_EQ(std::string(moeforge::to_string(s.routing.kind)), x["routing"].get<std::string>());
    EXPECT_EQ(s.routing.topk_groups, x["groups"][0].get<int>());
    EXPECT_EQ(s.routing.n_groups, x["groups"][1].get<int>());
    EXPECT_EQ(s.routing.scaling_factor, x["scale"].get<double>());
  } else {
    EXPECT_EQ(s.routing.kind, moeforge::RoutingKind::Softmax);
  }
  EXPECT_NO_THROW(s.validate());
}

TEST_P(CheckpointLayout, EveryExpertEqualsTheNumpyValues) {
  NEED_FIXTURES();
  const auto x = expect();
  const auto w = open_quiet(dir(), x["layer"].get<int>());
  const std::string ex = dir() + "/expected/";
  for (int64_t e = -w->spec().num_shared_experts; e < w->spec().num_experts; ++e) {
    const moeforge::ExpertWeights ew = e < 0 ? w->shared_expert(0) : w->expert(e);
    const std::string tag = e < 0 ? "shared" : std::to_string(e);
    EXPECT_EQ(ew.w13.format, w->spec().weight_format);
    expect_values(ew.w13, read_bin<double>(ex + (e < 0 ? "shared_w13.f64" : "w13_" + tag + ".f64")), "w13 of " + tag);
    expect_values(ew.w2, read_bin<double>(ex + (e < 0 ? "shared_w2.f64" : "w2_" + tag + ".f64")), "w2 of " + tag);
    if (e >= 0 && w->spec().expert_bias) {
      EXPECT_EQ(ew.b13, read_bin<float>(ex + "b13_" + tag + ".f32")) << "b13 of " << tag;
      EXPECT_EQ(ew.b2, read_bin<float>(ex + "b2_" + tag + ".f32")) << "b2 of " << tag;
    } else {
      EXPECT_TRUE(ew.b13.empty() && ew.b2.empty());
    }
  }
  EXPECT_EQ(w->router_weight(), read_bin<float>(ex + "router.f32"));
  EXPECT_EQ(w->router_bias(), read_bin<float>(ex + "router_bias.f32"));
  EXPECT_EQ(w->correction_bias(), read_bin<float>(ex + "corr_bias.f32"));
}

TEST_P(CheckpointLayout, ForwardEqualsInMemoryWeights) {
  NEED_FIXTURES();
  const auto w = open_quiet(dir(), expect()["layer"].get<int>());
  const moeforge::MoeSpec& s = w->spec();
  std::vector<moeforge::ExpertWeights> experts, shared;
  for (int64_t e = 0; e < s.num_experts; ++e) experts.push_back(w->expert(e));
  for (int i = 0; i < s.num_shared_experts; ++i) shared.push_back(w->shared_expert(i));
  const moeforge::InMemoryWeights mem(s, experts, shared, w->correction_bias());

  const int64_t T = 24;
  std::mt19937 rng(std::hash<std::string>{}(GetParam()));
  std::normal_distribution<float> nd;
  std::vector<uint16_t> xb(size_t(T * s.hidden));
  for (auto& v : xb) v = moeforge::formats::float_to_bf16(nd(rng));
  const auto x = moeforge::TensorView::contiguous(xb.data(), moeforge::DType::bf16, {T, s.hidden});
  std::vector<float> logits = w->router_logits(x);
  ASSERT_EQ(int64_t(logits.size()), T * s.num_experts);
  // The router: x . W^T (+ bias) in double, checked here against a direct sum.
  for (int64_t t : {int64_t(0), T - 1})
    for (int64_t e = 0; e < s.num_experts; ++e) {
      double acc = w->router_bias().empty() ? 0.0 : w->router_bias()[size_t(e)];
      for (int64_t h = 0; h < s.hidden; ++h)
        acc += double(moeforge::formats::bf16_to_float(xb[size_t(t * s.hidden + h)])) *
               w->router_weight()[size_t(e * s.hidden + h)];
      EXPECT_EQ(logits[size_t(t * s.num_experts + e)], float(acc));
    }
  const auto lv = moeforge::TensorView::contiguous(logits.data(), moeforge::DType::f32, {T, s.num_experts});
  const std::vector<double> a = moeforge::reference::forward(s, *w, x, lv);
  const std::vector<double> b = moeforge::reference::forward(s, mem, x, lv);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a, b);
  double norm = 0;
  for (double v : a) {
    ASSERT_TRUE(std::isfinite(v));
    norm += v * v;
  }
  EXPECT_GT(norm, 0.0);
}

std::string param_name(const ::testing::TestParamInfo<std::string>& i) {
  std::string n = i.param;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointLayout, ::testing::ValuesIn(kLayouts), param_name);

const std::vector<std::string> kHostile = {"truncated", "offsets-past-end", "header-length", "wrong-dtype",  "shape-mismatch",
                          "overlap",   "bad-json",         "unknown-dtype", "missing-scale"};

class CheckpointHostile : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointHostile, GivesIoErrorNamingFileAndProblem) {
  NEED_FIXTURES();
  const std::string d = fixture("hostile/" + GetParam());
  const auto x = read_json(d + "/expected/expect.json");
  const int layer = GetParam() == "missing-scale" ? 1 : 0;
  try {
    const auto w = open_quiet(d, layer);
    for (int64_t e = 0; e < w->spec().num_experts; ++e) w->expert(e);
    FAIL() << GetParam() << ": no error";
  } catch (const moeforge::IoError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.exit_code(), 7);
    for (const auto& s : x["error"]) EXPECT_NE(m.find(s.get<std::string>()), std::string::npos) << "'" << s << "' not in: " << m;
    EXPECT_NE(m.find(d), std::string::npos) << "the path is not in: " << m;
  } catch (const std::exception& e) {
    FAIL() << GetParam() << ": expected IoError, got " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointHostile, ::testing::ValuesIn(kHostile), param_name);

TEST(CheckpointOpen, LayersAndPolicies) {
  NEED_FIXTURES();
  try {
    open_quiet(fixture("fp8-deepseek"), 0);
    FAIL() << "dense layer 0 accepted";
  } catch (const moeforge::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0 has no routed experts"), std::string::npos) << e.what();
  }
  try {
    open_quiet(fixture("bf16-qwen3"), 5);
    FAIL() << "missing layer accepted";
  } catch (const moeforge::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("no tensors for layer 5"), std::string::npos) << e.what();
  }
  // Without the fallback, inexact layouts are refused, naming the reason.
  for (const char* name : {"fp8-ct-channel", "nvfp4-ct-unfused"}) {
    try {
      open_quiet(fixture(name), 0, /*fallback=*/false);
      FAIL() << name << " accepted without the fallback";
    } catch (const moeforge::Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find("cannot be held exactly"), std::string::npos) << e.what();
    }
  }
  std::vector<std::string> warnings;
  auto w = CheckpointWeights::open(fixture("fp8-ct-channel"), 0,
                                   {.warn = [&](const std::string& s) { warnings.push_back(s); }});
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings.back().find("per-channel"), std::string::npos) << warnings.back();
  EXPECT_NE(warnings.back().find("dequantizing the layer to bf16"), std::string::npos) << warnings.back();
  EXPECT_THROW(w->expert(8), moeforge::InvalidArgument);
  EXPECT_THROW(w->shared_expert(0), moeforge::InvalidArgument);
}

// ---- the safetensors reader on hand-made bytes (no fixtures needed)

std::string write_file(const moeforge::testing::TempDir& d, const std::string& header, size_t data_bytes,
                       int64_t header_len = -1) {
  const std::string p = d.path + "/x.safetensors";
  std::ofstream f(p, std::ios::binary);
  const uint64_t n = header_len < 0 ? header.size() : uint64_t(header_len);
  for (int i = 0; i < 8; ++i) f.put(char((n >> (8 * i)) & 0xFF));
  f << header << std::string(data_bytes, '\x01');
  return p;
}

std::string open_error(const std::string& p) {
  try {
    moeforge::io::SafetensorsFile f(p);
  } catch (const moeforge::IoError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointSafetensors, ValidFileMapsWithoutCopies) {
  moeforge::testing::TempDir d;
  const std::string p = write_file(
      d, R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"__metadata__":{"k":"v"}})",
      12);
  moeforge::io::SafetensorsFile f(p);
  ASSERT_EQ(f.tensors().size(), 2u);
  const auto* b = f.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape_str(), "[2]");
  EXPECT_EQ(f.find("a")->data + 4, b->data);  // views into one map
  EXPECT_EQ(f.find("c"), nullptr);
}

TEST(CheckpointSafetensors, DamagedHeadersNameTheFileAndProblem) {
  moeforge::testing::TempDir d;
  struct Case {
    std::string header;
    size_t data;
    int64_t len;
    const char* want;
  };
  const Case cases[] = {
      {"{}", 0, 1 << 30, "exceeds"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 0, 4000, "runs past the end"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, -1, "past the end of the file"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, -1, "reversed"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, -1, "needs 12"},
      {R"({"a":{"dtype":"F32","shape":[-3],"data_offsets":[0,8]}})", 8, -1, "negative"},
      {R"({"a":{"dtype":"F32","shape":[1048576,1048576,4],"data_offsets":[0,8]}})", 8, -1, "2^40"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, -1, "overlap"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, -1, "gap"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12, -1, "after the last tensor"},
      {R"([1,2])", 0, -1, "not a JSON object"},
      {R"({"a":{"dtype":"X1","shape":[2],"data_offsets":[0,8]}})", 8, -1, "unknown dtype 'X1'"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, -1, "data_offsets"},
  };
  for (const Case& c : cases) {
    const std::string p = write_file(d, c.header, c.data, c.len);
    const std::string err = open_error(p);
    EXPECT_NE(err.find(p), std::string::npos) << c.header << " -> " << err;
    EXPECT_NE(err.find(c.want), std::string::npos) << c.header << " -> '" << err << "' lacks '" << c.want << "'";
  }
  std::ofstream(d.path + "/tiny.safetensors") << "abc";
  EXPECT_NE(open_error(d.path + "/tiny.safetensors").find("too small"), std::string::npos);
}

// config.json values of the wrong JSON type or out of range give an IoError naming the file and
// the key (tests/fuzz/fuzz_checkpoint.cpp found a quant_method that was not a string escaping
// as nlohmann's type_error); a truncated int field would have been silently wrong.
TEST(CheckpointConfig, WrongTypesAndRangesNameTheKey) {
  using nlohmann::json;
  const json ok = {{"model_type", "mixtral"}, {"num_local_experts", 8}, {"hidden_size", 256},
                   {"intermediate_size", 128}, {"num_experts_per_tok", 2}};
  const moeforge::io::ConfigSpec c = moeforge::io::spec_from_config(ok, "cfg.json");
  EXPECT_EQ(c.spec.num_experts, 8);
  EXPECT_EQ(c.spec.topk, 2);
  struct Case {
    const char* key;
    json value;
    const char* want;
  };
  const Case cases[] = {
      {"model_type", 7, "model_type must be a string"},
      {"hidden_act", json::array({"silu"}), "hidden_act must be a string"},
      {"scoring_func", false, "scoring_func must be a string"},
      {"topk_method", 1.5, "topk_method must be a string"},
      {"quantization_config", {{"quant_method", 8}}, "quant_method must be a string"},
      {"num_experts_per_tok", int64_t(1) << 33, "experts per token = 8589934592 is out of range"},
      {"n_group", int64_t(1) << 40, "n_group = 1099511627776 is out of range"},
      {"hidden_size", uint64_t(1) << 63, "hidden_size = 9223372036854775808 is out of range"},
      {"n_shared_experts", int64_t(1) << 60, "n_shared_experts 1152921504606846976 x moe_intermediate_size"},
      {"swiglu_limit", "7", "swiglu_limit must be a number"},
  };
  for (const Case& k : cases) {
    json cfg = ok;
    cfg[k.key] = k.value;
    if (std::string(k.key) == "swiglu_limit") cfg["model_type"] = "gpt_oss";
    std::string err;
    try {
      moeforge::io::spec_from_config(cfg, "cfg.json");
    } catch (const moeforge::IoError& e) {
      err = e.what();
    }
    EXPECT_NE(err.find("cfg.json"), std::string::npos) << k.key << " -> '" << err << "'";
    EXPECT_NE(err.find(k.want), std::string::npos) << k.key << " -> '" << err << "' lacks '" << k.want << "'";
  }
  EXPECT_THROW(moeforge::io::spec_from_config(json::array({1, 2}), "cfg.json"), moeforge::IoError);
}

}  // namespace
