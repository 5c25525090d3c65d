// Fault injection for the error-attribution tests (MOEFORGE_FAULT_STAGE=<stage>):
// launched right after the named stage, it kills the context with a trap, the way
// a real kernel bug would. NVRTC-compiled: no host includes.
#pragma once

extern "C" __global__ void moeforge_fault() { asm volatile("trap;"); }
