// Error attribution: every stage launch leaves a breadcrumb; a sticky driver
// error (700, 715, 719, ...) is reported once as
//   "device context lost after <first stage launched since the last successful check>"
// and from then on every launch and load fails fast with that message, so a
// fault in one kernel is never blamed on whatever driver call came next.
//
// "Successful check" = a synchronizing driver call that returned CUDA_SUCCESS
// through rt::check (cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize)
// or the per-launch check of MOEFORGE_SYNC_CHECK=1. With several streams in
// flight a stream synchronize is treated as a checkpoint for all of them, so
// the named stage is the first candidate; the message lists the trail since the
// checkpoint. With MOEFORGE_SYNC_CHECK=1 the attribution is exact.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/jit.hpp"

namespace moeforge::rt {

struct Breadcrumb {
  uint64_t seq = 0;         // process-wide launch number (1, 2, ...)
  uint64_t thread_seq = 0;  // launch number on the launching thread
  std::string stage;
  std::string kernel;
  Dim3 grid, block;
  CUstream stream = nullptr;
  int device = -1;
};

// Records a launch; returns its sequence number.
uint64_t record_launch(const std::string& stage, const std::string& kernel, Dim3 grid, Dim3 block,
                       CUstream stream, int device);
// The most recent breadcrumbs, oldest first (the ring keeps the last 256).
std::vector<Breadcrumb> recent_breadcrumbs();

// Marks every launch so far as checked (called on a successful synchronization).
void mark_checked();
// Called by rt::check on success; a synchronizing call marks a checkpoint.
void note_driver_success(const char* what);

bool is_sticky_error(CUresult r);
// Records that the context is lost (first call wins); returns the attributed message.
std::string note_context_lost(int code, const std::string& driver_message);
// Throws DeviceError with the recorded message if the context was lost.
void throw_if_context_lost();
bool context_lost();

// The stage that MOEFORGE_FAULT_STAGE names, or "" (from settings()).
const std::string& fault_stage();

}  // namespace moeforge::rt
