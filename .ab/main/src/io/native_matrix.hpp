// One projection's weight as a checkpoint stores it, read out of the safetensors map, and its
// exact conversion to a QuantMatrix (or the BF16 fallback). Layouts: see moeforge/checkpoint.hpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint_dir.hpp"
#include "moeforge/weights.hpp"

namespace moeforge::io {

enum class NativeKind : uint8_t { Float, FP8, NVFP4, MXFP4 };

struct NativeMatrix {
  NativeKind kind = NativeKind::Float;
  int64_t rows = 0, cols = 0;     // nn.Linear: [out, in]
  StDtype float_dtype = StDtype::BF16;  // Float: BF16 | F16 | F32, elements in `data`
  std::vector<uint8_t> data;      // Float elements | E4M3 codes | packed E2M1 (empty if scales_only)
  std::vector<float> fp8_scales;  // FP8: one f32 per (row, 128-column block): [rows, ceil(cols/128)]
  std::vector<uint8_t> scales;    // NVFP4: E4M3 [rows, cols/16]; MXFP4: UE8M0 [rows, cols/32]
  float global = 1.0f;            // NVFP4: the factor every value is multiplied by
  std::string what;               // "compressed-tensors nvfp4", ... (for messages)
};

// A per-expert projection `base` (".weight", ".weight_packed", ...) of logical shape [N, K].
// scales_only: read (and validate) everything but the values themselves.
NativeMatrix load_linear(const CheckpointDir& dir, const std::string& base, int64_t N, int64_t K, bool scales_only);

// gpt-oss fused experts under `experts` ("...mlp.experts."): part 0 gate [I, H], 1 up [I, H], 2 down [H, I]
// of expert e, from gate_up_proj/down_proj (float, [E, H, 2I] / [E, I, H]) or the MXFP4 _blocks/_scales.
NativeMatrix load_fused(const CheckpointDir& dir, const std::string& experts, int64_t E, int64_t e, int part,
                        int64_t H, int64_t I, bool scales_only);

// The format this matrix maps to without loss (F32 maps to BF16, which is not lossless).
WeightFormat native_format(const NativeMatrix& m);

// Rows of a then rows of b. Returns false (with *why) when they cannot share one exact
// representation (different kinds or float dtypes, NVFP4 global scales that cannot be unified).
bool stack(const NativeMatrix& a, const NativeMatrix& b, NativeMatrix* out, std::string* why);

// "" when m converts to `target` exactly, else the reason. Needs only the scales.
std::string exact_problem(const NativeMatrix& m, WeightFormat target);
// The exact conversion (exact_problem must be "").
QuantMatrix to_quant(const NativeMatrix& m, WeightFormat target);
// The fallback: every value exactly, rounded to f32, then to bf16.
QuantMatrix to_bf16(const NativeMatrix& m);
// Rows of a then rows of b (both BF16).
QuantMatrix concat_rows(QuantMatrix a, const QuantMatrix& b);

// A float tensor (BF16 | F16 | F32) read exactly into f32, shape checked.
std::vector<float> read_floats(const TensorRef& t, const std::vector<int64_t>& shape);
// Throws IoError "<file>: tensor '<name>': expected ..." unless dtype and shape match.
void expect_tensor(const TensorRef& t, std::initializer_list<StDtype> dtypes, const std::vector<int64_t>& shape);

}  // namespace moeforge::io
