#pragma once
// BERT's WordPiece: each word of the normalised text (engine/text/bert_text.h) split greedily
// into the longest tokens of the vocabulary from its start, those after the first written with
// "##"; a word that cannot be split so, or longer than max_input_chars_per_word characters, is
// one [UNK].
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/text/bert_text.h"
#include "engine/text/vocabulary.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn::text {

struct WordPieceOptions {
  BertNormalizerOptions normalizer;
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  int64_t max_input_chars_per_word = 100;
  std::vector<std::string> prefix{"[CLS]"}, suffix{"[SEP]"};  // special tokens around every text
  PairTemplate pair = bert_pair("[CLS]", "[SEP]");              // two texts as one
  // special tokens that take the whitespace around them
  Strips strips;
};

class WordPiece : public VocabularyTokenizer {
 public:
  // vocab: token -> id; special: tokens matched in the text as they are ([CLS], [MASK], …).
  // FileError "<source>: …" names a bad id, a missing [UNK] or template token.
  WordPiece(Vocab vocab, std::vector<std::string> special, const std::string& source, WordPieceOptions options);

  // BERT's files: vocab.txt (one token a line, the line its id) and, where there is one,
  // tokenizer_config.json's do_lower_case, strip_accents, tokenize_chinese_chars and token names.
  static WordPiece from_files(const std::filesystem::path& vocab_txt, const std::filesystem::path& tokenizer_config);

  // The tokens joined by spaces, a "##" token to the one before it; a space before . , ! ? dropped.
  std::string decode(std::span<const int64_t> ids) const override;

 protected:
  // Each token's offsets: the characters of the text its normalised characters came from.
  std::vector<int64_t> encode_text(std::string_view text, std::vector<Offset>* offsets) const override;
  bool gives_offsets() const override { return true; }

 private:
  // One word's ids appended to `ids` and, where `pieces` is not null, each one's bytes in `word`.
  void split_word(std::string_view word, std::vector<int64_t>& ids, std::vector<Offset>* pieces) const;

  WordPieceOptions options_;
  int64_t unk_id_ = 0;
};

}  // namespace vkattn::text
