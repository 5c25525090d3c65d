// moeforge/formats.hpp — number formats, bit-exact, on the CPU.
//
// Scalar conversions round to nearest, ties to even. "Saturating" conversions
// clamp finite overflow (and ±Inf) to the largest finite magnitude of the
// format; NaN maps to the format's canonical NaN (or, for formats without NaN,
// is documented per function).
#pragma once
#include <cstdint>

namespace moeforge::formats {

// ---- 16-bit ----
uint16_t float_to_bf16(float v);   // RNE; NaN stays NaN (quiet); overflow rounds to Inf as IEEE does
float bf16_to_float(uint16_t bits);
uint16_t float_to_f16(float v);    // RNE, IEEE binary16 (subnormals, Inf, NaN)
float f16_to_float(uint16_t bits);

// ---- FP8 ----
// E4M3 (OCP "fn"): bias 7, no Inf, NaN = 0x7F/0xFF, max finite 448.
uint8_t float_to_e4m3(float v);    // RNE, saturating to ±448; NaN -> 0x7F (sign kept)
float e4m3_to_float(uint8_t bits);
// E5M2: bias 15, IEEE-like: Inf = 0x7C, NaN = 0x7D..0x7F, max finite 57344.
uint8_t float_to_e5m2(float v);    // RNE, saturating to ±57344 (Inf too); NaN -> 0x7F (sign kept)
float e5m2_to_float(uint8_t bits);

// ---- FP4 and scales ----
// E2M1: values {0, 0.5, 1, 1.5, 2, 3, 4, 6} and their negatives; code = s<<3 | e<<1 | m.
uint8_t float_to_e2m1(float v);    // RNE, saturating to ±6; NaN -> 0 (FP4 has no NaN; callers must not pass one)
                                   // Values that round to zero keep their sign: -0.0 and -0.1 give 0x8.
float e2m1_to_float(uint8_t code); // low 4 bits used
// UE8M0: 2^(bits - 127); 0xFF is NaN.
uint8_t float_to_ue8m0_ceil(float v);  // smallest power of two >= v (v > 0), as MX scale selection uses
                                       // Clamped to [2^-127, 2^127]: v > 2^127 and +Inf give 0xFE;
                                       // v <= 0 (incl. -0, -Inf) gives 0x00 (2^-127); NaN gives 0xFF.
                                       // (quantize_mxfp4 uses the OCP floor rule, not this function.)
float ue8m0_to_float(uint8_t bits);

// ---- Block-scaled matrices ([rows, cols], row-major) ----
// All of these throw InvalidArgument for rows or cols < 0, a null pointer with a non-empty
// matrix, or (NVFP4 / MXFP4) cols not a multiple of the block.
// Non-finite inputs: a block (FP8: tile) holding a NaN or ±Inf gets a NaN scale (NVFP4 0x7F,
// MXFP4 0xFF, FP8 f32 NaN) and zero codes (FP8: 0x7F), so it dequantizes to all NaN: a bad
// value is never silently made finite. Other blocks are unaffected.
// NVFP4: one E4M3 scale per 16 consecutive elements of a row, one f32 global scale.
//   value = e2m1(q) * e4m3(scale) * global_scale
//   packed: [rows, cols/2] bytes, element 2j in the low nibble. scales: [rows, cols/16].
//   global_scale = amax / (448 * 6), so every block scale fits E4M3.
//   Float operations in this order: amax over the finite |x| of the whole matrix;
//   global = amax / 2688.0f (1.0f if that is 0: all-zero matrix or underflow);
//   s = float_to_e4m3((block_amax / 6.0f) / global); d = e4m3_to_float(s) * global;
//   q = float_to_e2m1(x / d), or 0 for the whole block when d == 0.
//   dequantize: (e2m1 * scale) * global in float; e2m1 * E4M3 is exact in float, so this is
//   the exact product rounded once.
void quantize_nvfp4(const float* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales,
                    float* global_scale);
void dequantize_nvfp4(const uint8_t* packed, const uint8_t* scales, float global_scale, int64_t rows,
                      int64_t cols, float* out);
// MXFP4: one UE8M0 scale per 32 consecutive elements of a row (OCP MX v1.0).
//   scale = 2^(floor(log2(block_amax)) - 2) (2 = emax of E2M1), exponent clamped at -127;
//   an all-zero block gets scale 1 (code 127). q = float_to_e2m1(x / scale): block_amax /
//   scale is in [4, 8), so values above 6 * scale clip to ±6, as the spec intends.
void quantize_mxfp4(const float* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales);
void dequantize_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                      float* out);
// FP8 E4M3 weights with one f32 scale per 128x128 block (value = q * scale);
// scales: [ceil(rows/128), ceil(cols/128)]. Edge blocks may be partial.
// scale = block_amax / 448.0f (1.0f if that is 0); q = float_to_e4m3(x / scale).
void quantize_fp8_block128(const float* x, int64_t rows, int64_t cols, uint8_t* q, float* scales);
void dequantize_fp8_block128(const uint8_t* q, const float* scales, int64_t rows, int64_t cols,
                             float* out);
// FP8 E4M3 activations with one f32 scale per 1x128 group of a row;
// scales: [rows, ceil(cols/128)].
void quantize_fp8_group128(const float* x, int64_t rows, int64_t cols, uint8_t* q, float* scales);
void dequantize_fp8_group128(const uint8_t* q, const float* scales, int64_t rows, int64_t cols,
                             float* out);

}  // namespace moeforge::formats
