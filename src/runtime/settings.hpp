// Runtime settings, read from the environment ONCE (first use) into one struct
// and passed around from there — never getenv at a call site.
//
//   MOEFORGE_CACHE_DIR      kernel cache root (else $XDG_CACHE_HOME/moeforge, else ~/.cache/moeforge)
//   MOEFORGE_ALLOW_FAMILY   1: an unknown compute capability may use the nearest lower known
//                           target of its major (reported as family_fallback everywhere)
//   MOEFORGE_SYNC_CHECK     1: synchronize and check the stream after every stage launch
//   MOEFORGE_FAULT_STAGE    <stage>: launch a trapping kernel right after that stage
//                           (fault-injection for the error-attribution tests)
//   MOEFORGE_COMMIT         the commit that result records name (set by tests/gpu/run_all.sh)
//   MOEFORGE_SM90_CROSSOVER average routed rows per expert from which the sm90 backend runs its
//                           TMA/wgmma GEMMs (below: the portable ones); for measuring the
//                           crossover (bench); unset = the tuned table (src/backends/sm90/plan.cpp)
//   MOEFORGE_SM90_DECODE_BT token tile of the sm90 decode GEMMs (16, 32 or 64) wherever the
//                           planner runs them; for measuring the choice (bench); unset = the
//                           planner's rule (plan.cpp)
//   MOEFORGE_SM90_STREAM_K  0 / 1: the sm90 decode GEMMs of calls that fit one 16-token tile never /
//                           always cut their work stream-K (decode_gemm.cuh), for measuring the
//                           choice (bench); unset = where the planner's rule says it pays (sm90.hpp)
//   MOEFORGE_PDL            0: launch the forward's kernels without programmatic dependent launch;
//                           default 1: on sm_90 and up (rt::KernelSpec::pdl), in the calls the
//                           forward allows it (rt::PdlScope; portable.hpp's kPdlMaxTokens). The GPU
//                           suite's graph, fault, hostile-input and stress runs passed under it
#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace moeforge::rt {

struct Settings {
  std::string cache_root;        // resolved root directory
  std::string cache_root_source; // "MOEFORGE_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "cwd"
  bool allow_family = false;
  bool sync_check = false;
  std::string fault_stage;  // "" = none
  std::string commit = "unknown";  // for result records
  double sm90_crossover = -1;      // < 0: the tuned table
  int sm90_decode_bt = 0;          // 0: the planner's rule; else 16, 32, 64 or 128
  int sm90_stream_k = -1;          // -1: the planner's rule; 0 never, 1 always (one-tile calls)
  bool pdl = true;                 // MOEFORGE_PDL
};

// Reads the environment on first call; the same object afterwards.
const Settings& settings();
// Builds settings from a lookup function (tests; settings() uses getenv).
Settings settings_from(const std::function<const char*(const char*)>& getenv_fn);

// One-line warnings ("moeforge: warning: ...") to stderr, or to a sink (tests).
void warn(std::string_view message);
// Replaces the sink; returns the previous one. An empty function restores stderr.
using WarningSink = std::function<void(std::string_view)>;
WarningSink set_warning_sink(WarningSink sink);

}  // namespace moeforge::rt
