// Shared device-side definitions for every kernel family. NVRTC-compiled: no host includes.
#pragma once
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;
