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

// ---- pieces: how a CTA of the persistent grid walks the units ----
// A piece is k-blocks [k0, k1) of unit u. Strided (the default): CTA b takes whole units
// b, b + G, b + 2G, ... (G = gridDim.x). Stream-K (calls where the units are few: decode at
// T <= BT, where 160 units on 132 SMs left 28 SMs with two and the rest with one): the
// n_units x k_blocks (unit, k-block) tasks are cut into G contiguous ranges of equal length
// (+-1), so every CTA streams the same number of k-blocks; a unit that straddles ranges is
// split into pieces on consecutive CTAs, its partial sums added up in k order afterwards
// (decode_gemm.cuh's fixup). In a CTA's range only its first piece can start inside a unit
// (k0 > 0) and only its last can end inside one (k1 < k_blocks).
struct Piece {
  int u, k0, k1;
};

// The grid the ranges are cut for: G CTAs, or fewer when there are fewer tasks, so that every
// range holds a task and a unit's pieces sit on consecutive CTAs (CTAs past it do nothing).
// Task counts are ints (n_units x k_blocks < 2^31: the host checks); products go through 64 bits.
MOE_HD constexpr int stream_k_grid(int tasks, int ctas) { return tasks < ctas ? tasks : ctas; }
// CTA b's range is tasks [range_begin(b), range_begin(b + 1)); grid = stream_k_grid(...).
MOE_HD constexpr int range_begin(int tasks, int grid, int b) { return int((long long)tasks * b / grid); }

// The CTA whose range holds task t (0 <= t < tasks): the largest b with range_begin(b) <= t.
MOE_HD constexpr int cta_of_task(int tasks, int grid, int t) {
  return int(((long long)(t + 1) * grid + tasks - 1) / tasks - 1);
}

// The piece of CTA b that starts at task t (range_begin(b) <= t < range_begin(b + 1)).
MOE_HD constexpr Piece piece_at(int t, int range_end, int k_blocks) {
  const int u = t / k_blocks, k0 = t % k_blocks, left = range_end - t;
  return {u, k0, left < k_blocks - k0 ? k0 + left : k_blocks};
}

// A split unit's partial-sum slots: each CTA has two, 0 for its first piece when that starts
// inside a unit, 1 for its last piece when that ends inside one (the unit's first piece: its
// owner). A unit split over CTAs b .. b + n - 1 has its pieces in slot 1 of b, then slot 0 of
// b + 1 .. b + n - 1, in k order.
MOE_HD constexpr int piece_slot(const Piece& p) { return p.k0 == 0 ? 1 : 0; }
// How many CTAs hold pieces of the unit whose first piece is on CTA b.
MOE_HD constexpr int pieces_of_unit(int tasks, int grid, int b, int u, int k_blocks) {
  return cta_of_task(tasks, grid, (u + 1) * k_blocks - 1) - b + 1;
}

}  // namespace decode_units
