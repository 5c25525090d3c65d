// Weights (synthetic, or in memory from arrays), the layer, and the CPU reference
// entry points the tests compare against.
#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <optional>

#include "convert.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#if __has_include("moeforge/checkpoint.hpp")
#include "moeforge/checkpoint.hpp"
#define MOEFORGE_PY_CHECKPOINTS 1
#else
#define MOEFORGE_PY_CHECKPOINTS 0
#endif
#include "moeforge/layer.hpp"
#include "moeforge/reference.hpp"
#include "moeforge/validate.hpp"

namespace moeforge::py {
namespace {

// The Python-side handle to a WeightSource (shared: a layer on the "cpu" backend keeps it).
struct Weights {
  std::shared_ptr<const WeightSource> src;
#if MOEFORGE_PY_CHECKPOINTS
  std::shared_ptr<const CheckpointWeights> checkpoint;  // set for Weights.from_checkpoint
  std::vector<std::string> warnings;
#endif
};

#if MOEFORGE_PY_CHECKPOINTS
const CheckpointWeights& checkpoint_of(const Weights& w) {
  if (!w.checkpoint)
    throw InvalidArgument("weights", "expected weights from Weights.from_checkpoint (only they have a router)");
  return *w.checkpoint;
}
#endif

template <class T>
nb::ndarray<nb::numpy, T> numpy_owning(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape.size(), shape.begin(), owner);
}

// One matrix [rows, cols] from a CPU array (bf16, f16, f32 or f64), stored in `format`:
// bf16 into BF16 and f16 into FP16 are copied bit for bit; everything else is
// quantized (QuantMatrix::quantize, from f32).
QuantMatrix matrix_from(const nb::ndarray<>& a, WeightFormat format, int64_t rows, int64_t cols,
                        const std::string& name) {
  const TensorView v = to_view(a, name.c_str());
  validate_tensor(name.c_str(), v, {DType::bf16, DType::f16, DType::f32, DType::f64}, {rows, cols}, Device{}, 1);
  const int64_t n = rows * cols;
  if ((format == WeightFormat::BF16 && v.dtype == DType::bf16) || (format == WeightFormat::FP16 && v.dtype == DType::f16)) {
    QuantMatrix q;
    q.format = format;
    q.rows = rows;
    q.cols = cols;
    q.data.resize(size_t(n * 2));
    if (n) std::memcpy(q.data.data(), v.data, size_t(n * 2));
    return q;
  }
  std::vector<float> f(static_cast<size_t>(n));
  switch (v.dtype) {
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) f[size_t(i)] = formats::bf16_to_float(static_cast<const uint16_t*>(v.data)[i]);
      break;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) f[size_t(i)] = formats::f16_to_float(static_cast<const uint16_t*>(v.data)[i]);
      break;
    case DType::f32: std::memcpy(f.data(), v.data, size_t(n) * sizeof(float)); break;
    default:
      for (int64_t i = 0; i < n; ++i) f[size_t(i)] = float(static_cast<const double*>(v.data)[i]);
  }
  return QuantMatrix::quantize(format, rows, cols, f.data());
}

std::vector<float> floats_from(const nb::ndarray<>& a, int64_t count, const std::string& name) {
  const TensorView v = to_view(a, name.c_str());
  validate_tensor(name.c_str(), v, {DType::f32, DType::f64, DType::bf16}, {count}, Device{}, 1);
  std::vector<float> f(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    f[size_t(i)] = v.dtype == DType::f32    ? static_cast<const float*>(v.data)[i]
                   : v.dtype == DType::f64 ? float(static_cast<const double*>(v.data)[i])
                                           : formats::bf16_to_float(static_cast<const uint16_t*>(v.data)[i]);
  return f;
}

using Arrays = std::vector<nb::object>;

Weights from_experts(const MoeSpec& spec, const Arrays& w13, const Arrays& w2, const std::optional<Arrays>& b13,
                     const std::optional<Arrays>& b2, const Arrays& shared_w13, const Arrays& shared_w2,
                     const std::optional<nb::object>& correction_bias) {
  spec.validate();
  const int64_t E = spec.num_experts, H = spec.hidden, I = spec.intermediate, S = spec.num_shared_experts;
  auto count = [](const char* name, size_t got, int64_t want) {
    if (int64_t(got) != want)
      throw InvalidArgument(name, fmt::format("expected {} arrays (one per expert), got {}", want, got));
  };
  count("w13", w13.size(), E);
  count("w2", w2.size(), E);
  if (spec.expert_bias) {
    if (!b13 || !b2) throw InvalidArgument(b13 ? "b2" : "b13", "expected biases: spec.expert_bias is set");
    count("b13", b13->size(), E);
    count("b2", b2->size(), E);
  } else if ((b13 && !b13->empty()) || (b2 && !b2->empty())) {
    throw InvalidArgument(b13 && !b13->empty() ? "b13" : "b2", "expected no biases: spec.expert_bias is not set");
  }
  count("shared_w13", shared_w13.size(), S);
  count("shared_w2", shared_w2.size(), S);
  std::vector<ExpertWeights> experts(static_cast<size_t>(E)), shared(static_cast<size_t>(S));
  for (int64_t e = 0; e < E; ++e) {
    ExpertWeights& x = experts[size_t(e)];
    x.w13 = matrix_from(as_array(w13[size_t(e)], fmt::format("w13[{}]", e)), spec.weight_format, 2 * I, H, fmt::format("w13[{}]", e));
    x.w2 = matrix_from(as_array(w2[size_t(e)], fmt::format("w2[{}]", e)), spec.weight_format, H, I, fmt::format("w2[{}]", e));
    if (spec.expert_bias) {
      x.b13 = floats_from(as_array((*b13)[size_t(e)], fmt::format("b13[{}]", e)), 2 * I, fmt::format("b13[{}]", e));
      x.b2 = floats_from(as_array((*b2)[size_t(e)], fmt::format("b2[{}]", e)), H, fmt::format("b2[{}]", e));
    }
  }
  const int64_t SI = spec.shared_intermediate;
  for (int64_t s = 0; s < S; ++s) {
    shared[size_t(s)].w13 = matrix_from(as_array(shared_w13[size_t(s)], fmt::format("shared_w13[{}]", s)), spec.weight_format, 2 * SI, H, fmt::format("shared_w13[{}]", s));
    shared[size_t(s)].w2 = matrix_from(as_array(shared_w2[size_t(s)], fmt::format("shared_w2[{}]", s)), spec.weight_format, H, SI, fmt::format("shared_w2[{}]", s));
  }
  std::vector<float> bias;
  if (correction_bias) bias = floats_from(as_array(*correction_bias, "correction_bias"), E, "correction_bias");
  return Weights{std::make_shared<InMemoryWeights>(spec, std::move(experts), std::move(shared), std::move(bias))};
}

nb::dict expert_dict(const ExpertWeights& w) {
  nb::dict d;
  std::vector<double> w13(size_t(w.w13.rows * w.w13.cols)), w2(size_t(w.w2.rows * w.w2.cols));
  w.w13.dequantize_rows(0, w.w13.rows, w13.data());
  w.w2.dequantize_rows(0, w.w2.rows, w2.data());
  d["w13"] = numpy_owning(std::move(w13), {size_t(w.w13.rows), size_t(w.w13.cols)});
  d["w2"] = numpy_owning(std::move(w2), {size_t(w.w2.rows), size_t(w.w2.cols)});
  if (w.b13.empty()) {
    d["b13"] = nb::none();
    d["b2"] = nb::none();
  } else {
    std::vector<float> b13 = w.b13, b2 = w.b2;
    const size_t n13 = b13.size(), n2 = b2.size();
    d["b13"] = numpy_owning(std::move(b13), {n13});
    d["b2"] = numpy_owning(std::move(b2), {n2});
  }
  return d;
}

nb::ndarray<nb::numpy, double> as_out(std::vector<double>&& v, int64_t T, int64_t H) {
  return numpy_owning(std::move(v), {size_t(T), size_t(H)});
}

}  // namespace

void bind_layer(nb::module_& m) {
  nb::class_<Weights>(m, "Weights",
                      "Where a layer's weights come from (C++ WeightSource): synthetic from a seed, or held in\n"
                      "memory from arrays.")
      .def_static(
          "synthetic",
          [](const MoeSpec& spec, uint64_t seed) {
            spec.validate();
            return Weights{std::shared_ptr<const WeightSource>(make_synthetic_weights(spec, seed))};
          },
          nb::arg("spec"), nb::arg("seed") = 0,
          "Deterministic weights from (spec, seed), scaled like a trained layer (make_synthetic_weights).")
      .def_static("from_experts", &from_experts, nb::arg("spec"), nb::arg("w13"), nb::arg("w2"),
                  nb::arg("b13") = nb::none(), nb::arg("b2") = nb::none(), nb::arg("shared_w13") = Arrays{},
                  nb::arg("shared_w2") = Arrays{}, nb::arg("correction_bias") = nb::none(),
                  "Weights held in memory (C++ InMemoryWeights), one CPU array per expert:\n"
                  "w13[e] [2I, H] (gate rows, then up rows), w2[e] [H, I]; b13[e] [2I], b2[e] [H] when\n"
                  "spec.expert_bias; shared_w13[s] [2SI, H], shared_w2[s] [H, SI]; correction_bias [E].\n"
                  "Any DLPack CPU array (bf16, f16, f32, f64); bf16 into a BF16 spec (f16 into FP16) is\n"
                  "copied bit for bit, anything else is quantized into spec.weight_format. Copies the data.")
      .def_prop_ro("spec", [](const Weights& w) { return w.src->spec(); })
#if MOEFORGE_PY_CHECKPOINTS
      .def_static(
          "from_checkpoint",
          [](const std::string& dir, int layer, bool allow_bf16_fallback) {
            Weights w;
            std::vector<std::string> warnings;
            {
              nb::gil_scoped_release release;
              CheckpointOptions o;
              o.allow_bf16_fallback = allow_bf16_fallback;
              o.warn = [&warnings](const std::string& m) { warnings.push_back(m); };
              std::shared_ptr<const CheckpointWeights> c = CheckpointWeights::open(dir, layer, o);
              w.checkpoint = c;
              w.src = c;
            }
            w.warnings = std::move(warnings);
            return w;
          },
          nb::arg("dir"), nb::arg("layer"), nb::arg("allow_bf16_fallback") = true,
          "One MoE layer of a Hugging Face safetensors checkpoint (C++ CheckpointWeights::open): the\n"
          "spec from config.json, weights memory-mapped and read one expert at a time. Raises IoError\n"
          "for a missing or damaged checkpoint, UnsupportedError for a layout moeforge cannot run.")
      .def_prop_ro("warnings", [](const Weights& w) { return w.warnings; },
                   "Warnings from loading a checkpoint (fallbacks, assumptions); empty otherwise.")
      .def_prop_ro("description", [](const Weights& w) -> std::string {
        return w.checkpoint ? w.checkpoint->describe() : std::string("weights for ") + w.src->spec().describe();
      })
      .def(
          "router_logits",
          [](const Weights& w, nb::ndarray<> x) {
            const CheckpointWeights& c = checkpoint_of(w);
            const TensorView xv = to_view(x, "x");
            std::vector<float> logits;
            {
              nb::gil_scoped_release release;
              logits = c.router_logits(xv);
            }
            const size_t T = size_t(xv.rank > 0 ? xv.shape[0] : 0);
            return numpy_owning(std::move(logits), {T, size_t(c.spec().num_experts)});
          },
          nb::arg("x"),
          "Checkpoint weights only: router logits [T, E] float32 = x [T, H] (CPU) @ router weight^T\n"
          "(+ router bias), in double, rounded once.")
#endif
      .def(
          "expert", [](const Weights& w, int64_t e) {
            if (e < 0 || e >= w.src->spec().num_experts)
              throw InvalidArgument("e", fmt::format("expected an expert in [0, {}), got {}", w.src->spec().num_experts, e));
            return expert_dict(w.src->expert(e));
          },
          nb::arg("e"), "Routed expert e as the kernels see it: dict of float64 w13 [2I, H], w2 [H, I], b13, b2.")
      .def(
          "shared_expert", [](const Weights& w, int s) {
            if (s < 0 || s >= w.src->spec().num_shared_experts)
              throw InvalidArgument("s", fmt::format("expected a shared expert in [0, {}), got {}",
                                                     w.src->spec().num_shared_experts, s));
            return expert_dict(w.src->shared_expert(s));
          },
          nb::arg("s"), "Shared expert s, dequantized (as expert()).")
      .def(
          "correction_bias", [](const Weights& w) -> nb::object {
            std::vector<float> b = w.src->correction_bias();
            if (b.empty()) return nb::none();
            const size_t n = b.size();
            return nb::cast(numpy_owning(std::move(b), {n}));
          },
          "e_score_correction_bias [E] float32, or None.");

  nb::class_<MoeLayer>(m, "Layer", "The C++ moeforge::MoeLayer (use moeforge.MoeLayer).")
      .def(
          "__init__",
          [](MoeLayer* self, const MoeSpec& spec, const Weights& w, const std::string& backend, int device) {
            nb::gil_scoped_release release;
            new (self) MoeLayer(MoeLayer::create(spec, w.src, {.backend = backend, .device = device}));
          },
          nb::arg("spec"), nb::arg("weights"), nb::arg("backend") = "auto", nb::arg("device") = 0)
      .def(
          "forward",
          [](const MoeLayer& l, nb::ndarray<> x, nb::ndarray<> logits, nb::ndarray<> out, uintptr_t stream) {
            const TensorView xv = to_view(x, "x"), lv = to_view(logits, "router_logits"), ov = to_view(out, "out");
            nb::gil_scoped_release release;
            l.forward(xv, lv, ov, reinterpret_cast<void*>(stream));
          },
          nb::arg("x"), nb::arg("router_logits"), nb::arg("out"), nb::arg("stream") = 0,
          "out[T, H] = layer(x[T, H], router_logits[T, E]) on `stream` (a CUstream as an int; 0 = legacy default).")
      .def(
          "forward_topk",
          [](const MoeLayer& l, nb::ndarray<> x, nb::ndarray<> ids, nb::ndarray<> wts, nb::ndarray<> out,
             uintptr_t stream) {
            const TensorView xv = to_view(x, "x"), iv = to_view(ids, "topk_ids"), wv = to_view(wts, "topk_weights"),
                             ov = to_view(out, "out");
            nb::gil_scoped_release release;
            l.forward_topk(xv, iv, wv, ov, reinterpret_cast<void*>(stream));
          },
          nb::arg("x"), nb::arg("topk_ids"), nb::arg("topk_weights"), nb::arg("out"), nb::arg("stream") = 0,
          "Precomputed routing: topk_ids [T, k] int32/int64, topk_weights [T, k] float32 (used as given).")
      .def_prop_ro("spec", &MoeLayer::spec)
      .def_prop_ro("backend", &MoeLayer::backend_name, "the backend chosen ('cpu', 'portable', 'sm90')")
      .def_prop_ro("backend_reason", &MoeLayer::backend_reason, "why it was chosen")
      .def_prop_ro("device", [](const MoeLayer& l) {
        const Device d = l.device();
        return std::make_tuple(std::string(d.kind == DeviceKind::CPU ? "cpu" : "cuda"), d.index);
      }, "('cpu', 0) or ('cuda', ordinal)");

  m.attr("_has_checkpoints") = bool(MOEFORGE_PY_CHECKPOINTS);
  m.def(
      "_reference_forward",
      [](const MoeSpec& spec, const Weights& w, nb::ndarray<> x, nb::ndarray<> logits, int threads) {
        const TensorView xv = to_view(x, "x"), lv = to_view(logits, "router_logits");
        std::vector<double> out;
        {
          nb::gil_scoped_release release;
          reference::Options o;
          o.threads = threads;
          out = reference::forward(spec, *w.src, xv, lv, o);
        }
        return as_out(std::move(out), xv.shape[0], spec.hidden);
      },
      nb::arg("spec"), nb::arg("weights"), nb::arg("x"), nb::arg("router_logits"), nb::arg("threads") = 0,
      "The C++ CPU reference (moeforge::reference::forward) in float64: the oracle for tests.");
  m.def(
      "_reference_forward_topk",
      [](const MoeSpec& spec, const Weights& w, nb::ndarray<> x, nb::ndarray<> ids, nb::ndarray<> wts) {
        const TensorView xv = to_view(x, "x"), iv = to_view(ids, "topk_ids"), wv = to_view(wts, "topk_weights");
        std::vector<double> out;
        {
          nb::gil_scoped_release release;
          out = reference::forward_topk(spec, *w.src, xv, iv, wv);
        }
        return as_out(std::move(out), xv.shape[0], spec.hidden);
      },
      nb::arg("spec"), nb::arg("weights"), nb::arg("x"), nb::arg("topk_ids"), nb::arg("topk_weights"),
      "moeforge::reference::forward_topk in float64.");
  m.def(
      "_reference_route",
      [](const MoeSpec& spec, nb::ndarray<> logits, std::optional<nb::ndarray<>> correction_bias) {
        const TensorView lv = to_view(logits, "router_logits");
        validate_tensor("router_logits", lv, {DType::f32}, {-1, spec.num_experts}, Device{}, 1);
        std::vector<float> bias;
        if (correction_bias) bias = floats_from(*correction_bias, spec.num_experts, "correction_bias");
        reference::Routing r = reference::route(spec, static_cast<const float*>(lv.data), lv.shape[0], bias);
        const size_t T = size_t(r.tokens), k = size_t(r.topk);
        return std::make_tuple(numpy_owning(std::move(r.ids), {T, k}), numpy_owning(std::move(r.weights), {T, k}));
      },
      nb::arg("spec"), nb::arg("router_logits"), nb::arg("correction_bias") = nb::none(),
      "moeforge::reference::route: (ids int32 [T, k], weights float64 [T, k]).");
  m.def(
      "_reinterpret_bf16",
      [](nb::object obj) { return reinterpret_bf16(nb::cast<nb::ndarray<>>(obj), obj); },
      nb::arg("a"),
      "The same memory as a uint16/int16 array, typed bf16 (a DLPack array): how NumPy arrays of\n"
      "ml_dtypes.bfloat16 reach the core.");
}

}  // namespace moeforge::py
