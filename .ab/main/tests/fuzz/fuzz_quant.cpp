// libFuzzer target: QuantMatrix::validate with arbitrary (format, rows, cols, data and
// scales sizes, global scale) and, when it passes, dequantize_rows over arbitrary row
// ranges; QuantMatrix::quantize of arbitrary floats (NaN, Inf, subnormals) round trip.
//
// ASan sees every byte dequantize_rows reads (data, scales) and writes (out, sized
// exactly (r1 - r0) * cols), so a size check that lets a short buffer through is a
// heap-buffer-overflow report here.
#include <cmath>
#include <vector>

#include "fuzz_common.hpp"
#include "moeforge/weights.hpp"

using namespace moeforge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const auto format = static_cast<WeightFormat>(in.ConsumeIntegralInRange<uint8_t>(0, 5));
  if (in.ConsumeBool()) {  // quantize arbitrary values, then validate + dequantize all rows
    const int64_t rows = in.ConsumeIntegralInRange<int64_t>(0, 140);
    const int64_t cols = in.ConsumeIntegralInRange<int64_t>(0, 9) * (in.ConsumeBool() ? 32 : 1) + (in.ConsumeBool() ? 0 : 16);
    std::vector<float> v(size_t(rows * cols));
    for (float& f : v) f = in.remaining_bytes() ? in.ConsumeFloatingPoint<float>() : 1.0f;
    QuantMatrix m;
    if (!fuzz::expect_moeforge_errors_only("QuantMatrix::quantize",
                                           [&] { m = QuantMatrix::quantize(format, rows, cols, v.data()); }))
      return 0;
    m.validate("m");  // what quantize makes must validate (throws: a finding)
    std::vector<double> out(size_t(rows * cols));
    m.dequantize_rows(0, rows, out.data());
    for (size_t i = 0; i < v.size(); ++i)  // non-finite inputs never come back finite... unless the
      if (std::isnan(v[i]) && std::isfinite(out[i]) && format != WeightFormat::BF16 &&  // format saturates
          format != WeightFormat::FP16)
        std::abort();
    return 0;
  }
  QuantMatrix m;
  m.format = format;
  m.rows = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, 300) : fuzz::interesting_i64(in);
  m.cols = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, 300) : fuzz::interesting_i64(in);
  const size_t data_bytes = in.ConsumeIntegralInRange<size_t>(0, 1 << 16);
  const size_t scale_bytes = in.ConsumeIntegralInRange<size_t>(0, 1 << 13);
  m.global_scale = in.ConsumeBool() ? 1.0f : in.ConsumeFloatingPoint<float>();
  if (in.ConsumeBool()) {  // often sizes that agree with the shape, to reach dequantize_rows
    const int64_t r = m.rows, c = m.cols;
    if (r >= 0 && c >= 0 && r <= 300 && c <= 300) {
      switch (format) {
        case WeightFormat::BF16:
        case WeightFormat::FP16: m.data.resize(size_t(r * c * 2)); break;
        case WeightFormat::FP8_Block128:
          m.data.resize(size_t(r * c));
          m.scales.resize(size_t((r + 127) / 128 * ((c + 127) / 128) * 4));
          break;
        case WeightFormat::NVFP4: m.data.resize(size_t(r * c / 2)); m.scales.resize(size_t(r * c / 16)); break;
        case WeightFormat::MXFP4: m.data.resize(size_t(r * c / 2)); m.scales.resize(size_t(r * c / 32)); break;
        default: break;
      }
      if (in.ConsumeBool() && !m.data.empty()) m.data.pop_back();  // off by one
    }
  } else {
    m.data.resize(data_bytes);
    m.scales.resize(scale_bytes);
  }
  for (auto& b : m.data) b = in.ConsumeIntegral<uint8_t>();
  for (auto& b : m.scales) b = in.ConsumeIntegral<uint8_t>();
  if (!fuzz::expect_moeforge_errors_only("QuantMatrix::validate", [&] { m.validate("m"); })) return 0;
  const int64_t hi = m.rows > INT64_MAX - 2 ? INT64_MAX : m.rows + 2;
  const int64_t r0 = in.ConsumeIntegralInRange<int64_t>(-2, hi);
  const int64_t r1 = in.ConsumeIntegralInRange<int64_t>(-2, hi);
  if (r1 > r0 && m.cols > 0 && (r1 - r0) > (int64_t(1) << 22) / m.cols) return 0;  // too big to hold
  const int64_t n = r1 > r0 ? (r1 - r0) * m.cols : 0;
  std::vector<double> out(size_t(std::max<int64_t>(n, 0)));
  const bool ok = fuzz::expect_moeforge_errors_only("dequantize_rows",
                                                    [&] { m.dequantize_rows(r0, r1, out.empty() ? nullptr : out.data()); });
  if (ok && (r0 < 0 || r0 > r1 || r1 > m.rows)) std::abort();  // a bad range must be refused
  return 0;
}
