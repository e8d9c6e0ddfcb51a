#pragma once
// Text to token ids and back, as the Hugging Face hub's checkpoints define them:
//   ByteLevelBPE   GPT-2's byte-level BPE: vocab.json + merges.txt, or a tokenizer.json whose
//                  model is BPE with the ByteLevel pre-tokenizer, alone (GPT-2's pattern) or
//                  after a Split by its own pattern (Llama 3's, Qwen2's), NFC first or not,
//                  special tokens around each text by its TemplateProcessing (a BOS).
// A text is UTF-8; encode() splits it at the special tokens first (GPT-2's <|endoftext|>), then
// into pre-tokens by GPT-2's pattern (words with their leading space, numbers, punctuation runs,
// whitespace), maps each pre-token's bytes to the vocabulary's 256 printable stand-ins and merges
// them by rank. decode() maps back to bytes; a sequence that ends inside a UTF-8 character gives
// those bytes as they are.
// Bad files and bad text are FileError / ShapeError with one line naming the file and the entry.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vkattn::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  // The ids' text (bytes); a ShapeError names an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int64_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // The id of a token of the vocabulary (e.g. "<|endoftext|>"), or -1.
  virtual int64_t token_id(const std::string& token) const = 0;
};

class PreTokenizer;  // engine/text/pre_tokenize.h

// How a tokenizer.json's byte-level BPE differs from GPT-2's own.
struct ByteLevelOptions {
  std::string pattern;         // the pre-tokenizer's; empty: GPT-2's
  bool nfc = false;            // the text normalised to NFC first (Qwen2)
  bool ignore_merges = false;  // a pre-token in the vocabulary is one token, unmerged (Llama 3)
  std::vector<std::string> prefix, suffix;  // special tokens before and after every text (a BOS)
};

class ByteLevelBPE : public Tokenizer {
 public:
  // vocab: token (in the byte stand-ins) -> id; merges: pairs, the first merged first;
  // special: tokens matched in the text before it is split (each must be in vocab). Errors name
  // `source`, and `merges_source` (default: source) for a merge.
  ByteLevelBPE(std::unordered_map<std::string, int64_t> vocab, std::vector<std::pair<std::string, std::string>> merges,
               std::vector<std::string> special, const std::string& source, std::string merges_source = {},
               ByteLevelOptions options = {});

  // GPT-2's files: vocab.json {"token": id}, merges.txt ("#version" line, then "a b" a line).
  static ByteLevelBPE from_files(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int64_t> ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  int64_t token_id(const std::string& token) const override;

 private:
  // The merged symbols of one pre-token's stand-in characters (each a UTF-8 string).
  std::vector<std::string> merge(std::vector<std::string> symbols) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> tokens_;                // id -> token
  std::unordered_map<std::string, size_t> ranks_;  // "a b" -> the merge's rank
  std::vector<std::string> special_;
  ByteLevelOptions options_;
  std::shared_ptr<const PreTokenizer> pre_tokenizer_;
};

// A checkpoint folder's tokenizer: tokenizer.json when there is one, else vocab.json +
// merges.txt. A FileError names the folder when it has neither, and the model when it is not BPE.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir);
// tokenizer.json's text; errors start with `source`.
std::unique_ptr<Tokenizer> parse_tokenizer_json(std::string_view text, const std::string& source);

}  // namespace vkattn::text
