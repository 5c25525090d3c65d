// Kernel sources embedded at build time (cmake/embed_kernels.cmake).
#pragma once
#include <cstddef>
#include <string_view>

namespace moeforge::rt {

struct EmbeddedFile {
  const char* path;  // relative to src/kernels, e.g. "portable/grouped_gemm.cuh"
  const char* text;
  std::size_t size;
};

// Null-terminated table ({nullptr, nullptr, 0} ends it), sorted by path.
const EmbeddedFile* embedded_files();

// The text of one embedded file; throws InternalError if there is none.
std::string_view embedded_source(std::string_view path);

}  // namespace moeforge::rt
