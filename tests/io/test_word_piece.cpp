// BERT's WordPiece tokenizer against Hugging Face's own rules: every id and decoded text that
// transformers.js (tokenizers ported to JavaScript) gives the texts of tests/data/bert_tokenizer
// with bert-base-uncased's vocabulary, from vocab.txt and from the same vocabulary as a
// tokenizer.json; BertNormalizer's options each do what they say; files that are not what they
// claim are one-line errors naming what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <nlohmann/json.hpp>

#include "engine/text/bert_text.h"
#include "tests/support/expect_error.h"
#include "vkattn/errors.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn {
namespace {

using nlohmann::json;
using testing::expect_error;
namespace fs = std::filesystem;

const fs::path kBert = fs::path(VKATTN_SOURCE_DIR) / "tests/data/bert_tokenizer";

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("vkattn_test_word_piece_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

std::vector<std::string> vocab_lines() {
  std::ifstream in(kBert / "vocab.txt");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// bert-base-uncased's tokenizer.json as the hub has it (tests/data/bert_tokenizer/tokenizer_json.js
// writes the same), with `change` made to it.
json bert_tokenizer_json(const std::function<void(json&)>& change = {}) {
  json vocab = json::object();
  const auto lines = vocab_lines();
  for (size_t i = 0; i < lines.size(); ++i) vocab[lines[i]] = i;
  json added = json::array();
  for (const char* token : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
    added.push_back({{"id", vocab[token]}, {"content", token}, {"special", true}, {"normalized", false}});
  }
  auto special = [](const char* token) { return json{{"SpecialToken", {{"id", token}, {"type_id", 0}}}}; };
  json file = {
      {"added_tokens", added},
      {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                      {"strip_accents", nullptr}, {"lowercase", true}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor", {{"type", "TemplateProcessing"},
                          {"single", {special("[CLS]"), {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, special("[SEP]")}}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                 {"max_input_chars_per_word", 100}, {"vocab", vocab}}}};
  if (change) change(file);
  return file;
}

void expect_every_fixture_id(const text::Tokenizer& tokenizer) {
  const json fixture = read_json(kBert / "fixture.json");
  ASSERT_GE(fixture["cases"].size(), 20u);
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"];
    const auto expected = c["ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(tokenizer.encode(text), expected) << text;
    EXPECT_EQ(tokenizer.decode(expected), c["decoded"].get<std::string>()) << text;
  }
}

TEST(BertTokenizer, MatchesEveryIdOfTokenizersFromVocabTxt) {
  const auto tokenizer = text::load_tokenizer(kBert);  // vocab.txt alone: bert-base-uncased's defaults
  EXPECT_EQ(tokenizer->vocab_size(), 30522);
  EXPECT_EQ(tokenizer->token_id("[CLS]"), 101);
  expect_every_fixture_id(*tokenizer);
}

TEST(BertTokenizer, MatchesEveryIdOfTokenizersFromTokenizerJson) {
  const auto tokenizer = text::parse_tokenizer_json(bert_tokenizer_json().dump(), "tokenizer.json");
  expect_every_fixture_id(*tokenizer);
  // BertProcessing, the older form of the same template
  const auto processing = text::parse_tokenizer_json(bert_tokenizer_json([](json& f) {
    f["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 102}}, {"cls", {"[CLS]", 101}}};
  }).dump(), "tokenizer.json");
  EXPECT_EQ(processing->encode("hello"), (std::vector<int64_t>{101, 7592, 102}));
}

// A pair of texts (a question and its context) as BERT's template joins them: [CLS] a [SEP] b
// [SEP], token types 0 through the first [SEP] and 1 after — from vocab.txt, a TemplateProcessing's
// "pair" (bert-base-uncased's tokenizer.json) and a BertProcessing alike; each text's ids its own.
TEST(BertTokenizer, APairIsJoinedByItsTemplateWithItsTokenTypes) {
  const auto from_vocab = text::load_tokenizer(kBert);
  auto body = [&](const char* text) {  // a text's ids without [CLS] and [SEP]
    std::vector<int64_t> ids = from_vocab->encode(text);
    return std::vector<int64_t>(ids.begin() + 1, ids.end() - 1);
  };
  const std::vector<int64_t> a = body("Where is Alice?"), b = body("Alice is down the rabbit-hole.");
  std::vector<int64_t> ids{101}, types{0};
  ids.insert(ids.end(), a.begin(), a.end());
  ids.push_back(102);
  types.resize(ids.size(), 0);
  ids.insert(ids.end(), b.begin(), b.end());
  ids.push_back(102);
  types.resize(ids.size(), 1);
  auto pieces = [](std::initializer_list<std::pair<const char*, int>> parts) {
    json out = json::array();
    for (auto [id, type] : parts) {
      const std::string s = id;
      out.push_back(s.starts_with("$") ? json{{"Sequence", {{"id", s.substr(1)}, {"type_id", type}}}}
                                       : json{{"SpecialToken", {{"id", s}, {"type_id", type}}}});
    }
    return out;
  };
  const auto templated = text::parse_tokenizer_json(bert_tokenizer_json([&](json& f) {
    f["post_processor"]["pair"] = pieces({{"[CLS]", 0}, {"$A", 0}, {"[SEP]", 0}, {"$B", 1}, {"[SEP]", 1}});
  }).dump(), "tokenizer.json");
  const auto processing = text::parse_tokenizer_json(bert_tokenizer_json([](json& f) {
    f["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 102}}, {"cls", {"[CLS]", 101}}};
  }).dump(), "tokenizer.json");
  for (const text::Tokenizer* t : {from_vocab.get(), templated.get(), processing.get()}) {
    const text::EncodedPair pair = t->encode_pair("Where is Alice?", "Alice is down the rabbit-hole.");
    EXPECT_EQ(pair.ids, ids);
    EXPECT_EQ(pair.type_ids, types);
  }
  // a template with no "pair" has none
  expect_error<ConfigError>([&] { text::parse_tokenizer_json(bert_tokenizer_json().dump(), "t.json")->encode_pair("a", "b"); },
                            {"no template for a pair of texts"});
}

// Each token's offsets: the bytes of the text its characters came from, before they were
// normalised ("CAFÉ" -> "cafe" from 5 bytes), and its word ("déjà" is "dej" and "##a", both of
// word 4; [MASK] a word of its own); a template's tokens (0, 0) and word -1. Over every fixture
// text, each token but [UNK] is its bytes normalised; in a pair, the second text's offsets are
// into the second text, and sequence_ids say which text each token came from.
TEST(BertTokenizer, OffsetsSayWhichBytesOfTheTextEachTokenCameFrom) {
  using text::Offset;
  const auto tokenizer = text::load_tokenizer(kBert);
  const std::string text = "The CAF\xc3\x89's d\xc3\xa9j\xc3\xa0 vu\t\xe6\x9d\xb1 [MASK]!";  // The CAFÉ's déjà vu<tab>東 [MASK]!
  const std::vector<int64_t> ids = tokenizer->encode(text);
  ASSERT_EQ(ids.size(), 12u);
  EXPECT_EQ(tokenizer->offsets(text),
            (std::vector<Offset>{{0, 0, -1}, {0, 3, 0}, {4, 9, 1}, {9, 10, 2}, {10, 11, 3}, {12, 15, 4}, {15, 18, 4},
                                 {19, 21, 5}, {22, 25, 6}, {26, 32, 7}, {32, 33, 8}, {0, 0, -1}}));
  const text::BertNormalizerOptions uncased;
  const json fixture = read_json(kBert / "fixture.json");
  for (const auto& c : fixture["cases"]) {
    const std::string t = c["text"];
    const std::vector<int64_t> got = tokenizer->encode(t);
    const std::vector<Offset> offsets = tokenizer->offsets(t);
    ASSERT_EQ(offsets.size(), got.size()) << t;
    EXPECT_EQ(offsets.front(), Offset{}) << t;  // [CLS]
    EXPECT_EQ(offsets.back(), Offset{}) << t;   // [SEP]
    for (size_t i = 1; i + 1 < got.size(); ++i) {
      std::string token = tokenizer->decode(std::span(got).subspan(i, 1));
      if (token.starts_with("##")) token.erase(0, 2);
      if (token == "[UNK]") continue;
      ASSERT_LE(offsets[i].end, t.size()) << t;
      const std::string bytes = t.substr(offsets[i].begin, offsets[i].end - offsets[i].begin);
      if (token.starts_with('[')) {  // a special token in the text: as it is written
        EXPECT_EQ(bytes, token) << t << ": token " << i;
        continue;
      }
      std::string normalised = text::bert_normalize(bytes, uncased);
      if (normalised.size() > 2 && normalised.front() == ' ' && normalised.back() == ' ') {  // 東's spaces
        normalised = normalised.substr(1, normalised.size() - 2);
      }
      EXPECT_EQ(normalised, token) << t << ": token " << i;
    }
  }
  const text::EncodedPair pair = tokenizer->encode_pair("Who?", "Alice, of course.");
  EXPECT_EQ(pair.sequence_ids, (std::vector<int64_t>{-1, 0, 0, -1, 1, 1, 1, 1, 1, -1}));
  EXPECT_EQ(pair.offsets, (std::vector<Offset>{{0, 0, -1}, {0, 3, 0}, {3, 4, 1}, {0, 0, -1}, {0, 5, 0}, {5, 6, 1},
                                               {7, 9, 2}, {10, 16, 3}, {16, 17, 4}, {0, 0, -1}}));
}

// BertNormalizer: control characters out, whitespace to spaces, spaces around CJK ideographs,
// accents stripped (by default where it lowercases), lowercase; each option on its own.
TEST(BertTokenizer, EachNormalizerOptionDoesWhatItSays) {
  const std::string text = "Caf\xc3\xa9\tNA\xc3\x8fVE\xe2\x80\x8b\x01 \xe6\x9d\xb1\xe4\xba\xac!";  // Café\tNAÏVE<ZWSP><SOH> 東京!
  text::BertNormalizerOptions all;
  EXPECT_EQ(text::bert_normalize(text, all), "cafe naive  \xe6\x9d\xb1  \xe4\xba\xac !");
  text::BertNormalizerOptions keep_accents{.strip_accents = false};
  EXPECT_EQ(text::bert_normalize(text, keep_accents), "caf\xc3\xa9 na\xc3\xafve  \xe6\x9d\xb1  \xe4\xba\xac !");
  text::BertNormalizerOptions cased{.lowercase = false};  // bert-base-cased: accents kept too
  EXPECT_EQ(text::bert_normalize(text, cased), "Caf\xc3\xa9 NA\xc3\x8fVE  \xe6\x9d\xb1  \xe4\xba\xac !");
  text::BertNormalizerOptions raw{.clean_text = false, .handle_chinese_chars = false, .lowercase = false};
  EXPECT_EQ(text::bert_normalize(text, raw), text);
  // で is て + U+3099 in NFD, a nonspacing mark that BERT strips (transformers.js strips only
  // U+0300–U+036F, so the fixture has no such text)
  EXPECT_EQ(text::bert_normalize("\xe3\x81\xa7", all), "\xe3\x81\xa6");
  EXPECT_EQ(text::bert_normalize("\xc4\xb0", all), "i");  // İ: its dot is a mark, stripped
  EXPECT_EQ(text::bert_normalize("\xc4\xb0", keep_accents), "i\xcc\x87");  // i + U+0307: the full mapping
}

TEST(BertTokenizer, WordsSplitAtWhitespaceAndEveryPunctuationMark) {
  EXPECT_EQ(text::bert_pre_tokenize(" it's 3.5$  end\xe2\x80\x94" "done "),
            (std::vector<std::string_view>{"it", "'", "s", "3", ".", "5", "$", "end", "\xe2\x80\x94", "done"}));
  EXPECT_TRUE(text::bert_pre_tokenize("   ").empty());
}

// A cased vocabulary without BertNormalizer's lowercasing keeps case; a word longer than
// max_input_chars_per_word, or one no token starts, is one [UNK].
TEST(BertTokenizer, TheModelsOptionsAreRead) {
  auto tiny = [](const std::function<void(json&)>& change) {
    json file = {{"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
                 {"normalizer", {{"type", "BertNormalizer"}, {"lowercase", false}}},
                 {"model", {{"type", "WordPiece"}, {"unk_token", "<unk>"}, {"continuing_subword_prefix", "@@"},
                            {"max_input_chars_per_word", 5},
                            {"vocab", {{"<unk>", 0}, {"Hi", 1}, {"hi", 2}, {"@@s", 3}, {"a", 4}, {"@@a", 5}}}}}};
    change(file);
    return text::parse_tokenizer_json(file.dump(), "tiny.json");
  };
  const auto cased = tiny([](json&) {});
  EXPECT_EQ(cased->encode("Hi his hix aaaaa aaaaaa"), (std::vector<int64_t>{1, 2, 3, 0, 4, 5, 5, 5, 5, 0}));
  EXPECT_EQ(cased->decode(std::vector<int64_t>{1, 2, 3, 4, 5}), "Hi his aa");
  const auto uncased = tiny([](json& f) { f["normalizer"]["lowercase"] = true; });
  EXPECT_EQ(uncased->encode("Hi"), (std::vector<int64_t>{2}));
}

TEST(BertTokenizer, WhatIsWrongIsNamed) {
  auto refused = [](const std::function<void(json&)>& change, std::initializer_list<std::string> fragments) {
    expect_error<FileError>([&] { text::parse_tokenizer_json(bert_tokenizer_json(change).dump(), "t.json"); },
                            fragments);
  };
  refused([](json& f) { f["pre_tokenizer"] = {{"type", "Whitespace"}}; },
          {"t.json", "pre-tokenizer is Whitespace", "BertPreTokenizer"});
  refused([](json& f) { f["normalizer"] = {{"type", "Lowercase"}}; }, {"t.json", "normalizer Lowercase", "WordPiece"});
  refused([](json& f) { f["model"]["unk_token"] = "<unk>"; }, {"t.json", "unknown token '<unk>'"});
  refused([](json& f) { f["model"]["max_input_chars_per_word"] = 0; }, {"t.json", "max_input_chars_per_word is 0"});
  refused([](json& f) { f["model"]["vocab"]["hello"] = 99999; }, {"t.json", "token 'hello' has id 99999"});
  expect_error<ShapeError>([] { text::load_tokenizer(kBert)->encode("ok \xff"); }, {"not UTF-8", "byte 3"});
  expect_error<ShapeError>([] { text::load_tokenizer(kBert)->decode(std::vector<int64_t>{30522}); },
                           {"token id 30522", "[0, 30522)"});

  const fs::path dir = scratch("repeats");
  write(dir / "vocab.txt", "[UNK]\n[CLS]\n[SEP]\nhello\nworld\nhello\n");
  expect_error<FileError>([&] { text::load_tokenizer(dir); }, {"vocab.txt", "line 6 'hello' repeats line 4"});
  write(dir / "vocab.txt", "[UNK]\nhello\n");
  expect_error<FileError>([&] { text::load_tokenizer(dir); }, {"vocab.txt", "template's special token '[CLS]'"});
  write(dir / "vocab.txt", "<unk>\n<s>\n</s>\nhello\n");
  write(dir / "tokenizer_config.json", R"({"do_lower_case": false, "unk_token": "<unk>", "cls_token": "<s>",
                                          "sep_token": {"content": "</s>"}})");
  EXPECT_EQ(text::load_tokenizer(dir)->encode("hello Hello"), (std::vector<int64_t>{1, 3, 0, 2}));
  write(dir / "tokenizer_config.json", "{");
  expect_error<FileError>([&] { text::load_tokenizer(dir); }, {"tokenizer_config.json"});
}

}  // namespace
}  // namespace vkattn
