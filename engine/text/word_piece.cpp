#include "engine/text/word_piece.h"

#include <unicode/utf8.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/io/file.h"
#include "engine/text/pre_tokenize.h"
#include "vkattn/errors.h"

namespace vkattn::text {
namespace {

// tokenizers' WordPiece decoder cleans each token up: "hello ," -> "hello,"
std::string clean_up(std::string token) {
  static const std::pair<const char*, const char*> kReplacements[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kReplacements) {
    const std::string f = from, t = to;
    for (size_t at = token.find(f); at != std::string::npos; at = token.find(f, at + t.size())) {
      token.replace(at, f.size(), t);
    }
  }
  return token;
}

}  // namespace

WordPiece::WordPiece(Vocab vocab, std::vector<std::string> special, const std::string& source, WordPieceOptions options)
    : VocabularyTokenizer(std::move(vocab), std::move(special), options.prefix, options.suffix, source, options.strips,
                          options.pair),
      options_(std::move(options)) {
  auto unk = vocab_.find(options_.unk_token);
  if (unk == vocab_.end()) {
    throw FileError(source + ": the unknown token '" + options_.unk_token + "' is not in the vocabulary");
  }
  unk_id_ = unk->second;
  if (options_.max_input_chars_per_word < 1) {
    throw FileError(source + ": max_input_chars_per_word is " + std::to_string(options_.max_input_chars_per_word) +
                    "; it must be at least 1");
  }
}

WordPiece WordPiece::from_files(const std::filesystem::path& vocab_txt, const std::filesystem::path& tokenizer_config) {
  Vocab vocab;
  const std::string lines = io::read_text(vocab_txt);
  int64_t id = 0;
  for (size_t begin = 0; begin < lines.size(); ++id) {
    size_t end = lines.find('\n', begin);
    if (end == std::string::npos) end = lines.size();
    std::string token = lines.substr(begin, end - begin);
    begin = end + 1;
    if (!token.empty() && token.back() == '\r') token.pop_back();
    if (!vocab.emplace(token, id).second) {
      throw FileError(vocab_txt.string() + ": line " + std::to_string(id + 1) + " '" + token + "' repeats line " +
                      std::to_string(vocab[token] + 1));
    }
  }
  WordPieceOptions options;
  const std::string config_source = tokenizer_config.string();
  if (std::filesystem::exists(tokenizer_config)) {
    try {
      const nlohmann::json config = nlohmann::json::parse(io::read_text(tokenizer_config));
      options.normalizer.lowercase = config.value("do_lower_case", true);
      options.normalizer.handle_chinese_chars = config.value("tokenize_chinese_chars", true);
      if (config.contains("strip_accents") && config["strip_accents"].is_boolean()) {
        options.normalizer.strip_accents = config["strip_accents"].get<bool>();
      }
      auto name = [&](const char* key, std::string fallback) {  // a string, or {"content": …}
        if (!config.contains(key)) return fallback;
        const auto& v = config[key];
        return v.is_string() ? v.get<std::string>() : v.at("content").get<std::string>();
      };
      options.unk_token = name("unk_token", "[UNK]");
      options.prefix = {name("cls_token", "[CLS]")};
      options.suffix = {name("sep_token", "[SEP]")};
      options.pair = bert_pair(options.prefix[0], options.suffix[0]);
    } catch (const nlohmann::json::exception& e) {
      throw FileError(config_source + ": " + e.what());
    }
  }
  std::vector<std::string> special;
  for (const auto& token : {options.unk_token, options.prefix[0], options.suffix[0], std::string("[PAD]"),
                            std::string("[MASK]")}) {
    if (vocab.contains(token) && std::find(special.begin(), special.end(), token) == special.end()) {
      special.push_back(token);
    }
  }
  return WordPiece(std::move(vocab), std::move(special), vocab_txt.string(), std::move(options));
}

void WordPiece::split_word(std::string_view word, std::vector<int64_t>& ids, std::vector<Offset>* pieces) const {
  std::vector<int32_t> starts;  // each character's first byte, then the word's end
  const auto* s = reinterpret_cast<const uint8_t*>(word.data());
  const auto length = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < length;) {
    starts.push_back(i);
    U8_FWD_1(s, i, length);
  }
  auto unknown = [&] {  // the whole word is one [UNK]
    ids.push_back(unk_id_);
    if (pieces) pieces->push_back({0, word.size()});
  };
  if (static_cast<int64_t>(starts.size()) > options_.max_input_chars_per_word) return unknown();
  starts.push_back(length);
  std::vector<int64_t> found;
  std::vector<Offset> spans;
  for (size_t begin = 0; begin + 1 < starts.size();) {
    // the longest token that starts here: the rest of the word, then one character less, …
    size_t end = starts.size() - 1;
    for (; end > begin; --end) {
      const auto from = static_cast<size_t>(starts[begin]), to = static_cast<size_t>(starts[end]);
      std::string piece(word.substr(from, to - from));
      if (begin > 0) piece = options_.continuing_subword_prefix + piece;
      if (auto it = vocab_.find(piece); it != vocab_.end()) {
        found.push_back(it->second);
        spans.push_back({from, to});
        break;
      }
    }
    if (end == begin) return unknown();  // no token starts here
    begin = end;
  }
  ids.insert(ids.end(), found.begin(), found.end());
  if (pieces) pieces->insert(pieces->end(), spans.begin(), spans.end());
}

std::vector<int64_t> WordPiece::encode_text(std::string_view text, std::vector<Offset>* offsets) const {
  check_utf8(text, "the text");
  return encode_parts(text, offsets, [&](std::string_view part, std::vector<int64_t>& ids, std::vector<Offset>* at) {
    std::vector<std::pair<size_t, size_t>> source;  // each normalised byte's character in `part`
    const std::string normalised = bert_normalize(part, options_.normalizer, at ? &source : nullptr);
    std::vector<Offset> pieces;
    int64_t w = 0;
    for (std::string_view word : bert_pre_tokenize(normalised)) {
      const size_t from = pieces.size(), word_at = static_cast<size_t>(word.data() - normalised.data());
      split_word(word, ids, at ? &pieces : nullptr);
      if (!at) continue;
      for (size_t i = from; i < pieces.size(); ++i) {  // bytes of the word -> the characters of `part`
        at->push_back({source[word_at + pieces[i].begin].first, source[word_at + pieces[i].end - 1].second, w});
      }
      ++w;
    }
  });
}

std::string WordPiece::decode(std::span<const int64_t> ids) const {
  std::string text;
  const std::string& prefix = options_.continuing_subword_prefix;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string token = token_of(tokens_, ids, i);
    if (i > 0) token = token.starts_with(prefix) ? token.substr(prefix.size()) : " " + token;
    text += clean_up(std::move(token));
  }
  return text;
}

}  // namespace vkattn::text
