// QuantMatrix: quantize -> dequantize_rows agrees with the free functions for every
// format, sub-ranges agree with the full result, validate() names what is wrong.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "moeforge/spec.hpp"
#include "moeforge/weights.hpp"

using moeforge::InvalidArgument;
using moeforge::QuantMatrix;
using moeforge::WeightFormat;
namespace mf = moeforge::formats;

namespace {

const WeightFormat kAllFormats[] = {WeightFormat::BF16, WeightFormat::FP16, WeightFormat::FP8_Block128,
                                    WeightFormat::NVFP4, WeightFormat::MXFP4};

std::vector<float> random_values(int64_t n, uint64_t seed, float scale = 0.05f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  return x;
}

// The free functions' float result for the same input.
std::vector<float> free_dequant(WeightFormat f, const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> out(x.size());
  switch (f) {
    case WeightFormat::BF16:
      for (size_t i = 0; i < x.size(); ++i) out[i] = mf::bf16_to_float(mf::float_to_bf16(x[i]));
      break;
    case WeightFormat::FP16:
      for (size_t i = 0; i < x.size(); ++i) out[i] = mf::f16_to_float(mf::float_to_f16(x[i]));
      break;
    case WeightFormat::FP8_Block128: {
      std::vector<uint8_t> q(x.size());
      std::vector<float> s(((rows + 127) / 128) * ((cols + 127) / 128));
      mf::quantize_fp8_block128(x.data(), rows, cols, q.data(), s.data());
      mf::dequantize_fp8_block128(q.data(), s.data(), rows, cols, out.data());
      break;
    }
    case WeightFormat::NVFP4: {
      std::vector<uint8_t> p(x.size() / 2), s(x.size() / 16);
      float g;
      mf::quantize_nvfp4(x.data(), rows, cols, p.data(), s.data(), &g);
      mf::dequantize_nvfp4(p.data(), s.data(), g, rows, cols, out.data());
      break;
    }
    case WeightFormat::MXFP4: {
      std::vector<uint8_t> p(x.size() / 2), s(x.size() / 32);
      mf::quantize_mxfp4(x.data(), rows, cols, p.data(), s.data());
      mf::dequantize_mxfp4(p.data(), s.data(), rows, cols, out.data());
      break;
    }
  }
  return out;
}

// The exact real value of element i, from the stored codes by the format's definition.
double exact_value(const QuantMatrix& m, int64_t r, int64_t c) {
  const int64_t i = r * m.cols + c;
  switch (m.format) {
    case WeightFormat::BF16:
    case WeightFormat::FP16: {
      uint16_t h;
      std::memcpy(&h, m.data.data() + 2 * i, 2);
      return m.format == WeightFormat::BF16 ? mf::bf16_to_float(h) : mf::f16_to_float(h);
    }
    case WeightFormat::FP8_Block128: {
      float s;
      std::memcpy(&s, m.scales.data() + 4 * ((r / 128) * ((m.cols + 127) / 128) + c / 128), 4);
      return static_cast<double>(mf::e4m3_to_float(m.data[i])) * s;
    }
    case WeightFormat::NVFP4: {
      const uint8_t code = (m.data[i / 2] >> (4 * (i % 2))) & 0xF;
      return static_cast<double>(mf::e2m1_to_float(code)) * mf::e4m3_to_float(m.scales[i / 16]) * m.global_scale;
    }
    case WeightFormat::MXFP4: {
      const uint8_t code = (m.data[i / 2] >> (4 * (i % 2))) & 0xF;
      return static_cast<double>(mf::e2m1_to_float(code)) * mf::ue8m0_to_float(m.scales[i / 32]);
    }
  }
  return NAN;
}

std::string message_of(const QuantMatrix& m, const char* name) {
  try {
    m.validate(name);
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), name);
    return e.what();
  }
  ADD_FAILURE() << "validate accepted a bad matrix";
  return "";
}

}  // namespace

TEST(QuantMatrix, DequantizeRowsMatchesFreeFunctions) {
  const int64_t shapes[][2] = {{1, 32}, {130, 96}, {257, 160}};
  for (WeightFormat f : kAllFormats)
    for (auto [rows, cols] : shapes)
      for (uint64_t seed : {1u, 2u}) {
        SCOPED_TRACE(std::string(moeforge::to_string(f)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
        const auto x = random_values(rows * cols, seed);
        const QuantMatrix m = QuantMatrix::quantize(f, rows, cols, x.data());
        EXPECT_NO_THROW(m.validate("m"));
        std::vector<double> out(x.size(), NAN);
        m.dequantize_rows(0, rows, out.data());
        const auto ref = free_dequant(f, x, rows, cols);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const int64_t i = r * cols + c;
            // Exact product of the stored factors; its float rounding is the free function's value.
            ASSERT_EQ(out[i], exact_value(m, r, c)) << "element " << i;
            ASSERT_EQ(static_cast<float>(out[i]), ref[i]) << "element " << i;
          }
      }
}

TEST(QuantMatrix, SubRangeEqualsSliceOfFull) {
  for (WeightFormat f : kAllFormats) {
    const int64_t rows = 260, cols = 192;
    const auto x = random_values(rows * cols, 9);
    const QuantMatrix m = QuantMatrix::quantize(f, rows, cols, x.data());
    std::vector<double> full(rows * cols);
    m.dequantize_rows(0, rows, full.data());
    const int64_t ranges[][2] = {{0, 1}, {5, 6}, {100, 200}, {127, 129}, {255, 260}, {7, 7}};
    for (auto [r0, r1] : ranges) {
      std::vector<double> part((r1 - r0) * cols, NAN);
      m.dequantize_rows(r0, r1, part.data());
      for (int64_t i = 0; i < (r1 - r0) * cols; ++i)
        ASSERT_EQ(part[i], full[r0 * cols + i]) << moeforge::to_string(f) << " rows " << r0 << ".." << r1;
    }
    std::vector<double> tmp(cols);
    EXPECT_THROW(m.dequantize_rows(-1, 0, tmp.data()), InvalidArgument);
    EXPECT_THROW(m.dequantize_rows(2, 1, tmp.data()), InvalidArgument);
    EXPECT_THROW(m.dequantize_rows(rows, rows + 1, tmp.data()), InvalidArgument);
    EXPECT_THROW(m.dequantize_rows(0, 1, nullptr), InvalidArgument);
  }
}

TEST(QuantMatrix, LayoutOfStoredBytes) {
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 3.0f};
  const QuantMatrix b = QuantMatrix::quantize(WeightFormat::BF16, 2, 2, x.data());
  ASSERT_EQ(b.data.size(), 8u);
  uint16_t h;
  std::memcpy(&h, b.data.data() + 2, 2);
  EXPECT_EQ(h, 0xC000);  // element 1 (-2.0) at bytes 2..3, host order
  EXPECT_TRUE(b.scales.empty());
  const QuantMatrix f8 = QuantMatrix::quantize(WeightFormat::FP8_Block128, 2, 2, x.data());
  ASSERT_EQ(f8.scales.size(), 4u);
  float s;
  std::memcpy(&s, f8.scales.data(), 4);
  EXPECT_EQ(s, 3.0f / 448.0f);  // raw f32 bytes
  EXPECT_EQ(f8.data[3], 0x7E);  // the block max encodes as 448
}

TEST(QuantMatrix, ValidateNamesTheProblem) {
  const auto x = random_values(4 * 64, 3);
  for (WeightFormat f : kAllFormats) {
    const QuantMatrix good = QuantMatrix::quantize(f, 4, 64, x.data());
    EXPECT_NO_THROW(good.validate("w13"));
    QuantMatrix bad = good;
    bad.data.pop_back();
    std::string msg = message_of(bad, "w13");
    EXPECT_NE(msg.find("w13: data has " + std::to_string(good.data.size() - 1) + " bytes, expected " +
                       std::to_string(good.data.size())),
              std::string::npos)
        << msg;
    bad = good;
    bad.scales.push_back(0);
    msg = message_of(bad, "w2");
    EXPECT_NE(msg.find("w2: scales has " + std::to_string(good.scales.size() + 1) + " bytes, expected " +
                       std::to_string(good.scales.size())),
              std::string::npos)
        << msg;
    bad = good;
    bad.rows = 5;  // data no longer matches the shape
    message_of(bad, "w13");
    bad = good;
    bad.cols = -64;
    message_of(bad, "w13");
  }
  // cols not a multiple of the block
  QuantMatrix nv = QuantMatrix::quantize(WeightFormat::NVFP4, 1, 32, x.data());
  nv.cols = 24;
  nv.data.resize(12);
  nv.scales.resize(1);
  EXPECT_NE(message_of(nv, "w13").find("multiple of 16, got 24"), std::string::npos);
  QuantMatrix mx = QuantMatrix::quantize(WeightFormat::MXFP4, 1, 64, x.data());
  mx.cols = 48;
  mx.data.resize(24);
  mx.scales.resize(1);
  EXPECT_NE(message_of(mx, "w2").find("multiple of 32, got 48"), std::string::npos);
  nv = QuantMatrix::quantize(WeightFormat::NVFP4, 1, 32, x.data());
  nv.global_scale = NAN;
  EXPECT_NE(message_of(nv, "w13").find("global_scale"), std::string::npos);
}

TEST(QuantMatrix, QuantizeRejectsBadArguments) {
  const auto x = random_values(64, 4);
  auto argument_of = [](auto fn) -> std::string {
    try {
      fn();
    } catch (const InvalidArgument& e) {
      return e.argument();
    }
    return "(no throw)";
  };
  EXPECT_EQ(argument_of([&] { QuantMatrix::quantize(WeightFormat::BF16, -1, 4, x.data()); }), "values");
  EXPECT_EQ(argument_of([&] { QuantMatrix::quantize(WeightFormat::BF16, 4, -4, x.data()); }), "values");
  EXPECT_EQ(argument_of([&] { QuantMatrix::quantize(WeightFormat::FP8_Block128, 2, 2, nullptr); }), "values");
  EXPECT_EQ(argument_of([&] { QuantMatrix::quantize(WeightFormat::NVFP4, 1, 24, x.data()); }), "values");
  EXPECT_EQ(argument_of([&] { QuantMatrix::quantize(WeightFormat::MXFP4, 1, 48, x.data()); }), "values");
  // Empty matrices are fine, with or without a pointer.
  for (WeightFormat f : kAllFormats) {
    const QuantMatrix e = QuantMatrix::quantize(f, 0, 64, nullptr);
    EXPECT_NO_THROW(e.validate("e"));
    e.dequantize_rows(0, 0, nullptr);
  }
}

// dequantize_rows runs once per expert matrix of a 3.2-billion-parameter layer in the CPU
// reference, so it must be fast. Not a benchmark: a loose guard against an accidental
// slow path (a per-element virtual call, a decode without tables), printed for the record.
TEST(QuantMatrix, DequantizeLargeMatrixIsFast) {
  const int64_t rows = 4096, cols = 4096;
  const auto x = random_values(rows * cols, 5);
  std::vector<double> out(rows * cols);
  for (WeightFormat f : {WeightFormat::NVFP4, WeightFormat::FP8_Block128, WeightFormat::BF16}) {
    const QuantMatrix m = QuantMatrix::quantize(f, rows, cols, x.data());
    const auto t0 = std::chrono::steady_clock::now();
    m.dequantize_rows(0, rows, out.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RecordProperty(std::string("dequantize_4096x4096_") + std::string(moeforge::to_string(f)) + "_ms",
                   std::to_string(static_cast<int>(s * 1000)));
    EXPECT_LT(s, 2.0) << moeforge::to_string(f);
    EXPECT_EQ(out[12345], exact_value(m, 12345 / cols, 12345 % cols));
  }
}
