// A Hugging Face checkpoint directory: config.json plus one or more safetensors files.
//
// Sharded checkpoints are followed through model.safetensors.index.json ("weight_map": tensor
// name -> file name, relative to the directory; names with '/' or '..' are refused). Without
// an index, every *.safetensors file in the directory is read. Files are mapped and validated
// when first needed, so opening one layer of a 50-file model touches only that layer's files.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.hpp"

namespace moeforge::io {

struct TensorRef {
  const SafetensorsFile* file = nullptr;
  const StTensor* tensor = nullptr;
  // "<file>: tensor '<name>'" for error messages.
  std::string where() const;
};

class CheckpointDir {
 public:
  // Throws IoError if the directory, config.json or the index cannot be read.
  explicit CheckpointDir(std::string dir);
  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  // Every tensor name the checkpoint declares (index keys, or the headers of every file).
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  // Maps the tensor's file on first use; throws IoError if the tensor is missing (naming it and
  // where it was looked for) or if its file is damaged, or not in the file the index names.
  TensorRef get(const std::string& name) const;

 private:
  const SafetensorsFile& file(const std::string& file_name) const;
  std::string dir_;
  nlohmann::json config_;
  std::string source_;                          // "model.safetensors.index.json" or "*.safetensors"
  std::map<std::string, std::string> where_;    // tensor -> file name
  std::vector<std::string> names_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace moeforge::io
