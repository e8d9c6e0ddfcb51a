#pragma once
// Pre-tokenizers: a text's pieces by a pattern, with ICU's Unicode letters, numbers and spaces —
// GPT-2's
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (contractions, words and numbers with their leading space, punctuation runs, whitespace but the
// space before a word), or a tokenizer.json's Split pattern (Llama 3's, Qwen2's).
#include <unicode/regex.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vkattn::text {

class PreTokenizer {
 public:
  // FileError "<source>: the pre-tokenizer's pattern …" when ICU cannot compile it.
  PreTokenizer(const std::string& pattern, const std::string& source);
  static const PreTokenizer& gpt2();

  // `text` is valid UTF-8 (check_utf8). The matches, and the text between them (Split's
  // "Isolated"): concatenated, the pieces are `text`.
  std::vector<std::string> split(std::string_view text) const;

 private:
  std::shared_ptr<const icu::RegexPattern> pattern_;  // immutable, shared across threads
};

// `text` in Unicode's composed normal form (NFC: "e" + U+0301 -> "é").
std::string nfc(std::string_view text);

// A ShapeError "<what> is not UTF-8 at byte N" unless `text` is valid UTF-8.
void check_utf8(std::string_view text, const std::string& what);

}  // namespace vkattn::text
