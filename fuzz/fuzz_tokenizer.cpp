// libFuzzer target: tokenizer.json's reader and its tokenizer's encode and decode. The input's
// first line is a text; the rest a tokenizer.json. A file that loads must tokenize any UTF-8 text
// into ids of its vocabulary and decode them; byte-level BPE must give the text back byte for byte
// (it loses nothing; WordPiece lowercases, drops accents and spaces, SentencePiece's BPE reads a
// "▁" as a space); a text that is not UTF-8
// must be refused by name, never split.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/text/byte_level_bpe.h"
#include "fuzz/fuzz_contract.h"
#include "vkattn/text/tokenizer.h"

using namespace vkattn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == std::string::npos) return 0;
  const std::string text = input.substr(0, newline);
  std::unique_ptr<text::Tokenizer> tokenizer;
  const bool loaded = fuzz::refuses_cleanly("tokenizer.json", [&] {
    tokenizer = text::parse_tokenizer_json(std::string_view(input).substr(newline + 1), "tokenizer.json");
  });
  if (!loaded) return 0;
  std::vector<int64_t> ids;
  if (!fuzz::refuses_cleanly("the text", [&] { ids = tokenizer->encode(text); })) return 0;
  for (int64_t id : ids) {
    if (id < 0 || id >= tokenizer->vocab_size()) fuzz::finding("encode gave id " + std::to_string(id));
  }
  const std::string decoded = tokenizer->decode(ids);
  const bool lossless = dynamic_cast<const text::ByteLevelBPE*>(tokenizer.get()) != nullptr;
  if (lossless && decoded != text) fuzz::finding("decode(encode(text)) is not the text: " + text);
  return 0;
}
