#pragma once
// SentencePiece's BPE as Hugging Face's tokenizer.json writes it for Llama 2, Mistral and
// TinyLlama: spaces become "▁" (U+2581) with one before the text, the text is not split into
// words (or is, before each "▁", where a Metaspace pre-tokenizer says split), each character is
// a symbol — one missing from the vocabulary becomes its UTF-8 bytes' tokens "<0xNN>" (byte
// fallback), or the unknown token — and symbols merge pair by pair in the order of the merges.
// Decoding turns "▁" back into spaces and "<0xNN>" into bytes, and drops the space the encoder
// put before the text.
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/text/vocabulary.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn::text {

inline const std::string kSentencePieceSpace = "\xe2\x96\x81";  // ▁ (U+2581), a space in its tokens

struct SentencePieceOptions {
  bool prepend = true;              // "▁" before the text (Prepend normalizer; Metaspace's scheme)
  bool prepend_first_only = false;  // Metaspace's "first": not after a special token
  bool prepend_to_space = true;     // false (Metaspace's): not before a text that starts with one
  bool split = false;               // Metaspace's split: a pre-token from each "▁" on
  bool byte_fallback = true;        // a character not in the vocabulary as <0xNN> byte tokens
  std::string unk_token = "<unk>";  // otherwise this (consecutive ones fused into one)
  std::vector<std::string> prefix, suffix;  // special tokens around every text (a BOS)
  PairTemplate pair;                        // two texts as one; none: encode_pair refuses
  Strips strips;                            // special tokens that take whitespace around them
};

class SentencePieceBPE : public VocabularyTokenizer {
 public:
  // vocab: token -> id; merges: pairs, the first merged first; special: tokens matched in the
  // text as they are. FileError "<source>: …" names a bad id, merge or missing byte token.
  SentencePieceBPE(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   std::vector<std::string> special, const std::string& source, SentencePieceOptions options);

  std::string decode(std::span<const int64_t> ids) const override;
  std::string decode_continuation(std::span<const int64_t> ids) const override;

 protected:
  // No offsets: a piece's "▁" is a space the text may not have.
  std::vector<int64_t> encode_text(std::string_view text, std::vector<Offset>* offsets) const override;

 private:
  // One pre-token's ids, appended to `ids`.
  void encode_word(const std::string& word, std::vector<int64_t>& ids) const;
  std::string text_of(std::span<const int64_t> ids) const;

  MergeRanks ranks_;
  SentencePieceOptions options_;
  int64_t unk_id_ = -1;
  std::vector<int64_t> byte_ids_;  // byte -> its <0xNN> token's id, with byte fallback
};

}  // namespace vkattn::text
