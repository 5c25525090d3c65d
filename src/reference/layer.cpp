// The CPU reference MoE layer: the oracle every backend is compared with.
//
// Shape of the computation (one expert at a time, all threads on that expert):
//   for each touched routed expert e, ascending id, then each shared expert:
//     fetch its weights (the next one is fetched in the background meanwhile)
//     for each chunk of the (token, weight) entries routed to e:
//       X   = x rows of the chunk, in double
//       h   = act(X W13^T + b13)   parallel over panels of I (gate rows j, up rows I+j)
//       out[token] += w * (h W2^T + b2)   parallel over panels of H
//
// Why it is built this way:
//  * Determinism. Every output element out[t][c] is updated by exactly one task per
//    expert, and experts are processed one after another in a fixed order, so the
//    accumulation order of each element never depends on the thread count or on the
//    scheduling. Every dot product is summed in one fixed order (two lanes, even/odd
//    k, then added) whatever the blocking around it, so computing a subset of rows
//    (Options.rows) gives the very same bits as the full run.
//  * Bounded memory. Only one expert's stored weights (plus the one being prefetched)
//    live at a time; weights are dequantized into per-thread panels of ~256 KiB that
//    stay in L2 and are used by every token of the chunk at once; chunks cap X and h
//    at ~256 MiB. The output itself ([T, H] doubles) is the only O(T) buffer.
//  * Exactness. Weights are the values QuantMatrix::dequantize_rows reports (what the
//    kernels multiply by); inputs are converted exactly from bf16/f16/f32; all sums are
//    in double. FP8 activations (spec.activation_format) are part of the layer's definition,
//    not an approximation of it: X and h rows are quantized in 1 x 128 groups and
//    dequantized exactly as formats::quantize_fp8_group128 states before their GEMM.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "moeforge/reference.hpp"
#include "moeforge/validate.hpp"
#include "reference/routing_internal.hpp"

namespace moeforge::reference {
namespace {

// ---------------------------------------------------------------------------------
// A small fork-join pool: run(n, f) calls f(task, worker) for every task in [0, n),
// tasks taken dynamically, the caller working as worker 0. Which thread runs a task
// never matters for the result (see above), only for the speed.
class Pool {
 public:
  explicit Pool(int threads) : n_(std::max(1, threads)) {
    for (int i = 1; i < n_; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return n_; }

  void run(int64_t ntasks, const std::function<void(int64_t, int)>& f) {
    if (ntasks <= 0) return;
    if (n_ == 1 || ntasks == 1) {
      for (int64_t t = 0; t < ntasks; ++t) f(t, 0);
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &f;
      ntasks_ = ntasks;
      next_.store(0);
      busy_ = n_ - 1;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work(0);
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&] { return busy_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work(int worker) {
    for (;;) {
      const int64_t t = next_.fetch_add(1);
      if (t >= ntasks_) return;
      try {
        (*job_)(t, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
        next_.store(ntasks_);  // stop handing out work
      }
    }
  }
  void loop(int worker) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
      }
      work(worker);
      std::lock_guard<std::mutex> lk(mu_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  int n_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int64_t, int)>* job_ = nullptr;
  int64_t ntasks_ = 0;
  std::atomic<int64_t> next_{0};
  int busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

// ---------------------------------------------------------------------------------
// Dot products of NX rows of `a` with two rows b0, b1 (length K). Each pair is summed
// in two lanes (even k, odd k) that are added at the end — the same order for every NX,
// so the blocking chosen around it cannot change a result.
typedef double v2d __attribute__((vector_size(16)));

template <int NX>
inline void dots2(const double* const* a, const double* b0, const double* b1, int64_t K, double (*d)[2]) {
  v2d acc[NX][2];
  for (int i = 0; i < NX; ++i) acc[i][0] = acc[i][1] = v2d{0.0, 0.0};
  int64_t k = 0;
  for (; k + 2 <= K; k += 2) {
    v2d w0, w1;
    std::memcpy(&w0, b0 + k, sizeof w0);
    std::memcpy(&w1, b1 + k, sizeof w1);
    for (int i = 0; i < NX; ++i) {
      v2d xi;
      std::memcpy(&xi, a[i] + k, sizeof xi);
      acc[i][0] += xi * w0;
      acc[i][1] += xi * w1;
    }
  }
  for (int i = 0; i < NX; ++i) {
    d[i][0] = acc[i][0][0] + acc[i][0][1];
    d[i][1] = acc[i][1][0] + acc[i][1][1];
    if (k < K) {  // odd K (not reachable with validated specs, kept for safety)
      d[i][0] += a[i][k] * b0[k];
      d[i][1] += a[i][k] * b1[k];
    }
  }
}

constexpr int kMaxNX = 4;

inline void dots(int nx, const double* const* a, const double* b0, const double* b1, int64_t K,
                 double (*d)[2]) {
  switch (nx) {
    case 1: return dots2<1>(a, b0, b1, K, d);
    case 2: return dots2<2>(a, b0, b1, K, d);
    case 3: return dots2<3>(a, b0, b1, K, d);
    default: return dots2<4>(a, b0, b1, K, d);
  }
}

// Rows per dequantized panel so that one panel is ~256 KiB of doubles (stays in L2);
// even, because dots2 consumes rows in pairs.
int64_t panel_rows(int64_t row_len, int64_t total_rows) {
  int64_t r = std::max<int64_t>(2, (int64_t(256) << 10) / (8 * row_len));
  r -= r % 2;
  return std::min(r, total_rows);
}

// ---------------------------------------------------------------------------------
struct Entry {
  int64_t token;
  double weight;
};

// What one forward pass needs: routing for the tokens in `rows` (others unused).
struct Problem {
  const MoeSpec* spec;
  const WeightSource* weights;
  const TensorView* x;
  std::vector<int64_t> rows;  // tokens to compute, ascending
  std::vector<int32_t> ids;   // [T, k]; only rows listed are meaningful
  std::vector<double> wts;    // [T, k]
};

void load_x_row(const TensorView& x, int64_t t, double* out) {
  const int64_t H = x.shape[1];
  switch (x.dtype) {
    case DType::f32: {
      const float* p = static_cast<const float*>(x.data) + t * H;
      for (int64_t i = 0; i < H; ++i) out[i] = p[i];
      break;
    }
    case DType::bf16: {
      const uint16_t* p = static_cast<const uint16_t*>(x.data) + t * H;
      for (int64_t i = 0; i < H; ++i) out[i] = formats::bf16_to_float(p[i]);
      break;
    }
    case DType::f16: {
      const uint16_t* p = static_cast<const uint16_t*>(x.data) + t * H;
      for (int64_t i = 0; i < H; ++i) out[i] = formats::f16_to_float(p[i]);
      break;
    }
    default: throw InternalError(fmt::format("reference: x dtype {} not handled", dtype_name(x.dtype)));
  }
}

}  // namespace

std::vector<int64_t> even_rows(int64_t tokens, int64_t want) {
  std::vector<int64_t> rows;
  if (want >= tokens) return rows;
  for (int64_t i = 0; i < want; ++i) rows.push_back(i * (tokens - 1) / std::max<int64_t>(want - 1, 1));
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

ErrorSums& ErrorSums::operator+=(const ErrorSums& o) {
  err_sq += o.err_sq;
  ref_sq += o.ref_sq;
  nan |= o.nan;
  return *this;
}

double ErrorSums::rel_err() const { return nan ? NAN : std::sqrt(err_sq / std::max(ref_sq, 1e-300)); }

ErrorSums error_sums(const std::vector<uint16_t>& out_bf16, const std::vector<double>& ref, int64_t hidden,
                     const std::vector<int64_t>& rows) {
  ErrorSums s;
  auto row_err = [&](int64_t r) {
    for (int64_t c = 0; c < hidden; ++c) {
      const size_t i = size_t(r * hidden + c);
      const double o = formats::bf16_to_float(out_bf16[i]);
      s.nan |= std::isnan(o);
      s.err_sq += (o - ref[i]) * (o - ref[i]);
      s.ref_sq += ref[i] * ref[i];
    }
  };
  if (rows.empty())
    for (int64_t r = 0; r < int64_t(ref.size()) / hidden; ++r) row_err(r);
  else
    for (int64_t r : rows) row_err(r);
  return s;
}

double rel_err(const std::vector<uint16_t>& out_bf16, const std::vector<double>& ref, int64_t hidden,
               const std::vector<int64_t>& rows) {
  return error_sums(out_bf16, ref, hidden, rows).rel_err();
}

double error_bound(const MoeSpec& spec) {
  return spec.activation_format == ActivationFormat::FP8_Group128 ? 3e-2 : 1e-2;
}

namespace {

// FP8 activations (ActivationFormat::FP8_Group128): what a GEMM sees of an input row is the
// row quantized to e4m3 with one f32 scale per 128 columns (formats::quantize_fp8_group128),
// dequantized. Applied to x before GEMM 1 and to h before GEMM 2.
void round_to_fp8_groups(double* row, int64_t n) {
  thread_local std::vector<float> f, s;
  thread_local std::vector<uint8_t> q;
  f.resize(size_t(n));
  q.resize(size_t(n));
  s.resize(size_t((n + 127) / 128));
  for (int64_t i = 0; i < n; ++i) f[size_t(i)] = float(row[i]);
  formats::quantize_fp8_group128(f.data(), 1, n, q.data(), s.data());
  formats::dequantize_fp8_group128(q.data(), s.data(), 1, n, f.data());
  for (int64_t i = 0; i < n; ++i) row[i] = f[size_t(i)];
}

void check_weights(const char* what, int64_t index, const ExpertWeights& w, int64_t I, int64_t H, bool bias) {
  auto bad = [&](const std::string& why) {
    throw InvalidArgument("weights", fmt::format("{} {}: {}", what, index, why));
  };
  if (w.w13.rows != 2 * I || w.w13.cols != H)
    bad(fmt::format("expected w13 [{}, {}], got [{}, {}]", 2 * I, H, w.w13.rows, w.w13.cols));
  if (w.w2.rows != H || w.w2.cols != I)
    bad(fmt::format("expected w2 [{}, {}], got [{}, {}]", H, I, w.w2.rows, w.w2.cols));
  if (bias && (int64_t(w.b13.size()) != 2 * I || int64_t(w.b2.size()) != H))
    bad(fmt::format("expected biases of {} and {} values, got {} and {}", 2 * I, H, w.b13.size(), w.b2.size()));
}

// One expert applied to its entries, accumulated into out.
void run_expert(const Problem& p, const ExpertWeights& W, int64_t I, bool bias, const std::vector<Entry>& entries,
                Pool& pool, std::vector<std::vector<double>>& scratch, std::vector<double>& out) {
  const MoeSpec& spec = *p.spec;
  const int64_t H = spec.hidden;
  const int64_t n_all = int64_t(entries.size());
  // Chunk the entries so X [n, H] and h [n, I] stay within ~256 MiB together.
  const int64_t chunk = std::max<int64_t>(kMaxNX, (int64_t(32) << 20) / (H + I));
  const int64_t pj = panel_rows(H, I);  // gate rows per GEMM1 panel (and as many up rows)
  const int64_t pc = panel_rows(I, H);  // W2 rows per GEMM2 panel
  const bool fp8_acts = spec.activation_format == ActivationFormat::FP8_Group128;
  std::vector<double> X, h;
  for (int64_t c0 = 0; c0 < n_all; c0 += chunk) {
    const int64_t n = std::min(chunk, n_all - c0);
    const Entry* ent = entries.data() + c0;
    X.resize(size_t(n * H));
    h.resize(size_t(n * I));
    pool.run((n + 63) / 64, [&](int64_t task, int) {
      for (int64_t i = task * 64; i < std::min(n, task * 64 + 64); ++i) {
        load_x_row(*p.x, ent[i].token, &X[i * H]);
        if (fp8_acts) round_to_fp8_groups(&X[i * H], H);
      }
    });

    // GEMM1 + activation: task = one panel of pj gate rows and the matching up rows.
    pool.run((I + pj - 1) / pj, [&](int64_t task, int worker) {
      const int64_t j0 = task * pj, m = std::min(pj, I - j0);
      std::vector<double>& buf = scratch[size_t(worker)];
      buf.resize(size_t(2 * m * H));
      W.w13.dequantize_rows(j0, j0 + m, buf.data());
      W.w13.dequantize_rows(I + j0, I + j0 + m, buf.data() + m * H);
      std::vector<double> gu(size_t(kMaxNX * 2 * m));  // [i][2m]: gate then up
      for (int64_t i0 = 0; i0 < n; i0 += kMaxNX) {
        const int nx = int(std::min<int64_t>(kMaxNX, n - i0));
        const double* a[kMaxNX];
        for (int i = 0; i < nx; ++i) a[i] = &X[(i0 + i) * H];
        double d[kMaxNX][2];
        for (int64_t r = 0; r < 2 * m; r += 2) {
          dots(nx, a, &buf[r * H], &buf[(r + 1) * H], H, d);
          for (int i = 0; i < nx; ++i) {
            gu[size_t(i * 2 * m + r)] = d[i][0];
            gu[size_t(i * 2 * m + r + 1)] = d[i][1];
          }
        }
        for (int i = 0; i < nx; ++i) {
          for (int64_t r = 0; r < m; ++r) {
            double g = gu[size_t(i * 2 * m + r)], u = gu[size_t(i * 2 * m + m + r)];
            if (bias) {
              g += W.b13[size_t(j0 + r)];
              u += W.b13[size_t(I + j0 + r)];
            }
            h[size_t((i0 + i) * I + j0 + r)] = activate(spec.activation, g, u);
          }
        }
      }
    });

    if (fp8_acts)
      pool.run((n + 63) / 64, [&](int64_t task, int) {
        for (int64_t i = task * 64; i < std::min(n, task * 64 + 64); ++i) round_to_fp8_groups(&h[size_t(i * I)], I);
      });

    // GEMM2 + weighted accumulation: task = one panel of pc output columns, so each
    // out[t][c] is touched by exactly one task (in entry order).
    pool.run((H + pc - 1) / pc, [&](int64_t task, int worker) {
      const int64_t c0 = task * pc, m = std::min(pc, H - c0);
      std::vector<double>& buf = scratch[size_t(worker)];
      buf.resize(size_t(m * I));
      W.w2.dequantize_rows(c0, c0 + m, buf.data());
      for (int64_t i0 = 0; i0 < n; i0 += kMaxNX) {
        const int nx = int(std::min<int64_t>(kMaxNX, n - i0));
        const double* a[kMaxNX];
        for (int i = 0; i < nx; ++i) a[i] = &h[size_t((i0 + i) * I)];
        double d[kMaxNX][2];
        for (int64_t r = 0; r < m; r += 2) {
          dots(nx, a, &buf[r * I], &buf[(r + 1) * I], I, d);
          for (int i = 0; i < nx; ++i) {
            const Entry& e = ent[i0 + i];
            for (int q = 0; q < 2; ++q) {
              const double y = bias ? d[i][q] + W.b2[size_t(c0 + r + q)] : d[i][q];
              out[size_t(e.token * H + c0 + r + q)] += e.weight * y;
            }
          }
        }
      }
    });
  }
}

std::vector<double> run(const Problem& p, const Options& options) {
  const MoeSpec& spec = *p.spec;
  const int64_t T = p.x->shape[0], H = spec.hidden, E = spec.num_experts, k = spec.topk;
  std::vector<double> out(size_t(T * H), 0.0);

  // Entries per expert, tokens ascending (slots ascending within a token).
  std::vector<std::vector<Entry>> per_expert(static_cast<size_t>(E));
  for (int64_t t : p.rows)
    for (int64_t s = 0; s < k; ++s)
      per_expert[size_t(p.ids[size_t(t * k + s)])].push_back({t, p.wts[size_t(t * k + s)]});

  // Jobs: touched routed experts ascending, then the shared experts.
  struct Job {
    bool shared;
    int64_t index;
  };
  std::vector<Job> jobs;
  for (int64_t e = 0; e < E; ++e)
    if (!per_expert[size_t(e)].empty()) jobs.push_back({false, e});
  std::vector<Entry> all_rows;
  if (!p.rows.empty()) {
    for (int s = 0; s < spec.num_shared_experts; ++s) jobs.push_back({true, s});
    for (int64_t t : p.rows) all_rows.push_back({t, 1.0});
  }
  const int64_t total = int64_t(jobs.size());
  if (total == 0) return out;

  const int threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  Pool pool(threads);
  std::vector<std::vector<double>> scratch(size_t(pool.size()));
  auto fetch = [&](const Job& j) {
    return j.shared ? p.weights->shared_expert(int(j.index)) : p.weights->expert(j.index);
  };
  // The next expert's weights are fetched (for synthetic weights: generated and
  // quantized) while the current one is computed.
  std::future<ExpertWeights> next = std::async(std::launch::async, fetch, jobs[0]);
  for (int64_t i = 0; i < total; ++i) {
    ExpertWeights W = next.get();
    if (i + 1 < total) next = std::async(std::launch::async, fetch, jobs[size_t(i + 1)]);
    const Job& j = jobs[size_t(i)];
    const int64_t I = j.shared ? spec.shared_intermediate : spec.intermediate;
    const bool bias = !j.shared && spec.expert_bias;
    check_weights(j.shared ? "shared expert" : "expert", j.index, W, I, H, bias);
    run_expert(p, W, I, bias, j.shared ? all_rows : per_expert[size_t(j.index)], pool, scratch, out);
    if (options.progress) options.progress(i + 1, total);
  }
  return out;
}

// Validates the common arguments and fills p.rows.
void prepare(Problem& p, const MoeSpec& spec, const WeightSource& weights, const TensorView& x,
             const Options& options) {
  spec.validate();
  const Device cpu{};
  validate_tensor("x", x, {DType::bf16, DType::f16, DType::f32}, {-1, spec.hidden}, cpu, 1);
  const int64_t T = x.shape[0];
  p.spec = &spec;
  p.weights = &weights;
  p.x = &x;
  if (options.rows.empty()) {
    p.rows.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t) p.rows[size_t(t)] = t;
  } else {
    for (size_t i = 0; i < options.rows.size(); ++i) {
      const int64_t r = options.rows[i];
      if (r < 0 || r >= T)
        throw InvalidArgument("options.rows", fmt::format("expected tokens in [0, {}), got {} at index {}", T, r, i));
      if (i > 0 && r <= options.rows[i - 1])
        throw InvalidArgument("options.rows", fmt::format("expected sorted unique tokens, got {} after {} at index {}",
                                                          r, options.rows[i - 1], i));
    }
    p.rows = options.rows;
  }
  p.ids.assign(size_t(T * spec.topk), 0);
  p.wts.assign(size_t(T * spec.topk), 0.0);
}

}  // namespace

std::vector<double> forward(const MoeSpec& spec, const WeightSource& weights, const TensorView& x,
                            const TensorView& router_logits, const Options& options) {
  Problem p;
  prepare(p, spec, weights, x, options);
  const int64_t T = x.shape[0], E = spec.num_experts;
  validate_tensor("router_logits", router_logits, {DType::f32, DType::bf16}, {T, E}, Device{}, 1);
  const std::vector<float> bias = weights.correction_bias();
  check_correction_bias(spec, bias);
  RouteScratch scratch;
  std::vector<float> row(static_cast<size_t>(E));
  for (int64_t t : p.rows) {
    const float* logits;
    if (router_logits.dtype == DType::f32) {
      logits = static_cast<const float*>(router_logits.data) + t * E;
    } else {
      const uint16_t* b = static_cast<const uint16_t*>(router_logits.data) + t * E;
      for (int64_t e = 0; e < E; ++e) row[size_t(e)] = formats::bf16_to_float(b[e]);
      logits = row.data();
    }
    route_token(spec, logits, bias, scratch, &p.ids[size_t(t * spec.topk)], &p.wts[size_t(t * spec.topk)]);
  }
  return run(p, options);
}

std::vector<double> forward_topk(const MoeSpec& spec, const WeightSource& weights, const TensorView& x,
                                 const TensorView& topk_ids, const TensorView& topk_weights, const Options& options) {
  Problem p;
  prepare(p, spec, weights, x, options);
  const int64_t T = x.shape[0], k = spec.topk;
  validate_tensor("topk_ids", topk_ids, {DType::i32, DType::i64}, {T, k}, Device{}, 1);
  validate_tensor("topk_weights", topk_weights, {DType::f32}, {T, k}, Device{}, 1);
  validate_topk_ids_host("topk_ids", topk_ids, spec.num_experts);
  const float* w = static_cast<const float*>(topk_weights.data);
  for (int64_t i = 0; i < T * k; ++i) {
    p.ids[size_t(i)] = topk_ids.dtype == DType::i32 ? static_cast<const int32_t*>(topk_ids.data)[i]
                                                    : int32_t(static_cast<const int64_t*>(topk_ids.data)[i]);
    p.wts[size_t(i)] = w[i];
  }
  return run(p, options);
}

std::vector<double> forward_routed(const MoeSpec& spec, const WeightSource& weights, const TensorView& x,
                                   const Routing& routing, const Options& options) {
  Problem p;
  prepare(p, spec, weights, x, options);
  const int64_t T = x.shape[0], k = spec.topk;
  if (routing.tokens != T || routing.topk != k || int64_t(routing.ids.size()) != T * k ||
      int64_t(routing.weights.size()) != T * k)
    throw InvalidArgument("routing", fmt::format("expected {} tokens x top-{} ({} ids and weights), got {} x {} "
                                                 "({} ids, {} weights)",
                                                 T, k, T * k, routing.tokens, routing.topk, routing.ids.size(),
                                                 routing.weights.size()));
  for (int64_t t : p.rows)
    for (int64_t s = 0; s < k; ++s) {
      const int32_t id = routing.ids[size_t(t * k + s)];
      if (id < 0 || id >= spec.num_experts)
        throw InvalidArgument("routing.ids", fmt::format("expected expert ids in [0, {}), got {} at token {}, slot {}",
                                                         spec.num_experts, id, t, s));
    }
  p.ids = routing.ids;
  p.wts = routing.weights;
  return run(p, options);
}

}  // namespace moeforge::reference
