// QuantMatrix: one weight matrix in its storage format, and the exact values it stands for.
//
// Storage (see weights.hpp): BF16/FP16 data are the 16-bit codes in host byte order (what
// a uint16_t array holds; little-endian on every supported host, as the GPU reads them).
// FP8_Block128 scales are the f32 scales' raw bytes in host order.
//
// dequantize_rows gives the EXACT real value of each weight, not a float rounding of it:
//   NVFP4: e2m1 * scale * global  (2 + 4 + 24 significant bits <= 53: exact in double)
//   MXFP4: e2m1 * 2^k             (exact)
//   FP8:   e4m3 * scale           (4 + 24 bits: exact in double)
// Why: kernels apply the scales at different points (per element in the main loop, per
// block on the accumulator, the NVFP4 global in the epilogue), but every one of them
// multiplies the same exact factors, so the exact product is what each of them computes
// with; rounding it to float first would build one kernel's rounding into the oracle.
// Converting this double to float gives, bit for bit, the free dequantize_* functions'
// result (they round the same exact product once, to nearest).
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "formats/minifloat.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "moeforge/spec.hpp"
#include "moeforge/weights.hpp"

namespace moeforge {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t col_multiple(WeightFormat f) {
  switch (f) {
    case WeightFormat::NVFP4: return 16;
    case WeightFormat::MXFP4: return 32;
    default: return 1;
  }
}

struct Sizes {
  int64_t data;
  int64_t scales;
  const char* data_layout;
  const char* scales_layout;
};

// Byte sizes of data and scales for a valid shape (cols already a multiple of the block).
Sizes expected_sizes(WeightFormat f, int64_t rows, int64_t cols) {
  switch (f) {
    case WeightFormat::BF16:
    case WeightFormat::FP16: return {rows * cols * 2, 0, "2 bytes per element", "none"};
    case WeightFormat::FP8_Block128:
      return {rows * cols, ceil_div(rows, 128) * ceil_div(cols, 128) * 4, "1 byte per element",
              "f32 [ceil(rows/128), ceil(cols/128)]"};
    case WeightFormat::NVFP4: return {rows * cols / 2, rows * cols / 16, "cols/2 bytes per row", "e4m3 [rows, cols/16]"};
    case WeightFormat::MXFP4: return {rows * cols / 2, rows * cols / 32, "cols/2 bytes per row", "ue8m0 [rows, cols/32]"};
  }
  throw InternalError(fmt::format("unknown WeightFormat {}", static_cast<int>(f)));
}

void check_shape(const char* name, WeightFormat format, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    throw InvalidArgument(name, fmt::format("expected rows, cols >= 0, got {} x {}", rows, cols));
  const int64_t m = col_multiple(format);
  if (cols % m != 0)
    throw InvalidArgument(name, fmt::format("{} needs cols to be a multiple of {}, got {}", to_string(format), m, cols));
  // 2 bytes per element must fit in int64 (and in size_t); each dimension alone
  // must also leave room for the block round-up (rows + 127) even when the other
  // is 0, so that no size computation can overflow.
  constexpr int64_t kMaxDim = int64_t(1) << 48;
  if (rows > kMaxDim || cols > kMaxDim)
    throw InvalidArgument(name, fmt::format("expected rows, cols <= 2^48, got {} x {}", rows, cols));
  if (cols > 0 && rows > std::numeric_limits<int64_t>::max() / 2 / cols)
    throw InvalidArgument(name, fmt::format("{} x {} elements overflow a 64-bit size", rows, cols));
}

}  // namespace

QuantMatrix QuantMatrix::quantize(WeightFormat format, int64_t rows, int64_t cols, const float* values) {
  check_shape("values", format, rows, cols);
  if (values == nullptr && rows * cols > 0)
    throw InvalidArgument("values", fmt::format("null pointer for a {} x {} matrix", rows, cols));
  QuantMatrix m;
  m.format = format;
  m.rows = rows;
  m.cols = cols;
  const Sizes sz = expected_sizes(format, rows, cols);
  m.data.resize(static_cast<size_t>(sz.data));
  m.scales.resize(static_cast<size_t>(sz.scales));
  const int64_t n = rows * cols;
  if (n == 0) return m;
  switch (format) {
    case WeightFormat::BF16:
    case WeightFormat::FP16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = format == WeightFormat::BF16 ? formats::float_to_bf16(values[i]) : formats::float_to_f16(values[i]);
        std::memcpy(m.data.data() + 2 * i, &h, 2);
      }
      break;
    case WeightFormat::FP8_Block128: {
      std::vector<float> s(static_cast<size_t>(sz.scales / 4));
      formats::quantize_fp8_block128(values, rows, cols, m.data.data(), s.data());
      std::memcpy(m.scales.data(), s.data(), m.scales.size());
      break;
    }
    case WeightFormat::NVFP4:
      formats::quantize_nvfp4(values, rows, cols, m.data.data(), m.scales.data(), &m.global_scale);
      break;
    case WeightFormat::MXFP4: formats::quantize_mxfp4(values, rows, cols, m.data.data(), m.scales.data()); break;
  }
  return m;
}

void QuantMatrix::validate(const char* name) const {
  check_shape(name, format, rows, cols);
  const Sizes sz = expected_sizes(format, rows, cols);
  if (static_cast<int64_t>(data.size()) != sz.data)
    throw InvalidArgument(name, fmt::format("data has {} bytes, expected {} for {} [{} x {}] ({})", data.size(),
                                            sz.data, to_string(format), rows, cols, sz.data_layout));
  if (static_cast<int64_t>(scales.size()) != sz.scales)
    throw InvalidArgument(name, fmt::format("scales has {} bytes, expected {} for {} [{} x {}] ({})", scales.size(),
                                            sz.scales, to_string(format), rows, cols, sz.scales_layout));
  if (format == WeightFormat::NVFP4 && !(global_scale > 0.0f && global_scale <= std::numeric_limits<float>::max()))
    throw InvalidArgument(name, fmt::format("global_scale must be finite and > 0, got {}", global_scale));
}

void QuantMatrix::dequantize_rows(int64_t r0, int64_t r1, double* out) const {
  validate("matrix");
  if (r0 < 0 || r0 > r1 || r1 > rows)
    throw InvalidArgument("rows", fmt::format("expected 0 <= r0 <= r1 <= {}, got [{}, {})", rows, r0, r1));
  const int64_t n = (r1 - r0) * cols;
  if (n == 0) return;
  if (out == nullptr) throw InvalidArgument("out", "null pointer");
  const uint8_t* d = data.data();
  using formats::detail::kE2M1;
  using formats::detail::kE4M3;
  switch (format) {
    case WeightFormat::BF16:
    case WeightFormat::FP16: {
      const bool bf16 = format == WeightFormat::BF16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, d + 2 * (r0 * cols + i), 2);
        out[i] = bf16 ? static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(h) << 16))
                      : static_cast<double>(formats::f16_to_float(h));
      }
      break;
    }
    case WeightFormat::FP8_Block128: {
      const int64_t nbc = ceil_div(cols, 128);
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* q = d + r * cols;
        double* o = out + (r - r0) * cols;
        for (int64_t bc = 0; bc < nbc; ++bc) {
          float sf;
          std::memcpy(&sf, scales.data() + 4 * ((r / 128) * nbc + bc), 4);
          const double s = sf;
          const int64_t c1 = std::min(cols, (bc + 1) * 128);
          for (int64_t c = bc * 128; c < c1; ++c) o[c] = static_cast<double>(kE4M3[q[c]]) * s;
        }
      }
      break;
    }
    case WeightFormat::NVFP4:
    case WeightFormat::MXFP4: {
      const bool nv = format == WeightFormat::NVFP4;
      const int64_t block = nv ? 16 : 32;
      const int64_t nblocks = cols / block;
      double lut[16];
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t b = 0; b < nblocks; ++b) {
          const uint8_t sc = scales[r * nblocks + b];
          // scale * global: 4 x 24 significant bits, exact in double; times e2m1 still exact.
          const double s = nv ? static_cast<double>(kE4M3[sc]) * static_cast<double>(global_scale)
                              : static_cast<double>(formats::ue8m0_to_float(sc));
          for (int c = 0; c < 16; ++c) lut[c] = static_cast<double>(kE2M1[c]) * s;
          const uint8_t* pb = d + (r * cols + b * block) / 2;
          double* o = out + (r - r0) * cols + b * block;
          for (int64_t j = 0; j < block / 2; ++j) {
            o[2 * j] = lut[pb[j] & 0xF];
            o[2 * j + 1] = lut[pb[j] >> 4];
          }
        }
      }
      break;
    }
  }
}

}  // namespace moeforge
