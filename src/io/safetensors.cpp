#include "io/safetensors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "moeforge/errors.hpp"

namespace moeforge::io {
namespace {

constexpr uint64_t kMaxHeader = uint64_t(100) << 20;  // the Rust reader's limit as well
constexpr int64_t kMaxNumel = int64_t(1) << 40;

struct DtypeEntry {
  const char* name;
  StDtype type;
  int size;
};
constexpr DtypeEntry kDtypes[] = {
    {"BOOL", StDtype::BOOL, 1}, {"U8", StDtype::U8, 1},   {"I8", StDtype::I8, 1},
    {"I16", StDtype::I16, 2},   {"U16", StDtype::U16, 2}, {"F16", StDtype::F16, 2},
    {"BF16", StDtype::BF16, 2}, {"I32", StDtype::I32, 4}, {"U32", StDtype::U32, 4},
    {"F32", StDtype::F32, 4},   {"F64", StDtype::F64, 8}, {"I64", StDtype::I64, 8},
    {"U64", StDtype::U64, 8},   {"F8_E4M3", StDtype::F8_E4M3, 1}, {"F8_E5M2", StDtype::F8_E5M2, 1},
    {"F8_E8M0", StDtype::F8_E8M0, 1},
};

}  // namespace

std::string_view st_dtype_name(StDtype t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  return "?";
}
int st_dtype_size(StDtype t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.size;
  return 0;
}

std::string StTensor::shape_str() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::vector<StTensor> parse_safetensors(const uint8_t* bytes, uint64_t size, const std::string& where) {
  auto fail = [&](const std::string& what) -> void { throw IoError(where + ": " + what); };
  std::vector<StTensor> tensors;
  if (size < 8) fail(fmt::format("not a safetensors file: {} bytes, too small for the 8-byte header length", size));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian on any host
  if (n > kMaxHeader) fail(fmt::format("header length {} exceeds the {}-byte limit (damaged or not safetensors)", n, kMaxHeader));
  if (n > size - 8) fail(fmt::format("header length {} runs past the end of the file ({} bytes)", n, size));
  if (n < 2 || bytes[8] != '{') fail("header is not a JSON object");
  const char* h = reinterpret_cast<const char*>(bytes + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(h, h + n);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail("header is not a JSON object");
  const uint64_t data_size = size - 8 - n;
  const uint8_t* data = bytes + 8 + n;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& what) { fail(fmt::format("tensor '{}': {}", name, what)); };
    const nlohmann::json& v = it.value();
    if (!v.is_object()) bad("header entry is not an object");
    StTensor t;
    t.name = name;
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("missing dtype");
    const std::string dt = v["dtype"].get<std::string>();
    const DtypeEntry* de = nullptr;
    for (const auto& d : kDtypes)
      if (dt == d.name) de = &d;
    if (!de) bad(fmt::format("unknown dtype '{}'", dt));
    t.dtype = de->type;
    if (!v.contains("shape") || !v["shape"].is_array()) bad("missing shape");
    int64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) bad(fmt::format("shape {} has a non-integer or negative dimension", v["shape"].dump()));
      const int64_t x = d.get<int64_t>();
      if (x > 0 && numel > kMaxNumel / x) bad(fmt::format("shape {} has more than 2^40 elements", v["shape"].dump()));
      numel *= x;
      t.shape.push_back(x);
    }
    t.numel = numel;
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2 ||
        !v["data_offsets"][0].is_number_unsigned() || !v["data_offsets"][1].is_number_unsigned())
      bad("data_offsets must be two non-negative integers");
    t.begin = v["data_offsets"][0].get<uint64_t>();
    t.end = v["data_offsets"][1].get<uint64_t>();
    if (t.begin > t.end) bad(fmt::format("data_offsets [{}, {}] are reversed", t.begin, t.end));
    const uint64_t want = uint64_t(numel) * uint64_t(de->size);
    if (t.end - t.begin != want)
      bad(fmt::format("data_offsets [{}, {}] hold {} bytes, but {} {} needs {}", t.begin, t.end, t.end - t.begin, dt,
                      t.shape_str(), want));
    tensors.push_back(std::move(t));
  }
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(tensors[a].begin, tensors[a].end) < std::pair(tensors[b].begin, tensors[b].end);
  });
  uint64_t at = 0;
  const StTensor* prev = nullptr;
  for (size_t i : order) {
    StTensor& t = tensors[i];
    if (t.begin < at)
      fail(fmt::format("tensor '{}': data_offsets [{}, {}] overlap tensor '{}' (which ends at {})", t.name, t.begin, t.end,
                       prev->name, at));
    if (t.begin > at)
      fail(fmt::format("tensor '{}': data_offsets [{}, {}] leave a gap after byte {} (tensors must tile the data section)",
                       t.name, t.begin, t.end, at));
    if (t.end > data_size)
      fail(fmt::format("tensor '{}': data_offsets [{}, {}] run past the end of the file (data section has {} bytes; "
                       "file truncated?)", t.name, t.begin, t.end, data_size));
    t.data = data + t.begin;
    at = t.end;
    prev = &t;
  }
  if (at != data_size)
    fail(fmt::format("{} bytes after the last tensor's data (header describes {} of {} data bytes)", data_size - at, at,
                     data_size));
  return tensors;
}

SafetensorsFile::SafetensorsFile(std::string path)
    : map_(std::move(path)), tensors_(parse_safetensors(map_.data(), map_.size(), map_.path())) {
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace moeforge::io
