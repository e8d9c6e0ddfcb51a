#pragma once
// GPT-2's pre-tokenizer: a text's pieces by the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (contractions, words and numbers with their leading space, punctuation runs, whitespace but the
// space before a word), with ICU's Unicode letters, numbers and spaces.
#include <string>
#include <string_view>
#include <vector>

namespace vkattn::text {

// `text` is valid UTF-8 (check_utf8); the pieces, concatenated, are `text`.
std::vector<std::string> pre_tokenize(std::string_view text);

// A ShapeError "<what> is not UTF-8 at byte N" unless `text` is valid UTF-8.
void check_utf8(std::string_view text, const std::string& what);

}  // namespace vkattn::text
