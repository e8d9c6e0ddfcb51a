// SentencePiece's BPE as Llama 2's tokenizer.json holds it: every id and decoded text of the texts
// of tests/data/llama2_tokenizer, on which two JavaScript encoders of Llama 2's tokenizer agree
// (llama-tokenizer-js and transformers.js): spaces as ▁, characters outside the vocabulary as
// their bytes' tokens; the Metaspace form (Mistral's, TinyLlama's) giving the same ids;
// tokenizer_config.json's add_bos_token / add_eos_token; one-line errors for what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "tests/support/checkpoint_folder.h"
#include "tests/support/expect_error.h"
#include "vkattn/errors.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn {
namespace {

using nlohmann::json;
using testing::expect_error;
namespace fs = std::filesystem;

const fs::path kLlama2 = fs::path(VKATTN_SOURCE_DIR) / "tests/data/llama2_tokenizer";

const json& llama2_json() {
  static const json file = testing::read_json(kLlama2 / "tokenizer.json");
  return file;
}

std::unique_ptr<text::Tokenizer> llama2(const std::function<void(json&)>& change = {}) {
  json file = llama2_json();
  if (change) change(file);
  return text::parse_tokenizer_json(file.dump(), "tokenizer.json");
}

// The fixture's ids and decoded texts (its decode leaves the BOS out, as skip_special_tokens does);
// `but_leading_spaces`: those of texts that start with a space left out.
void expect_every_fixture_id(const text::Tokenizer& tokenizer, bool but_leading_spaces = false) {
  const json fixture = testing::read_json(kLlama2 / "fixture.json");
  ASSERT_GE(fixture["cases"].size(), 18u);
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"];
    if (but_leading_spaces && text.starts_with(' ')) continue;
    const auto expected = c["ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(tokenizer.encode(text), expected) << text;
    EXPECT_EQ(tokenizer.decode(std::span(expected).subspan(1)), c["decoded"].get<std::string>()) << text;
  }
}

TEST(Llama2Tokenizer, MatchesEveryIdOfTwoEncoders) {
  const auto tokenizer = llama2();
  EXPECT_EQ(tokenizer->vocab_size(), 32000);
  EXPECT_EQ(tokenizer->token_id("<s>"), 1);
  expect_every_fixture_id(*tokenizer);
}

// Mistral's and TinyLlama's files write the same tokenizer with the Metaspace pre-tokenizer
// (prepend_scheme "first", no split) and no normalizer: the same ids, but that Metaspace puts no
// ▁ before a text that starts with a space (transformers.js gives these ids too).
TEST(Llama2Tokenizer, TheMetaspaceFormGivesTheSameIds) {
  const auto metaspace = llama2([](json& f) {
    f["normalizer"] = nullptr;
    f["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}, {"prepend_scheme", "first"},
                          {"split", false}};
  });
  expect_every_fixture_id(*metaspace, true);
  EXPECT_EQ(metaspace->encode(" "), (std::vector<int64_t>{1, 29871}));
  EXPECT_EQ(metaspace->encode("  leading spaces"), (std::vector<int64_t>{1, 29871, 8236, 8162}));
  // "first": no ▁ after a special token; the normalizer's Prepend puts one before every part
  const auto ids = metaspace->encode("a</s>b");
  const auto legacy = llama2()->encode("a</s>b");
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 263, 2, 29890}));   // <s> ▁a </s> b
  EXPECT_EQ(legacy, (std::vector<int64_t>{1, 263, 2, 289}));  // <s> ▁a </s> ▁b
  // split: a word from each ▁ on, merged on its own
  const auto split = llama2([](json& f) {
    f["normalizer"] = nullptr;
    f["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}, {"prepend_scheme", "always"}};
  });
  EXPECT_EQ(split->encode("Hello world!"), (std::vector<int64_t>{1, 15043, 3186, 29991}));
}

// A stream's next piece keeps its space; a whole text's first loses the one encode() put there.
TEST(Llama2Tokenizer, ContinuationsKeepTheirLeadingSpace) {
  const auto tokenizer = llama2();
  const std::vector<int64_t> world{3186};  // ▁world
  EXPECT_EQ(tokenizer->decode(world), "world");
  EXPECT_EQ(tokenizer->decode_continuation(world), " world");
  const std::vector<int64_t> grin{243, 162, 155, 131};  // 😀's four bytes, one token each
  EXPECT_EQ(tokenizer->decode(grin), "\xf0\x9f\x98\x80");
  EXPECT_EQ(tokenizer->decode_continuation(std::span(grin).first(1)), "\xf0");
}

TEST(Llama2Tokenizer, TokenizerConfigChoosesTheBosAndEos) {
  const fs::path dir = fs::temp_directory_path() / "vkattn_test_sentencepiece_config";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kLlama2 / "tokenizer.json", dir / "tokenizer.json");
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"add_bos_token": false, "add_eos_token": true, "bos_token": "<s>", "eos_token": {"content": "</s>"}})";
  EXPECT_EQ(text::load_tokenizer(dir)->encode("Hello"), (std::vector<int64_t>{15043, 2}));
  std::ofstream(dir / "tokenizer_config.json") << R"({"add_eos_token": true})";
  expect_error<FileError>([&] { text::load_tokenizer(dir); }, {"tokenizer.json", "no eos_token for add_eos_token"});
  std::ofstream(dir / "tokenizer_config.json") << "{";
  expect_error<FileError>([&] { text::load_tokenizer(dir); }, {"tokenizer_config.json", "not JSON"});
}

TEST(Llama2Tokenizer, WhatIsWrongIsNamed) {
  auto refused = [](const std::function<void(json&)>& change, std::initializer_list<std::string> fragments) {
    expect_error<FileError>([&] { llama2(change); }, fragments);
  };
  refused([](json& f) {
    f["model"]["vocab"]["<0x4l>"] = f["model"]["vocab"]["<0x41>"];
    f["model"]["vocab"].erase("<0x41>");
  }, {"tokenizer.json", "lacks the byte token '<0x41>'"});
  refused([](json& f) { f["normalizer"]["normalizers"].push_back({{"type", "NFKC"}}); }, {"normalizer NFKC"});
  refused([](json& f) { f["pre_tokenizer"] = {{"type", "Whitespace"}}; }, {"pre-tokenizer is Whitespace", "Metaspace"});
  refused([](json& f) { f["model"]["merges"][0] = "▁ zzzz"; }, {"merge 1", "not in the vocabulary"});
  refused([](json& f) {
    f["model"]["byte_fallback"] = false;
    f["model"]["unk_token"] = "<nope>";
  }, {"unknown token '<nope>'"});
  // without byte fallback: a run of unknown characters is one <unk>
  const auto unk = llama2([](json& f) { f["model"]["byte_fallback"] = false; });
  EXPECT_EQ(unk->encode("a \xf0\x9f\x98\x80\xf0\x9f\x98\x80"), (std::vector<int64_t>{1, 263, 29871, 0}));
  expect_error<ShapeError>([] { llama2()->encode("ok \xff"); }, {"not UTF-8", "byte 3"});
  expect_error<ShapeError>([] { llama2()->decode(std::vector<int64_t>{32000}); }, {"token id 32000", "[0, 32000)"});
}

}  // namespace
}  // namespace vkattn
