// Probe: how fast can TMA stream expert weights, by weight layout? (session 7 question)
//
// The decode GEMMs read weights at ~89 % of the streaming-read ceiling at T = 32 and ~76 %
// at T = 1 (ncu, H200). A CTA streams a 128-row weight tile as 128 x 128-byte pieces per
// stage, one piece from each of 128 rows 8 KB apart (row-major [N][K] bf16, K = 4096), so
// every stage touches 128 DRAM pages for 128 bytes each. The question: does a weight layout
// in which each stage's 16 KB is contiguous ("tiled": [N/128][K/64][128][64]) stream closer
// to the ceiling? Everything else is the decode kernel's memory side: persistent CTAs stride
// over (expert, 128-row tile) items, a producer thread fills a ring of 16 KB stages with TMA
// (128B swizzle), a consumer warp only waits and releases. No math: this is the DRAM side.
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -I src/kernels \
//        dev/sm90/probe_weight_stream.cu -lcuda -o /tmp/probe && /tmp/probe
//
// Prints GB/s per (layout, experts, stages, CTAs per SM) next to an LDG streaming read of the
// same bytes (the benchmark's ceiling kernel), each the median of 9 runs with L2 flushed.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/stream_read.cuh"  // moe_stream_read: the benchmark's read-ceiling kernel
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

constexpr int kRows = 128, kCols = 64, kStageBytes = kRows * kCols * 2;  // one bf16 128 x 64 box
constexpr int kK = 4096, kKb = kK / kCols, kN = 4096;                     // GEMM 1 of Mistral-Small-4

// Layout 0: row-major [rows][K], coordinates (kb * 64, row0). Layout 1: tiled, a 3-D map
// (64, 128, tile * kKb + kb), each box one contiguous 16 KB. Layout 2: row-major with the
// 128-row box as two 64-row boxes of two adjacent k-blocks (256 contiguous bytes per row).
template <int STAGES>
__global__ void __launch_bounds__(64) stream_tma(const __grid_constant__ CUtensorMap map, int layout, int items,
                                                 unsigned* sink) {
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned char* smem = raw + ((1024u - (smem_u32(raw) & 1023u)) & 1023u);
  __shared__ alignas(8) u64 full[STAGES], empty[STAGES];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbar_init(smem_u32(&full[s]), 1), mbar_init(smem_u32(&empty[s]), 1);
    fence_mbar_init();
  }
  __syncthreads();
  const int my_items = items > int(blockIdx.x) ? (items - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int steps = my_items * kKb;
  if (warp == 0) {
    if (lane != 0) return;
    for (int i = 0; i < steps; ++i) {
      const int s = i % STAGES, kb = i % kKb, tile = blockIdx.x + (i / kKb) * gridDim.x;
      while (!mbar_try_wait(smem_u32(&empty[s]), ((i / STAGES) & 1) ^ 1)) {
      }
      const unsigned dst = smem_u32(smem + s * kStageBytes), bar = smem_u32(&full[s]);
      mbar_arrive_expect_tx(bar, kStageBytes);
      if (layout == 0) {
        tma_load_2d(dst, &map, kb * kCols, tile * kRows, bar);
      } else if (layout == 1) {
        tma_load_3d(dst, &map, 0, 0, tile * kKb + kb, bar);
      } else {  // two k-blocks of 64 rows: rows tile*128 + (kb&1)*64, k-blocks (kb & ~1), +1
        const int r0 = tile * kRows + (kb & 1) * 64, k0 = (kb & ~1) * kCols;
        tma_load_2d(dst, &map, k0, r0, bar);
        tma_load_2d(dst + kStageBytes / 2, &map, k0 + kCols, r0, bar);
      }
    }
  } else if (lane == 0) {
    unsigned acc = 0;
    for (int i = 0; i < steps; ++i) {
      const int s = i % STAGES;
      while (!mbar_try_wait(smem_u32(&full[s]), (i / STAGES) & 1)) {
      }
      acc ^= reinterpret_cast<const unsigned*>(smem + s * kStageBytes)[i & 63];
      mbar_arrive(smem_u32(&empty[s]));
    }
    if (acc == 0x9E3779B9u) sink[0] = acc;
  }
}

static CUtensorMap make_map(void* base, int layout, unsigned long long rows) {
  CUtensorMap m;
  std::memset(&m, 0, sizeof(m));
  cuuint32_t estr[3] = {1, 1, 1};
  CUresult r;
  if (layout == 1) {
    cuuint64_t dims[3] = {kCols, kRows, rows / kRows * kKb}, strides[2] = {kCols * 2, kStageBytes};
    cuuint32_t box[3] = {kCols, kRows, 1};
    r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box, estr,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  } else {
    cuuint64_t dims[2] = {kK, rows}, strides[1] = {kK * 2};
    cuuint32_t box[2] = {kCols, layout == 0 ? 128u : 64u};
    r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, estr,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  if (r != CUDA_SUCCESS) std::fprintf(stderr, "encode failed %d\n", int(r)), std::exit(2);
  return m;
}

// L2 flush before each run: a memset (leaves dirty lines the timed run writes back) or, when
// g_read_flush, a streaming read of the clean buffer (leaves only clean lines).
static bool g_read_flush = false;
static unsigned* g_sink = nullptr;
static int g_sms = 0;

template <class F>
static double median_us(F&& launch, void* flush, size_t flush_bytes) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < 10; ++r) {
    if (g_read_flush)
      moe_stream_read<<<g_sms * 4, 512>>>(static_cast<const u32x4*>(flush), flush_bytes / 16, g_sink);
    else
      CK(cudaMemsetAsync(flush, r, flush_bytes));
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r > 0) t.push_back(ms * 1e3f);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <int STAGES>
static void run_tma(const char* name, int layout, void* w, int experts, int ctas_per_sm, int sms, unsigned* sink,
                    void* flush, size_t flush_bytes, double ldg_gbps) {
  const unsigned long long rows = (unsigned long long)experts * kN;
  const CUtensorMap map = make_map(w, layout, rows);
  const int items = int(rows / kRows), grid = std::min(items, sms * ctas_per_sm);
  const size_t smem = STAGES * kStageBytes + 1024;
  CK(cudaFuncSetAttribute(stream_tma<STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const double us = median_us([&] { stream_tma<STAGES><<<grid, 64, smem>>>(map, layout, items, sink); }, flush,
                              flush_bytes);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const double gbps = rows * kK * 2 / (us * 1e-6) / 1e9;
  std::printf("%-10s experts %3d  stages %d  ctas/SM %d  grid %4d  %9.1f us  %7.0f GB/s  %5.1f %% of LDG\n", name,
              experts, STAGES, ctas_per_sm, grid, us, gbps, 100 * gbps / ldg_gbps);
}

int main() {
  CK(cudaFree(nullptr));
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int max_experts = 77;
  const size_t bytes = size_t(max_experts) * kN * kK * 2, flush_bytes = size_t(256) << 20;
  void *w, *flush;
  unsigned* sink;
  CK(cudaMalloc(&w, bytes));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(w, 0x3c, bytes));
  CK(cudaMemset(flush, 0x11, flush_bytes));
  g_sink = sink;
  g_sms = sms;
  // The flush question first: the same reads after a memset flush and after a read flush.
  for (int read_flush : {0, 1}) {
    g_read_flush = read_flush;
    for (int experts : {5, 30, 77}) {
      const size_t b = size_t(experts) * kN * kK * 2;
      const double us = median_us(
          [&] { moe_stream_read<<<sms * 4, 512>>>(static_cast<const u32x4*>(w), b / 16, sink); }, flush, flush_bytes);
      std::printf("flush %-6s ldg experts %3d  %9.1f us  %7.0f GB/s (%zu MB)\n", read_flush ? "read" : "memset",
                  experts, us, b / (us * 1e-6) / 1e9, b >> 20);
    }
  }
  g_read_flush = false;
  for (int experts : {5, 77}) {
    const size_t b = size_t(experts) * kN * kK * 2;
    const unsigned long long n = b / 16;
    const double us = median_us([&] { moe_stream_read<<<sms * 4, 512>>>(static_cast<const u32x4*>(w), n, sink); },
                                flush, flush_bytes);
    const double ldg = b / (us * 1e-6) / 1e9;
    std::printf("ldg       experts %3d  %9.1f us  %7.0f GB/s (%zu MB)\n", experts, us, ldg, b >> 20);
    const char* names[] = {"rowmajor", "tiled", "row2kb"};
    for (int layout = 0; layout < 3; ++layout)
      for (int cps : {1, 2}) {
        run_tma<4>(names[layout], layout, w, experts, cps, sms, sink, flush, flush_bytes, ldg);
        run_tma<6>(names[layout], layout, w, experts, cps, sms, sink, flush, flush_bytes, ldg);
      }
  }
  return 0;
}
