#include "engine/text/sentencepiece_bpe.h"

#include <unicode/utf8.h>

#include <cstdio>

#include "engine/text/pre_tokenize.h"
#include "vkattn/errors.h"

namespace vkattn::text {
namespace {

std::string byte_token(unsigned char byte) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", byte);
  return name;
}

// "<0xNN>" -> NN, or -1 for any other token
int byte_of(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

SentencePieceBPE::SentencePieceBPE(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                                   std::vector<std::string> special, const std::string& source,
                                   SentencePieceOptions options)
    : VocabularyTokenizer(std::move(vocab), std::move(special), options.prefix, options.suffix, source, options.strips,
                          options.pair),
      ranks_(merge_ranks(merges, vocab_, source)),
      options_(std::move(options)) {
  if (auto unk = vocab_.find(options_.unk_token); unk != vocab_.end()) unk_id_ = unk->second;
  if (options_.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      auto it = vocab_.find(byte_token(static_cast<unsigned char>(b)));
      if (it == vocab_.end()) {
        throw FileError(source + ": the vocabulary lacks the byte token '" + byte_token(static_cast<unsigned char>(b)) +
                        "' (byte_fallback needs all 256)");
      }
      byte_ids_.push_back(it->second);
    }
  } else if (unk_id_ < 0) {
    throw FileError(source + ": without byte_fallback the unknown token '" + options_.unk_token +
                    "' must be in the vocabulary");
  }
}

void SentencePieceBPE::encode_word(const std::string& word, std::vector<int64_t>& ids) const {
  std::vector<std::string> symbols;
  const auto* s = reinterpret_cast<const uint8_t*>(word.data());
  const auto length = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < length;) {
    const int32_t begin = i;
    U8_FWD_1(s, i, length);
    symbols.push_back(word.substr(static_cast<size_t>(begin), static_cast<size_t>(i - begin)));
  }
  bool after_unk = false;
  for (const std::string& symbol : merge_symbols(std::move(symbols), ranks_)) {
    if (auto it = vocab_.find(symbol); it != vocab_.end()) {
      ids.push_back(it->second);
      after_unk = false;
    } else if (options_.byte_fallback) {  // a character outside the vocabulary: its bytes
      for (unsigned char byte : symbol) ids.push_back(byte_ids_[byte]);
    } else if (!after_unk) {  // fuse_unk: one unknown token for a run of them
      ids.push_back(unk_id_);
      after_unk = true;
    }
  }
}

std::vector<int64_t> SentencePieceBPE::encode_text(std::string_view text, std::vector<Offset>* offsets) const {
  check_utf8(text, "the text");
  return encode_parts(text, offsets, [&](std::string_view part, std::vector<int64_t>& ids, std::vector<Offset>*) {
    const bool first = part.data() == text.data();
    const bool prepend = options_.prepend && (first || !options_.prepend_first_only) &&
                         (options_.prepend_to_space || !part.starts_with(' '));
    std::string normalised = prepend ? kSentencePieceSpace : "";
    for (char c : part) normalised += c == ' ' ? kSentencePieceSpace : std::string(1, c);
    if (!options_.split) {
      encode_word(normalised, ids);
      return;
    }
    for (size_t begin = 0; begin < normalised.size();) {  // a word from each ▁ on
      size_t end = normalised.find(kSentencePieceSpace, begin + 1);
      if (end == std::string::npos) end = normalised.size();
      encode_word(normalised.substr(begin, end - begin), ids);
      begin = end;
    }
  });
}

std::string SentencePieceBPE::text_of(std::span<const int64_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string& token = token_of(tokens_, ids, i);
    if (const int byte = byte_of(token); byte >= 0 && options_.byte_fallback) {
      text += static_cast<char>(byte);
      continue;
    }
    for (size_t at = 0; at < token.size();) {  // ▁ back to spaces
      if (token.compare(at, kSentencePieceSpace.size(), kSentencePieceSpace) == 0) {
        text += ' ';
        at += kSentencePieceSpace.size();
      } else {
        text += token[at++];
      }
    }
  }
  return text;
}

std::string SentencePieceBPE::decode(std::span<const int64_t> ids) const {
  std::string text = text_of(ids);
  if (options_.prepend && text.starts_with(' ')) text.erase(0, 1);  // the space encode() put first
  return text;
}

std::string SentencePieceBPE::decode_continuation(std::span<const int64_t> ids) const { return text_of(ids); }

}  // namespace vkattn::text
