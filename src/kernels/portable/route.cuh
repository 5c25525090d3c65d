// Portable routing: router_logits [T, E] -> topk_ids [T, k] i32, topk_weights [T, k] f32.
//
// One warp per token; lane L holds experts L, L+32, L+64, ... (coalesced loads).
// Semantics are those of src/reference/routing.cpp, computed in double like it:
//  * Softmax kinds rank experts by their logit (key = logit), weights are softmax p
//    (NaN logits are missing: p = NaN, excluded from the normalization; +-Inf maxima
//    share the mass equally). Group scores (SoftmaxGrouped) sum p of the group's best
//    GROUP_TOPN experts, best first.
//  * SigmoidBiasGrouped: s = sigmoid(l) (overflow-free form), key b = s + bias; group
//    scores sum b; weights are s.
//  * Order: higher key first, equal keys -> lower id, NaN below everything (two NaN tie
//    -> lower id). Implemented as a 64-bit order-preserving key (see order_key) compared
//    together with the id.
//  * Renormalization divides by the sum of the k weights summed in selection order
//    (j = 0..k-1, exactly as the reference does), then SCALE multiplies.
//
// Defines: E (routed experts, <= 1024), TOPK (<= 32), ROUTING (0 softmax, 1 softmax
// grouped, 2 sigmoid bias grouped), N_GROUPS (<= 64), TOPK_GROUPS, GROUP_TOPN,
// RENORM (0/1), SCALE (double literal), LOGITS_BF16 (0/1).
#pragma once
#include "common/convert.cuh"
#include "common/grid_dependency.cuh"
#include "common/types.cuh"

#ifndef E
#error "route.cuh needs -DE=<experts>"
#endif
#if E > 1024 || TOPK > 32 || TOPK > E || N_GROUPS > 64 || (E % N_GROUPS) != 0
#error "route.cuh: unsupported E / TOPK / N_GROUPS"
#endif

#define ROUTE_NPL ((E + 31) / 32)       // experts per lane
#define ROUTE_GROUPED (ROUTING != 0 && N_GROUPS > 1)
#define ROUTE_WARPS 4

namespace route {

// Order-preserving map double -> u64 for "prefer": larger is better.
// 0 = not a candidate, 1 = NaN (below every number), numbers >= 2^52 - 1 + ... > 1.
// -0.0 is canonicalized to +0.0 (they compare equal in the reference).
__device__ __forceinline__ u64 order_key(double d) {
  if (d != d) return 1ull;
  if (d == 0.0) d = 0.0;
  const u64 u = (u64)__double_as_longlong(d);
  return (u >> 63) ? ~u : (u | 0x8000000000000000ull);  // -inf -> 0x000F..F > 1
}

// (key, id) "a preferred over b": larger key, ties to the lower id.
__device__ __forceinline__ bool better(u64 ka, int ia, u64 kb, int ib) { return ka > kb || (ka == kb && ia < ib); }

// Warp-wide argmax of (key, id) carrying a double payload. Every lane gets the winner.
__device__ __forceinline__ void warp_argmax(u64& key, int& id, double& val) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const u64 ok = __shfl_xor_sync(0xffffffffu, key, off);
    const int oi = __shfl_xor_sync(0xffffffffu, id, off);
    const double ov = __shfl_xor_sync(0xffffffffu, val, off);
    if (better(ok, oi, key, id)) {
      key = ok;
      id = oi;
      val = ov;
    }
  }
}

__device__ __forceinline__ double sigmoid(double v) {
  if (v >= 0.0) return 1.0 / (1.0 + exp(-v));
  const double e = exp(v);
  return e / (1.0 + e);
}

__device__ __forceinline__ float load_logit(const void* p, i64 i) {
#if LOGITS_BF16
  return bf16_to_f32(((const u16*)p)[i]);
#else
  return ((const float*)p)[i];
#endif
}

// Token t, by the calling warp (all 32 lanes): its TOPK ids and weights into ids_out / w_out.
__device__ __forceinline__ void route_token(const void* __restrict__ logits, i64 t,
                                            const float* __restrict__ correction_bias, int* __restrict__ ids_out,
                                            float* __restrict__ w_out) {
  const int lane = threadIdx.x & 31;
  const i64 base = t * (i64)E;

  float l[ROUTE_NPL];
  double w[ROUTE_NPL];    // combine weight candidate (p or s)
  double kd[ROUTE_NPL];   // selection key as a double (logit, or s + bias)
#pragma unroll
  for (int i = 0; i < ROUTE_NPL; ++i) {
    const int e = lane + 32 * i;
    l[i] = e < E ? load_logit(logits, base + e) : __int_as_float(0x7fc00000);
  }

#if ROUTING == 2
#pragma unroll
  for (int i = 0; i < ROUTE_NPL; ++i) {
    const int e = lane + 32 * i;
    w[i] = sigmoid((double)l[i]);
    kd[i] = w[i] + (correction_bias != nullptr && e < E ? (double)correction_bias[e] : 0.0);
  }
#else
  // Softmax in double. m = largest non-NaN logit.
  bool any = false;
  double m = -__longlong_as_double(0x7ff0000000000000ll);
#pragma unroll
  for (int i = 0; i < ROUTE_NPL; ++i)
    if (l[i] == l[i]) {
      m = any ? fmax(m, (double)l[i]) : (double)l[i];
      any = true;
    }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, off));  // fmax ignores NaN
  const bool any_warp = __any_sync(0xffffffffu, any);
  const bool m_inf = (m == __longlong_as_double(0x7ff0000000000000ll)) || (m == -__longlong_as_double(0x7ff0000000000000ll));
  double ex[ROUTE_NPL];
#pragma unroll
  for (int i = 0; i < ROUTE_NPL; ++i) {
    const bool isnum = l[i] == l[i];
    ex[i] = !isnum ? 0.0 : m_inf ? ((double)l[i] == m ? 1.0 : 0.0) : exp((double)l[i] - m);
  }
  // Sum in ascending expert order (e = 32 i + lane), as the reference does.
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < ROUTE_NPL; ++i)
    for (int src = 0; src < 32; ++src) sum += __shfl_sync(0xffffffffu, ex[i], src);
  const double nan = __longlong_as_double(0x7ff8000000000000ll);
#pragma unroll
  for (int i = 0; i < ROUTE_NPL; ++i) {
    w[i] = (!any_warp || l[i] != l[i]) ? nan : ex[i] / sum;
    kd[i] = (double)l[i];
  }
#endif

  u64 key[ROUTE_NPL];
#pragma unroll
  for (int i = 0; i < ROUTE_NPL; ++i) key[i] = (lane + 32 * i) < E ? order_key(kd[i]) : 0ull;

#if ROUTE_GROUPED
  {
    constexpr int GS = E / N_GROUPS;
    // Group scores: lane g%32 keeps group g's key in gk[g/32].
    u64 gk0 = 0, gk1 = 0;
    for (int g = 0; g < N_GROUPS; ++g) {
      u32 taken = 0;  // bit i: item i of this lane already counted for group g
      double gsum = 0.0;
      for (int n = 0; n < GROUP_TOPN; ++n) {
        u64 bk = 0;
        int bi = 0x7fffffff;
        double bv = 0.0;
#pragma unroll
        for (int i = 0; i < ROUTE_NPL; ++i) {
          const int e = lane + 32 * i;
          const bool cand = e < E && (e / GS) == g && !((taken >> i) & 1u);
#if ROUTING == 1
          const double contrib = w[i];  // SoftmaxGrouped sums p
#else
          const double contrib = kd[i];  // sigmoid sums b
#endif
          if (cand && better(key[i], e, bk, bi)) {
            bk = key[i];
            bi = e;
            bv = contrib;
          }
        }
        warp_argmax(bk, bi, bv);
        gsum += bv;
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
      }
      const u64 k = order_key(gsum);
      if ((g & 31) == lane) {
        if (g < 32) gk0 = k; else gk1 = k;
      }
    }
    // Keep the best TOPK_GROUPS groups.
    u64 kept = 0;
    for (int j = 0; j < TOPK_GROUPS; ++j) {
      u64 bk = 0;
      int bi = 0x7fffffff;
      double dummy = 0.0;
      if (lane < N_GROUPS && !((kept >> lane) & 1ull) && better(gk0, lane, bk, bi)) { bk = gk0; bi = lane; }
      if (lane + 32 < N_GROUPS && !((kept >> (lane + 32)) & 1ull) && better(gk1, lane + 32, bk, bi)) {
        bk = gk1;
        bi = lane + 32;
      }
      warp_argmax(bk, bi, dummy);
      kept |= 1ull << bi;
    }
#pragma unroll
    for (int i = 0; i < ROUTE_NPL; ++i) {
      const int e = lane + 32 * i;
      if (e < E && !((kept >> (e / GS)) & 1ull)) key[i] = 0;  // not a candidate
    }
  }
#endif

  // Top-k among the candidates, best first. Lane j keeps the j-th pick.
  int my_id = 0;
  double my_w = 0.0;
#pragma unroll 1
  for (int j = 0; j < TOPK; ++j) {
    u64 bk = 0;
    int bi = 0x7fffffff;
    double bv = 0.0;
#pragma unroll
    for (int i = 0; i < ROUTE_NPL; ++i) {
      const int e = lane + 32 * i;
      if (key[i] != 0 && better(key[i], e, bk, bi)) {
        bk = key[i];
        bi = e;
        bv = w[i];
      }
    }
    warp_argmax(bk, bi, bv);
    // Retire the pick on its owner lane (compile-time register indices only).
#pragma unroll
    for (int i = 0; i < ROUTE_NPL; ++i)
      if (bi == lane + 32 * i) key[i] = 0;
    if (lane == j) {
      my_id = bi;
      my_w = bv;
    }
  }
  double total = 0.0;  // in selection order, like the reference
  for (int j = 0; j < TOPK; ++j) total += __shfl_sync(0xffffffffu, my_w, j);
  if (lane < TOPK) {
    double v = my_w;
    if (RENORM) v = v / total;
    v *= (double)(SCALE);
    ids_out[t * TOPK + lane] = my_id;
    w_out[t * TOPK + lane] = (float)v;
  }
}

}  // namespace route

// grid.x = ceil(T / 4), block = 128 (4 warps, one token each).
extern "C" __global__ void __launch_bounds__(32 * ROUTE_WARPS)
    moe_route(const void* __restrict__ logits, i64 T, const float* __restrict__ correction_bias,
              int* __restrict__ ids_out, float* __restrict__ w_out) {
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  const i64 t = (i64)blockIdx.x * ROUTE_WARPS + (threadIdx.x >> 5);
  if (t >= T) return;  // warp-uniform
  route::route_token(logits, t, correction_bias, ids_out, w_out);
}
