// Prepare-time weight layout of the portable backend (pure CPU; tests/cpu checks it
// against QuantMatrix::dequantize_rows). See grouped_gemm.cuh for how the kernel reads it.
#include <fmt/format.h>

#include <cstring>

#include "backends/portable/portable.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"

namespace moeforge::portable {

int64_t padded_k(int64_t k) { return (k + kBK - 1) / kBK * kBK; }

int64_t interleaved_source_row(int64_t n, int64_t I) {
  const int64_t b = n / 16, r = n % 16;
  return r < 8 ? 8 * b + r : I + 8 * b + (r - 8);
}

PreparedMatrix prepare_matrix(const QuantMatrix& m, bool interleave_gate_up) {
  m.validate("weights");
  if (interleave_gate_up && (m.rows % 16) != 0)
    throw InvalidArgument("weights", fmt::format("w13 needs 2I % 16 == 0 to interleave, got {} rows", m.rows));
  PreparedMatrix p;
  p.format = m.format;
  p.rows = m.rows;
  p.cols = m.cols;
  p.kp = padded_k(m.cols);
  p.global_scale = m.global_scale;
  const int64_t rows = m.rows, cols = m.cols, kp = p.kp, kt_n = kp / kBK;
  auto src_row = [&](int64_t n) { return interleave_gate_up ? interleaved_source_row(n, rows / 2) : n; };
  switch (m.format) {
    case WeightFormat::BF16:
    case WeightFormat::FP16: {
      p.format = WeightFormat::BF16;  // FP16 weights are staged as bf16 (rounded once, RNE)
      p.data.assign(size_t(rows * kp * 2), 0);
      for (int64_t n = 0; n < rows; ++n) {
        const uint8_t* s = m.data.data() + src_row(n) * cols * 2;
        uint8_t* d = p.data.data() + n * kp * 2;
        if (m.format == WeightFormat::BF16) {
          std::memcpy(d, s, size_t(cols * 2));
        } else {
          for (int64_t c = 0; c < cols; ++c) {
            uint16_t h;
            std::memcpy(&h, s + 2 * c, 2);
            const uint16_t b = formats::float_to_bf16(formats::f16_to_float(h));
            std::memcpy(d + 2 * c, &b, 2);
          }
        }
      }
      break;
    }
    case WeightFormat::FP8_Block128: {
      const int64_t kb_n = (cols + 127) / 128;
      p.data.assign(size_t(rows * kp), 0);
      p.scales.assign(size_t(kb_n * rows * 4), 0);
      for (int64_t n = 0; n < rows; ++n) {
        const int64_t sr = src_row(n);
        std::memcpy(p.data.data() + n * kp, m.data.data() + sr * cols, size_t(cols));
        for (int64_t kb = 0; kb < kb_n; ++kb)
          std::memcpy(p.scales.data() + 4 * (kb * rows + n), m.scales.data() + 4 * ((sr / 128) * kb_n + kb), 4);
      }
      break;
    }
    case WeightFormat::NVFP4:
    case WeightFormat::MXFP4: {
      const bool nv = m.format == WeightFormat::NVFP4;
      const int64_t group = nv ? 16 : 32, groups = cols / group, per_tile = kBK / group;
      p.data.assign(size_t(rows * kp / 2), 0);
      p.scales.assign(size_t(kt_n * rows * per_tile), 0);
      for (int64_t n = 0; n < rows; ++n) {
        const int64_t sr = src_row(n);
        std::memcpy(p.data.data() + n * kp / 2, m.data.data() + sr * cols / 2, size_t(cols / 2));
        for (int64_t kt = 0; kt < kt_n; ++kt)
          for (int64_t g = 0; g < per_tile; ++g) {
            const int64_t src_g = kt * per_tile + g;
            // Padding groups: e4m3 0 (NVFP4) / 2^0 (MXFP4) with zero codes -> value 0.
            const uint8_t v = src_g < groups ? m.scales[size_t(sr * groups + src_g)] : (nv ? 0 : 127);
            p.scales[size_t((kt * rows + n) * per_tile + g)] = v;
          }
      }
      break;
    }
  }
  return p;
}

std::vector<float> interleave_bias(const std::vector<float>& b13, int64_t I) {
  std::vector<float> out(b13.size());
  for (int64_t n = 0; n < int64_t(b13.size()); ++n) out[size_t(n)] = b13[size_t(interleaved_source_row(n, I))];
  return out;
}

void decode_prepared_rows(const PreparedMatrix& p, int64_t r0, int64_t r1, double* out) {
  const int64_t cols = p.cols, kp = p.kp, rows = p.rows;
  for (int64_t n = r0; n < r1; ++n) {
    double* o = out + (n - r0) * cols;
    for (int64_t c = 0; c < cols; ++c) {
      switch (p.format) {
        case WeightFormat::BF16:
        case WeightFormat::FP16: {
          uint16_t b;
          std::memcpy(&b, p.data.data() + 2 * (n * kp + c), 2);
          o[c] = formats::bf16_to_float(b);
          break;
        }
        case WeightFormat::FP8_Block128: {
          float s;
          std::memcpy(&s, p.scales.data() + 4 * ((c / 128) * rows + n), 4);
          o[c] = double(formats::e4m3_to_float(p.data[size_t(n * kp + c)])) * double(s);
          break;
        }
        case WeightFormat::NVFP4:
        case WeightFormat::MXFP4: {
          const uint8_t byte = p.data[size_t(n * kp / 2 + c / 2)];
          const double v = formats::e2m1_to_float(c % 2 ? byte >> 4 : byte & 0xF);
          const int64_t kt = c / kBK;
          if (p.format == WeightFormat::NVFP4) {
            const uint8_t s = p.scales[size_t((kt * rows + n) * 2 + (c % kBK) / 16)];
            o[c] = v * double(formats::e4m3_to_float(s)) * double(p.global_scale);
          } else {
            o[c] = v * double(formats::ue8m0_to_float(p.scales[size_t(kt * rows + n)]));
          }
          break;
        }
      }
    }
  }
}

}  // namespace moeforge::portable
