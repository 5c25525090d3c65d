// Precomputed routing ids: check them on the device before anything indexes with them.
//
// ids [n] (i32 or i64, IDS_I64) -> ids_out [n] i32 with every id outside [0, E) replaced
// by -1 (the permute skips it, the combine writes a NaN row for its token), and
// first_bad = min over bad entries of (base + index): the lowest bad (token, slot) of the
// call, independent of scheduling. The host reads first_bad after the call (when the
// stream is not being captured) and the bad value from the caller's own ids tensor.
//
// Defines: E, IDS_I64 (0/1).
#pragma once
#include "common/grid_dependency.cuh"
#include "common/types.cuh"

// grid.x = ceil(n / 256), block = 256.
extern "C" __global__ void __launch_bounds__(256)
    moe_validate_ids(const void* __restrict__ ids, i64 n, i64 base, int* __restrict__ ids_out,
                     u64* __restrict__ first_bad) {
  pdl_begin();  // PDL (common/grid_dependency.cuh): before any dependent access
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
#if IDS_I64
  const i64 v = ((const i64*)ids)[i];
#else
  const i64 v = ((const int*)ids)[i];
#endif
  const bool ok = v >= 0 && v < (i64)E;
  ids_out[i] = ok ? (int)v : -1;
  if (!ok) atomicMin(first_bad, (u64)(base + i));
}
