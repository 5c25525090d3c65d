#include "bench/ceilings.hpp"

#include <cublas_api.h>  // types and enums only: cuBLAS itself is loaded with dlopen
#include <dlfcn.h>
#include <fmt/format.h>

#include <random>
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
  const rt::DeviceInfo info = rt::device_info(device);
  const size_t bytes = size_t(2) << 30;  // 2 GiB: ~35x the H200's L2
  DeviceBuffer src(device, bytes), sink(device, 4);
  rt::check(rt::driver().cuMemsetD8Async(src.ptr(), 0x5a, bytes, stream), "memset");
  const rt::KernelSpec spec{.source = "common/stream_read.cuh", .entry = "moe_stream_read", .threads = 512};
  const rt::LoadedKernel& k = rt::load_kernel(device, spec);
  unsigned long long n_vec = bytes / 16;
  CUdeviceptr s = src.ptr(), o = sink.ptr();
  void* args[] = {&s, &n_vec, &o};
  const Timing t = time_on_stream(device, stream, [&](CUstream st) {
    rt::launch(k, {unsigned(info.sm_count * 4)}, {512}, 0, st, args, "ceiling.read");
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

}  // namespace

Ceilings measure_ceilings(int device) {
  rt::use_device(device);
  CUstream stream;
  rt::check(rt::driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  Ceilings c;
  c.read_GBps = read_bandwidth(device, stream);
  c.bf16_TFLOPs = cublas_bf16_tflops(device, stream, &c.gemm_note);
  rt::driver().cuStreamDestroy(stream);
  return c;
}

}  // namespace moeforge::bench
