#pragma once
// BERT's text before WordPiece, as Hugging Face's tokenizers define it (BertNormalizer, then
// BertPreTokenizer), with ICU's Unicode categories.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vkattn::text {

struct BertNormalizerOptions {
  bool clean_text = true;            // control characters out, every whitespace a space
  bool handle_chinese_chars = true;  // a space each side of a CJK ideograph: one word each
  std::optional<bool> strip_accents;  // NFD, then nonspacing marks out; none: as lowercase
  bool lowercase = true;             // each character's full lowercase mapping
};

// `text` (valid UTF-8) normalised in that order: "Café\tNAÏVE" -> "cafe naive".
std::string bert_normalize(std::string_view text, const BertNormalizerOptions& options);

// The words of a normalised text: split at whitespace (dropped) and at each punctuation mark (a
// word of its own; ASCII's symbols count too): "it's 3.5$" -> it ' s 3 . 5 $
std::vector<std::string> bert_pre_tokenize(std::string_view text);

}  // namespace vkattn::text
