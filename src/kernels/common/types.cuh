// Shared device-side definitions for every kernel family. NVRTC-compiled: no host includes.
#pragma once
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// A compile-time int as a type (std::integral_constant, which NVRTC's headerless build lacks):
// lets a generic lambda be instantiated per value, e.g. once per consumer warpgroup.
template <int V>
struct Constant {
  static constexpr int value = V;
};
