#pragma once
// BERT's text before WordPiece, as Hugging Face's tokenizers define it (BertNormalizer, then
// BertPreTokenizer), with ICU's Unicode categories.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vkattn::text {

struct BertNormalizerOptions {
  bool clean_text = true;            // control characters out, every whitespace a space
  bool handle_chinese_chars = true;  // a space each side of a CJK ideograph: one word each
  std::optional<bool> strip_accents;  // NFD, then nonspacing marks out; none: as lowercase
  bool lowercase = true;             // each character's full lowercase mapping
};

// `text` (valid UTF-8) normalised in that order: "Café\tNAÏVE" -> "cafe naive". Each character
// is normalised on its own (as in order over the whole text: every step maps one character to
// none, one or several); where `source` is not null, it gets each output byte's character's
// bytes in `text`: "É" -> "e", its one byte from bytes [0, 2).
std::string bert_normalize(std::string_view text, const BertNormalizerOptions& options,
                           std::vector<std::pair<size_t, size_t>>* source = nullptr);

// The words of a normalised text, views of it: split at whitespace (dropped) and at each
// punctuation mark (a word of its own; ASCII's symbols count too): "it's 3.5$" -> it ' s 3 . 5 $
std::vector<std::string_view> bert_pre_tokenize(std::string_view text);

}  // namespace vkattn::text
