#include "runtime/embedded.hpp"

#include <string>

#include "moeforge/errors.hpp"

namespace moeforge::rt {

std::string_view embedded_source(std::string_view path) {
  for (const EmbeddedFile* f = embedded_files(); f->path; ++f)
    if (path == f->path) return {f->text, f->size};
  throw InternalError("no embedded kernel source '" + std::string(path) + "'");
}

}  // namespace moeforge::rt
