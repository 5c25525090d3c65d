// The portable backend without a GPU: every kernel it would launch compiles with NVRTC
// for every supported target, and the prepare-time weight layout (gate/up interleave,
// K padding, per-row scale packing) decodes to exactly QuantMatrix::dequantize_rows.
//
// Compile coverage (NVRTC is slow; budget < 2 minutes on 2 cores, compiles run on 2
// threads and identical (source, entry, defines) requests are compiled once):
//  * sm_90a: every kernel of kernels(spec) for every preset and the two custom specs
//    (softmax-grouped, geglu), times every weight format (bf16, fp16, fp8, nvfp4, mxfp4).
//  * every other supported target: a subset that still takes every code path of every
//    kernel source: all kernels of gpt-oss (clamped SwiGLU, biases, H and I not multiples
//    of 128) in each weight format; the routing / validate / permute / combine kernels of
//    deepseek-v3 (sigmoid + bias, groups, shared expert), custom-softmax-grouped and
//    custom-geglu in bf16, and GEMM 1 of custom-geglu (the GeGLU epilogue).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "backends/backend.hpp"
#include "backends/portable/portable.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "moeforge/spec.hpp"
#include "moeforge/weights.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "support/specs.hpp"
#include "test_runtime_support.hpp"

namespace moeforge {
namespace {

using portable::PreparedMatrix;

// ---- custom specs that, with the presets, cover every routing kind and activation ----
std::vector<MoeSpec> all_specs() {
  std::vector<MoeSpec> v;
  for (const auto& n : presets::names()) v.push_back(presets::get(n));
  v.push_back(testing::custom_softmax_grouped_spec());
  v.push_back(testing::custom_geglu_spec());
  return v;
}
const WeightFormat kFormats[] = {WeightFormat::BF16, WeightFormat::FP16, WeightFormat::FP8_Block128,
                                 WeightFormat::NVFP4, WeightFormat::MXFP4};

// ---------------------------------------------------------------- layout ----------
TEST(PortableLayout, InterleaveIsAPermutationPairingGateAndUp) {
  const int64_t I = 48;
  std::set<int64_t> seen;
  for (int64_t n = 0; n < 2 * I; ++n) {
    const int64_t s = portable::interleaved_source_row(n, I);
    ASSERT_TRUE(seen.insert(s).second) << n;
    if ((n % 16) < 8) {
      EXPECT_LT(s, I);
      // its up partner sits 8 rows later
      EXPECT_EQ(portable::interleaved_source_row(n + 8, I), s + I);
    }
  }
  EXPECT_EQ(int64_t(seen.size()), 2 * I);
  std::vector<float> b(size_t(2 * I));
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i);
  const auto bi = portable::interleave_bias(b, I);
  for (int64_t n = 0; n < 2 * I; ++n) EXPECT_EQ(bi[size_t(n)], float(portable::interleaved_source_row(n, I)));
}

void check_layout(WeightFormat f, int64_t rows, int64_t cols, bool interleave) {
  std::mt19937 rng(1234 + int(f) + int(rows) + int(cols));
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> v(size_t(rows * cols));
  for (auto& x : v) x = nd(rng);
  // a few block-scale extremes
  for (int64_t r = 0; r < rows; r += 7) v[size_t(r * cols)] = 3.0f;
  const QuantMatrix m = QuantMatrix::quantize(f, rows, cols, v.data());
  const PreparedMatrix p = portable::prepare_matrix(m, interleave);
  ASSERT_EQ(p.kp % portable::kBK, 0);
  ASSERT_GE(p.kp, cols);
  std::vector<double> got(static_cast<size_t>(cols)), want(static_cast<size_t>(cols));
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t src = interleave ? portable::interleaved_source_row(n, rows / 2) : n;
    portable::decode_prepared_rows(p, n, n + 1, got.data());
    m.dequantize_rows(src, src + 1, want.data());
    for (int64_t c = 0; c < cols; ++c) {
      double w = want[size_t(c)];
      if (f == WeightFormat::FP16) w = formats::bf16_to_float(formats::float_to_bf16(float(w)));  // staged as bf16
      ASSERT_EQ(got[size_t(c)], w) << to_string(f) << " row " << n << " (source " << src << ") col " << c;
    }
  }
  // K padding holds zeros (the kernel multiplies it by zero-filled activations).
  const int64_t ebytes = p.format == WeightFormat::BF16 ? 2 : 1;
  if (p.format == WeightFormat::BF16 || p.format == WeightFormat::FP8_Block128) {
    for (int64_t n = 0; n < rows; ++n)
      for (int64_t b = cols * ebytes; b < p.kp * ebytes; ++b) ASSERT_EQ(p.data[size_t(n * p.kp * ebytes + b)], 0);
  } else {
    for (int64_t n = 0; n < rows; ++n)
      for (int64_t b = cols / 2; b < p.kp / 2; ++b) ASSERT_EQ(p.data[size_t(n * p.kp / 2 + b)], 0);
  }
}

TEST(PortableLayout, PreparedMatricesDecodeToTheDequantizedValues) {
  for (WeightFormat f : kFormats) {
    SCOPED_TRACE(std::string(to_string(f)));
    // W13-like (interleaved) and W2-like; cols not a multiple of 128 (partial fp8 block,
    // K padding) where the format allows.
    const int64_t cols = f == WeightFormat::MXFP4 ? 224 : 208;
    check_layout(f, 96, cols, true);
    check_layout(f, 136, cols, false);
    check_layout(f, 256, 256, true);
  }
}

TEST(PortableLayout, TileChoiceAndChunkPlan) {
  const MoeSpec s = presets::get("deepseek-v3");
  EXPECT_EQ(&portable::choose_tile(s, 1, nullptr), &portable::kSmallTile);
  EXPECT_EQ(&portable::choose_tile(s, 36308, nullptr), &portable::kLargeTile);
  // 300k tokens of DeepSeek-V3: chunked, every bound far below 2^31.
  const portable::ChunkPlan p = portable::plan_chunk(s, 300000, portable::kLargeTile);
  EXPECT_LT(p.tokens, 300000);
  EXPECT_GE(p.tokens, 4096);
  EXPECT_LT(p.rows_bound, int64_t(1) << 31);
  EXPECT_GE(p.tile_bound * portable::kLargeTile.bm,
            p.tokens * (s.topk + s.num_shared_experts) + (s.num_experts + 1) * (portable::kLargeTile.bm - 1));
  // Decode sizes: only experts that can have rows count (the gather and GEMM grids are this
  // bound), and the worst routing still fits: every entry in its own expert, the shared
  // expert's T rows padded to a tile.
  const int64_t bm = portable::kLargeTile.bm, k = s.topk, S = s.num_shared_experts;
  for (int64_t T : {1, 2, 7, 32}) {  // T * k <= E
    const portable::ChunkPlan d = portable::plan_chunk(s, T, portable::kLargeTile);
    EXPECT_GE(d.tile_bound * bm, T * k * bm + S * ((T + bm - 1) / bm) * bm) << T;
    EXPECT_LE(d.tile_bound, T * k + 2 * S) << T;
  }
  EXPECT_EQ(portable::plan_chunk(s, 1, portable::kLargeTile).tile_bound, k + S);
  // GEMM shared memory fits the smallest opt-in limit of the supported chips (99 KB).
  for (WeightFormat f : kFormats)
    for (const auto* c : {&portable::kSmallTile, &portable::kLargeTile})
      EXPECT_LE(portable::gemm_smem_bytes(*c, f), 99 * 1024) << *c << " " << to_string(f);
}

// Decode-sized batches split each token's combine over column slices of 1024 (one pass of
// loads per block); once the tokens alone fill the SMs, one block per token.
TEST(PortableLayout, CombineSlices) {
  EXPECT_EQ(portable::combine_slices(1, 4096, 132), 4u);
  EXPECT_EQ(portable::combine_slices(131, 7168, 132), 7u);
  EXPECT_EQ(portable::combine_slices(132, 4096, 132), 1u);
  EXPECT_EQ(portable::combine_slices(1, 544, 132), 1u);
  EXPECT_EQ(portable::combine_slices(1, 1028, 132), 2u);
}

TEST(PortableBackend, WhyNotWithoutDeviceAndUnsupportedSpecs) {
  const Backend& b = portable_backend();
  EXPECT_EQ(b.name(), "portable");
  EXPECT_FALSE(b.why_not(presets::get("mixtral-8x7b"), nullptr).empty());
  MoeSpec s = presets::get("mistral-small-4");
  s.shared_intermediate = 1024;
  EXPECT_NE(portable::spec_unsupported(s).find("shared_intermediate"), std::string::npos);
  s = presets::get("mistral-small-4");
  s.activation_format = ActivationFormat::FP8_Group128;
  EXPECT_FALSE(portable::spec_unsupported(s).empty());
  for (const MoeSpec& spec : all_specs()) EXPECT_EQ(portable::spec_unsupported(spec), "") << spec.name;
}

// ---------------------------------------------------------------- NVRTC ----------
struct Job {
  rt::CompileRequest req;
  std::string label;
};

std::string job_key(const rt::CompileRequest& r) {
  std::string k = r.target + "|" + r.source + "|" + r.entry;
  for (const auto& [a, b] : r.defines) k += "|" + a + "=" + b;
  return k;
}

void add_spec_jobs(const MoeSpec& spec, const std::string& target, std::map<std::string, Job>& jobs, bool full) {
  for (const rt::KernelSpec& k : portable_backend().kernels(spec)) {
    // Other targets: GEMMs of gpt-oss only (every format, bias, clamped SwiGLU, N and K
    // tails) plus GEMM 1 of the geglu spec; every non-GEMM kernel of each spec.
    if (!full && k.entry == "moe_grouped_gemm" && spec.name != "gpt-oss-120b") {
      bool stage1 = false;
      for (const auto& [a, b] : k.defines) stage1 |= a == "GEMM_STAGE" && b == "1";
      if (!(spec.name == "custom-geglu" && stage1)) continue;
    }
    rt::CompileRequest r{k.source, k.entry, k.defines, k.options, target};
    const std::string key = job_key(r);
    if (!jobs.count(key)) jobs[key] = Job{r, spec.name + "/" + std::string(to_string(spec.weight_format)) + " " + k.entry};
  }
}

// The workspace-fill testing hook takes -1 (off) or a byte, and says so otherwise.
TEST(PortableBackend, WorkspaceFillTakesAByteOrOff) {
  EXPECT_THROW(portable::set_workspace_fill(256), InvalidArgument);
  EXPECT_THROW(portable::set_workspace_fill(-2), InvalidArgument);
  EXPECT_NO_THROW(portable::set_workspace_fill(0x7F));
  EXPECT_NO_THROW(portable::set_workspace_fill(-1));
}

TEST(PortableKernels, CompileForEveryTarget) {
  std::map<std::string, Job> jobs;
  for (const std::string& target : rt::supported_targets()) {
    const bool full = target == "sm_90a";
    for (MoeSpec spec : all_specs()) {
      const bool representative = spec.name == "gpt-oss-120b" || spec.name == "deepseek-v3" ||
                                  spec.name == "custom-softmax-grouped" || spec.name == "custom-geglu";
      if (!full && !representative) continue;
      for (WeightFormat f : kFormats) {
        if (!full && spec.name != "gpt-oss-120b" && f != WeightFormat::BF16) continue;
        spec.weight_format = f;
        spec.validate();
        const auto ks = portable_backend().kernels(spec);
        ASSERT_FALSE(ks.empty()) << spec.name;
        // Every kernel has a resource budget the planner can check.
        for (const auto& k : ks) EXPECT_GT(k.threads, 0) << k.entry;
        add_spec_jobs(spec, target, jobs, full);
      }
    }
  }
  std::vector<const Job*> list;
  for (const auto& [k, j] : jobs) list.push_back(&j);
  std::mutex mu;
  std::vector<std::string> failures;
  moeforge::testing::parallel_for(list.size(), [&](size_t i) {
    const Job& j = *list[i];
    try {
      const rt::CompileResult r = rt::compile(j.req);
      // The cubin's ELF must name the requested target.
      if (r.cubin.size() < 64 || std::memcmp(r.cubin.data(), "\x7f" "ELF", 4) != 0)
        throw std::runtime_error("not an ELF cubin");
      uint32_t flags = 0;
      std::memcpy(&flags, r.cubin.data() + 48, 4);  // e_flags of an ELF64 header
      const int sm = int((flags >> 8) & 0xFF);
      if (sm != rt::target_sm_number(j.req.target))
        throw std::runtime_error("cubin SM " + std::to_string(sm) + " != " + j.req.target);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu);
      failures.push_back(j.req.target + " " + j.label + ": " + std::string(e.what()).substr(0, 2000));
    }
  });
  RecordProperty("compiled", int(list.size()));
  for (const auto& f : failures) ADD_FAILURE() << f;
}

}  // namespace
}  // namespace moeforge
