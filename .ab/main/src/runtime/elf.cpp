#include "runtime/elf.hpp"

#include <fmt/format.h>

#include <cstring>

#include "moeforge/errors.hpp"
#include "runtime/device.hpp"

namespace moeforge::rt {
namespace {

template <class T>
T rd(std::string_view b, uint64_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

constexpr uint16_t kEmCuda = 190;

}  // namespace

std::string CubinInfo::describe() const {
  if (!has_compat) return fmt::format("sm_{} (arch-specific variant unknown)", sm);
  return fmt::format("sm_{}{}", sm, arch_specific ? "a" : "");
}

CubinInfo parse_cubin(std::string_view b, const std::string& path) {
  auto bad = [&](const std::string& why) { return CacheError(fmt::format("{}: not a valid cubin: {}", path, why)); };
  if (b.size() < 64) throw bad(fmt::format("{} bytes, shorter than an ELF64 header", b.size()));
  if (std::memcmp(b.data(), "\x7f" "ELF", 4) != 0) throw bad("no ELF magic");
  if (b[4] != 2) throw bad(fmt::format("ELF class {} (expected 2, ELF64)", int(b[4])));
  if (b[5] != 1) throw bad("not little-endian");
  CubinInfo info;
  uint16_t machine = rd<uint16_t>(b, 18);
  if (machine != kEmCuda) throw bad(fmt::format("e_machine {} (expected {}, EM_CUDA)", machine, kEmCuda));
  info.e_flags = rd<uint32_t>(b, 48);
  info.sm = int((info.e_flags >> 8) & 0xff);
  uint64_t shoff = rd<uint64_t>(b, 0x28);
  uint16_t shentsize = rd<uint16_t>(b, 0x3a), shnum = rd<uint16_t>(b, 0x3c), shstrndx = rd<uint16_t>(b, 0x3e);
  if (shentsize != 64) throw bad(fmt::format("section header size {} (expected 64)", shentsize));
  if (shoff > b.size() || uint64_t(shnum) * 64 > b.size() - shoff)
    throw bad(fmt::format("section table [{}, +{}x64) past the end of {} bytes (truncated?)", shoff, shnum, b.size()));
  if (shstrndx >= shnum) throw bad("section name table index out of range");
  struct Sec {
    uint32_t name;
    uint64_t off, size;
    uint32_t type;
  };
  auto sec = [&](unsigned i) {
    uint64_t h = shoff + uint64_t(i) * 64;
    return Sec{rd<uint32_t>(b, h), rd<uint64_t>(b, h + 24), rd<uint64_t>(b, h + 32), rd<uint32_t>(b, h + 4)};
  };
  const Sec strs = sec(shstrndx);
  if (strs.off > b.size() || strs.size > b.size() - strs.off) throw bad("section name table past the end (truncated?)");
  for (unsigned i = 0; i < shnum; ++i) {
    Sec s = sec(i);
    if (s.type == 8 /*SHT_NOBITS*/) continue;
    if (s.off > b.size() || s.size > b.size() - s.off)
      throw bad(fmt::format("section {} [{}, +{}) past the end of {} bytes (truncated?)", i, s.off, s.size, b.size()));
    if (s.name >= strs.size) continue;
    std::string_view nm(b.data() + strs.off + s.name, strnlen(b.data() + strs.off + s.name, strs.size - s.name));
    std::string_view d = b.substr(s.off, s.size);
    if (nm == ".nv.compat") {
      // Entries: [format][attribute][...]; format 4 carries a u16 size then data, others 4 bytes.
      for (size_t p = 0; p + 4 <= d.size();) {
        uint8_t fmt_ = uint8_t(d[p]), attr = uint8_t(d[p + 1]);
        if (fmt_ == 4) {
          p += 4 + rd<uint16_t>(d, p + 2);
          continue;
        }
        if (attr == 0x09) {
          info.has_compat = true;
          info.arch_specific = uint8_t(d[p + 2]) == 1;
        }
        p += 4;
      }
    } else if (nm == ".note.nv.tkinfo") {
      size_t at = d.find("-arch ");
      if (at != std::string_view::npos) {
        size_t end = at + 6;
        while (end < d.size() && d[end] != ' ' && d[end] != '\0') ++end;
        info.tool_arch = std::string(d.substr(at, end - at));
      }
    }
  }
  return info;
}

void verify_cubin(std::string_view bytes, const std::string& target, const std::string& path) {
  CubinInfo info = parse_cubin(bytes, path);
  const int want = target_sm_number(target);
  const bool want_a = !target.empty() && target.back() == 'a';
  if (info.sm != want || (info.has_compat && info.arch_specific != want_a))
    throw Unsupported(fmt::format("{}: cubin is built for {} (e_flags 0x{:08x}{}{}) but the expected target is {}; "
                                  "refusing to load a binary for another target",
                                  path, info.describe(), info.e_flags, info.tool_arch.empty() ? "" : ", ",
                                  info.tool_arch, target));
}

}  // namespace moeforge::rt
