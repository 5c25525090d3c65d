// A safetensors file, memory-mapped and validated; tensors are views into the map.
//
// Format (https://github.com/huggingface/safetensors): 8 bytes little-endian header length N,
// N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data section; offsets are relative to its start.
//
// Validation, so that a hostile or damaged file gives an IoError naming the file (and the
// tensor) instead of a crash or an out-of-bounds read:
//  * the file holds at least 8 bytes; N <= 100 MiB and 8 + N <= file size;
//  * the header is a JSON object (starts with '{'); each entry has a known dtype, a shape of
//    non-negative integers whose element count fits in 2^40, and two data_offsets with
//    begin <= end and end - begin == element count * dtype size;
//  * sorted by begin, the tensors tile the data section from 0 with no gap and no overlap
//    (the same rule as the reference Rust reader), and the last end is inside the file:
//    a truncated file names the first tensor that runs past the end.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/mapped_file.hpp"

namespace moeforge::io {

enum class StDtype : uint8_t { BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, F8_E4M3, F8_E5M2, F8_E8M0 };

std::string_view st_dtype_name(StDtype t);
int st_dtype_size(StDtype t);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::U8;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  uint64_t begin = 0, end = 0;   // offsets in the data section
  const uint8_t* data = nullptr; // into the map; not aligned in general (read with memcpy)
  std::string shape_str() const; // "[8, 256, 128]"
};

// The validation above, on a file's bytes in memory (`where` names the file in the IoError):
// the tensors, their data pointers into `bytes`, in header order. SafetensorsFile maps the
// file and calls it; the fuzzer (tests/fuzz/fuzz_checkpoint.cpp) calls it on arbitrary bytes.
std::vector<StTensor> parse_safetensors(const uint8_t* bytes, uint64_t size, const std::string& where);

class SafetensorsFile {
 public:
  // Maps and validates; throws IoError("<path>: ...") on any inconsistency.
  explicit SafetensorsFile(std::string path);
  const std::string& path() const { return map_.path(); }
  const StTensor* find(std::string_view name) const;
  const std::vector<StTensor>& tensors() const { return tensors_; }

 private:
  MappedFile map_;
  std::vector<StTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace moeforge::io
