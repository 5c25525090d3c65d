// moeforge/errors.hpp — the typed errors every public entry point throws.
//
// Each error says which argument (or stage, or file) is at fault, the value it
// saw and what was expected. The CLI maps each kind to its own exit code
// (see exit_code()), so scripts can tell a bad flag from a lost device.
#pragma once
#include <stdexcept>
#include <string>

namespace moeforge {

enum class ErrorKind {
  InvalidArgument = 2,  // shape, dtype, stride, alignment, value of a caller's argument
  Unsupported = 3,      // valid request this build, backend or device cannot serve
  Device = 4,           // CUDA driver error, lost context, missing driver
  Compile = 5,          // NVRTC failed (the log is in the message)
  Cache = 6,            // kernel cache refused (permissions, corruption that cannot be rebuilt)
  Io = 7,               // files: checkpoints, JSON records
  Internal = 10,        // a bug in moeforge
};

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
};

// Thrown when a caller's argument is wrong. The message always starts with the
// argument's name: "x: expected dtype bf16, got f32".
class InvalidArgument : public Error {
 public:
  InvalidArgument(const std::string& argument, const std::string& what)
      : Error(ErrorKind::InvalidArgument, argument + ": " + what), argument_(argument) {}
  const std::string& argument() const { return argument_; }

 private:
  std::string argument_;
};

class Unsupported : public Error {
 public:
  explicit Unsupported(const std::string& m) : Error(ErrorKind::Unsupported, m) {}
};
class DeviceError : public Error {
 public:
  DeviceError(const std::string& m, int cuda_code = 0) : Error(ErrorKind::Device, m), code_(cuda_code) {}
  int cuda_code() const { return code_; }

 private:
  int code_;
};
class CompileError : public Error {
 public:
  explicit CompileError(const std::string& m) : Error(ErrorKind::Compile, m) {}
};
class CacheError : public Error {
 public:
  explicit CacheError(const std::string& m) : Error(ErrorKind::Cache, m) {}
};
class IoError : public Error {
 public:
  explicit IoError(const std::string& m) : Error(ErrorKind::Io, m) {}
};
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& m) : Error(ErrorKind::Internal, m) {}
};

}  // namespace moeforge
