// Check-and-time harness for the dev/sm90 ladder (STYLE item 9). One header, included by
// each numbered version; the version supplies a small struct (see `run_main` below):
//
//   struct Version {
//     static constexpr const char* kName;        // "01_tma_wgmma"
//     static constexpr int kBM, kBN, kBK;        // tile; the problem is padded to kBM rows
//     static const void* func();                 // the kernel, for cudaFuncGetAttributes
//     static size_t smem_bytes();                // dynamic shared memory it launches with
//     void setup(const Problem&, const DevInfo&);// encode tensor maps ONCE per buffer set
//     void launch(const Problem&, cudaStream_t); // one grouped GEMM, nothing else
//   };
//
// What it checks, per shape: random bf16 A and B (never zeros), D poisoned with 0xFFFF
// (a NaN pattern the kernel never produces) before every run, every element written,
// no NaN, ||D - ref|| / ||ref|| < 1e-2 against a simple GPU reference (fp32 accumulate,
// one thread per output) that is itself spot-checked against a CPU double reference.
// Padding rows carry row_scale = 0, so D must be exactly 0 there (checked by the same
// comparison: ref is 0 there). Timing: cudaEvents around the kernel alone, L2 flushed
// (2 x L2 bytes written) and D re-poisoned before every run, warm-up, median of kRuns;
// next to cuBLAS bf16 GemmEx at 8192^3 and at the dense M_total x N x K shape, and a
// streaming-read bandwidth, all measured in the same process.
//
// Gated mode (GEMM1, ladder step 03): a Version that declares `static constexpr int kAct`
// (gated.cuh: kSwiGLU, kGeGLUTanh, kClampedSwiGLU) gets B = W13 in the plain checkpoint
// layout [E * 2I, K] (N = 2I; its setup() prepares it in place), D = h [M_total, I], and a
// reference that is the plain GEMM in fp32 (`pre`, [M_total, 2I]) followed by the activation
// in fp32 (accurate expf/tanhf). GEMM1 has no routing weight: row_scale is the row mask
// (1 on routed rows, 0 on padding) and `tile_rows[mt]` the routed rows of m-tile mt; padding
// rows of h must be exactly 0. Shape a (GEMM2) is skipped; records go to <json>-<act>.json.
#pragma once
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gated.cuh"
#include "watchdog.cuh"

namespace h {

typedef __nv_bfloat16 bf16;

// V::kAct when the version declares it (gated GEMM1), else 0 (plain GEMM).
template <class V, class = void>
struct ActOf : std::integral_constant<int, 0> {};
template <class V>
struct ActOf<V, std::void_t<decltype(V::kAct)>> : std::integral_constant<int, V::kAct> {};

// ---------------------------------------------------------------- error checks (file:line)
inline void check_rt(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s:%d: %s -> %s (%s)\n", file, line, what, cudaGetErrorName(e), cudaGetErrorString(e));
    std::exit(3);
  }
}
inline void check_drv(CUresult e, const char* what, const char* file, int line) {
  if (e != CUDA_SUCCESS) {
    const char* name = "?";
    const char* msg = "?";
    cuGetErrorName(e, &name);
    cuGetErrorString(e, &msg);
    std::fprintf(stderr, "%s:%d: %s -> %s (%s)\n", file, line, what, name, msg);
    std::exit(3);
  }
}
inline void check_blas(cublasStatus_t e, const char* what, const char* file, int line) {
  if (e != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s:%d: %s -> cuBLAS status %d\n", file, line, what, (int)e);
    std::exit(3);
  }
}
#define CK(x) ::h::check_rt((x), #x, __FILE__, __LINE__)
#define CKD(x) ::h::check_drv((x), #x, __FILE__, __LINE__)
#define CKB(x) ::h::check_blas((x), #x, __FILE__, __LINE__)

// ---------------------------------------------------------------- device info
struct DevInfo {
  cudaDeviceProp prop;
  int sms = 0;
  size_t l2 = 0;
  size_t smem_optin = 0;
  int driver = 0;
  std::string name;
};
inline DevInfo dev_info() {
  DevInfo d;
  CK(cudaGetDeviceProperties(&d.prop, 0));
  d.sms = d.prop.multiProcessorCount;
  d.l2 = (size_t)d.prop.l2CacheSize;
  d.smem_optin = d.prop.sharedMemPerBlockOptin;
  d.name = d.prop.name;
  CK(cudaDriverGetVersion(&d.driver));
  return d;
}

// ---------------------------------------------------------------- tensor maps (host, once)
// 2-D bf16 row-major tensor [outer, inner] (inner contiguous), box [box_outer, box_inner],
// 128-byte swizzle. box_inner * 2 must be <= 128 for SWIZZLE_128B (it is exactly 128 here).
inline CUtensorMap tmap_bf16_2d(const void* base, uint64_t inner, uint64_t outer, uint32_t box_inner,
                               uint32_t box_outer) {
  CUtensorMap m;
  std::memset(&m, 0, sizeof(m));
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {inner * sizeof(bf16)};  // bytes, dims 1..rank-1
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t estr[2] = {1, 1};
  if (box_inner * sizeof(bf16) > 128 || box_outer > 256 || (strides[0] % 16) != 0 ||
      (reinterpret_cast<uintptr_t>(base) % 16) != 0) {
    std::fprintf(stderr, "tmap_bf16_2d: unsupported box/stride/alignment\n");
    std::exit(3);
  }
  CKD(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                             estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return m;
}

// ---------------------------------------------------------------- problem
struct Shape {
  std::string name;  // "a", "b", ...
  std::string what;  // human description
  int E, N, K;
  int T, topk;       // for the record only (0 when not a model shape)
  std::vector<int> counts;  // rows per expert (unpadded)
};

struct Problem {
  Shape s;
  int BM = 0;
  long long M_total = 0;  // padded rows
  int m_tiles = 0;
  long long useful_rows = 0;
  int experts_touched = 0;
  std::vector<int> tile_expert_h;
  std::vector<float> scale_h;
  std::vector<int> tile_rows_h;
  int act = 0;            // gated.cuh activation; 0 = plain GEMM
  int N_out = 0;          // columns of the output: N, or N / 2 = I when gated
  bf16* A = nullptr;      // [M_total, K]
  bf16* B = nullptr;      // [E*N, K]
  bf16* D = nullptr;      // [M_total, N] allocated (cuBLAS dense writes N columns); the kernel writes N_out
  float* scale = nullptr; // [M_total]  routing weight; 0 on padding rows
  int* tile_expert = nullptr;  // [m_tiles]
  int* tile_rows = nullptr;    // [m_tiles]  routed (non-padding) rows of each m-tile
  float* ref = nullptr;   // [M_total, N_out]
  float* pre = nullptr;   // gated only: [M_total, N] plain GEMM (gate cols [0, I), up cols [I, 2I))
  double flops_useful() const { return 2.0 * (double)useful_rows * s.N * s.K; }
  double flops_padded() const { return 2.0 * (double)M_total * s.N * s.K; }
  double bytes_min() const {  // each input read once, output written once
    return (double)M_total * s.K * 2 + (double)experts_touched * s.N * s.K * 2 + (double)M_total * N_out * 2 +
           (double)M_total * 4 + (double)m_tiles * 4;
  }
};

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Uniform in [-1, 1), rounded to bf16.
__global__ void fill_bf16_kernel(bf16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint64_t r = splitmix64(seed ^ (i * 0xD1B54A32D192ED03ull));
    const float u = (float)(r >> 40) * (1.0f / 16777216.0f);  // [0,1)
    p[i] = __float2bfloat16(2.0f * u - 1.0f);
  }
}
inline void fill_bf16(bf16* p, size_t n, uint64_t seed) {
  fill_bf16_kernel<<<2048, 256>>>(p, n, seed);
  CK(cudaGetLastError());
}

// Reference: one thread per output, fp32 accumulate, routing-weight scale, 64-bit offsets.
__global__ void ref_kernel(const bf16* __restrict__ A, const bf16* __restrict__ B, const float* __restrict__ scale,
                           const int* __restrict__ tile_expert, float* __restrict__ ref, long long M_total, int N,
                           int K, int BM) {
  const int n = blockIdx.x * 32 + threadIdx.x;
  const long long m = (long long)blockIdx.y * 8 + threadIdx.y;
  if (m >= M_total || n >= N) return;
  const int e = tile_expert[m / BM];
  const uint4* a = reinterpret_cast<const uint4*>(A + (size_t)m * K);
  const uint4* b = reinterpret_cast<const uint4*>(B + ((size_t)e * N + n) * K);
  float acc = 0.f;
  for (int k8 = 0; k8 < K / 8; ++k8) {
    const uint4 va = __ldg(a + k8), vb = __ldg(b + k8);
    const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&va);
    const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&vb);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 fa = __bfloat1622float2(pa[j]), fb = __bfloat1622float2(pb[j]);
      acc = fmaf(fa.x, fb.x, acc);
      acc = fmaf(fa.y, fb.y, acc);
    }
  }
  ref[(size_t)m * N + n] = acc * scale[m];
}

// Gated reference: ref[m, n] = act(pre[m, n], pre[m, I + n]) in fp32, 0 on padding rows.
__global__ void gated_ref_kernel(const float* __restrict__ pre, const float* __restrict__ mask, float* __restrict__ ref,
                                 long long M_total, int I, int act) {
  const size_t n_out = (size_t)M_total * I;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_out; i += (size_t)gridDim.x * blockDim.x) {
    const size_t m = i / I, n = i % I;
    const float* row = pre + m * 2 * I;
    ref[i] = mask[m] != 0.f ? gated::gated_act_ref(act, row[n], row[I + n]) : 0.f;
  }
}

struct CmpStats {
  double err2, ref2;
  unsigned int maxabs_bits;  // non-negative float bits order as unsigned ints
  unsigned long long nan, unwritten;
  unsigned long long first_bad;
};
__global__ void compare_kernel(const bf16* __restrict__ D, const float* __restrict__ ref, size_t n, CmpStats* st) {
  double e2 = 0, r2 = 0;
  float mx = 0.f;
  unsigned long long nn = 0, nu = 0, first = ~0ull;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const unsigned short bits = __bfloat16_as_ushort(D[i]);
    const float r = ref[i];
    if (bits == 0xFFFFu) {  // poison survived: never written
      ++nu;
      first = min(first, (unsigned long long)i);
      continue;
    }
    const float d = __bfloat162float(D[i]);
    if (isnan(d) || isinf(d)) {
      ++nn;
      first = min(first, (unsigned long long)i);
      continue;
    }
    const double df = (double)d - (double)r;
    e2 += df * df;
    r2 += (double)r * r;
    mx = fmaxf(mx, fabsf(d - r));
  }
  // warp reduce, then one atomic per warp (fine for a check)
  for (int o = 16; o > 0; o >>= 1) {
    e2 += __shfl_down_sync(0xffffffffu, e2, o);
    r2 += __shfl_down_sync(0xffffffffu, r2, o);
    mx = fmaxf(mx, __shfl_down_sync(0xffffffffu, mx, o));
    nn += __shfl_down_sync(0xffffffffu, nn, o);
    nu += __shfl_down_sync(0xffffffffu, nu, o);
    first = min(first, __shfl_down_sync(0xffffffffu, first, o));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&st->err2, e2);
    atomicAdd(&st->ref2, r2);
    atomicMax(&st->maxabs_bits, __float_as_uint(mx));
    atomicAdd(&st->nan, nn);
    atomicAdd(&st->unwritten, nu);
    atomicMin(&st->first_bad, first);
  }
}

// Streaming read: every 16-B word once; the dummy store keeps the loads alive.
__global__ void stream_read_kernel(const uint4* __restrict__ p, size_t n, unsigned int* sink) {
  unsigned int x = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9E3779B9u) sink[0] = x;
}

// ---------------------------------------------------------------- segments
inline std::vector<int> lognormal_counts(int E, long long total, std::mt19937_64& rng, double sigma) {
  std::normal_distribution<double> g(0.0, sigma);
  std::vector<double> w(E);
  double sw = 0;
  for (auto& x : w) sw += (x = std::exp(g(rng)));
  std::vector<int> c(E);
  long long acc = 0;
  for (int e = 0; e < E; ++e) acc += (c[e] = (int)std::floor(w[e] / sw * (double)total));
  for (long long r = total - acc, e = 0; r > 0; --r, e = (e + 1) % E) c[e]++;
  return c;
}

inline void build_problem(Problem& p, const Shape& s, int BM, uint64_t seed, int act = 0) {
  p = Problem{};
  p.s = s;
  p.BM = BM;
  p.act = act;
  p.N_out = act ? s.N / 2 : s.N;
  std::mt19937_64 rng(seed ^ 0x5EEDull);
  std::uniform_real_distribution<float> uw(0.1f, 1.0f);
  for (int e = 0; e < s.E; ++e) {
    const int c = s.counts[e];
    if (c == 0) continue;
    p.experts_touched++;
    const int tiles = (c + BM - 1) / BM;
    for (int t = 0; t < tiles; ++t) {
      p.tile_expert_h.push_back(e);
      p.tile_rows_h.push_back(std::min(BM, c - t * BM));
    }
    for (int r = 0; r < tiles * BM; ++r) p.scale_h.push_back(r < c ? (act ? 1.0f : uw(rng)) : 0.0f);
    p.useful_rows += c;
  }
  p.m_tiles = (int)p.tile_expert_h.size();
  p.M_total = (long long)p.m_tiles * BM;
  const size_t a_n = (size_t)p.M_total * s.K, b_n = (size_t)s.E * s.N * s.K, d_n = (size_t)p.M_total * s.N;
  const size_t r_n = (size_t)p.M_total * p.N_out;
  CK(cudaMalloc(&p.A, a_n * sizeof(bf16)));
  CK(cudaMalloc(&p.B, b_n * sizeof(bf16)));
  CK(cudaMalloc(&p.D, d_n * sizeof(bf16)));
  CK(cudaMalloc(&p.ref, r_n * sizeof(float)));
  if (act) CK(cudaMalloc(&p.pre, d_n * sizeof(float)));
  CK(cudaMalloc(&p.tile_rows, (size_t)p.m_tiles * sizeof(int)));
  CK(cudaMemcpy(p.tile_rows, p.tile_rows_h.data(), p.tile_rows_h.size() * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&p.scale, (size_t)p.M_total * sizeof(float)));
  CK(cudaMalloc(&p.tile_expert, (size_t)p.m_tiles * sizeof(int)));
  fill_bf16(p.A, a_n, seed * 3 + 1);  // padding rows of A are random too (not zeros)
  fill_bf16(p.B, b_n, seed * 3 + 2);
  CK(cudaMemcpy(p.scale, p.scale_h.data(), p.scale_h.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(p.tile_expert, p.tile_expert_h.data(), p.tile_expert_h.size() * sizeof(int),
                cudaMemcpyHostToDevice));
  dim3 grid((unsigned)((s.N + 31) / 32), (unsigned)((p.M_total + 7) / 8));
  ref_kernel<<<grid, dim3(32, 8)>>>(p.A, p.B, p.scale, p.tile_expert, act ? p.pre : p.ref, p.M_total, s.N, s.K, BM);
  CK(cudaGetLastError());
  if (act) {
    gated_ref_kernel<<<2048, 256>>>(p.pre, p.scale, p.ref, p.M_total, p.N_out, act);
    CK(cudaGetLastError());
  }
  CK(cudaDeviceSynchronize());
}
inline void free_problem(Problem& p) {
  cudaFree(p.A);
  cudaFree(p.B);
  cudaFree(p.D);
  cudaFree(p.ref);
  cudaFree(p.scale);
  cudaFree(p.tile_expert);
  cudaFree(p.tile_rows);
  cudaFree(p.pre);
  p.A = p.B = p.D = nullptr;
  p.ref = p.scale = p.pre = nullptr;
  p.tile_expert = p.tile_rows = nullptr;
}

inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Gated mode: each sample checks the gate and up dot products against `pre` (same measure as
// below) and, separately, the activation kernel: ref vs the host's gated_act_ref of the same
// two `pre` values (so fp32 accumulation error is not mistaken for an activation error);
// |dev| / (1 + |h|) must stay < 1e-4, else the returned deviation is 1: BAD REFERENCE.
inline double spot_check_gated(const Problem& p, int samples, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0xC0FFEEull);
  const int K = p.s.K, N = p.s.N, I = p.N_out;
  std::vector<uint16_t> arow(K), brow(K);
  double worst = 0;
  for (int i = 0; i < samples; ++i) {
    const long long m = (long long)(rng() % (unsigned long long)p.M_total);
    const int n = (int)(rng() % (unsigned)I);
    const int e = p.tile_expert_h[m / p.BM];
    CK(cudaMemcpy(arow.data(), p.A + (size_t)m * K, K * 2, cudaMemcpyDeviceToHost));
    float pre_v[2];
    for (int half = 0; half < 2; ++half) {
      const int col = half * I + n;
      CK(cudaMemcpy(brow.data(), p.B + ((size_t)e * N + col) * K, K * 2, cudaMemcpyDeviceToHost));
      double acc = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double t = (double)bf16_bits_to_float(arow[k]) * (double)bf16_bits_to_float(brow[k]);
        acc += t;
        mag += std::fabs(t);
      }
      acc *= p.scale_h[m];
      mag *= p.scale_h[m];
      float g;
      CK(cudaMemcpy(&g, p.pre + (size_t)m * N + col, 4, cudaMemcpyDeviceToHost));
      worst = std::max(worst, std::fabs((double)g - acc) / (mag > 0 ? mag : 1.0));
      pre_v[half] = g;
    }
    const float want = p.scale_h[m] != 0.f ? gated::gated_act_ref(p.act, pre_v[0], pre_v[1]) : 0.f;
    float got;
    CK(cudaMemcpy(&got, p.ref + (size_t)m * I + n, 4, cudaMemcpyDeviceToHost));
    if (!(std::fabs((double)got - want) / (1.0 + std::fabs((double)want)) < 1e-4)) {
      std::printf("  gated reference: row %lld col %d: ref %.6g, CPU %.6g\n", m, n, (double)got, (double)want);
      worst = 1.0;
    }
  }
  return worst;
}

// CPU double check of `samples` reference elements (validates the GPU reference itself:
// expert mapping, scale, accumulation). Returns the max relative deviation.
inline double spot_check_ref(const Problem& p, int samples, uint64_t seed) {
  if (p.act) return spot_check_gated(p, samples, seed);
  std::mt19937_64 rng(seed ^ 0xC0FFEEull);
  const int K = p.s.K, N = p.s.N;
  std::vector<uint16_t> arow(K), brow(K);
  double worst = 0;
  for (int i = 0; i < samples; ++i) {
    const long long m = (long long)(rng() % (unsigned long long)p.M_total);
    const int n = (int)(rng() % (unsigned)N);
    const int e = p.tile_expert_h[m / p.BM];
    CK(cudaMemcpy(arow.data(), p.A + (size_t)m * K, K * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(brow.data(), p.B + ((size_t)e * N + n) * K, K * 2, cudaMemcpyDeviceToHost));
    double acc = 0, mag = 0;
    for (int k = 0; k < K; ++k) {
      const double t = (double)bf16_bits_to_float(arow[k]) * (double)bf16_bits_to_float(brow[k]);
      acc += t;
      mag += std::fabs(t);
    }
    acc *= p.scale_h[m];
    mag *= p.scale_h[m];
    float g;
    CK(cudaMemcpy(&g, p.ref + (size_t)m * N + n, 4, cudaMemcpyDeviceToHost));
    const double dev = std::fabs((double)g - acc) / (mag > 0 ? mag : 1.0);
    worst = std::max(worst, dev);
  }
  return worst;
}

struct CheckResult {
  double rel = 0;
  float maxabs = 0;
  unsigned long long nan = 0, unwritten = 0, first_bad = ~0ull;
  bool ok = false;
};
inline CheckResult check_output(const Problem& p) {
  CmpStats* st;
  CK(cudaMalloc(&st, sizeof(CmpStats)));
  CmpStats z{};
  z.first_bad = ~0ull;
  CK(cudaMemcpy(st, &z, sizeof(z), cudaMemcpyHostToDevice));
  compare_kernel<<<1024, 256>>>(p.D, p.ref, (size_t)p.M_total * p.N_out, st);
  CK(cudaGetLastError());
  CmpStats r;
  CK(cudaMemcpy(&r, st, sizeof(r), cudaMemcpyDeviceToHost));
  CK(cudaFree(st));
  CheckResult c;
  c.rel = r.ref2 > 0 ? std::sqrt(r.err2 / r.ref2) : INFINITY;
  std::memcpy(&c.maxabs, &r.maxabs_bits, 4);
  c.nan = r.nan;
  c.unwritten = r.unwritten;
  c.first_bad = r.first_bad;
  c.ok = (c.nan == 0 && c.unwritten == 0 && c.rel < 1e-2 && std::isfinite(c.rel));
  return c;
}
inline void print_check(const Problem& p, const char* when, const CheckResult& c) {
  std::printf("  check %-6s rel_err %.3e  max_abs %.3e  unwritten %llu  nan/inf %llu  -> %s\n", when, c.rel,
              (double)c.maxabs, c.unwritten, c.nan, c.ok ? "PASS" : "FAIL");
  if (c.first_bad != ~0ull) {
    const long long m = (long long)(c.first_bad / p.N_out);
    const int n = (int)(c.first_bad % p.N_out);
    std::printf("    first bad element: row %lld (m-tile %lld, expert %d), col %d\n", m, m / p.BM,
                p.tile_expert_h[m / p.BM], n);
  }
}

// ---------------------------------------------------------------- timing
struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
  int runs = 0;
  bool ok = true;
};
// `launch` is timed alone; `before` (poison, L2 flush) runs outside the events.
template <class Launch, class Before>
Timing time_it(Launch&& launch, Before&& before, int warmup, int runs, const char* what) {
  Timing t;
  std::vector<cudaEvent_t> ev(2 * runs);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < warmup; ++i) {
    before(i);
    launch();
  }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  if (!watchdog_check(what)) {
    t.ok = false;
    for (auto& e : ev) cudaEventDestroy(e);
    return t;
  }
  for (int i = 0; i < runs; ++i) {
    before(i + 1);
    CK(cudaEventRecord(ev[2 * i]));
    launch();
    CK(cudaEventRecord(ev[2 * i + 1]));
  }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  if (!watchdog_check(what)) t.ok = false;
  std::vector<double> us(runs);
  for (int i = 0; i < runs; ++i) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    us[i] = ms * 1000.0;
  }
  std::sort(us.begin(), us.end());
  t.runs = runs;
  t.min_us = us.front();
  t.max_us = us.back();
  t.median_us = (runs % 2) ? us[runs / 2] : 0.5 * (us[runs / 2 - 1] + us[runs / 2]);
  for (auto& e : ev) CK(cudaEventDestroy(e));
  return t;
}

// cuBLAS bf16 GemmEx, f32 compute: row-major D[M,N] = A[M,K] * B[N,K]^T, i.e. column-major
// D^T[N,M] = op_T(B as KxN, ld K) * op_N(A as KxM, ld K)  ("TN", cuBLAS's fast case).
inline void cublas_tn(cublasHandle_t hd, const bf16* A, const bf16* B, bf16* D, long long M, int N, int K) {
  const float alpha = 1.f, beta = 0.f;
  CKB(cublasGemmEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, N, (int)M, K, &alpha, B, CUDA_R_16BF, K, A, CUDA_R_16BF, K, &beta,
                   D, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ---------------------------------------------------------------- shapes
inline std::vector<Shape> shapes(uint64_t seed) {
  std::vector<Shape> v;
  std::mt19937_64 rng(seed);
  const int T = 36308, k = 4;
  const std::vector<int> big = lognormal_counts(128, (long long)T * k, rng, 0.6);
  v.push_back({"c", "small uneven: empty experts, 1-row segments, K < stages", 8, 512, 192, 0, 0,
               {0, 1, 300, 0, 1, 129, 0, 77}});
  {
    std::vector<int> c = lognormal_counts(16, 5000, rng, 1.0);
    c[3] = 0;
    c[7] = 0;
    c[5] = 1;
    c[11] = 1;
    v.push_back({"d", "mid uneven: >1 tile per CTA, K/64 = 5 (stage phase wraps mid-tile)", 16, 1024, 320, 0, 0, c});
  }
  v.push_back({"a", "Mistral-Small-4 GEMM2-like (E=128, N=H=4096, K=I=2048, T=36308, k=4)", 128, 4096, 2048, T, k,
               big});
  v.push_back({"b", "Mistral-Small-4 GEMM1-like (E=128, N=2I=4096, K=H=4096, T=36308, k=4)", 128, 4096, 4096, T, k,
               big});
  return v;
}

// ---------------------------------------------------------------- the driver
struct Row {
  std::string shape, what;
  long long useful_rows, M_total;
  int E, N, K, T, experts;
  double us = 0, min_us = 0, max_us = 0, floor_us = 0, tflops = 0, gbps = 0, flops = 0, bytes = 0;
  double cublas_dense_us = 0, cublas_dense_tflops = 0;
  double rel1 = 0, rel2 = 0;
  float maxabs = 0;
  bool passed = false, timed = false;
  std::string floor_bound;
  int N_out = 0;
};

struct Args {
  uint64_t seed = 0;
  int runs = 15;
  std::string json, commit = "unknown", only;
};
inline Args parse(int argc, char** argv) {
  Args a;
  a.seed = (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (s == "--seed") a.seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (s == "--runs") a.runs = std::max(10, std::atoi(next().c_str()));
    else if (s == "--json") a.json = next();
    else if (s == "--commit") a.commit = next();
    else if (s == "--only") a.only = next();
  }
  return a;
}

template <class V>
int run_main(int argc, char** argv) {
  Args args = parse(argc, argv);
  constexpr int act = ActOf<V>::value;
  if (act && !args.json.empty()) {  // one record per activation: x.json -> x-<act>.json
    const size_t dot = args.json.rfind(".json");
    args.json = args.json.substr(0, dot) + "-" + gated::act_name(act) + (dot == std::string::npos ? "" : ".json");
  }
  const DevInfo dev = dev_info();
  std::printf("== %s on %s (sm_%d%d, %d SMs, L2 %zu MB, smem opt-in %zu B, driver %d), seed %llu\n", V::kName,
              dev.name.c_str(), dev.prop.major, dev.prop.minor, dev.sms, dev.l2 >> 20, dev.smem_optin, dev.driver,
              (unsigned long long)args.seed);
  if (dev.prop.major != 9 || dev.prop.minor != 0) {
    std::printf("FAIL: this binary is sm_90a only; the device is sm_%d%d\n", dev.prop.major, dev.prop.minor);
    return 2;
  }
  if (V::smem_bytes() > dev.smem_optin) {
    std::printf("FAIL: %s needs %zu B of shared memory; this device allows %zu B per block\n", V::kName,
                V::smem_bytes(), dev.smem_optin);
    return 2;
  }
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, V::func()));
  std::printf("  kernel: %d regs/thread at launch (cap), %zu B local (stack/spill), %zu B static smem, %zu B dynamic "
              "smem, max %d threads/block\n",
              fa.numRegs, (size_t)fa.localSizeBytes, (size_t)fa.sharedSizeBytes, V::smem_bytes(),
              fa.maxThreadsPerBlock);

  cublasHandle_t hd;
  CKB(cublasCreate(&hd));
  void* flush = nullptr;
  const size_t flush_bytes = 2 * dev.l2;
  CK(cudaMalloc(&flush, flush_bytes));

  // Ceilings, same process: cuBLAS 8192^3 bf16 and a streaming read.
  double ceil_tflops = 0, read_gbps = 0;
  {
    const int S = 8192;
    bf16 *a, *b, *c;
    CK(cudaMalloc(&a, (size_t)S * S * 2));
    CK(cudaMalloc(&b, (size_t)S * S * 2));
    CK(cudaMalloc(&c, (size_t)S * S * 2));
    fill_bf16(a, (size_t)S * S, args.seed + 11);
    fill_bf16(b, (size_t)S * S, args.seed + 12);
    Timing t = time_it([&] { cublas_tn(hd, a, b, c, S, S, S); },
                       [&](int i) { CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes)); }, 3, 20, "cublas 8192^3");
    ceil_tflops = 2.0 * S * S * (double)S / (t.median_us * 1e-6) / 1e12;
    cudaFree(c);
    // 4 GiB streaming read over a and b's bytes region reused: allocate one big buffer
    cudaFree(a);
    cudaFree(b);
    const size_t rb = (size_t)4 << 30;
    void* big;
    unsigned int* sink;
    CK(cudaMalloc(&big, rb));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(big, 1, rb));
    Timing tr = time_it([&] { stream_read_kernel<<<dev.sms * 8, 512>>>((const uint4*)big, rb / 16, sink); },
                        [&](int i) { CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes)); }, 2, 10, "stream read");
    read_gbps = (double)rb / (tr.median_us * 1e-6) / 1e9;
    cudaFree(big);
    cudaFree(sink);
    std::printf("  ceilings (this run): cuBLAS bf16 8192^3 %.1f TFLOP/s, streaming read %.0f GB/s\n", ceil_tflops,
                read_gbps);
  }

  std::vector<Row> rows;
  int failed = 0;
  for (const Shape& s : shapes(args.seed)) {
    if (!args.only.empty() && args.only.find(s.name) == std::string::npos) continue;
    Row row;
    row.shape = s.name;
    row.what = s.what;
    if (act && (s.name == "a" || (s.N / 2) % gated::kHalfTile != 0)) {
      std::printf("-- shape %s: not a GEMM1 shape for the gated epilogue (N = 2I, I %% 128 == 0), skipped\n",
                  s.name.c_str());
      continue;
    }
    if (s.N % V::kBN != 0 || s.K % V::kBK != 0) {
      std::printf("-- shape %s: N %% %d or K %% %d != 0, skipped\n", s.name.c_str(), V::kBN, V::kBK);
      continue;
    }
    Problem p;
    build_problem(p, s, V::kBM, args.seed + std::hash<std::string>{}(s.name), act);
    int cmin = 1 << 30, cmax = 0, empty = 0, ones = 0;
    for (int c : s.counts) {
      cmin = std::min(cmin, c);
      cmax = std::max(cmax, c);
      empty += c == 0;
      ones += c == 1;
    }
    std::printf("-- shape %s: %s\n   E=%d N=%d K=%d rows %lld (padded %lld, %d m-tiles of %d), segments %d..%d, "
                "%d empty, %d of 1 row, tiles %lld\n",
                s.name.c_str(), s.what.c_str(), s.E, s.N, s.K, p.useful_rows, p.M_total, p.m_tiles, V::kBM, cmin,
                cmax, empty, ones, (long long)p.m_tiles * (s.N / V::kBN));
    row.useful_rows = p.useful_rows;
    row.M_total = p.M_total;
    row.E = s.E;
    row.N = s.N;
    row.K = s.K;
    row.N_out = p.N_out;
    row.T = s.T;
    row.experts = p.experts_touched;
    const double spot = spot_check_ref(p, 64, args.seed);
    std::printf("  reference spot check vs CPU double (64 elements): max |dev|/sum|terms| = %.2e %s\n", spot,
                spot < 1e-5 ? "ok" : "BAD REFERENCE");
    const size_t d_bytes = (size_t)p.M_total * p.N_out * sizeof(bf16);

    V v;
    v.setup(p, dev);
    // First run: poisoned, checked.
    CK(cudaMemset(p.D, 0xFF, d_bytes));
    v.launch(p, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    bool ok = watchdog_check("first run") && spot < 1e-5;
    CheckResult c1 = check_output(p);
    print_check(p, "first", c1);
    row.rel1 = c1.rel;
    row.maxabs = c1.maxabs;
    ok = ok && c1.ok;
    if (ok) {
      Timing t = time_it([&] { v.launch(p, 0); },
                         [&](int i) {
                           CK(cudaMemsetAsync(p.D, 0xFF, d_bytes));
                           CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
                         },
                         2, args.runs, "timed runs");
      ok = ok && t.ok;
      CheckResult c2 = check_output(p);  // the last timed run's output (poisoned before it)
      print_check(p, "last", c2);
      row.rel2 = c2.rel;
      row.maxabs = std::max(row.maxabs, c2.maxabs);
      ok = ok && c2.ok;
      row.timed = t.ok;
      row.us = t.median_us;
      row.min_us = t.min_us;
      row.max_us = t.max_us;
      // cuBLAS at the dense M_total x N x K shape (A, expert 0's B, D as output)
      Timing tc = time_it([&] { cublas_tn(hd, p.A, p.B, p.D, p.M_total, s.N, s.K); },
                          [&](int i) { CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes)); }, 2, args.runs,
                          "cublas dense");
      row.cublas_dense_us = tc.median_us;
      row.cublas_dense_tflops = p.flops_padded() / (tc.median_us * 1e-6) / 1e12;
    }
    row.flops = p.flops_useful();
    row.bytes = p.bytes_min();
    const double t_flop = row.flops / (ceil_tflops * 1e12) * 1e6, t_byte = row.bytes / (read_gbps * 1e9) * 1e6;
    row.floor_us = std::max(t_flop, t_byte);
    row.floor_bound = t_flop >= t_byte ? "compute" : "memory";
    if (row.us > 0) {
      row.tflops = row.flops / (row.us * 1e-6) / 1e12;
      row.gbps = row.bytes / (row.us * 1e-6) / 1e9;
    }
    row.passed = ok;
    failed += !ok;
    std::printf("  %s: median %.1f us (min %.1f max %.1f), %.1f TFLOP/s useful, floor %.1f us (%s) -> ratio %.2f; "
                "cuBLAS dense %.1f us = %.1f TFLOP/s\n",
                ok ? "PASS" : "FAIL", row.us, row.min_us, row.max_us, row.tflops, row.floor_us,
                row.floor_bound.c_str(), row.us > 0 ? row.us / row.floor_us : 0.0, row.cublas_dense_us,
                row.cublas_dense_tflops);
    rows.push_back(row);
    free_problem(p);
  }

  // ---- table (last thing printed)
  std::printf("\n%-14s %-2s %7s %6s %5s %9s %8s %8s %9s %6s %8s %6s %9s %s\n", "version", "sh", "rows", "N", "K",
              "us", "TFLOP/s", "floor_us", "x_floor", "%cuB8k", "cuBdense", "%dense", "rel_err", "status");
  for (const Row& r : rows)
    std::printf("%-14s %-2s %7lld %6d %5d %9.1f %8.1f %8.1f %9.2f %6.1f %8.1f %6.1f %9.2e %s\n", V::kName,
                r.shape.c_str(), r.useful_rows, r.N, r.K, r.us, r.tflops, r.floor_us,
                r.us > 0 ? r.us / r.floor_us : 0.0, 100.0 * r.tflops / ceil_tflops, r.cublas_dense_tflops,
                r.cublas_dense_tflops > 0 ? 100.0 * r.tflops / r.cublas_dense_tflops : 0.0, std::max(r.rel1, r.rel2),
                r.passed ? "PASS" : "FAIL");
  std::printf("ceilings: cuBLAS 8192^3 %.1f TFLOP/s, read %.0f GB/s; kernel %d regs (launch cap), %zu B local, "
              "%zu B smem\n",
              ceil_tflops, read_gbps, fa.numRegs, (size_t)fa.localSizeBytes, V::smem_bytes());

  if (!args.json.empty()) {
    FILE* f = std::fopen(args.json.c_str(), "w");
    if (f) {
      char date[64];
      std::time_t now = std::time(nullptr);
      std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
      std::fprintf(f,
                   "{\"kind\": \"bench\", \"version\": \"%s\", \"commit\": \"%s\", \"date\": \"%s\", \"seed\": %llu,\n"
                   " \"device\": {\"name\": \"%s\", \"target\": \"sm_90a\", \"driver\": \"%d.%d\", \"nvrtc\": "
                   "\"n/a (nvcc)\", \"sm_count\": %d},\n"
                   " \"ceilings\": {\"read_GBps\": %.1f, \"bf16_TFLOPs\": %.2f, \"gemm\": \"cuBLAS GemmEx bf16, f32 "
                   "compute, 8192^3, TN, median of 20\"},\n"
                   " \"kernel\": {\"regs\": %d, \"local_bytes\": %zu, \"smem_bytes\": %zu},\n \"rows\": [\n",
                   V::kName, args.commit.c_str(), date, (unsigned long long)args.seed, dev.name.c_str(),
                   dev.driver / 1000, (dev.driver % 1000) / 10, dev.sms, read_gbps, ceil_tflops, fa.numRegs,
                   (size_t)fa.localSizeBytes, V::smem_bytes());
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::fprintf(f,
                     "  {\"model\": \"%s\", \"case\": \"%s\", \"backend\": \"sm90-dev-%s\", \"weights\": \"bf16\", "
                     "\"activation\": \"%s\", \"N_out\": %d, \"T\": %d, \"E\": %d, \"N\": %d, \"K\": %d, \"rows\": %lld, \"padded_rows\": %lld, "
                     "\"experts_touched\": %d, \"us\": %.2f, \"min_us\": %.2f, \"max_us\": %.2f, \"runs\": %d, "
                     "\"floor_us\": %.2f, \"floor_bound\": \"%s\", \"ratio\": %.3f, \"TFLOPs\": %.2f, \"GBps\": %.1f, "
                     "\"flops\": %.0f, \"bytes\": %.0f, \"cublas_dense_us\": %.2f, \"cublas_dense_TFLOPs\": %.2f, "
                     "\"rel_err\": %.3e, \"max_abs_err\": %.3e, \"passed\": %s}%s\n",
                     r.T ? "mistral-small-4" : "synthetic", r.shape.c_str(), V::kName, gated::act_name(act), r.N_out, r.T, r.E, r.N, r.K,
                     r.useful_rows, r.M_total, r.experts, r.us, r.min_us, r.max_us, args.runs, r.floor_us,
                     r.floor_bound.c_str(), r.us > 0 ? r.us / r.floor_us : 0.0, r.tflops, r.gbps, r.flops, r.bytes,
                     r.cublas_dense_us, r.cublas_dense_tflops, std::max(r.rel1, r.rel2), (double)r.maxabs,
                     r.passed ? "true" : "false", i + 1 < rows.size() ? "," : "");
      }
      std::fprintf(f, " ],\n \"passed\": %d, \"failed\": %d}\n", (int)rows.size() - failed, failed);
      std::fclose(f);
    }
  }
  cublasDestroy(hd);
  cudaFree(flush);
  return failed ? 1 : 0;
}

}  // namespace h
