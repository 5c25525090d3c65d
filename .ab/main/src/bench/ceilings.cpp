#include "bench/ceilings.hpp"

#include <cublasLt.h>    // types and enums only: cuBLASLt too is loaded with dlopen
#include <cublas_api.h>  // types and enums only: cuBLAS itself is loaded with dlopen
#include <dlfcn.h>
#include <fmt/format.h>

#include <random>
#include <type_traits>
#include <vector>

#include "backends/device_buffer.hpp"
#include "bench/timing.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit.hpp"

namespace moeforge::bench {
namespace {

double read_bandwidth(int device, CUstream stream) {
  const size_t bytes = size_t(2) << 30;  // 2 GiB: ~35x the H200's L2
  DeviceBuffer src(device, bytes), sink(device, 4);
  rt::check(rt::driver().cuMemsetD8Async(src.ptr(), 0x5a, bytes, stream), "memset");
  const Timing t = time_on_stream(device, stream, [&](CUstream st) {
    stream_read(device, src.ptr(), bytes, sink.ptr(), st, "ceiling.read");
  });
  return double(bytes) / (t.median_us * 1e-6) / 1e9;
}

// cuBLAS through dlopen, so that nothing links it and machines without it still
// run everything else.
struct Cublas {
  void* lib = nullptr;
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

const Cublas* load_cublas(std::string* why) {
  static Cublas c;
  static std::string error;
  static bool tried = false;
  if (!tried) {
    tried = true;
    for (const char* name : {"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13", "libcublas.so.12",
                             "/usr/local/cuda/lib64/libcublas.so"}) {
      if ((c.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      error = dlerror();
    }
    if (c.lib) {
      c.create = reinterpret_cast<decltype(c.create)>(dlsym(c.lib, "cublasCreate_v2"));
      c.destroy = reinterpret_cast<decltype(c.destroy)>(dlsym(c.lib, "cublasDestroy_v2"));
      c.set_stream = reinterpret_cast<decltype(c.set_stream)>(dlsym(c.lib, "cublasSetStream_v2"));
      c.gemm_ex = reinterpret_cast<decltype(c.gemm_ex)>(dlsym(c.lib, "cublasGemmEx"));
      if (!c.create || !c.destroy || !c.set_stream || !c.gemm_ex) {
        error = "libcublas lacks cublasCreate_v2/cublasGemmEx";
        c.lib = nullptr;
      }
    }
  }
  if (!c.lib && why) *why = error;
  return c.lib ? &c : nullptr;
}

double cublas_bf16_tflops(int device, CUstream stream, std::string* note) {
  const Cublas* cb = load_cublas(note);
  if (!cb) return 0;
  const int n = 8192;
  std::vector<uint16_t> host(size_t(n) * n);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (auto& v : host) v = formats::float_to_bf16(dist(rng));  // random data: zeros run faster (METHOD.md)
  DeviceBuffer a = DeviceBuffer::from_host(device, host), b = DeviceBuffer::from_host(device, host);
  DeviceBuffer c(device, size_t(n) * n * 2);
  cublasHandle_t h;
  if (cb->create(&h) != CUBLAS_STATUS_SUCCESS) {
    *note = "cublasCreate failed";
    return 0;
  }
  cb->set_stream(h, stream);
  const float alpha = 1.f, beta = 0.f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const Timing t = time_on_stream(device, stream, [&](CUstream) {
    status = cb->gemm_ex(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.data(), CUDA_R_16BF, n, b.data(), CUDA_R_16BF,
                         n, &beta, c.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  cb->destroy(h);
  if (status != CUBLAS_STATUS_SUCCESS) {
    *note = fmt::format("cublasGemmEx failed with status {}", int(status));
    return 0;
  }
  *note = fmt::format("cuBLAS GemmEx bf16->bf16, f32 accumulate, {0}x{0}x{0}, random inputs, median of {1}", n,
                      t.runs);
  return 2.0 * n * double(n) * n / (t.median_us * 1e-6) / 1e12;
}

// cuBLASLt (FP8 GEMMs are not in cublasGemmEx), also through dlopen.
struct CublasLt {
  void* lib = nullptr;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

const CublasLt* load_cublaslt(std::string* why) {
  static const CublasLt* lt = [] () -> const CublasLt* {
    static CublasLt c;
    for (const char* name : {"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13", "libcublasLt.so.12",
                             "/usr/local/cuda/lib64/libcublasLt.so"})
      if ((c.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!c.lib) return nullptr;
    auto sym = [&](auto& f, const char* n) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(c.lib, n));
      return f != nullptr;
    };
    const bool ok = sym(c.create, "cublasLtCreate") && sym(c.destroy, "cublasLtDestroy") &&
                    sym(c.desc_create, "cublasLtMatmulDescCreate") &&
                    sym(c.desc_destroy, "cublasLtMatmulDescDestroy") &&
                    sym(c.desc_set, "cublasLtMatmulDescSetAttribute") &&
                    sym(c.layout_create, "cublasLtMatrixLayoutCreate") &&
                    sym(c.layout_destroy, "cublasLtMatrixLayoutDestroy") &&
                    sym(c.pref_create, "cublasLtMatmulPreferenceCreate") &&
                    sym(c.pref_destroy, "cublasLtMatmulPreferenceDestroy") &&
                    sym(c.pref_set, "cublasLtMatmulPreferenceSetAttribute") &&
                    sym(c.heuristic, "cublasLtMatmulAlgoGetHeuristic") && sym(c.matmul, "cublasLtMatmul");
    return ok ? &c : nullptr;
  }();
  if (!lt) *why = "libcublasLt not found or incomplete: no FP8 GEMM ceiling";
  return lt;
}

// cuBLASLt FP8 x FP8 (e4m3, the "TN" layout FP8 needs), bf16 out, f32 accumulate, n^3.
double cublaslt_fp8_tflops(int device, CUstream stream, std::string* note) {
  const CublasLt* lt = load_cublaslt(note);
  if (!lt) return 0;
  const int n = 8192;
  std::vector<uint8_t> host(size_t(n) * n);
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (auto& v : host) v = formats::float_to_e4m3(dist(rng));  // random, finite
  DeviceBuffer a = DeviceBuffer::from_host(device, host), b = DeviceBuffer::from_host(device, host);
  DeviceBuffer d(device, size_t(n) * n * 2);
  const size_t ws_bytes = size_t(64) << 20;
  DeviceBuffer ws(device, ws_bytes);
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t st = lt->create(&h);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  if (st == CUBLAS_STATUS_SUCCESS) st = lt->desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st == CUBLAS_STATUS_SUCCESS) st = lt->desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  if (st == CUBLAS_STATUS_SUCCESS) st = lt->desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (st == CUBLAS_STATUS_SUCCESS) st = lt->layout_create(&la, CUDA_R_8F_E4M3, n, n, n);
  if (st == CUBLAS_STATUS_SUCCESS) st = lt->layout_create(&lb, CUDA_R_8F_E4M3, n, n, n);
  if (st == CUBLAS_STATUS_SUCCESS) st = lt->layout_create(&ld, CUDA_R_16BF, n, n, n);
  if (st == CUBLAS_STATUS_SUCCESS) st = lt->pref_create(&pref);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes));
  cublasLtMatmulHeuristicResult_t algo{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) st = lt->heuristic(h, op, la, lb, ld, ld, pref, 1, &algo, &found);
  double tflops = 0;
  if (st == CUBLAS_STATUS_SUCCESS && found == 1) {
    const float alpha = 1.f, beta = 0.f;
    const Timing t = time_on_stream(device, stream, [&](CUstream s) {
      st = lt->matmul(h, op, &alpha, a.data(), la, b.data(), lb, &beta, d.data(), ld, d.data(), ld, &algo.algo,
                      ws.data(), ws_bytes, s);
    });
    if (st == CUBLAS_STATUS_SUCCESS) {
      tflops = 2.0 * n * double(n) * n / (t.median_us * 1e-6) / 1e12;
      *note = fmt::format(
          "cuBLASLt matmul e4m3 x e4m3 -> bf16, f32 accumulate, {0}x{0}x{0}, random inputs, median of {1}", n, t.runs);
    }
  }
  if (tflops == 0) *note = fmt::format("cuBLASLt FP8 matmul unavailable (status {}, algorithms {})", int(st), found);
  if (pref) lt->pref_destroy(pref);
  for (cublasLtMatrixLayout_t l : {la, lb, ld})
    if (l) lt->layout_destroy(l);
  if (op) lt->desc_destroy(op);
  if (h) lt->destroy(h);
  return tflops;
}

}  // namespace

Ceilings measure_ceilings(int device) {
  rt::use_device(device);
  CUstream stream;
  rt::check(rt::driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  Ceilings c;
  c.read_GBps = read_bandwidth(device, stream);
  c.bf16_TFLOPs = cublas_bf16_tflops(device, stream, &c.gemm_note);
  c.fp8_TFLOPs = cublaslt_fp8_tflops(device, stream, &c.fp8_gemm_note);
  rt::driver().cuStreamDestroy(stream);
  return c;
}

}  // namespace moeforge::bench
