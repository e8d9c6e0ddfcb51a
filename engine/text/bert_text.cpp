#include "engine/text/bert_text.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include "vkattn/errors.h"

namespace vkattn::text {
namespace {

// Each code point of valid UTF-8.
template <class F>
void for_each_code_point(std::string_view text, F&& f) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    UChar32 c;
    U8_NEXT(s, i, length, c);
    f(c);
  }
}

void append(std::string& out, UChar32 c) {
  char bytes[U8_MAX_LENGTH];
  int32_t n = 0;
  U8_APPEND_UNSAFE(bytes, n, c);
  out.append(bytes, static_cast<size_t>(n));
}

// Rust's char::is_whitespace: Unicode's White_Space property (tabs and newlines among them)
bool is_whitespace(UChar32 c) { return u_isUWhiteSpace(c); }

// tokenizers' is_control: the "other" categories (Cc, Cf, Cs, Co, Cn), but tab and newlines
bool is_control(UChar32 c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  switch (u_charType(c)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
      return true;
    default:
      return false;
  }
}

// BERT's CJK Unified Ideographs blocks (not Japanese kana or Korean hangul)
bool is_chinese(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// ASCII's punctuation and symbols (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~), or Unicode's P categories
bool is_punctuation(UChar32 c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E) || u_ispunct(c);
}

std::string nfd_without_marks(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  icu::UnicodeString decomposed;
  if (U_SUCCESS(status)) {
    decomposed = nfd->normalize(
        icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size()))), status);
  }
  if (U_FAILURE(status)) throw Error(std::string("normalising a text to NFD: ") + u_errorName(status));
  std::string out;
  for (int32_t i = 0; i < decomposed.length(); i = decomposed.moveIndex32(i, 1)) {
    const UChar32 c = decomposed.char32At(i);
    if (u_charType(c) != U_NON_SPACING_MARK) append(out, c);
  }
  return out;
}

// Each character's own full lowercase mapping ('İ' -> "i̇"), as tokenizers lowercases: no
// context, so a final 'Σ' is 'σ'.
std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for_each_code_point(text, [&](UChar32 c) {
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
      return;
    }
    icu::UnicodeString one(c);
    one.toLower(icu::Locale::getRoot());
    one.toUTF8String(out);
  });
  return out;
}

}  // namespace

std::string bert_normalize(std::string_view text, const BertNormalizerOptions& options) {
  std::string out;
  out.reserve(text.size());
  for_each_code_point(text, [&](UChar32 c) {
    if (options.clean_text) {
      if (c == 0 || c == 0xFFFD || is_control(c)) return;
      if (is_whitespace(c)) c = ' ';
    }
    const bool spaced = options.handle_chinese_chars && is_chinese(c);
    if (spaced) out += ' ';
    append(out, c);
    if (spaced) out += ' ';
  });
  if (options.strip_accents.value_or(options.lowercase)) out = nfd_without_marks(out);
  if (options.lowercase) out = lowercase(out);
  return out;
}

std::vector<std::string> bert_pre_tokenize(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  auto end_word = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for_each_code_point(text, [&](UChar32 c) {
    if (is_whitespace(c)) {
      end_word();
    } else if (is_punctuation(c)) {
      end_word();
      append(word, c);
      end_word();
    } else {
      append(word, c);
    }
  });
  end_word();
  return words;
}

}  // namespace vkattn::text
