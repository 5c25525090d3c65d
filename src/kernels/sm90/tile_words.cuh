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

// The order the persistent CTAs claim tiles in (tiles.cuh produce_tiles): claim c is tile
// claimed_tile(c, ...). Expert by expert, as the m-tiles lie (expert e's claims are
// [mt0 * n_tiles, mt1 * n_tiles) for its m-tiles [mt0, mt1), so e = tile_expert[c / n_tiles]);
// within an expert, bands of up to `band` m-tiles, and within a band n-tile major: the band's
// m-tiles of one n-tile are consecutive claims. Why: the tile that next reads the same B panel
// (the larger operand: 256 weight rows x K) is then the next claim, not the one n_tiles claims
// later. With ~132 tiles in flight, every claim between two reads of a k-slice streams ~1/132 of
// a tile's bytes per CTA, i.e. one tile's worth (~3 MB for bf16 GEMM 1) in all: m-tile major
// put ~16 claims (~48 MB, the whole L2) between the reads of a B slice, so an expert's B came
// from DRAM once per m-tile (ncu, 336eccf, bf16 GEMM 1 at T = 8192: L2 hit 53.7 %, L2 98.5 %
// busy, DRAM 81.7 %). Here a B slice is reused by the next claim and an A slice `band` claims
// later. Bands alternate their n direction (serpentine), so the panels at a band's end are
// the next band's first reads.
MOE_HD constexpr TileMN claimed_tile(int c, int n_tiles, int mt0, int mt1, int band) {
  const int local = c - mt0 * n_tiles, per_band = band * n_tiles;
  const int b = local / per_band, r = local - b * per_band;
  const int rest = mt1 - mt0 - b * band, g = rest < band ? rest : band;  // this band's m-tiles
  const int q = r / g, nt = (b & 1) ? n_tiles - 1 - q : q;
  return {mt0 + b * band + (r - q * g), nt};
}

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
