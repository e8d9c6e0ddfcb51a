#include "engine/text/vocabulary.h"

#include <algorithm>

#include "vkattn/errors.h"

namespace vkattn::text {

int64_t token_id_of(const nlohmann::json& id, const std::string& token, const std::string& source) {
  if (!id.is_number_integer()) throw FileError(source + ": token '" + token + "' has id " + id.dump() + ", not an integer");
  return id.get<int64_t>();
}

std::vector<std::string> tokens_by_id(const Vocab& vocab, const std::string& source) {
  std::vector<std::string> tokens(vocab.size());
  std::vector<bool> seen(vocab.size());
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id >= static_cast<int64_t>(vocab.size()) || seen[static_cast<size_t>(id)]) {
      throw FileError(source + ": token '" + token + "' has id " + std::to_string(id) + ", but the " +
                      std::to_string(vocab.size()) + " ids must be 0 … " + std::to_string(vocab.size() - 1) +
                      ", each once");
    }
    seen[static_cast<size_t>(id)] = true;
    tokens[static_cast<size_t>(id)] = token;
  }
  return tokens;
}

SpecialTokens::SpecialTokens(std::vector<std::string> tokens, const Vocab& vocab, const std::string& source) {
  for (auto& token : tokens) {
    if (token.empty()) throw FileError(source + ": a special token is empty");
    auto it = vocab.find(token);
    if (it == vocab.end()) throw FileError(source + ": special token '" + token + "' is not in the vocabulary");
    tokens_.emplace_back(std::move(token), it->second);
  }
  // the longest first, so that a special token that starts another does not split it
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
}

bool SpecialTokens::contains(std::string_view token) const {
  return std::any_of(tokens_.begin(), tokens_.end(), [&](const auto& t) { return t.first == token; });
}

void SpecialTokens::split(std::string_view text, const std::function<void(std::string_view)>& plain,
                          const std::function<void(int64_t)>& special) const {
  size_t begin = 0;
  while (begin < text.size()) {
    // the first special token at or after `begin` (the longest where several start there)
    size_t found = std::string_view::npos;
    const std::pair<std::string, int64_t>* which = nullptr;
    for (const auto& token : tokens_) {
      const size_t at = text.find(token.first, begin);
      if (at < found) found = at, which = &token;
    }
    const std::string_view part = text.substr(begin, which ? found - begin : std::string_view::npos);
    if (!part.empty()) plain(part);
    if (!which) break;
    special(which->second);
    begin = found + which->first.size();
  }
}

std::vector<int64_t> template_ids(const std::vector<std::string>& tokens, const Vocab& vocab, const std::string& source) {
  std::vector<int64_t> ids;
  for (const auto& token : tokens) {
    auto it = vocab.find(token);
    if (it == vocab.end()) {
      throw FileError(source + ": the template's special token '" + token + "' is not in the vocabulary");
    }
    ids.push_back(it->second);
  }
  return ids;
}

}  // namespace vkattn::text
