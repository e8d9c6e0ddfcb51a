#include "engine/text/pre_tokenize.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include "vkattn/errors.h"

namespace vkattn::text {
namespace {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

icu::UnicodeString unicode_of(std::string_view text) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
}

std::string utf8_of(const icu::UnicodeString& text, int32_t begin, int32_t end) {
  std::string out;
  text.tempSubStringBetween(begin, end).toUTF8String(out);
  return out;
}

}  // namespace

PreTokenizer::PreTokenizer(const std::string& pattern, const std::string& source) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError where;
  std::shared_ptr<icu::RegexPattern> compiled(icu::RegexPattern::compile(unicode_of(pattern), 0, where, status));
  if (U_FAILURE(status)) {
    throw FileError(source + ": the pre-tokenizer's pattern does not compile (" + u_errorName(status) + " at offset " +
                    std::to_string(where.offset) + ")");
  }
  pattern_ = std::move(compiled);
}

const PreTokenizer& PreTokenizer::gpt2() {
  static const PreTokenizer gpt2(kGpt2Pattern, "GPT-2's pre-tokenizer");
  return gpt2;
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const icu::UnicodeString unicode = unicode_of(text);
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> matcher(pattern_->matcher(unicode, status));
  std::vector<std::string> pieces;
  int32_t done = 0;
  while (U_SUCCESS(status) && matcher->find(status)) {
    const int32_t begin = matcher->start(status), end = matcher->end(status);
    if (begin > done) pieces.push_back(utf8_of(unicode, done, begin));  // what no match took
    if (end > begin) pieces.push_back(utf8_of(unicode, begin, end));
    done = end;
  }
  if (U_FAILURE(status)) throw Error(std::string("pre-tokenizing a text: ") + u_errorName(status));
  if (done < unicode.length()) pieces.push_back(utf8_of(unicode, done, unicode.length()));
  return pieces;
}

std::string nfc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(status);
  icu::UnicodeString out;
  if (U_SUCCESS(status)) out = normalizer->normalize(unicode_of(text), status);
  if (U_FAILURE(status)) throw Error(std::string("normalising a text to NFC: ") + u_errorName(status));
  std::string bytes;
  out.toUTF8String(bytes);
  return bytes;
}

void check_utf8(std::string_view text, const std::string& what) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    const int32_t at = i;
    UChar32 c;
    U8_NEXT(s, i, length, c);
    if (c < 0) throw ShapeError(what + " is not UTF-8 at byte " + std::to_string(at));
  }
}

}  // namespace vkattn::text
