#include "engine/text/pre_tokenize.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <memory>

#include "vkattn/errors.h"

namespace vkattn::text {
namespace {

const char* const kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The compiled pattern, once: a RegexPattern is immutable and shared across threads; each call
// makes its own matcher.
const icu::RegexPattern& pattern() {
  static const std::unique_ptr<icu::RegexPattern> compiled = [] {
    UErrorCode status = U_ZERO_ERROR;
    UParseError where;
    std::unique_ptr<icu::RegexPattern> p(
        icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(kPattern), 0, where, status));
    if (U_FAILURE(status)) throw Error(std::string("GPT-2's pre-tokenizer pattern: ") + u_errorName(status));
    return p;
  }();
  return *compiled;
}

}  // namespace

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

std::vector<std::string> pre_tokenize(std::string_view text) {
  const icu::UnicodeString unicode =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> matcher(pattern().matcher(unicode, status));
  std::vector<std::string> pieces;
  while (U_SUCCESS(status) && matcher->find(status)) {
    const int32_t begin = matcher->start(status), end = matcher->end(status);
    std::string piece;
    unicode.tempSubStringBetween(begin, end).toUTF8String(piece);
    pieces.push_back(std::move(piece));
  }
  if (U_FAILURE(status)) throw Error(std::string("pre-tokenizing a text: ") + u_errorName(status));
  return pieces;
}

}  // namespace vkattn::text
