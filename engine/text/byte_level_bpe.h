#pragma once
// GPT-2's byte-level BPE: each pre-token's bytes mapped to the vocabulary's 256 printable
// stand-ins, then merged pair by pair in the order of the merges.
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/text/vocabulary.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn::text {

class PreTokenizer;  // engine/text/pre_tokenize.h

// How a tokenizer.json's byte-level BPE differs from GPT-2's own.
struct ByteLevelOptions {
  std::string pattern;         // the pre-tokenizer's; empty: GPT-2's
  bool nfc = false;            // the text normalised to NFC first (Qwen2)
  bool ignore_merges = false;  // a pre-token in the vocabulary is one token, unmerged (Llama 3)
  std::vector<std::string> prefix, suffix;  // special tokens before and after every text (a BOS)
  PairTemplate pair;                        // two texts as one (RoBERTa's); none: encode_pair refuses
  Strips strips;                            // special tokens that take whitespace around them
};

class ByteLevelBPE : public VocabularyTokenizer {
 public:
  // vocab: token (in the byte stand-ins) -> id; merges: pairs, the first merged first;
  // special: tokens matched in the text before it is split (each must be in vocab). Errors name
  // `source`, and `merges_source` (default: source) for a merge.
  ByteLevelBPE(Vocab vocab, std::vector<std::pair<std::string, std::string>> merges, std::vector<std::string> special,
               const std::string& source, std::string merges_source = {}, ByteLevelOptions options = {});

  // GPT-2's files: vocab.json {"token": id}, merges.txt ("#version" line, then "a b" a line).
  static ByteLevelBPE from_files(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);

  std::string decode(std::span<const int64_t> ids) const override;

 protected:
  // Each token's offsets: its bytes, the whitespace at either end left out.
  std::vector<int64_t> encode_text(std::string_view text, std::vector<Offset>* offsets) const override;
  bool gives_offsets() const override { return !options_.nfc; }  // NFC's text is not the one given

 private:
  MergeRanks ranks_;
  ByteLevelOptions options_;
  std::shared_ptr<const PreTokenizer> pre_tokenizer_;
};

}  // namespace vkattn::text
