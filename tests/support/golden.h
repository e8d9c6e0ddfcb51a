#pragma once
// The PyTorch golden fixtures in tests/golden/<name>/ (written by tests/golden/generate.py):
// weights.safetensors, the input .npy files, expected_output.npy [expected_weights.npy], and
// config.json saying how forward() was called.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "vkattn/modules/multi_head_attention.h"

namespace vkattn::testing {

struct GoldenFixture {
  std::string name;
  std::filesystem::path dir;
  nlohmann::json config;

  std::filesystem::path weights() const { return dir / "weights.safetensors"; }
  // dir/<input>.npy; has() says whether the fixture has that input (key, value, masks, weights).
  std::filesystem::path npy(const std::string& input) const { return dir / (input + ".npy"); }
  bool has(const std::string& input) const { return std::filesystem::exists(npy(input)); }
  // --heads when the weight file has no num_heads in its metadata, else 0.
  int64_t heads_argument() const;
  ForwardOptions forward_options() const;
};

// The fixture folders under `root`, those holding a config.json, sorted: not the __pycache__
// Python leaves beside tests/golden/generate.py, which models/*/train.py import.
std::vector<std::string> fixture_folders(const std::filesystem::path& root);
// Every fixture folder of tests/golden, sorted.
std::vector<std::string> golden_fixture_names();
GoldenFixture golden_fixture(const std::string& name);

}  // namespace vkattn::testing
