// What the wide sm90 GEMMs' producer tells its consumers about a claimed tile (tiles.cuh
// produce_tiles, ring.cuh stage_word): one int, tile_word(t, half), or kNoMoreTiles; which
// m-tile and n-tile t is; and when a tile is "half". Pure integer code, also compiled as host C++ by
// tests/cpu/test_sm90_backend.cpp, which checks half_tile against the rows of random segment
// layouts and the word's round trip.
#pragma once
#include "common/host_device.cuh"

namespace sm90 {

using tile_i64 = long long;  // seg_off's element (i64 in the kernels)

constexpr int kNoMoreTiles = -1;
MOE_HD constexpr int tile_word(int t, bool half) { return 2 * t + (half ? 1 : 0); }
MOE_HD constexpr int word_tile(int word) { return word >> 1; }
MOE_HD constexpr bool word_half(int word) { return (word & 1) != 0; }

// Tile t's m-tile (a 128-row block of the expert-ordered rows) and n-tile: t = mt * n_tiles + nt.
struct TileMN {
  int mt, nt;
};
MOE_HD constexpr TileMN tile_mn(int t, int n_tiles) { return {t / n_tiles, t - t / n_tiles * n_tiles}; }

// True when m-tile mt (of expert e, BM rows from the padded segment's start) holds at most 64
// of the expert's rows: its second 64 rows are all padding. grouped_gemm.cuh and fp8_gemm.cuh
// then split the tile's columns between their two consumer warpgroups (both on the first 64
// rows). With ~256 rows an expert (Mistral-Small-4 at T = 8192) about one tile in five is
// such a tile; at T = 2048 (~64 rows an expert) about half the routed experts' only tile is.
template <int BM>
MOE_HD inline bool half_tile(const int* __restrict__ counts, const tile_i64* __restrict__ seg_off, int e, int mt) {
  return seg_off[e] + counts[e] - (tile_i64)mt * BM <= 64;
}

}  // namespace sm90
