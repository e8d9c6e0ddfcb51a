// The tokenizers against their own implementations' ids: GPT-2's byte-level BPE matches every id
// gpt-3-encoder (OpenAI's encoder in JavaScript) gives the texts of tests/data/gpt2_tokenizer,
// from vocab.json + merges.txt and from the same vocabulary as a tokenizer.json; Llama 3's and
// Qwen2's Split patterns split as JavaScript's regex engine does (tests/data/pre_tokenizers); a
// tokenizer.json's NFC, ignore_merges and template do what tokenizers does; text and files that
// are not what they claim are one-line errors naming what is wrong.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/text/pre_tokenize.h"
#include "tests/support/expect_error.h"
#include "vkattn/errors.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn {
namespace {

using nlohmann::json;
using testing::expect_error;
namespace fs = std::filesystem;

const fs::path kGpt2 = fs::path(VKATTN_SOURCE_DIR) / "tests/data/gpt2_tokenizer";

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

const text::Tokenizer& gpt2() {
  static const auto tokenizer = text::load_tokenizer(kGpt2);
  return *tokenizer;
}

// A fresh folder under the test's temporary directory.
fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("vkattn_test_tokenizer_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

void expect_every_fixture_id(const text::Tokenizer& tokenizer) {
  const json fixture = read_json(kGpt2 / "fixture.json");
  ASSERT_GE(fixture["cases"].size(), 20u);
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"];
    const auto expected = c["ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(tokenizer.encode(text), expected) << text;
    EXPECT_EQ(tokenizer.decode(expected), text);
  }
}

TEST(Gpt2Tokenizer, MatchesEveryIdOfGpt2sOwnEncoder) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  expect_every_fixture_id(gpt2());
}

TEST(Gpt2Tokenizer, PreTokensKeepTheirLeadingSpaceAndTheLastSpaceBeforeAWord) {
  EXPECT_EQ(text::PreTokenizer::gpt2().split("I'm  here 42x!?\n"),
            (std::vector<std::string>{"I", "'m", " ", " here", " 42", "x", "!?", "\n"}));
  EXPECT_EQ(text::PreTokenizer::gpt2().split("caf\xc3\xa9 \xe6\x97\xa5"), (std::vector<std::string>{"caf\xc3\xa9", " \xe6\x97\xa5"}));
  EXPECT_TRUE(text::PreTokenizer::gpt2().split("").empty());
}

TEST(Gpt2Tokenizer, SpecialTokensAreMatchedBeforeTheTextIsSplit) {
  const int64_t end = gpt2().token_id("<|endoftext|>");
  EXPECT_EQ(end, 50256);
  EXPECT_EQ(gpt2().encode("Hello world<|endoftext|> Hi"), (std::vector<int64_t>{15496, 995, end, 15902}));
  EXPECT_EQ(gpt2().encode("<|endoftext|><|endoftext|>"), (std::vector<int64_t>{end, end}));
  EXPECT_EQ(gpt2().decode(std::vector<int64_t>{15496, end}), "Hello<|endoftext|>");
  EXPECT_EQ(gpt2().token_id("no such token"), -1);
}

TEST(Gpt2Tokenizer, DecodesAPartOfACharacterToItsBytes) {
  const auto ids = gpt2().encode("\xf0\x9f\x98\x80");  // 😀: several byte tokens
  ASSERT_GT(ids.size(), 1u);
  const std::string first = gpt2().decode(std::span(ids).first(1));
  EXPECT_EQ(first, std::string("\xf0\x9f\x98\x80").substr(0, first.size()));
}

TEST(Gpt2Tokenizer, BadTextAndIdsAreOneLineErrors) {
  expect_error<ShapeError>([] { gpt2().encode("ok \xff here"); }, {"not UTF-8", "byte 3"});
  expect_error<ShapeError>([] { gpt2().encode("cut \xe6\x97"); }, {"not UTF-8", "byte 4"});
  expect_error<ShapeError>([] { gpt2().decode(std::vector<int64_t>{1, 50257}); },
                           {"token id 50257", "index 1", "[0, 50257)"});
  expect_error<ShapeError>([] { gpt2().decode(std::vector<int64_t>{-1}); }, {"token id -1"});
}

// GPT-2's vocabulary and merges as tokenizers' one file (merges as "a b" strings and as pairs,
// both written by the library's versions): the same ids.
TEST(TokenizerJson, AByteLevelBpeFileGivesTheSameIds) {
  const json vocab = read_json(kGpt2 / "vocab.json");
  std::ifstream merges_in(kGpt2 / "merges.txt");
  std::vector<std::string> lines;
  for (std::string line; std::getline(merges_in, line);) {
    if (!line.empty() && !line.starts_with("#version")) lines.push_back(line);
  }
  for (bool pairs : {false, true}) {
    json merges = json::array();
    for (const auto& line : lines) {
      const size_t space = line.find(' ');
      merges.push_back(pairs ? json::array({line.substr(0, space), line.substr(space + 1)}) : json(line));
    }
    json regular = vocab;
    regular.erase("<|endoftext|>");
    const json file = {{"version", "1.0"},
                       {"added_tokens", json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}})},
                       {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                       {"model", {{"type", "BPE"}, {"vocab", regular}, {"merges", merges}}}};
    const fs::path dir = scratch(pairs ? "pairs" : "strings");
    write(dir / "tokenizer.json", file.dump());
    const auto tokenizer = text::load_tokenizer(dir);
    expect_every_fixture_id(*tokenizer);
    EXPECT_EQ(tokenizer->encode("a<|endoftext|>"), (std::vector<int64_t>{64, 50256}));
  }
}

// GPT-2's vocabulary as a tokenizer.json, with `change` made to it.
json gpt2_tokenizer_json(const std::function<void(json&)>& change = {}) {
  const json vocab = read_json(kGpt2 / "vocab.json");
  std::ifstream merges_in(kGpt2 / "merges.txt");
  json merges = json::array();
  for (std::string line; std::getline(merges_in, line);) {
    if (!line.empty() && !line.starts_with("#version")) merges.push_back(line);
  }
  json regular = vocab;
  regular.erase("<|endoftext|>");
  json file = {{"added_tokens", json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}})},
               {"normalizer", nullptr},
               {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
               {"model", {{"type", "BPE"}, {"vocab", regular}, {"merges", merges}}}};
  if (change) change(file);
  return file;
}

TEST(PreTokenizers, Llama3sAndQwen2sPatternsSplitAsJavaScriptDoes) {
  const json oracle = read_json(fs::path(VKATTN_SOURCE_DIR) / "tests/data/pre_tokenizers/pieces.json");
  for (const char* name : {"llama3", "qwen2"}) {
    const text::PreTokenizer pre(oracle["patterns"][name].get<std::string>(), name);
    for (const auto& c : oracle["cases"]) {
      EXPECT_EQ(pre.split(c["text"].get<std::string>()), c[name].get<std::vector<std::string>>()) << name;
    }
  }
  // numbers in threes (Llama 3) or ones (Qwen2), where GPT-2 keeps them whole
  EXPECT_EQ(text::PreTokenizer::gpt2().split(" 1234567"), (std::vector<std::string>{" 1234567"}));
}

// Llama 3's layout: a Split by its pattern, then ByteLevel without a regex of its own. With GPT-2's
// pattern in the Split, every fixture text gets GPT-2's ids; with Llama 3's, numbers split in threes.
TEST(TokenizerJson, ASplitPatternThenByteLevelIsReadAsTheSplitSays) {
  const std::string gpt2_pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  auto split_by = [](const std::string& pattern) {
    return [pattern](json& f) {
      f["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers",
                             {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"},
                               {"invert", false}},
                              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    };
  };
  const auto gpt2_split = text::parse_tokenizer_json(gpt2_tokenizer_json(split_by(gpt2_pattern)).dump(), "t.json");
  expect_every_fixture_id(*gpt2_split);
  const json oracle = read_json(fs::path(VKATTN_SOURCE_DIR) / "tests/data/pre_tokenizers/pieces.json");
  const auto llama3 = text::parse_tokenizer_json(gpt2_tokenizer_json(split_by(oracle["patterns"]["llama3"])).dump(), "t.json");
  EXPECT_EQ(llama3->encode(" 1234567"), (std::vector<int64_t>{220, 10163, 29228, 22}));  // " ", "123", "456", "7"
  EXPECT_EQ(gpt2().encode(" 1234567"), (std::vector<int64_t>{17031, 2231, 3134}));  // gpt-3-encoder's: " 123", "45", "67"
  EXPECT_EQ(llama3->decode(llama3->encode("tabs\tand 12345\n\n")), "tabs\tand 12345\n\n");
}

TEST(TokenizerJson, NfcIgnoreMergesAndATemplateDoWhatTokenizersDoes) {
  // NFC: "e" + U+0301 is "é" before the split
  const auto nfc = text::parse_tokenizer_json(
      gpt2_tokenizer_json([](json& f) { f["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}}; })
          .dump(),
      "t.json");
  EXPECT_EQ(nfc->encode("caf\x65\xcc\x81"), gpt2().encode("caf\xc3\xa9"));
  EXPECT_NE(gpt2().encode("caf\x65\xcc\x81"), gpt2().encode("caf\xc3\xa9"));
  // a template's special tokens around every text: a BOS before it, an EOS after it
  const auto templated = text::parse_tokenizer_json(gpt2_tokenizer_json([](json& f) {
                                                      f["post_processor"] = {
                                                          {"type", "TemplateProcessing"},
                                                          {"single", {{{"SpecialToken", {{"id", "<|endoftext|>"}}}},
                                                                      {{"Sequence", {{"id", "A"}}}},
                                                                      {{"SpecialToken", {{"id", "<|endoftext|>"}}}}}}};
                                                    }).dump(),
                                                    "t.json");
  EXPECT_EQ(templated->encode("Hello world"), (std::vector<int64_t>{50256, 15496, 995, 50256}));
  // ignore_merges: a pre-token that is a token of the vocabulary is taken whole, whatever the
  // merges would make of it (here none could: there are none)
  auto no_merges = [](bool ignore) {
    return [ignore](json& f) {
      f["model"]["merges"] = json::array();
      f["model"]["ignore_merges"] = ignore;
    };
  };
  const auto merging = text::parse_tokenizer_json(gpt2_tokenizer_json(no_merges(false)).dump(), "t.json");
  const auto whole = text::parse_tokenizer_json(gpt2_tokenizer_json(no_merges(true)).dump(), "t.json");
  EXPECT_EQ(merging->encode(" world"), (std::vector<int64_t>{220, 86, 78, 81, 75, 67}));  // byte by byte
  EXPECT_EQ(whole->encode(" world"), (std::vector<int64_t>{995}));
}

// RoBERTa's tokenizer.json: RobertaProcessing's <s> … </s> around every text (here GPT-2's one
// special token for both), and an added token with lstrip (RoBERTa's <mask>) that takes the
// whitespace before it, as Hugging Face's AddedToken does; rstrip takes the whitespace after it.
// Each token's offsets: its bytes, the whitespace at its ends left out (RoBERTa's trim_offsets),
// and its word: the pre-tokenizer's piece (" world"; "  Hi" is " " and " Hi"), a special token
// one of its own. Over every fixture text, each token's bytes are its decoded text so trimmed, and
// the words count up from 0 by at most one a token.
TEST(TokenizerJson, OffsetsAreEachTokensBytesWithoutTheirSpaces) {
  using text::Offset;
  EXPECT_EQ(gpt2().offsets("Hello world<|endoftext|>  Hi"),
            (std::vector<Offset>{{0, 5, 0}, {6, 11, 1}, {11, 24, 2}, {25, 25, 3}, {26, 28, 4}}));
  const json fixture = read_json(kGpt2 / "fixture.json");
  auto trimmed = [](std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(0, 1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    return s;
  };
  for (const auto& c : fixture["cases"]) {
    const std::string t = c["text"];
    const std::vector<int64_t> ids = gpt2().encode(t);
    const std::vector<Offset> offsets = gpt2().offsets(t);
    ASSERT_EQ(offsets.size(), ids.size()) << t;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t before = i ? offsets[i - 1].word : -1;  // the words count up by 0 or 1 a token
      EXPECT_TRUE(offsets[i].word >= 0 && (offsets[i].word == before || offsets[i].word == before + 1))
          << t << ": token " << i << " is in word " << offsets[i].word << " after " << before;
      ASSERT_LE(offsets[i].begin, offsets[i].end) << t;
      ASSERT_LE(offsets[i].end, t.size()) << t;
      EXPECT_EQ(t.substr(offsets[i].begin, offsets[i].end - offsets[i].begin),
                trimmed(gpt2().decode(std::span(ids).subspan(i, 1))))
          << t << ": token " << i;
    }
  }
  // a text normalised to NFC is not the text given: no offsets
  const auto nfc = text::parse_tokenizer_json(gpt2_tokenizer_json([](json& f) {
    f["normalizer"] = {{"type", "NFC"}};
  }).dump(), "t.json");
  expect_error<ConfigError>([&] { nfc->offsets("caf\xc3\xa9"); }, {"does not say where its tokens came from"});
}

TEST(TokenizerJson, ARobertaTemplateAndTokensThatTakeTheSpaceBesideThem) {
  auto roberta = [](bool lstrip, bool rstrip) {
    return text::parse_tokenizer_json(
        gpt2_tokenizer_json([&](json& f) {
          f["post_processor"] = {
              {"type", "RobertaProcessing"}, {"sep", {"<|endoftext|>", 50256}}, {"cls", {"<|endoftext|>", 50256}}};
          f["model"]["vocab"]["<mask>"] = 50257;
          f["added_tokens"].push_back(
              {{"id", 50257}, {"content", "<mask>"}, {"lstrip", lstrip}, {"rstrip", rstrip}, {"special", true}});
        }).dump(),
        "t.json");
  };
  auto ids = [](std::initializer_list<std::vector<int64_t>> parts) {
    std::vector<int64_t> all{50256};
    for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
    all.push_back(50256);
    return all;
  };
  const std::vector<int64_t> mask{50257};
  const std::string text = "Hello  <mask>\t world";
  EXPECT_EQ(roberta(false, false)->encode(text), ids({gpt2().encode("Hello  "), mask, gpt2().encode("\t world")}));
  EXPECT_EQ(roberta(true, false)->encode(text), ids({gpt2().encode("Hello"), mask, gpt2().encode("\t world")}));
  EXPECT_EQ(roberta(false, true)->encode(text), ids({gpt2().encode("Hello  "), mask, gpt2().encode("world")}));
  EXPECT_EQ(roberta(true, true)->encode(text), ids({gpt2().encode("Hello"), mask, gpt2().encode("world")}));
  EXPECT_EQ(roberta(true, false)->encode("<mask> <mask>"), ids({mask, mask}));
  EXPECT_EQ(roberta(true, false)->encode(" "), ids({gpt2().encode(" ")}));  // no token: nothing stripped
  // a pair: <s> a </s></s> b </s>, every token type 0
  const text::EncodedPair pair = roberta(true, false)->encode_pair("Hello", " world <mask>");
  std::vector<int64_t> joined = ids({gpt2().encode("Hello")});  // <s> a </s>, then </s> b </s>
  const std::vector<int64_t> second = ids({gpt2().encode(" world"), mask});
  joined.insert(joined.end(), second.begin(), second.end());
  EXPECT_EQ(pair.ids, joined);
  EXPECT_EQ(pair.type_ids, std::vector<int64_t>(joined.size(), 0));
  // GPT-2's files have no template for pairs
  expect_error<ConfigError>([] { gpt2().encode_pair("a", "b"); }, {"no template for a pair of texts"});
}

TEST(TokenizerFiles, WhatIsWrongIsNamed) {
  const fs::path empty = scratch("empty");
  expect_error<FileError>([&] { text::load_tokenizer(empty); }, {empty.string(), "no tokenizer", "tokenizer.json"});

  const fs::path unigram = scratch("unigram");
  write(unigram / "tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  expect_error<FileError>([&] { text::load_tokenizer(unigram); }, {"tokenizer.json", "the model is Unigram"});

  const fs::path metaspace = scratch("metaspace");
  write(metaspace / "tokenizer.json",
        R"({"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})");
  expect_error<FileError>([&] { text::load_tokenizer(metaspace); }, {"tokenizer.json", "unknown token '<unk>'"});
  auto refused = [](const std::function<void(json&)>& change, std::initializer_list<std::string> fragments) {
    expect_error<FileError>([&] { text::parse_tokenizer_json(gpt2_tokenizer_json(change).dump(), "t.json"); },
                            fragments);
  };
  refused([](json& f) { f["model"]["byte_fallback"] = true; }, {"t.json", "pre-tokenizer is ByteLevel", "SentencePiece"});
  refused([](json& f) { f["model"]["vocab"]["!"] = 1e80; }, {"t.json", "token '!' has id 1e+80, not an integer"});
  refused([](json& f) { f["normalizer"] = {{"type", "Lowercase"}}; }, {"normalizer Lowercase"});
  refused([](json& f) { f["post_processor"] = {{"type", "CustomProcessing"}}; }, {"post-processor CustomProcessing"});
  refused([](json& f) { f["pre_tokenizer"]["add_prefix_space"] = true; }, {"add_prefix_space"});
  refused([](json& f) {
    f["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}},
                                              {"behavior", "Isolated"}, {"invert", false}},
                                             {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  }, {"t.json", "pattern does not compile"});

  // vocab.json + merges.txt: the 256 byte tokens "!" … and the stand-ins, then a made-up merge
  json bytes_only = json::object();
  const json vocab = read_json(kGpt2 / "vocab.json");
  for (const auto& [token, id] : vocab.items()) {
    if (id.get<int64_t>() < 256) bytes_only[token] = id;
  }
  const fs::path files = scratch("files");
  write(files / "vocab.json", bytes_only.dump());
  write(files / "merges.txt", "#version: 0.2\nh e\n");
  expect_error<FileError>([&] { text::load_tokenizer(files); }, {"merges.txt", "merge 1", "'he'", "not in the vocabulary"});
  write(files / "merges.txt", "#version: 0.2\nhe\n");
  expect_error<FileError>([&] { text::load_tokenizer(files); }, {"merges.txt", "line 2", "two tokens"});
  bytes_only.erase("!");
  write(files / "vocab.json", bytes_only.dump());
  write(files / "merges.txt", "#version: 0.2\n");
  expect_error<FileError>([&] { text::load_tokenizer(files); }, {"vocab.json", "ids must be 0"});
  write(files / "vocab.json", "[1, 2]");
  expect_error<FileError>([&] { text::load_tokenizer(files); }, {"vocab.json"});
}

}  // namespace
}  // namespace vkattn
