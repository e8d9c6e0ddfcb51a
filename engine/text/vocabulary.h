#pragma once
// What every tokenizer's vocabulary needs: ids read from a file, the table of tokens by id, and
// the special tokens a text is split at before it is normalised and split into words.
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vkattn/text/tokenizer.h"

namespace vkattn::text {

using Vocab = std::unordered_map<std::string, int64_t>;  // token -> id

// A token's id as a vocabulary file gives it: FileError "<source>: token '…' has id …, not an
// integer" for anything else (a float's conversion would be undefined past int64's range).
int64_t token_id_of(const nlohmann::json& id, const std::string& token, const std::string& source);

// id -> token. FileError "<source>: …" unless the N ids are 0 … N-1, each once.
std::vector<std::string> tokens_by_id(const Vocab& vocab, const std::string& source);
// The token of ids[i]: ShapeError "token id N at index i is outside the vocabulary [0, V)".
const std::string& token_of(const std::vector<std::string>& tokens, std::span<const int64_t> ids, size_t i);

// Special tokens that take the whitespace before them (left) or after them (right) with them, as
// Hugging Face's AddedToken(lstrip=True, rstrip=True) does: RoBERTa's <mask> makes "a <mask>" the
// tokens of "a" and <mask>, not of "a", " " and <mask>.
struct Strip {
  bool left = false, right = false;
};
using Strips = std::map<std::string, Strip>;

// Tokens matched in a text as they are, before anything else reads it (GPT-2's <|endoftext|>,
// BERT's [CLS] and [MASK]): where several start at one place, the longest.
class SpecialTokens {
 public:
  SpecialTokens() = default;
  // FileError "<source>: …" for an empty token or one not in `vocab`. `strips`: of some of them.
  SpecialTokens(std::vector<std::string> tokens, const Vocab& vocab, const std::string& source,
                const Strips& strips = {});

  bool contains(std::string_view token) const;
  // `text` in order: plain(part) for the text between special tokens (not called for an empty
  // part), special(id, token) for each special token; ASCII whitespace a token strips is in
  // neither. part and token are views of `text`.
  void split(std::string_view text, const std::function<void(std::string_view part)>& plain,
             const std::function<void(int64_t id, std::string_view token)>& special) const;

 private:
  struct Token {
    std::string text;
    int64_t id;
    Strip strip;
  };
  std::vector<Token> tokens_;  // the longest first
};

// A BPE model's merges: "a b" -> its rank (the first merge 0), each merge checked to make a token
// of `vocab` (FileError "<source>: merge N 'a b' makes 'ab', which is not in the vocabulary").
using MergeRanks = std::unordered_map<std::string, size_t>;
MergeRanks merge_ranks(const std::vector<std::pair<std::string, std::string>>& merges, const Vocab& vocab,
                       const std::string& source);

// `symbols` merged as BPE merges them: the adjacent pair of the lowest rank (the leftmost of
// equals) merged, again, until no pair has a rank (tokenizers' and SentencePiece's BPE; GPT-2's
// bpe() merges every occurrence of a rank at once, the same wherever a merge's rank comes after
// those of the merges that made its two halves, as BPE training ranks them).
std::vector<std::string> merge_symbols(std::vector<std::string> symbols, const MergeRanks& ranks);

// One piece of a template for pairs: "$A" or "$B" (that text's ids) or a special token, and the
// token type its ids take.
struct TemplatePiece {
  std::string token;
  int64_t type_id = 0;
};
using PairTemplate = std::vector<TemplatePiece>;
// BERT's: [CLS] $A [SEP] $B [SEP], types 0 0 0 1 1, under the tokenizer's names for [CLS], [SEP]
PairTemplate bert_pair(const std::string& cls, const std::string& sep);

// What every tokenizer of a vocabulary file holds: its tokens by name and by id, the special
// tokens matched first, the template's ids around each text; vocab_size() and token_id() from them.
class VocabularyTokenizer : public Tokenizer {
 public:
  std::vector<int64_t> encode(std::string_view text) const final { return encode_text(text, nullptr); }
  // Tokenizer's ConfigError where the tokenizer does not give offsets (gives_offsets()).
  std::vector<Offset> offsets(std::string_view text) const final;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  int64_t token_id(const std::string& token) const override;
  // By `pair`, each text's ids those of encode() without the single text's prefix and suffix, with
  // their offsets where the tokenizer gives them; Tokenizer's ConfigError where `pair` is empty.
  EncodedPair encode_pair(std::string_view a, std::string_view b) const override;

 protected:
  // FileError "<source>: …" for bad ids, special or template tokens (as the functions below).
  VocabularyTokenizer(Vocab vocab, std::vector<std::string> special, const std::vector<std::string>& prefix,
                      const std::vector<std::string>& suffix, const std::string& source, const Strips& strips = {},
                      const PairTemplate& pair = {});

  // encode()'s ids of `text`; where `offsets` is not null (only where gives_offsets()), each id's
  // Offset in `text` too, one an id.
  virtual std::vector<int64_t> encode_text(std::string_view text, std::vector<Offset>* offsets) const = 0;
  // Whether encode_text gives offsets.
  virtual bool gives_offsets() const { return false; }

  // What a part of a text between special tokens becomes: its ids appended to `ids` and, where
  // `offsets` is not null, each one's Offset in `part` (its word counted from 0 in `part`).
  using EncodePart =
      std::function<void(std::string_view part, std::vector<int64_t>& ids, std::vector<Offset>* offsets)>;
  // The ids of `text` (valid UTF-8): the template's prefix, then for the text between special
  // tokens what `plain` appends, each special token's id, then the template's suffix; where
  // `offsets` is not null, their Offsets in `text` (the template's (0, 0)).
  std::vector<int64_t> encode_parts(std::string_view text, std::vector<Offset>* offsets, const EncodePart& plain) const;

  Vocab vocab_;
  std::vector<std::string> tokens_;  // id -> token
  SpecialTokens special_;
  std::vector<int64_t> prefix_ids_, suffix_ids_;  // the template's before and after every text
  // the template for pairs: a special token's id, or kTextA / kTextB, with its token type
  static constexpr int64_t kTextA = -1, kTextB = -2;
  std::vector<std::pair<int64_t, int64_t>> pair_;
};

// The ids of `tokens` (a template's [CLS] and [SEP], a BOS): FileError "<source>: the template's
// special token '…' is not in the vocabulary" for one that is not.
std::vector<int64_t> template_ids(const std::vector<std::string>& tokens, const Vocab& vocab, const std::string& source);

}  // namespace vkattn::text
