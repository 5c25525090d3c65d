// The compiler: one embedded kernel source -> a CUBIN for one exact target (NVRTC).
//
// Kernels include each other by their path under src/kernels ("common/types.cuh")
// or relative to the including file; every embedded file is offered to NVRTC as
// a header, so no CUDA toolkit header or include path is involved. Problem
// constants arrive as -D defines. No --use_fast_math (accuracy first).
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moeforge::rt {

struct CompileRequest {
  std::string source;  // embedded path, e.g. "common/selftest.cuh"
  std::string entry;   // extern "C" kernel name
  std::vector<std::pair<std::string, std::string>> defines;
  std::vector<std::string> options;  // extra NVRTC options
  std::string target;                // exact target, e.g. "sm_90a"
  // Compile with MOE_PDL=1 and fail unless the entry's PTX waits on the prior grid
  // (griddepcontrol.wait): the proof behind launching it with PDL (common/grid_dependency.cuh).
  bool grid_wait = false;
};

// The complete NVRTC option list for req (what the cache key hashes).
std::vector<std::string> compile_options(const CompileRequest& req);

// The source followed by every embedded file it includes, transitively, each
// once, in discovery order: (path, text).
std::vector<std::pair<std::string, std::string_view>> source_closure(const std::string& source);

// "13.0"
std::string nvrtc_version();
// Targets this NVRTC accepts ("sm_75", ..., "sm_121"), from nvrtcGetSupportedArchs.
std::vector<int> nvrtc_supported_sms();

struct CompileResult {
  std::string cubin;
  std::string log;
  std::vector<std::string> options;
  double ms = 0;
};

// Throws CompileError with the log and the options on failure.
CompileResult compile(const CompileRequest& req);

}  // namespace moeforge::rt
