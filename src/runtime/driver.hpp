// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1").
//
// Nothing in moeforge links libcuda: on a machine with no driver the library,
// CLI and tests still run and say plainly that no driver is there.
//
//   const rt::Driver& d = rt::driver();            // throws DeviceError if absent
//   rt::check(d.cuMemAlloc(&ptr, bytes), "cuMemAlloc");
#pragma once
#include <cuda.h>

#include <string>

namespace moeforge::rt {

#define MOEFORGE_DRIVER_FUNCTIONS(X)                                                          \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)  \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)              \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)                \
  X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload)             \
  X(cuModuleGetFunction) X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel)       \
  X(cuMemAlloc) X(cuMemFree) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemcpyHtoD)           \
  X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync)          \
  X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuMemGetInfo) X(cuStreamCreate)                  \
  X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery) X(cuEventCreate)               \
  X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)            \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuStreamIsCapturing) X(cuGraphInstantiate) \
  X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuMemHostAlloc) X(cuMemFreeHost)       \
  X(cuTensorMapEncodeTiled) X(cuLaunchKernelEx)

struct Driver {
#define MOEFORGE_DECLARE(name) decltype(&::name) name = nullptr;
  MOEFORGE_DRIVER_FUNCTIONS(MOEFORGE_DECLARE)
#undef MOEFORGE_DECLARE
  int version = 0;  // cuDriverGetVersion, e.g. 13000
};

// The loaded driver, or nullptr with *why set ("libcuda.so.1: cannot open shared object file").
const Driver* driver_or_null(std::string* why = nullptr);
// The loaded driver; throws DeviceError when there is none.
const Driver& driver();

// Throws DeviceError("<what>: CUDA_ERROR_X (code): <driver's message>") unless r == CUDA_SUCCESS.
void check(CUresult r, const char* what);
std::string error_name(CUresult r);

// Makes the device's primary context current on this thread (retained once per process).
void use_device(int ordinal);

}  // namespace moeforge::rt
