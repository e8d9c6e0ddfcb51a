#include "tests/support/golden.h"

#include <algorithm>
#include <fstream>

#include "vkattn/io/npy.h"

namespace vkattn::testing {

namespace fs = std::filesystem;

int64_t GoldenFixture::heads_argument() const {
  return config.at("metadata").get<bool>() ? 0 : config.at("num_heads").get<int64_t>();
}

ForwardOptions GoldenFixture::forward_options() const {
  ForwardOptions o;
  if (has("key_padding_mask")) o.key_padding_mask = io::read_npy(npy("key_padding_mask"));
  if (has("attn_mask")) o.attn_mask = io::read_npy(npy("attn_mask"));
  o.need_weights = config.at("need_weights").get<bool>();
  o.average_attn_weights = config.at("average_attn_weights").get<bool>();
  o.is_causal = config.at("is_causal").get<bool>();
  return o;
}

std::vector<std::string> fixture_folders(const fs::path& root) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (fs::is_regular_file(entry.path() / "config.json")) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> golden_fixture_names() { return fixture_folders(VKATTN_GOLDEN_DIR); }

GoldenFixture golden_fixture(const std::string& name) {
  GoldenFixture f{name, fs::path(VKATTN_GOLDEN_DIR) / name, {}};
  std::ifstream in(f.dir / "config.json");
  f.config = nlohmann::json::parse(in);
  return f;
}

}  // namespace vkattn::testing
