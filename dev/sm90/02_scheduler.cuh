// Tile scheduler for 02 (persistent grid). Static round-robin over a linear tile index:
// CTA b takes tiles b, b + gridDim.x, b + 2 gridDim.x, ...  Every tile costs the same
// (same K), so static assignment is balanced to within one tile per CTA.
//
// Order (L2): tile t = mt * n_tiles + nt, n fastest. m-tiles are numbered in expert order
// (the contiguous layout), so the ~gridDim.x tiles in flight at any moment are
// gridDim.x / n_tiles consecutive m-tiles (about 8 at N = 4096, BN = 256) times every
// n-tile: each A tile is read by n_tiles CTAs at about the same time, and the B tiles in
// flight all belong to one or two experts (16-32 MB of weights), which stay in the 60 MB L2
// while that expert's m-tiles pass. Producer and consumers walk the same sequence.
#pragma once

struct TileScheduler {
  int total, n_tiles, next_t;
  __device__ __forceinline__ TileScheduler(int m_tiles, int n_tiles_)
      : total(m_tiles * n_tiles_), n_tiles(n_tiles_), next_t((int)blockIdx.x) {}
  __device__ __forceinline__ bool next(int& mt, int& nt) {
    if (next_t >= total) return false;
    mt = next_t / n_tiles;
    nt = next_t - mt * n_tiles;
    next_t += (int)gridDim.x;
    return true;
  }
};
