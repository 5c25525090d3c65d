#include "runtime/breadcrumbs.hpp"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include "moeforge/errors.hpp"
#include "runtime/driver.hpp"
#include "runtime/settings.hpp"

namespace moeforge::rt {
namespace {

constexpr size_t kRing = 256;

struct State {
  std::mutex m;
  std::array<Breadcrumb, kRing> ring;
  uint64_t next_seq = 1;
  uint64_t checked_through = 0;  // every launch with seq <= this completed without error
  std::atomic<bool> lost{false};
  std::string lost_message;
  int lost_code = 0;
};

State& state() {
  static State& s = *new State;  // immortal: launches may happen during static destruction
  return s;
}

thread_local uint64_t t_thread_seq = 0;

std::string dim(Dim3 d) { return fmt::format("({},{},{})", d.x, d.y, d.z); }

}  // namespace

uint64_t record_launch(const std::string& stage, const std::string& kernel, Dim3 grid, Dim3 block,
                       CUstream stream, int device) {
  State& s = state();
  std::lock_guard lock(s.m);
  Breadcrumb& b = s.ring[s.next_seq % kRing];
  b.seq = s.next_seq++;
  b.thread_seq = ++t_thread_seq;
  b.stage = stage;
  b.kernel = kernel;
  b.grid = grid;
  b.block = block;
  b.stream = stream;
  b.device = device;
  return b.seq;
}

std::vector<Breadcrumb> recent_breadcrumbs() {
  State& s = state();
  std::lock_guard lock(s.m);
  std::vector<Breadcrumb> out;
  uint64_t first = s.next_seq > kRing ? s.next_seq - kRing : 1;
  for (uint64_t q = first; q < s.next_seq; ++q) out.push_back(s.ring[q % kRing]);
  return out;
}

void mark_checked() {
  State& s = state();
  if (s.lost) return;
  std::lock_guard lock(s.m);
  s.checked_through = s.next_seq - 1;
}

void note_driver_success(const char* what) {
  if (what && std::strstr(what, "Synchronize")) mark_checked();
}

bool is_sticky_error(CUresult r) {
  switch (int(r)) {
    case 700:  // CUDA_ERROR_ILLEGAL_ADDRESS
    case 702:  // CUDA_ERROR_LAUNCH_TIMEOUT
    case 710:  // CUDA_ERROR_ASSERT (device-side assert)
    case 714:  // CUDA_ERROR_HARDWARE_STACK_ERROR
    case 715:  // CUDA_ERROR_ILLEGAL_INSTRUCTION
    case 716:  // CUDA_ERROR_MISALIGNED_ADDRESS
    case 717:  // CUDA_ERROR_INVALID_ADDRESS_SPACE
    case 718:  // CUDA_ERROR_INVALID_PC
    case 719:  // CUDA_ERROR_LAUNCH_FAILED
      return true;
    default: return false;
  }
}

std::string note_context_lost(int code, const std::string& driver_message) {
  State& s = state();
  std::lock_guard lock(s.m);
  if (s.lost) return s.lost_message + " (again: " + driver_message + ")";
  uint64_t first = std::max<uint64_t>(s.checked_through + 1, s.next_seq > kRing ? s.next_seq - kRing : 1);
  std::string culprit, trail;
  for (uint64_t q = first; q < s.next_seq; ++q) {
    const Breadcrumb& b = s.ring[q % kRing];
    if (culprit.empty()) culprit = fmt::format("'{}' (kernel {}, grid {}, block {})", b.stage, b.kernel, dim(b.grid), dim(b.block));
    trail += (trail.empty() ? "" : " -> ") + b.stage;
  }
  if (culprit.empty()) culprit = "no moeforge launch (the fault came from outside moeforge or before its first launch)";
  s.lost_message = fmt::format(
      "device context lost after {}: {}; stages launched since the last successful check: [{}]; every later CUDA "
      "error in this process is a consequence of this one",
      culprit, driver_message, trail);
  s.lost_code = code;
  s.lost = true;
  std::fprintf(stderr, "moeforge: error: %s\n", s.lost_message.c_str());
  return s.lost_message;
}

bool context_lost() { return state().lost.load(); }

void throw_if_context_lost() {
  State& s = state();
  if (!s.lost) return;
  std::lock_guard lock(s.m);
  throw DeviceError(s.lost_message, s.lost_code);
}

const std::string& fault_stage() { return settings().fault_stage; }

}  // namespace moeforge::rt
