#include "engine/text/bert_text.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include "vkattn/errors.h"

namespace vkattn::text {
namespace {

// Each code point of valid UTF-8: f(c, its first byte, the byte after it).
template <class F>
void for_each_code_point(std::string_view text, F&& f) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    const int32_t begin = i;
    UChar32 c;
    U8_NEXT(s, i, length, c);
    f(c, static_cast<size_t>(begin), static_cast<size_t>(i));
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

// One character's NFD with its nonspacing marks dropped ("é" -> "e"), appended to `out`
void append_without_marks(std::string& out, UChar32 c) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  icu::UnicodeString decomposed;
  if (U_SUCCESS(status)) decomposed = nfd->normalize(icu::UnicodeString(c), status);
  if (U_FAILURE(status)) throw Error(std::string("normalising a text to NFD: ") + u_errorName(status));
  for (int32_t i = 0; i < decomposed.length(); i = decomposed.moveIndex32(i, 1)) {
    const UChar32 d = decomposed.char32At(i);
    if (u_charType(d) != U_NON_SPACING_MARK) append(out, d);
  }
}

// One character's own full lowercase mapping ('İ' -> "i̇"), as tokenizers lowercases: no
// context, so a final 'Σ' is 'σ'.
void append_lowercase(std::string& out, UChar32 c) {
  if (c < 0x80) {
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return;
  }
  icu::UnicodeString one(c);
  one.toLower(icu::Locale::getRoot());
  one.toUTF8String(out);
}

}  // namespace

std::string bert_normalize(std::string_view text, const BertNormalizerOptions& options,
                           std::vector<std::pair<size_t, size_t>>* source) {
  const bool strip = options.strip_accents.value_or(options.lowercase);
  std::string out, stripped;
  out.reserve(text.size());
  for_each_code_point(text, [&](UChar32 c, size_t begin, size_t end) {
    const size_t before = out.size();
    if (options.clean_text) {
      if (c == 0 || c == 0xFFFD || is_control(c)) return;
      if (is_whitespace(c)) c = ' ';
    }
    const bool spaced = options.handle_chinese_chars && is_chinese(c);
    if (spaced) out += ' ';
    stripped.clear();
    if (strip && c >= 0x80) {
      append_without_marks(stripped, c);
    } else {
      append(stripped, c);
    }
    if (options.lowercase) {
      for_each_code_point(stripped, [&](UChar32 d, size_t, size_t) { append_lowercase(out, d); });
    } else {
      out += stripped;
    }
    if (spaced) out += ' ';
    if (source) source->insert(source->end(), out.size() - before, {begin, end});
  });
  return out;
}

std::vector<std::string_view> bert_pre_tokenize(std::string_view text) {
  std::vector<std::string_view> words;
  size_t word = 0;  // where the word being read began
  auto end_word = [&](size_t at) {
    if (at > word) words.push_back(text.substr(word, at - word));
  };
  for_each_code_point(text, [&](UChar32 c, size_t begin, size_t end) {
    if (is_whitespace(c)) {
      end_word(begin);
      word = end;
    } else if (is_punctuation(c)) {
      end_word(begin);
      words.push_back(text.substr(begin, end - begin));
      word = end;
    }
  });
  end_word(text.size());
  return words;
}

}  // namespace vkattn::text
