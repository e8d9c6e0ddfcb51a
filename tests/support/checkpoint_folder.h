#pragma once
// Checkpoint folders (models/tiny_*) for the tests: their JSON files read, and copies to change.
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace vkattn::testing {

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A copy of a model's folder (its .py files left out) under the temporary directory, to change.
inline std::filesystem::path copy_of(const std::filesystem::path& model, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("vkattn_test_checkpoint_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& file : fs::directory_iterator(model)) {
    if (file.path().extension() != ".py") fs::copy_file(file.path(), dir / file.path().filename());
  }
  return dir;
}

// config.json of the folder `dir`, changed by `change`.
inline void rewrite_config(const std::filesystem::path& dir, const std::function<void(nlohmann::json&)>& change) {
  nlohmann::json config = read_json(dir / "config.json");
  change(config);
  std::ofstream(dir / "config.json") << config.dump();
}

}  // namespace vkattn::testing
