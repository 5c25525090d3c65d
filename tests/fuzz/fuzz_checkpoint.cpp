// libFuzzer target: what moeforge reads from a checkpoint directory, on arbitrary bytes.
//   mode 0: a safetensors file (io::parse_safetensors, SafetensorsFile's validation);
//   mode 1: a config.json (io::spec_from_config on whatever JSON the bytes parse to).
//
// Findings: crashes, sanitizer reports (a tensor view past the input is an ASan read
// overflow: every accepted tensor's bytes are read), exceptions other than moeforge::Error
// (a JSON type error escaping the config reader), and accepted safetensors files that break
// what the reader promises: tensors that tile the data section exactly, sizes that match dtype and
// shape, data pointers at their offsets.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "io/hf_config.hpp"
#include "io/safetensors.hpp"

using namespace moeforge;

namespace {

void check_safetensors(const uint8_t* bytes, size_t size) {
  std::vector<io::StTensor> ts;
  if (!fuzz::expect_moeforge_errors_only("parse_safetensors",
                                         [&] { ts = io::parse_safetensors(bytes, size, "fuzz.safetensors"); }))
    return;
  uint64_t n = 0;  // accepted: the header length is readable
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  const uint8_t* data = bytes + 8 + n;
  const uint64_t data_size = size - 8 - n;
  std::sort(ts.begin(), ts.end(), [](const io::StTensor& a, const io::StTensor& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  uint64_t at = 0;
  unsigned sum = 0;
  for (const io::StTensor& t : ts) {
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) std::abort();
      numel *= d;
    }
    if (numel != t.numel || t.begin != at || t.end < t.begin ||
        t.end - t.begin != uint64_t(t.numel) * uint64_t(io::st_dtype_size(t.dtype)) || t.data != data + t.begin)
      std::abort();
    for (uint64_t i = 0; i < t.end - t.begin; ++i) sum += t.data[i];  // inside the input, or ASan says so
    if (t.shape_str().empty() || io::st_dtype_name(t.dtype) == "?") std::abort();
    at = t.end;
  }
  if (at != data_size) std::abort();
  if (sum == 0xFFFFFFFFu) std::fprintf(stderr, " ");  // keeps the reads
}

void check_config(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  fuzz::expect_moeforge_errors_only("spec_from_config", [&] {
    // The loader validates the spec once the tensors have filled in the rest; here the
    // fields the config gave go through the same validation.
    io::spec_from_config(j, "config.json").spec.validate();
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 2;
  if (mode == 0)
    check_safetensors(data + 1, size - 1);
  else
    check_config(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  return 0;
}
