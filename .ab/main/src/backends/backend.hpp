// A backend = (kernel family, weight formats, targets) with a self-test.
//
// The registry (registry.cpp) lists every backend; `auto` asks each one whether
// it can serve (spec, device), runs the self-test of those that can (once per
// process and device) and picks, among those that passed, the highest priority (a
// backend built for this exact chip over the portable one), then the fastest. An
// explicit backend that cannot run is an error naming why and listing the ones that can.
#pragma once
#include <cuda.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moeforge/spec.hpp"
#include "moeforge/tensor.hpp"
#include "moeforge/weights.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace moeforge {

// One forward call, already validated against the spec and the layer's device.
struct ForwardCall {
  const TensorView* x = nullptr;             // [T, H]
  const TensorView* router_logits = nullptr;  // [T, E], or null when topk_* are given
  const TensorView* topk_ids = nullptr;       // [T, k]
  const TensorView* topk_weights = nullptr;   // [T, k]
  const TensorView* out = nullptr;            // [T, H]
  CUstream stream = nullptr;
};

// Weights prepared once for one device; immutable afterwards. forward() must be
// safe from many threads at once: per-call state lives in the call only.
class PreparedLayer {
 public:
  virtual ~PreparedLayer() = default;
  virtual void forward(const ForwardCall& call) const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual bool needs_gpu() const = 0;
  // "" when it can serve spec on device (null device: no GPU); else the reason it cannot.
  virtual std::string why_not(const MoeSpec& spec, const rt::DeviceInfo* device) const = 0;
  // GPU backends copy what they need and must not keep `weights` past prepare();
  // the cpu backend keeps the shared pointer (it reads experts on demand).
  virtual std::unique_ptr<PreparedLayer> prepare(const MoeSpec& spec,
                                                 const std::shared_ptr<const WeightSource>& weights,
                                                 int device) const = 0;
  // Every kernel this backend compiles for spec (precompile, the CI compile check).
  virtual std::vector<rt::KernelSpec> kernels(const MoeSpec& spec) const { return {}; }
  // Which kernels a call of T tokens runs, in a few words ("decode GEMMs, 16-token tiles");
  // for bench records. "" when the backend has one path.
  virtual std::string gemm_plan(const MoeSpec& spec, int64_t tokens) const { return ""; }
  // `auto` prefers a higher priority among backends whose self-test passed.
  virtual int priority() const { return 1; }
  // Batch sizes the self-test runs on its small spec: enough to cover every kernel path
  // the planner can pick (the first one is also the one timed).
  virtual std::vector<int64_t> self_test_tokens(const MoeSpec& test_spec) const { return {37}; }
};

const Backend& cpu_backend();
const Backend& portable_backend();
const Backend& sm90_backend();

// Every backend, in order of preference for `auto` when speeds tie.
const std::vector<const Backend*>& all_backends();
// Throws InvalidArgument("backend", ...) listing the known names.
const Backend& find_backend(std::string_view name);

struct BackendChoice {
  const Backend* backend = nullptr;
  std::string reason;                  // one line: why this one
  std::vector<std::string> rejected;   // "portable: no CUDA driver (libcuda.so.1 not found)"
};
// requested: "auto" or a backend name. device: CUDA ordinal to run on.
BackendChoice choose_backend(const MoeSpec& spec, std::string_view requested, int device);

}  // namespace moeforge
