#include "engine/text/vocabulary.h"

#include <algorithm>
#include <limits>
#include <queue>

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

const std::string& token_of(const std::vector<std::string>& tokens, std::span<const int64_t> ids, size_t i) {
  const int64_t id = ids[i], V = static_cast<int64_t>(tokens.size());
  if (id < 0 || id >= V) {
    throw ShapeError("token id " + std::to_string(id) + " at index " + std::to_string(i) +
                     " is outside the vocabulary [0, " + std::to_string(V) + ")");
  }
  return tokens[static_cast<size_t>(id)];
}

SpecialTokens::SpecialTokens(std::vector<std::string> tokens, const Vocab& vocab, const std::string& source,
                             const Strips& strips) {
  for (auto& token : tokens) {
    if (token.empty()) throw FileError(source + ": a special token is empty");
    auto it = vocab.find(token);
    if (it == vocab.end()) throw FileError(source + ": special token '" + token + "' is not in the vocabulary");
    auto strip = strips.find(token);
    tokens_.push_back({std::move(token), it->second, strip == strips.end() ? Strip{} : strip->second});
  }
  // the longest first, so that a special token that starts another does not split it
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const auto& x, const auto& y) { return x.text.size() > y.text.size(); });
}

bool SpecialTokens::contains(std::string_view token) const {
  return std::any_of(tokens_.begin(), tokens_.end(), [&](const auto& t) { return t.text == token; });
}

void SpecialTokens::split(std::string_view text, const std::function<void(std::string_view part)>& plain,
                          const std::function<void(int64_t id, std::string_view token)>& special) const {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  size_t begin = 0;
  while (begin < text.size()) {
    // the first special token at or after `begin` (the longest where several start there)
    size_t found = std::string_view::npos;
    const Token* which = nullptr;
    for (const auto& token : tokens_) {
      const size_t at = text.find(token.text, begin);
      if (at < found) found = at, which = &token;
    }
    std::string_view part = text.substr(begin, which ? found - begin : std::string_view::npos);
    if (which && which->strip.left) {
      while (!part.empty() && space(part.back())) part.remove_suffix(1);
    }
    if (!part.empty()) plain(part);
    if (!which) break;
    special(which->id, text.substr(found, which->text.size()));
    begin = found + which->text.size();
    if (which->strip.right) {
      while (begin < text.size() && space(text[begin])) ++begin;
    }
  }
}

MergeRanks merge_ranks(const std::vector<std::pair<std::string, std::string>>& merges, const Vocab& vocab,
                       const std::string& source) {
  MergeRanks ranks;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    if (!vocab.contains(a + b)) {
      throw FileError(source + ": merge " + std::to_string(rank + 1) + " '" + a + " " + b + "' makes '" + a + b +
                      "', which is not in the vocabulary");
    }
    ranks.emplace(a + ' ' + b, rank);  // a repeated merge keeps its first rank
  }
  return ranks;
}

std::vector<std::string> merge_symbols(std::vector<std::string> symbols, const MergeRanks& ranks) {
  // The symbols as a linked list, the ranked adjacent pairs in a heap of (rank, left symbol): the
  // lowest rank first, the leftmost among equals, as tokenizers' BPE merges (O(n log n) for a
  // text of n symbols; a SentencePiece model merges a whole text at once).
  const size_t n = symbols.size();
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::vector<size_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) prev[i] = i == 0 ? kNone : i - 1, next[i] = i + 1 == n ? kNone : i + 1;
  using Pair = std::pair<size_t, size_t>;  // (rank, left symbol)
  std::priority_queue<Pair, std::vector<Pair>, std::greater<>> heap;
  auto rank_of = [&](size_t left) {
    if (left == kNone || next[left] == kNone) return kNone;
    auto it = ranks.find(symbols[left] + ' ' + symbols[next[left]]);
    return it == ranks.end() ? kNone : it->second;
  };
  auto push = [&](size_t left) {
    if (const size_t rank = rank_of(left); rank != kNone) heap.emplace(rank, left);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [rank, left] = heap.top();
    heap.pop();
    if (!alive[left] || rank_of(left) != rank) continue;  // a pair since merged away
    const size_t right = next[left];
    symbols[left] += symbols[right];
    alive[right] = false;
    next[left] = next[right];
    if (next[right] != kNone) prev[next[right]] = left;
    push(prev[left]);
    push(left);
  }
  std::vector<std::string> merged;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) merged.push_back(std::move(symbols[i]));
  }
  return merged;
}

VocabularyTokenizer::VocabularyTokenizer(Vocab vocab, std::vector<std::string> special,
                                         const std::vector<std::string>& prefix, const std::vector<std::string>& suffix,
                                         const std::string& source, const Strips& strips, const PairTemplate& pair)
    : vocab_(std::move(vocab)),
      tokens_(tokens_by_id(vocab_, source)),
      special_(std::move(special), vocab_, source, strips),
      prefix_ids_(template_ids(prefix, vocab_, source)),
      suffix_ids_(template_ids(suffix, vocab_, source)) {
  for (const TemplatePiece& piece : pair) {
    const int64_t id = piece.token == "$A"   ? kTextA
                       : piece.token == "$B" ? kTextB
                                             : template_ids({piece.token}, vocab_, source).front();
    pair_.emplace_back(id, piece.type_id);
  }
}

EncodedPair VocabularyTokenizer::encode_pair(std::string_view a, std::string_view b) const {
  if (pair_.empty()) return Tokenizer::encode_pair(a, b);
  EncodedPair out;
  for (const auto& [id, type] : pair_) {
    if (id >= 0) {
      out.ids.push_back(id);
      out.type_ids.push_back(type);
      out.sequence_ids.push_back(-1);
      if (gives_offsets()) out.offsets.emplace_back();
      continue;
    }
    std::vector<Offset> offsets;
    const std::vector<int64_t> text = encode_text(id == kTextA ? a : b, gives_offsets() ? &offsets : nullptr);
    // the single text's prefix and suffix dropped
    const auto first = static_cast<std::ptrdiff_t>(prefix_ids_.size());
    const auto last = static_cast<std::ptrdiff_t>(text.size() - suffix_ids_.size());
    out.ids.insert(out.ids.end(), text.begin() + first, text.begin() + last);
    out.type_ids.insert(out.type_ids.end(), static_cast<size_t>(last - first), type);
    out.sequence_ids.insert(out.sequence_ids.end(), static_cast<size_t>(last - first), id == kTextA ? 0 : 1);
    if (gives_offsets()) out.offsets.insert(out.offsets.end(), offsets.begin() + first, offsets.begin() + last);
  }
  return out;
}

std::vector<Offset> VocabularyTokenizer::offsets(std::string_view text) const {
  if (!gives_offsets()) return Tokenizer::offsets(text);
  std::vector<Offset> offsets;
  encode_text(text, &offsets);
  return offsets;
}

PairTemplate bert_pair(const std::string& cls, const std::string& sep) {
  return {{cls, 0}, {"$A", 0}, {sep, 0}, {"$B", 1}, {sep, 1}};
}

std::vector<int64_t> VocabularyTokenizer::encode_parts(std::string_view text, std::vector<Offset>* offsets,
                                                       const EncodePart& plain) const {
  std::vector<int64_t> ids = prefix_ids_;
  if (offsets) offsets->assign(ids.size(), Offset{});
  auto at = [&](std::string_view part) { return static_cast<size_t>(part.data() - text.data()); };
  int64_t words = 0;  // the words of the parts before: a part's words are counted on from them
  special_.split(
      text,
      [&](std::string_view part) {
        const size_t from = offsets ? offsets->size() : 0;
        plain(part, ids, offsets);
        if (!offsets) return;
        int64_t last = -1;
        for (size_t i = from; i < offsets->size(); ++i) {
          Offset& o = (*offsets)[i];
          o.begin += at(part), o.end += at(part);
          last = std::max(last, o.word);
          o.word += words;
        }
        words += last + 1;
      },
      [&](int64_t id, std::string_view token) {
        ids.push_back(id);
        if (offsets) offsets->push_back({at(token), at(token) + token.size(), words++});
      });
  ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  if (offsets) offsets->resize(ids.size());
  return ids;
}

int64_t VocabularyTokenizer::token_id(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
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
