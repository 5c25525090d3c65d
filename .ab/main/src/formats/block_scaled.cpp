// Block-scaled matrix formats: NVFP4, MXFP4, FP8 with 128x128 weight blocks and 1x128
// activation groups. Every quantizer is written as "compute the scale exactly as the
// header states, in float, in the stated order; then encode each element with the scalar
// RNE encoder" so that a test can recompute every byte independently.
//
// Non-finite inputs. FP4 has no NaN, and a block scale computed from an amax of Inf is
// meaningless (Inf/Inf = NaN, finite/Inf = 0), so a block that contains a NaN or ±Inf is
// stored with a NaN scale (NVFP4: E4M3 0x7F; MXFP4: UE8M0 0xFF; FP8: f32 quiet NaN) and
// zero element codes (FP8: 0x7F). The whole block then dequantizes to NaN: a bad weight is
// never silently turned into a number. The NVFP4 global amax ignores non-finite values.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "formats/minifloat.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"

namespace moeforge::formats {
namespace {

constexpr int64_t kNvfp4Block = 16;
constexpr int64_t kMxfp4Block = 32;
constexpr int64_t kFp8Block = 128;

void check_shape(int64_t rows, int64_t cols, int64_t col_multiple, const char* format) {
  if (rows < 0) throw InvalidArgument("rows", fmt::format("expected >= 0, got {}", rows));
  if (cols < 0) throw InvalidArgument("cols", fmt::format("expected >= 0, got {}", cols));
  if (cols % col_multiple != 0)
    throw InvalidArgument("cols", fmt::format("{} needs a multiple of {}, got {}", format, col_multiple, cols));
  if (cols > 0 && rows > std::numeric_limits<int64_t>::max() / cols)
    throw InvalidArgument("rows", fmt::format("rows * cols overflows: {} x {}", rows, cols));
}

void check_ptr(const void* p, const char* name, int64_t rows, int64_t cols) {
  if (p == nullptr && rows > 0 && cols > 0)
    throw InvalidArgument(name, fmt::format("null pointer for a {} x {} matrix", rows, cols));
}

bool is_finite(float v) { return (std::bit_cast<uint32_t>(v) & 0x7F800000u) != 0x7F800000u; }

// Largest |x| over n finite values; *nonfinite set if any value is NaN or ±Inf.
float block_amax(const float* x, int64_t n, bool* nonfinite) {
  float amax = 0.0f;
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    bad |= !is_finite(x[i]);
    amax = a > amax && is_finite(a) ? a : amax;
  }
  *nonfinite = bad;
  return amax;
}

// floor(log2(v)) for a finite v > 0, read off the bits (exact, unlike std::log2).
int floor_log2(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const int e = static_cast<int>(u >> 23);
  if (e != 0) return e - 127;
  return static_cast<int>(std::bit_width(u & 0x7FFFFFu)) - 1 - 149;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Packs n (even) E2M1 codes, element 2j in the low nibble of byte j.
void pack_e2m1(const uint8_t* codes, int64_t n, uint8_t* out) {
  for (int64_t j = 0; j < n / 2; ++j) out[j] = static_cast<uint8_t>((codes[2 * j] & 0xF) | (codes[2 * j + 1] << 4));
}

}  // namespace

namespace {
// Both FP4 formats encode the same way, block by block: a block holding NaN/Inf
// gets the format's NaN scale code and zero codes; otherwise choose(block_amax)
// gives the stored scale code and the divisor it stands for, and each element is
// float_to_e2m1(x / divisor) (all zeros when the divisor underflowed to 0).
template <class Choose>
void quantize_fp4_blocks(const float* x, int64_t rows, int64_t cols, int64_t block, uint8_t* packed,
                         uint8_t* scales, uint8_t nan_scale, Choose choose) {
  const int64_t nblocks = cols / block;
  uint8_t codes[32];  // the largest block (MXFP4)
  if (block > 32) throw InternalError("quantize_fp4_blocks: block > 32");
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nblocks; ++b) {
      const float* xb = x + r * cols + b * block;
      uint8_t* pb = packed + (r * cols + b * block) / 2;
      uint8_t& sb = scales[r * nblocks + b];
      bool nonfinite = false;
      const float bamax = block_amax(xb, block, &nonfinite);
      if (nonfinite) {
        sb = nan_scale;
        std::fill(pb, pb + block / 2, uint8_t{0});
        continue;
      }
      const auto [code, d] = choose(bamax);
      sb = code;
      for (int64_t i = 0; i < block; ++i) codes[i] = d > 0.0f ? float_to_e2m1(xb[i] / d) : uint8_t{0};
      pack_e2m1(codes, block, pb);
    }
  }
}

}  // namespace

// ---- NVFP4 ----
// Float operations, in this order (the tests recompute them):
//   amax   = max |x| over the finite elements of the whole matrix
//   global = amax / 2688.0f           (2688 = 448 * 6: the largest block then gets scale 448;
//                                      1.0f if amax == 0 or the quotient underflows to 0)
//   s      = float_to_e4m3((block_amax / 6.0f) / global)
//   d      = e4m3_to_float(s) * global
//   q[i]   = float_to_e2m1(x[i] / d)  (all codes 0 when d == 0: the block is below E4M3's range)
void quantize_nvfp4(const float* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales,
                    float* global_scale) {
  check_shape(rows, cols, kNvfp4Block, "nvfp4");
  check_ptr(x, "x", rows, cols);
  check_ptr(packed, "packed", rows, cols);
  check_ptr(scales, "scales", rows, cols);
  if (global_scale == nullptr) throw InvalidArgument("global_scale", "null pointer");
  bool nonfinite = false;
  const float amax = block_amax(x, rows * cols, &nonfinite);
  float global = amax / 2688.0f;
  if (!(global > 0.0f)) global = 1.0f;
  *global_scale = global;

  quantize_fp4_blocks(x, rows, cols, kNvfp4Block, packed, scales, uint8_t{0x7F}, [&](float bamax) {
    const uint8_t code = float_to_e4m3((bamax / 6.0f) / global);
    return std::pair{code, detail::kE4M3[code] * global};
  });
}

// Both FP4 formats decode the same way: each block of E2M1 codes times its
// decoded scale, times a global factor (1 for MXFP4, which is exact), through a
// 16-entry table built per block. (e2m1 * scale) * global is the order every
// caller documents.
namespace {
template <class ScaleOf>
void dequantize_fp4_blocks(const uint8_t* packed, int64_t rows, int64_t cols, int64_t block, ScaleOf scale_of,
                           float global, float* out) {
  const int64_t nblocks = cols / block;
  float lut[16];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nblocks; ++b) {
      const float s = scale_of(r * nblocks + b);
      for (int c = 0; c < 16; ++c) lut[c] = (detail::kE2M1[c] * s) * global;
      const uint8_t* pb = packed + (r * cols + b * block) / 2;
      float* ob = out + r * cols + b * block;
      for (int64_t j = 0; j < block / 2; ++j) {
        ob[2 * j] = lut[pb[j] & 0xF];
        ob[2 * j + 1] = lut[pb[j] >> 4];
      }
    }
  }
}
}  // namespace

// value = (e2m1 * scale) * global in float. e2m1 (2 significant bits) times E4M3 (4) is
// exact in float, so this is the exact product e2m1*scale*global rounded once to float.
void dequantize_nvfp4(const uint8_t* packed, const uint8_t* scales, float global_scale, int64_t rows,
                      int64_t cols, float* out) {
  check_shape(rows, cols, kNvfp4Block, "nvfp4");
  check_ptr(packed, "packed", rows, cols);
  check_ptr(scales, "scales", rows, cols);
  check_ptr(out, "out", rows, cols);
  dequantize_fp4_blocks(packed, rows, cols, kNvfp4Block, [&](int64_t i) { return detail::kE4M3[scales[i]]; },
                        global_scale, out);
}

// ---- MXFP4 ----
// OCP Microscaling Formats (MX) v1.0, section 6.3: the shared scale of a block is
//   X = 2^(floor(log2(amax)) - emax_elem),  emax_elem = 2 for E2M1 (largest value 6 = 1.5 * 2^2),
// stored as UE8M0; elements are float_to_e2m1(x / X), saturating. amax / X lies in [4, 8),
// so elements above 6 * X clip to ±6 — the spec's choice (it never picks a scale that
// leaves the top of the E2M1 range unused), and the source of MXFP4's larger worst-case error.
// The exponent is clamped below at -127 (UE8M0 code 0). An all-zero block gets X = 1
// (code 127); any X would do, 1 keeps the scale a normal float.
void quantize_mxfp4(const float* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales) {
  check_shape(rows, cols, kMxfp4Block, "mxfp4");
  check_ptr(x, "x", rows, cols);
  check_ptr(packed, "packed", rows, cols);
  check_ptr(scales, "scales", rows, cols);
  quantize_fp4_blocks(x, rows, cols, kMxfp4Block, packed, scales, uint8_t{0xFF}, [](float bamax) {
    const int shared_exp = bamax > 0.0f ? std::max(floor_log2(bamax) - 2, -127) : 0;
    const uint8_t code = static_cast<uint8_t>(shared_exp + 127);
    return std::pair{code, ue8m0_to_float(code)};  // a power of two, so x / scale is exact
  });
}

// value = e2m1 * 2^k, exact in float (the smallest product, 0.5 * 2^-127, is a float subnormal).
void dequantize_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols, float* out) {
  check_shape(rows, cols, kMxfp4Block, "mxfp4");
  check_ptr(packed, "packed", rows, cols);
  check_ptr(scales, "scales", rows, cols);
  check_ptr(out, "out", rows, cols);
  dequantize_fp4_blocks(packed, rows, cols, kMxfp4Block, [&](int64_t i) { return ue8m0_to_float(scales[i]); },
                        1.0f, out);
}

// ---- FP8 E4M3 with f32 scales ----
// scale = block_amax / 448.0f (1.0f when block_amax is 0 or the quotient underflows to 0);
// q = float_to_e4m3(x / scale). block_amax / scale can exceed 448 by a float rounding at
// most; float_to_e4m3 saturates it to 448.
namespace {

float fp8_scale(float amax) {
  const float s = amax / 448.0f;
  return s > 0.0f ? s : 1.0f;
}

// Quantizes the [r0, r1) x [c0, c1) tile of x (row stride cols) with one scale.
float quantize_fp8_tile(const float* x, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1, uint8_t* q) {
  float amax = 0.0f;
  bool nonfinite = false;
  for (int64_t r = r0; r < r1; ++r) {
    bool bad = false;
    amax = std::max(amax, block_amax(x + r * cols + c0, c1 - c0, &bad));
    nonfinite |= bad;
  }
  if (nonfinite) {
    for (int64_t r = r0; r < r1; ++r) std::fill(q + r * cols + c0, q + r * cols + c1, uint8_t{0x7F});
    return detail::kQuietNaN;
  }
  const float scale = fp8_scale(amax);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) q[r * cols + c] = float_to_e4m3(x[r * cols + c] / scale);
  return scale;
}

void dequantize_fp8_tile(const uint8_t* q, float scale, int64_t cols, int64_t r0, int64_t r1, int64_t c0,
                         int64_t c1, float* out) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) out[r * cols + c] = detail::kE4M3[q[r * cols + c]] * scale;
}

}  // namespace

void quantize_fp8_block128(const float* x, int64_t rows, int64_t cols, uint8_t* q, float* scales) {
  check_shape(rows, cols, 1, "fp8 block128");
  check_ptr(x, "x", rows, cols);
  check_ptr(q, "q", rows, cols);
  check_ptr(scales, "scales", rows, cols);
  const int64_t nbc = ceil_div(cols, kFp8Block);
  for (int64_t br = 0; br * kFp8Block < rows; ++br)
    for (int64_t bc = 0; bc < nbc; ++bc)
      scales[br * nbc + bc] = quantize_fp8_tile(x, cols, br * kFp8Block, std::min(rows, (br + 1) * kFp8Block),
                                                bc * kFp8Block, std::min(cols, (bc + 1) * kFp8Block), q);
}

void dequantize_fp8_block128(const uint8_t* q, const float* scales, int64_t rows, int64_t cols, float* out) {
  check_shape(rows, cols, 1, "fp8 block128");
  check_ptr(q, "q", rows, cols);
  check_ptr(scales, "scales", rows, cols);
  check_ptr(out, "out", rows, cols);
  const int64_t nbc = ceil_div(cols, kFp8Block);
  for (int64_t br = 0; br * kFp8Block < rows; ++br)
    for (int64_t bc = 0; bc < nbc; ++bc)
      dequantize_fp8_tile(q, scales[br * nbc + bc], cols, br * kFp8Block, std::min(rows, (br + 1) * kFp8Block),
                          bc * kFp8Block, std::min(cols, (bc + 1) * kFp8Block), out);
}

void quantize_fp8_group128(const float* x, int64_t rows, int64_t cols, uint8_t* q, float* scales) {
  check_shape(rows, cols, 1, "fp8 group128");
  check_ptr(x, "x", rows, cols);
  check_ptr(q, "q", rows, cols);
  check_ptr(scales, "scales", rows, cols);
  const int64_t ng = ceil_div(cols, kFp8Block);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < ng; ++g)
      scales[r * ng + g] =
          quantize_fp8_tile(x, cols, r, r + 1, g * kFp8Block, std::min(cols, (g + 1) * kFp8Block), q);
}

void dequantize_fp8_group128(const uint8_t* q, const float* scales, int64_t rows, int64_t cols, float* out) {
  check_shape(rows, cols, 1, "fp8 group128");
  check_ptr(q, "q", rows, cols);
  check_ptr(scales, "scales", rows, cols);
  check_ptr(out, "out", rows, cols);
  const int64_t ng = ceil_div(cols, kFp8Block);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < ng; ++g)
      dequantize_fp8_tile(q, scales[r * ng + g], cols, r, r + 1, g * kFp8Block,
                          std::min(cols, (g + 1) * kFp8Block), out);
}

}  // namespace moeforge::formats
