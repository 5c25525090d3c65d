// What a cubin says about itself: the ELF64 header of a CUDA binary.
//
// Measured on NVRTC 13.0 cubins (tests/cpu/test_runtime_elf.cpp keeps this true):
//   e_machine = 190 (EM_CUDA), EI_OSABI = 0x41, EI_ABIVERSION = 8
//   e_flags bits 8-15 = SM number: sm_80 0x06005004, sm_86 0x06005604, sm_89 0x06005904,
//     sm_90/sm_90a 0x06005a04, sm_100a 0x06006402, sm_103a 0x06006702, sm_110a 0x06006e02,
//     sm_120a 0x06007802, sm_121a 0x06007902.
//   The arch-specific "a" variant is NOT in e_flags (sm_90 and sm_90a are equal there). It is
//   in the .nv.compat section: attribute 0x09 (1-byte value) = 1 for "a" targets, 0 otherwise
//   (sm_100 / sm_100f / sm_120f carry 0). The .note.nv.tkinfo note also records "-arch sm_90a".
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace moeforge::rt {

struct CubinInfo {
  int sm = 0;                  // e_flags bits 8-15 (90 for sm_90 and sm_90a)
  uint32_t e_flags = 0;
  bool has_compat = false;     // .nv.compat with attribute 0x09 found
  bool arch_specific = false;  // attribute 0x09 == 1: built for an "a" target
  std::string tool_arch;       // "-arch sm_90a" from .note.nv.tkinfo, "" if absent
  // "sm_90a" when has_compat, else "sm_90 (a: unknown)".
  std::string describe() const;
};

// Parses the header and section table; throws CacheError("<path>: ...") on a malformed ELF.
CubinInfo parse_cubin(std::string_view bytes, const std::string& path);

// Checks that bytes are a well-formed cubin for exactly `target` ("sm_90a").
// Malformed -> CacheError; built for another target -> Unsupported; both name the
// expected target, the one found and `path` (a file, or "<memory>").
void verify_cubin(std::string_view bytes, const std::string& target, const std::string& path);

}  // namespace moeforge::rt
