// A read-only memory map of a whole file (RAII). No copies: tensors are read where they lie.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace moeforge::io {

class MappedFile {
 public:
  // Throws IoError naming the path (and errno text) if it cannot be opened or mapped.
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace moeforge::io
