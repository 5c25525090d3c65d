#include "io/native_matrix.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"

namespace moeforge::io {
namespace {

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Values are little-endian in safetensors; moeforge runs on little-endian hosts only.
float load_float(StDtype dt, const uint8_t* p) {
  switch (dt) {
    case StDtype::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case StDtype::BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return formats::bf16_to_float(h);
    }
    case StDtype::F16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return formats::f16_to_float(h);
    }
    default: throw InternalError("load_float: not a float dtype");
  }
}

bool is_scalar_shape(const StTensor& t) { return t.shape.empty() || (t.shape.size() == 1 && t.shape[0] == 1); }

float read_scalar(const TensorRef& r) {
  expect_tensor(r, {StDtype::F32, StDtype::BF16, StDtype::F16}, {});
  const float v = load_float(r.tensor->dtype, r.tensor->data);
  if (!(std::isfinite(v) && v > 0.0f)) throw IoError(fmt::format("{}: expected a finite scale > 0, got {}", r.where(), v));
  return v;
}

void check_k(const std::string& base, int64_t K, int64_t block, const char* fmt_name) {
  if (K % block != 0)
    throw Unsupported(fmt::format("{}: {} needs the input size to be a multiple of {}, got {}", base, fmt_name, block, K));
}

}  // namespace

void expect_tensor(const TensorRef& r, std::initializer_list<StDtype> dtypes, const std::vector<int64_t>& shape) {
  bool ok = false;
  std::vector<std::string> names;
  for (StDtype d : dtypes) {
    ok |= d == r.tensor->dtype;
    names.emplace_back(st_dtype_name(d));
  }
  if (!ok)
    throw IoError(fmt::format("{}: expected dtype {}, got {}", r.where(), fmt::join(names, " or "),
                              st_dtype_name(r.tensor->dtype)));
  // An empty expected shape stands for a scalar: [] or [1].
  if (shape.empty() ? !is_scalar_shape(*r.tensor) : r.tensor->shape != shape)
    throw IoError(fmt::format("{}: expected shape {}, got {}", r.where(), shape.empty() ? "[] or [1]" : shape_str(shape),
                              r.tensor->shape_str()));
}

std::vector<float> read_floats(const TensorRef& r, const std::vector<int64_t>& shape) {
  expect_tensor(r, {StDtype::BF16, StDtype::F16, StDtype::F32}, shape);
  std::vector<float> v(size_t(r.tensor->numel));
  const int sz = st_dtype_size(r.tensor->dtype);
  for (int64_t i = 0; i < r.tensor->numel; ++i) v[size_t(i)] = load_float(r.tensor->dtype, r.tensor->data + i * sz);
  return v;
}

NativeMatrix load_linear(const CheckpointDir& dir, const std::string& base, int64_t N, int64_t K, bool scales_only) {
  NativeMatrix m;
  m.rows = N;
  m.cols = K;
  auto copy_data = [&](const TensorRef& r) {
    if (!scales_only) m.data.assign(r.tensor->data, r.tensor->data + r.tensor->numel * st_dtype_size(r.tensor->dtype));
  };
  if (dir.has(base + ".weight_packed")) {  // compressed-tensors nvfp4-pack-quantized
    check_k(base, K, 16, "NVFP4");
    const TensorRef w = dir.get(base + ".weight_packed");
    expect_tensor(w, {StDtype::U8}, {N, K / 2});
    const TensorRef s = dir.get(base + ".weight_scale");
    expect_tensor(s, {StDtype::F8_E4M3}, {N, K / 16});
    const float g = read_scalar(dir.get(base + ".weight_global_scale"));
    m.kind = NativeKind::NVFP4;
    m.global = 1.0f / g;  // compressed-tensors stores the reciprocal
    if (!(std::isfinite(m.global) && m.global > 0.0f))
      throw IoError(fmt::format("{}.weight_global_scale: 1 / {} is not a finite positive f32", base, g));
    copy_data(w);
    m.scales.assign(s.tensor->data, s.tensor->data + s.tensor->numel);
    m.what = "compressed-tensors nvfp4";
    return m;
  }
  const TensorRef w = dir.get(base + ".weight");
  switch (w.tensor->dtype) {
    case StDtype::U8: {  // ModelOpt NVFP4
      check_k(base, K, 16, "NVFP4");
      expect_tensor(w, {StDtype::U8}, {N, K / 2});
      const TensorRef s = dir.get(base + ".weight_scale");
      expect_tensor(s, {StDtype::F8_E4M3}, {N, K / 16});
      m.kind = NativeKind::NVFP4;
      m.global = read_scalar(dir.get(base + ".weight_scale_2"));
      copy_data(w);
      m.scales.assign(s.tensor->data, s.tensor->data + s.tensor->numel);
      m.what = "modelopt nvfp4";
      return m;
    }
    case StDtype::F8_E4M3: {
      expect_tensor(w, {StDtype::F8_E4M3}, {N, K});
      m.kind = NativeKind::FP8;
      const int64_t nrb = ceil_div(N, 128), ncb = ceil_div(K, 128);
      m.fp8_scales.resize(size_t(N * ncb));
      const bool inv = dir.has(base + ".weight_scale_inv");
      if (!inv && !dir.has(base + ".weight_scale"))
        throw IoError(fmt::format("{}: FP8 tensor '{}.weight' has no scale: neither '{}.weight_scale_inv' nor "
                                  "'{}.weight_scale' is in the checkpoint",
                                  w.file->path(), base, base, base));
      const TensorRef s = dir.get(base + (inv ? ".weight_scale_inv" : ".weight_scale"));
      const std::vector<int64_t> grid = {nrb, ncb};
      const auto& sh = s.tensor->shape;
      std::vector<float> v;
      if (inv || (sh == grid && !(sh == std::vector<int64_t>{N, 1}))) {
        v = read_floats(s, grid);
        for (int64_t r = 0; r < N; ++r)
          for (int64_t c = 0; c < ncb; ++c) m.fp8_scales[size_t(r * ncb + c)] = v[size_t((r / 128) * ncb + c)];
        m.what = inv ? "fp8 block 128x128 (weight_scale_inv)" : "fp8 block 128x128";
      } else if (is_scalar_shape(*s.tensor)) {
        v = read_floats(s, sh);
        std::fill(m.fp8_scales.begin(), m.fp8_scales.end(), v[0]);
        m.what = "fp8 per-tensor";
      } else if (sh == std::vector<int64_t>{N, 1} || sh == std::vector<int64_t>{N}) {
        v = read_floats(s, sh);
        for (int64_t r = 0; r < N; ++r)
          for (int64_t c = 0; c < ncb; ++c) m.fp8_scales[size_t(r * ncb + c)] = v[size_t(r)];
        m.what = "fp8 per-channel";
      } else {
        throw IoError(fmt::format("{}: expected shape [] or [1] (per tensor), [{}, 1] (per channel) or {} (128x128 "
                                  "blocks) for the scale of a [{}, {}] FP8 weight, got {}",
                                  s.where(), N, shape_str(grid), N, K, s.tensor->shape_str()));
      }
      copy_data(w);
      return m;
    }
    case StDtype::BF16:
    case StDtype::F16:
    case StDtype::F32:
      expect_tensor(w, {w.tensor->dtype}, {N, K});
      m.kind = NativeKind::Float;
      m.float_dtype = w.tensor->dtype;
      copy_data(w);
      m.what = std::string(st_dtype_name(w.tensor->dtype));
      return m;
    default:
      throw IoError(fmt::format("{}: expected dtype BF16, F16, F32, F8_E4M3 or U8 (packed FP4), got {}", w.where(),
                                st_dtype_name(w.tensor->dtype)));
  }
}

NativeMatrix load_fused(const CheckpointDir& dir, const std::string& experts, int64_t E, int64_t e, int part, int64_t H,
                        int64_t I, bool scales_only) {
  const std::string name = experts + (part < 2 ? "gate_up_proj" : "down_proj");
  NativeMatrix m;
  m.rows = part < 2 ? I : H;
  m.cols = part < 2 ? H : I;
  const int64_t R = part < 2 ? 2 * I : H, K = m.cols;
  auto src_row = [&](int64_t j) { return part == 0 ? 2 * j : part == 1 ? 2 * j + 1 : j; };
  if (dir.has(name + "_blocks")) {  // gpt-oss MXFP4
    check_k(name, K, 32, "MXFP4");
    const TensorRef b = dir.get(name + "_blocks");
    expect_tensor(b, {StDtype::U8}, {E, R, K / 32, 16});
    const TensorRef s = dir.get(name + "_scales");
    expect_tensor(s, {StDtype::U8}, {E, R, K / 32});
    m.kind = NativeKind::MXFP4;
    m.what = "gpt-oss mxfp4";
    m.scales.resize(size_t(m.rows * (K / 32)));
    if (!scales_only) m.data.resize(size_t(m.rows * (K / 2)));
    for (int64_t j = 0; j < m.rows; ++j) {
      const int64_t src = e * R + src_row(j);
      std::memcpy(m.scales.data() + j * (K / 32), s.tensor->data + src * (K / 32), size_t(K / 32));
      if (!scales_only) std::memcpy(m.data.data() + j * (K / 2), b.tensor->data + src * (K / 2), size_t(K / 2));
    }
    return m;
  }
  const TensorRef t = dir.get(name);
  expect_tensor(t, {StDtype::BF16, StDtype::F16, StDtype::F32}, part < 2 ? std::vector<int64_t>{E, H, 2 * I}
                                                                         : std::vector<int64_t>{E, I, H});
  m.kind = NativeKind::Float;
  m.float_dtype = t.tensor->dtype;
  m.what = fmt::format("gpt-oss fused {}", st_dtype_name(t.tensor->dtype));
  if (scales_only) return m;
  const int64_t es = st_dtype_size(t.tensor->dtype);
  m.data.resize(size_t(m.rows * m.cols * es));
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) {
      // gate/up: W[j, h] = gate_up[e, h, 2j + part]; down: W[h, i] = down[e, i, h].
      const int64_t src = part < 2 ? (e * H + c) * 2 * I + 2 * r + part : (e * I + c) * H + r;
      std::memcpy(m.data.data() + (r * m.cols + c) * es, t.tensor->data + src * es, size_t(es));
    }
  return m;
}

WeightFormat native_format(const NativeMatrix& m) {
  switch (m.kind) {
    case NativeKind::Float: return m.float_dtype == StDtype::F16 ? WeightFormat::FP16 : WeightFormat::BF16;
    case NativeKind::FP8: return WeightFormat::FP8_Block128;
    case NativeKind::NVFP4: return WeightFormat::NVFP4;
    case NativeKind::MXFP4: return WeightFormat::MXFP4;
  }
  return WeightFormat::BF16;
}

namespace {

// other.global = keep.global * 2^k: other's block scales times 2^k, if each stays exact in E4M3.
bool rescale_nvfp4(const NativeMatrix& keep, const NativeMatrix& other, std::vector<uint8_t>* out) {
  int ek = 0, eo = 0;
  const double mk = std::frexp(double(keep.global), &ek), mo = std::frexp(double(other.global), &eo);
  if (mk != mo) return false;
  const int k = eo - ek;
  out->resize(other.scales.size());
  for (size_t i = 0; i < other.scales.size(); ++i) {
    const uint8_t c = other.scales[i];
    if ((c & 0x7F) == 0x7F) {  // NaN stays NaN
      (*out)[i] = c;
      continue;
    }
    const float v = std::ldexp(formats::e4m3_to_float(c), k);
    const uint8_t n = formats::float_to_e4m3(v);
    if (formats::e4m3_to_float(n) != v) return false;
    (*out)[i] = n;
  }
  return true;
}

}  // namespace

bool stack(const NativeMatrix& a, const NativeMatrix& b, NativeMatrix* out, std::string* why) {
  if (a.kind != b.kind || (a.kind == NativeKind::Float && a.float_dtype != b.float_dtype)) {
    *why = fmt::format("gate is stored as {} and up as {}", a.what, b.what);
    return false;
  }
  NativeMatrix m = a;
  m.rows = a.rows + b.rows;
  m.data.insert(m.data.end(), b.data.begin(), b.data.end());
  m.fp8_scales.insert(m.fp8_scales.end(), b.fp8_scales.begin(), b.fp8_scales.end());
  if (a.kind == NativeKind::NVFP4 && a.global != b.global) {
    std::vector<uint8_t> re;
    if (rescale_nvfp4(a, b, &re)) {
      m.scales.insert(m.scales.end(), re.begin(), re.end());
    } else if (rescale_nvfp4(b, a, &re)) {
      m.scales = re;
      m.scales.insert(m.scales.end(), b.scales.begin(), b.scales.end());
      m.global = b.global;
    } else {
      *why = fmt::format("NVFP4 gate and up have global scales {:.9g} and {:.9g}, which one global scale cannot "
                         "express exactly (ratio not a power of two, or rescaled block scales leave E4M3)",
                         a.global, b.global);
      return false;
    }
  } else {
    m.scales.insert(m.scales.end(), b.scales.begin(), b.scales.end());
  }
  *out = std::move(m);
  return true;
}

std::string exact_problem(const NativeMatrix& m, WeightFormat target) {
  if (m.kind == NativeKind::Float && m.float_dtype == StDtype::F32) return "f32 weights would be rounded to bf16";
  if (native_format(m) != target)
    return fmt::format("stored as {}, the layer as {}", m.what, to_string(target));
  if (m.kind == NativeKind::FP8) {
    const int64_t ncb = ceil_div(m.cols, 128);
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < ncb; ++c) {
        const float s0 = m.fp8_scales[size_t((r / 128 * 128) * ncb + c)], s = m.fp8_scales[size_t(r * ncb + c)];
        if (std::memcmp(&s0, &s, 4) != 0)
          return fmt::format("{} scales differ inside the 128x128 block at row {} ({:.9g} at row {} vs {:.9g}); "
                             "FP8_Block128 holds one scale per block",
                             m.what, r / 128 * 128, s0, r / 128 * 128, s);
      }
  }
  return "";
}

QuantMatrix to_quant(const NativeMatrix& m, WeightFormat target) {
  QuantMatrix q;
  q.format = target;
  q.rows = m.rows;
  q.cols = m.cols;
  q.data = m.data;
  switch (m.kind) {
    case NativeKind::Float: break;
    case NativeKind::FP8: {
      const int64_t nrb = ceil_div(m.rows, 128), ncb = ceil_div(m.cols, 128);
      q.scales.resize(size_t(nrb * ncb * 4));
      for (int64_t rb = 0; rb < nrb; ++rb)
        for (int64_t c = 0; c < ncb; ++c)
          std::memcpy(q.scales.data() + (rb * ncb + c) * 4, &m.fp8_scales[size_t(rb * 128 * ncb + c)], 4);
      break;
    }
    case NativeKind::NVFP4:
      q.scales = m.scales;
      q.global_scale = m.global;
      break;
    case NativeKind::MXFP4: q.scales = m.scales; break;
  }
  q.validate("checkpoint matrix");
  return q;
}

QuantMatrix to_bf16(const NativeMatrix& m) {
  QuantMatrix q;
  q.format = WeightFormat::BF16;
  q.rows = m.rows;
  q.cols = m.cols;
  q.data.resize(size_t(m.rows * m.cols * 2));
  const int64_t ncb = ceil_div(m.cols, 128);
  const int es = m.kind == NativeKind::Float ? st_dtype_size(m.float_dtype) : 0;
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) {
      const int64_t i = r * m.cols + c;
      double v = 0;  // the exact value
      switch (m.kind) {
        case NativeKind::Float: v = load_float(m.float_dtype, m.data.data() + i * es); break;
        case NativeKind::FP8:
          v = double(formats::e4m3_to_float(m.data[size_t(i)])) * double(m.fp8_scales[size_t(r * ncb + c / 128)]);
          break;
        case NativeKind::NVFP4:
        case NativeKind::MXFP4: {
          const uint8_t byte = m.data[size_t(i / 2)];
          const double e2m1 = formats::e2m1_to_float(i % 2 ? byte >> 4 : byte & 0xF);
          if (m.kind == NativeKind::NVFP4)
            v = e2m1 * double(formats::e4m3_to_float(m.scales[size_t(r * (m.cols / 16) + c / 16)])) * double(m.global);
          else
            v = e2m1 * double(formats::ue8m0_to_float(m.scales[size_t(r * (m.cols / 32) + c / 32)]));
          break;
        }
      }
      const uint16_t h = formats::float_to_bf16(float(v));
      std::memcpy(q.data.data() + i * 2, &h, 2);
    }
  return q;
}

QuantMatrix concat_rows(QuantMatrix a, const QuantMatrix& b) {
  a.rows += b.rows;
  a.data.insert(a.data.end(), b.data.begin(), b.data.end());
  return a;
}

}  // namespace moeforge::io
