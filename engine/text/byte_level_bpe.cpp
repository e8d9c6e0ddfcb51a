#include "engine/text/byte_level_bpe.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <nlohmann/json.hpp>

#include "engine/io/file.h"
#include "engine/text/pre_tokenize.h"
#include "vkattn/errors.h"

namespace vkattn::text {
namespace {

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else {  // the stand-ins are below U+0800: two bytes
    s += static_cast<char>(0xc0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3f));
  }
  return s;
}

// GPT-2's bytes_to_unicode: each byte's printable stand-in. The printable bytes ('!'…'~',
// '¡'…'¬', '®'…'ÿ') stand for themselves; the other 68 for U+0100 onwards, in byte order — so
// that a space is 'Ġ' (U+0120) and a newline 'Ċ'.
const std::array<std::string, 256>& byte_stand_ins() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      t[static_cast<size_t>(b)] = utf8(printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

// stand-in (UTF-8) -> byte
const std::unordered_map<std::string, unsigned char>& stand_in_bytes() {
  static const std::unordered_map<std::string, unsigned char> table = [] {
    std::unordered_map<std::string, unsigned char> t;
    for (int b = 0; b < 256; ++b) t[byte_stand_ins()[static_cast<size_t>(b)]] = static_cast<unsigned char>(b);
    return t;
  }();
  return table;
}

}  // namespace

ByteLevelBPE::ByteLevelBPE(Vocab vocab, std::vector<std::pair<std::string, std::string>> merges,
                           std::vector<std::string> special, const std::string& source, std::string merges_source,
                           ByteLevelOptions options)
    : VocabularyTokenizer(std::move(vocab), std::move(special), options.prefix, options.suffix, source, options.strips,
                          options.pair),
      options_(std::move(options)) {
  pre_tokenizer_ = options_.pattern.empty()
                       ? std::shared_ptr<const PreTokenizer>(&PreTokenizer::gpt2(), [](const PreTokenizer*) {})
                       : std::make_shared<const PreTokenizer>(options_.pattern, source);
  if (merges_source.empty()) merges_source = source;
  for (const auto& stand_in : byte_stand_ins()) {
    if (!vocab_.contains(stand_in)) {
      throw FileError(source + ": the vocabulary lacks the byte token '" + stand_in + "' (byte-level BPE has all 256)");
    }
  }
  ranks_ = merge_ranks(merges, vocab_, merges_source);
}

ByteLevelBPE ByteLevelBPE::from_files(const std::filesystem::path& vocab_json,
                                      const std::filesystem::path& merges_txt) {
  Vocab vocab;
  try {
    const nlohmann::json file = nlohmann::json::parse(io::read_text(vocab_json));
    if (!file.is_object()) throw FileError(vocab_json.string() + ": not a JSON object of token: id");
    for (const auto& [token, id] : file.items()) vocab[token] = token_id_of(id, token, vocab_json.string());
  } catch (const nlohmann::json::exception& e) {
    throw FileError(vocab_json.string() + ": not a JSON object of token: id (" + e.what() + ")");
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const std::string lines = io::read_text(merges_txt);
  size_t line_number = 0;
  for (size_t begin = 0; begin < lines.size();) {
    size_t end = lines.find('\n', begin);
    if (end == std::string::npos) end = lines.size();
    std::string line = lines.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || line.find(' ', space + 1) != std::string::npos ||
        space + 1 == line.size()) {
      throw FileError(merges_txt.string() + ": line " + std::to_string(line_number) + " '" + line +
                      "' is not two tokens split by one space");
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  std::vector<std::string> special;
  if (vocab.contains("<|endoftext|>")) special.push_back("<|endoftext|>");
  return ByteLevelBPE(std::move(vocab), std::move(merges), std::move(special), vocab_json.string(),
                      merges_txt.string());
}

std::vector<int64_t> ByteLevelBPE::encode_text(std::string_view input, std::vector<Offset>* offsets) const {
  check_utf8(input, "the text");
  const std::string normalised = options_.nfc ? nfc(input) : std::string();
  const std::string_view text = options_.nfc ? std::string_view(normalised) : input;
  return encode_parts(text, offsets, [&](std::string_view part, std::vector<int64_t>& ids, std::vector<Offset>* at) {
    size_t piece_at = 0;  // the pieces, one after another, are `part`; each is a word
    int64_t word = 0;
    auto token = [&](int64_t id, size_t begin, size_t end) {  // bytes [begin, end) of `part`
      ids.push_back(id);
      if (!at) return;
      auto space = [&](size_t i) { return std::isspace(static_cast<unsigned char>(part[i])) != 0; };
      while (begin < end && space(begin)) ++begin;
      while (end > begin && space(end - 1)) --end;
      at->push_back({begin, end, word});
    };
    for (const std::string& piece : pre_tokenizer_->split(part)) {
      std::vector<std::string> symbols;
      std::string whole;
      for (unsigned char byte : piece) {
        symbols.push_back(byte_stand_ins()[byte]);
        whole += symbols.back();
      }
      if (auto it = options_.ignore_merges ? vocab_.find(whole) : vocab_.end(); it != vocab_.end()) {
        token(it->second, piece_at, piece_at + piece.size());
      } else {
        size_t byte = piece_at;
        for (const std::string& symbol : merge_symbols(std::move(symbols), ranks_)) {
          // each stand-in one byte: as many bytes as the symbol has characters (1 or 2 bytes each)
          const auto n = static_cast<size_t>(std::count_if(symbol.begin(), symbol.end(), [](char c) {
            return (static_cast<unsigned char>(c) & 0xc0) != 0x80;
          }));
          token(vocab_.at(symbol), byte, byte + n);
          byte += n;
        }
      }
      piece_at += piece.size();
      ++word;
    }
  });
}

std::string ByteLevelBPE::decode(std::span<const int64_t> ids) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string& token = token_of(tokens_, ids, i);
    if (special_.contains(token)) {
      bytes += token;
      continue;
    }
    for (size_t k = 0; k < token.size();) {  // each stand-in: 1 or 2 bytes of UTF-8
      const size_t length = static_cast<unsigned char>(token[k]) < 0x80 ? 1 : 2;
      auto it = stand_in_bytes().find(token.substr(k, length));
      if (it == stand_in_bytes().end()) {  // a token of other characters (an added token): as it is
        bytes += token.substr(k);
        break;
      }
      bytes += static_cast<char>(it->second);
      k += length;
    }
  }
  return bytes;
}

}  // namespace vkattn::text
