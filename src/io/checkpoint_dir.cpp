#include "io/checkpoint_dir.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "moeforge/errors.hpp"

namespace moeforge::io {
namespace fs = std::filesystem;
namespace {

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) throw IoError(p.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw IoError(p.string() + ": not valid JSON: " + e.what());
  }
}

}  // namespace

std::string TensorRef::where() const { return fmt::format("{}: tensor '{}'", file->path(), tensor->name); }

CheckpointDir::CheckpointDir(std::string dir) : dir_(std::move(dir)) {
  const fs::path d(dir_);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) throw IoError(dir_ + ": not a checkpoint directory (does not exist or is not a directory)");
  if (!fs::exists(d / "config.json", ec)) throw IoError(dir_ + ": no config.json (expected a Hugging Face checkpoint)");
  config_ = read_json(d / "config.json");
  if (!config_.is_object()) throw IoError((d / "config.json").string() + ": not a JSON object");
  const fs::path index = d / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    source_ = index.string();
    const nlohmann::json j = read_json(index);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw IoError(index.string() + ": no \"weight_map\" object");
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) throw IoError(fmt::format("{}: weight_map['{}'] is not a file name", index.string(), it.key()));
      const std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
        throw IoError(fmt::format("{}: weight_map['{}'] = '{}' is not a plain file name in the directory", index.string(),
                                  it.key(), f));
      where_[it.key()] = f;
    }
  } else {
    source_ = "*.safetensors";
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw IoError(dir_ + ": no model.safetensors.index.json and no *.safetensors file");
    for (const auto& f : files)
      for (const auto& t : file(f).tensors()) {
        auto [it, fresh] = where_.emplace(t.name, f);
        if (!fresh) throw IoError(fmt::format("{}: tensor '{}' is in both {} and {}", dir_, t.name, it->second, f));
      }
  }
  for (const auto& [k, v] : where_) names_.push_back(k);
}

const SafetensorsFile& CheckpointDir::file(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(name);
  if (it == files_.end())
    it = files_.emplace(name, std::make_unique<SafetensorsFile>((fs::path(dir_) / name).string())).first;
  return *it->second;
}

TensorRef CheckpointDir::get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw IoError(fmt::format("{}: tensor '{}' not found (looked in {})", dir_, name, source_));
  const SafetensorsFile& f = file(it->second);
  const StTensor* t = f.find(name);
  if (!t) throw IoError(fmt::format("{}: tensor '{}' is not in this file, although {} names it", f.path(), name, source_));
  return {&f, t};
}

}  // namespace moeforge::io
