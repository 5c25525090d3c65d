// TensorView helpers and validation on degenerate views (regressions from fuzzing).
#include <gtest/gtest.h>

#include "moeforge/errors.hpp"
#include "moeforge/validate.hpp"
#include "moeforge/weights.hpp"

using namespace moeforge;

TEST(TensorView, EmptyHasZeroElementsHoweverLargeTheOtherDims) {
  TensorView t = TensorView::contiguous(nullptr, DType::bf16, {int64_t(1) << 40, int64_t(1) << 40, 0});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0);
  EXPECT_TRUE(t.is_contiguous());
}

TEST(TensorView, OverflowAndBadRankAreRefusedNotUndefined) {
  TensorView t = TensorView::contiguous(nullptr, DType::f32, {int64_t(1) << 40, int64_t(1) << 40});
  EXPECT_EQ(t.numel(), -1);
  EXPECT_EQ(t.nbytes(), -1);
  EXPECT_FALSE(t.is_contiguous());
  TensorView big = TensorView::contiguous(nullptr, DType::f64, {int64_t(1) << 61});
  EXPECT_EQ(big.numel(), int64_t(1) << 61);
  EXPECT_EQ(big.nbytes(), -1);  // 2^64 bytes
  TensorView bad;
  bad.rank = 7;
  EXPECT_EQ(bad.numel(), -1);
  EXPECT_FALSE(bad.is_contiguous());
  EXPECT_NE(bad.describe().find("rank 7"), std::string::npos);
}

TEST(TensorView, UnknownDtypeCodeIsAnInvalidArgument) {
  uint16_t buf[8]{};
  TensorView t = TensorView::contiguous(buf, DType(200), {2, 4});
  EXPECT_FALSE(dtype_known(t.dtype));
  try {
    validate_tensor("x", t, {DType::bf16}, {2, 4}, Device{});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype code 200"), std::string::npos) << e.what();
  }
}

TEST(QuantMatrix, HugeDimensionsAreRefusedEvenWhenTheOtherIsZero) {
  QuantMatrix m;
  m.format = WeightFormat::FP8_Block128;
  m.rows = INT64_MAX - 5;
  m.cols = 0;
  EXPECT_THROW(m.validate("m"), InvalidArgument);
  EXPECT_THROW(QuantMatrix::quantize(WeightFormat::FP8_Block128, 0, INT64_MAX - 100, nullptr), InvalidArgument);
}
