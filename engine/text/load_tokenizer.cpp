// A checkpoint folder's tokenizer: tokenizer.json (Hugging Face tokenizers' one file) or GPT-2's
// vocab.json + merges.txt.
#include <nlohmann/json.hpp>

#include "engine/io/file.h"
#include "vkattn/errors.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn::text {
namespace {

using nlohmann::json;

// The pre-tokenizer's type, or "none"; a Sequence's members joined by '+'.
std::string pre_tokenizer_kind(const json& pre) {
  if (!pre.is_object()) return "none";
  const std::string type = pre.value("type", "?");
  if (type != "Sequence") return type;
  std::string kinds;
  for (const auto& member : pre.value("pretokenizers", json::array())) {
    kinds += (kinds.empty() ? "" : "+") + pre_tokenizer_kind(member);
  }
  return "Sequence(" + kinds + ")";
}

}  // namespace

// tokenizer.json with a BPE model and the ByteLevel pre-tokenizer: GPT-2's algorithm, its vocab
// and merges in one file, the added tokens beside them.
std::unique_ptr<Tokenizer> parse_tokenizer_json(std::string_view text, const std::string& source) {
  json file;
  try {
    file = json::parse(text);
  } catch (const json::exception& e) {
    throw FileError(source + ": not JSON (" + e.what() + ")");
  }
  if (!file.is_object()) throw FileError(source + ": not a JSON object");
  try {
    const json& model = file.at("model");
    const std::string type = model.value("type", "?");
    if (type != "BPE") {
      throw FileError(source + ": the model is " + type + "; vkattn reads byte-level BPE tokenizers (GPT-2's) so far");
    }
    const std::string pre = pre_tokenizer_kind(file.value("pre_tokenizer", json()));
    if (pre != "ByteLevel") {
      throw FileError(source + ": the pre-tokenizer is " + pre +
                      "; vkattn reads byte-level BPE with GPT-2's ByteLevel pre-tokenizer so far");
    }
    std::unordered_map<std::string, int64_t> vocab;
    for (const auto& [token, id] : model.at("vocab").items()) vocab[token] = id.get<int64_t>();
    std::vector<std::pair<std::string, std::string>> merges;
    for (const auto& m : model.at("merges")) {
      if (m.is_array() && m.size() == 2) {  // tokenizers >= 0.20: ["a", "b"]
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        continue;
      }
      const std::string line = m.get<std::string>();  // "a b"
      const size_t space = line.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == line.size()) {
        throw FileError(source + ": merge '" + line + "' is not two tokens split by one space");
      }
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    }
    std::vector<std::string> special;
    for (const auto& added : file.value("added_tokens", json::array())) {
      const std::string content = added.at("content").get<std::string>();
      vocab[content] = added.at("id").get<int64_t>();
      special.push_back(content);
    }
    return std::make_unique<ByteLevelBPE>(std::move(vocab), std::move(merges), std::move(special), source);
  } catch (const json::exception& e) {
    throw FileError(source + ": " + e.what());
  }
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "tokenizer.json")) {
    const auto bytes = io::read_file(dir / "tokenizer.json");
    return parse_tokenizer_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                                (dir / "tokenizer.json").string());
  }
  if (std::filesystem::exists(dir / "vocab.json") && std::filesystem::exists(dir / "merges.txt")) {
    return std::make_unique<ByteLevelBPE>(ByteLevelBPE::from_files(dir / "vocab.json", dir / "merges.txt"));
  }
  throw FileError(dir.string() + ": no tokenizer: neither tokenizer.json nor vocab.json with merges.txt");
}

}  // namespace vkattn::text
