#include "moeforge/errors.hpp"

namespace moeforge {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return "invalid argument";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::Device: return "device error";
    case ErrorKind::Compile: return "compile error";
    case ErrorKind::Cache: return "cache error";
    case ErrorKind::Io: return "I/O error";
    case ErrorKind::Internal: return "internal error";
  }
  return "error";
}

}  // namespace moeforge
