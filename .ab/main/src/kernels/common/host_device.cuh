// MOE_HD marks pure integer helpers that the kernels use and the CPU tests compile as host C++
// (sm90/w4_format.cuh, sm90/decode_units.cuh): __host__ __device__ under nvcc / NVRTC, nothing
// under a host compiler.
#pragma once
#if defined(__CUDACC__)
#define MOE_HD __host__ __device__
#else
#define MOE_HD
#endif
