// The decode GEMMs' work units (decode_gemm.cuh): one unit streams one 128-row weight tile of
// one expert over K for one BT-token chunk of that expert's rows, so every unit costs the same
// and a persistent grid striding over them keeps the SMs even. Pure integer code, also
// compiled as host C++ by tests/cpu/test_sm90_backend.cpp, which checks that the units of any
// counts are every (expert, tile, chunk) exactly once.
#pragma once
#include "common/host_device.cuh"

namespace decode_units {

// Units of an expert with `rows` rows (0 for none): n_tiles weight tiles x ceil(rows / bt) chunks.
MOE_HD constexpr int units_of(int rows, int bt, int n_tiles) { return (rows + bt - 1) / bt * n_tiles; }

struct Unit {
  int e, nt, c;  // expert, weight tile, token chunk
};

// Unit u of the experts with rows L.active[0 .. L.num_active) (index order), where
// L.unit_end[y] is the running total of units_of over active[0 .. y] (L: the kernel's shared
// memory, or any struct with those members). Chunks of one tile are consecutive units, so they
// land on neighbouring CTAs at the same time and the tile comes from DRAM once.
// Requires 0 <= u < L.unit_end[L.num_active - 1].
template <class List>
MOE_HD inline Unit unit_at(const List& L, const int* __restrict__ counts, int bt, int u) {
  int lo = 0, hi = L.num_active - 1;  // the first y with unit_end[y] > u
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (L.unit_end[mid] > u)
      hi = mid;
    else
      lo = mid + 1;
  }
  const int e = L.active[lo], local = u - (lo > 0 ? L.unit_end[lo - 1] : 0);
  const int chunks = (counts[e] + bt - 1) / bt;
  return {e, local / chunks, local % chunks};
}

}  // namespace decode_units
