// A checkpoint folder's tokenizer: tokenizer.json (Hugging Face tokenizers' one file), GPT-2's
// vocab.json + merges.txt, or BERT's vocab.txt.
#include <nlohmann/json.hpp>

#include "engine/io/file.h"
#include "engine/text/byte_level_bpe.h"
#include "engine/text/sentencepiece_bpe.h"
#include "engine/text/vocabulary.h"
#include "engine/text/word_piece.h"
#include "vkattn/errors.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn::text {
namespace {

using nlohmann::json;

// The pre-tokenizer's type, or "none"; a Sequence's members joined by '+'.
std::string pre_tokenizer_kind(const json& pre) {
  if (!pre.is_object()) return "none";
  const std::string type = pre.value("type", "?");
  if (type != "Sequence") return type;
  std::string kinds;
  for (const auto& member : pre.value("pretokenizers", json::array())) {
    kinds += (kinds.empty() ? "" : "+") + pre_tokenizer_kind(member);
  }
  return "Sequence(" + kinds + ")";
}

// The members of a Sequence (of normalizers, pre-tokenizers, processors), or the one given.
std::vector<json> members(const json& part, const char* list) {
  if (part.is_object() && part.value("type", "") == "Sequence") return part.value(list, json::array());
  return {part};
}

// The pre-tokenizer's pattern: "" for ByteLevel alone (GPT-2's), a Split's regex followed by a
// ByteLevel that does not split again (Llama 3's, Qwen2's). FileError naming any other.
std::string pre_tokenizer_pattern(const json& pre, const std::string& source) {
  const std::string kind = pre_tokenizer_kind(pre);
  auto refuse = [&] {
    return FileError(source + ": the pre-tokenizer is " + kind + "; vkattn reads ByteLevel, or a Split by a " +
                     "pattern then ByteLevel without its own (GPT-2's, Llama 3's, Qwen2's)");
  };
  const std::vector<json> parts = members(pre, "pretokenizers");
  if (kind == "ByteLevel") {
    if (pre.value("add_prefix_space", false)) throw FileError(source + ": ByteLevel's add_prefix_space is not supported");
    return "";
  }
  if (parts.size() != 2 || parts[0].value("type", "") != "Split" || parts[1].value("type", "") != "ByteLevel" ||
      parts[1].value("use_regex", true) || parts[1].value("add_prefix_space", false)) {
    throw refuse();
  }
  const json& split = parts[0];
  if (split.value("behavior", "") != "Isolated" || split.value("invert", false) || !split.contains("pattern") ||
      !split["pattern"].contains("Regex")) {
    throw FileError(source + ": the Split pre-tokenizer is " + split.dump().substr(0, 80) +
                    "; vkattn reads an Isolated split by a Regex pattern");
  }
  return split["pattern"]["Regex"].get<std::string>();
}

// The special tokens a post-processor puts around a single text ("$A") and its template for
// pairs: a TemplateProcessing's "single" and "pair", or a BertProcessing's [CLS] and [SEP] (a
// RobertaProcessing's <s> and </s>, two between the texts, every token type 0).
void template_tokens(const json& processor, std::vector<std::string>& prefix, std::vector<std::string>& suffix,
                     PairTemplate& pair, const std::string& source) {
  for (const json& part : members(processor, "processors")) {
    if (part.is_null()) continue;
    const std::string type = part.value("type", "?");
    if (type == "ByteLevel") continue;  // offsets only
    if (type == "BertProcessing" || type == "RobertaProcessing") {
      const std::string cls = part.at("cls").at(0).get<std::string>(), sep = part.at("sep").at(0).get<std::string>();
      prefix.push_back(cls);
      suffix.push_back(sep);
      pair = type == "BertProcessing" ? bert_pair(cls, sep) : PairTemplate{{cls}, {"$A"}, {sep}, {sep}, {"$B"}, {sep}};
      continue;
    }
    if (type != "TemplateProcessing") {
      throw FileError(source + ": the post-processor " + type +
                      " is not one vkattn reads (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel)");
    }
    bool after = false;
    for (const json& piece : part.at("single")) {
      if (piece.contains("Sequence")) {
        after = true;
      } else {
        (after ? suffix : prefix).push_back(piece.at("SpecialToken").at("id").get<std::string>());
      }
    }
    pair.clear();
    for (const json& piece : part.value("pair", json::array())) {
      const bool text = piece.contains("Sequence");
      const json& what = text ? piece.at("Sequence") : piece.at("SpecialToken");
      pair.push_back({text ? "$" + what.at("id").get<std::string>() : what.at("id").get<std::string>(),
                      what.value("type_id", int64_t{0})});
    }
  }
}

// The model's vocabulary and the added tokens (all matched as they are written; those with lstrip
// or rstrip taking the whitespace beside them too).
Vocab vocab_of(const json& file, std::vector<std::string>& special, Strips& strips, const std::string& source) {
  Vocab vocab;
  for (const auto& [token, id] : file.at("model").at("vocab").items()) vocab[token] = token_id_of(id, token, source);
  for (const auto& added : file.value("added_tokens", json::array())) {
    const std::string content = added.at("content").get<std::string>();
    vocab[content] = token_id_of(added.at("id"), content, source);
    special.push_back(content);
    const Strip strip{added.value("lstrip", false), added.value("rstrip", false)};
    if (strip.left || strip.right) strips[content] = strip;
  }
  return vocab;
}

// A BPE model's merges: "a b" strings, or ["a", "b"] pairs (tokenizers >= 0.20).
std::vector<std::pair<std::string, std::string>> merges_of(const json& model, const std::string& source) {
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& m : model.at("merges")) {
    if (m.is_array() && m.size() == 2) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      continue;
    }
    const std::string line = m.get<std::string>();
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size()) {
      throw FileError(source + ": merge '" + line + "' is not two tokens split by one space");
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return merges;
}

std::unique_ptr<Tokenizer> byte_level_bpe(const json& file, const std::string& source) {
  const json& model = file.at("model");
  ByteLevelOptions options;
  options.pattern = pre_tokenizer_pattern(file.value("pre_tokenizer", json()), source);
  options.ignore_merges = model.value("ignore_merges", false);
  for (const json& n : members(file.value("normalizer", json()), "normalizers")) {
    if (n.is_null()) continue;
    const std::string kind = n.value("type", "?");
    if (kind != "NFC") throw FileError(source + ": the normalizer " + kind + " is not one vkattn reads with BPE (NFC)");
    options.nfc = true;
  }
  template_tokens(file.value("post_processor", json()), options.prefix, options.suffix, options.pair, source);
  std::vector<std::string> special;
  Vocab vocab = vocab_of(file, special, options.strips, source);
  return std::make_unique<ByteLevelBPE>(std::move(vocab), merges_of(model, source), std::move(special), source, "",
                                        std::move(options));
}

// Whether a BPE tokenizer.json is SentencePiece's (Llama 2's): byte fallback, or spaces as ▁.
bool is_sentencepiece(const json& file) {
  if (file.at("model").value("byte_fallback", false)) return true;
  if (pre_tokenizer_kind(file.value("pre_tokenizer", json())) == "Metaspace") return true;
  for (const json& n : members(file.value("normalizer", json()), "normalizers")) {
    if (n.is_object() && n.value("type", "") == "Replace" && n.value("content", "") == kSentencePieceSpace) return true;
  }
  return false;
}

// A special token's name in tokenizer_config.json: a string, or {"content": …}
std::string config_token(const json& config, const char* key, const std::string& source) {
  if (!config.contains(key)) throw FileError(source + ": no " + key + " for add_" + std::string(key));
  const json& v = config[key];
  return v.is_string() ? v.get<std::string>() : v.at("content").get<std::string>();
}

// SentencePiece's BPE (Llama 2's, Mistral's, TinyLlama's): spaces as ▁ by a Prepend + Replace
// normalizer or by the Metaspace pre-tokenizer, byte fallback; tokenizer_config.json's
// add_bos_token and add_eos_token, where it has them, choose the template's tokens (as
// LlamaTokenizerFast does).
std::unique_ptr<Tokenizer> sentencepiece_bpe(const json& file, const json& config, const std::string& source) {
  const json& model = file.at("model");
  SentencePieceOptions options;
  options.byte_fallback = model.value("byte_fallback", false);
  options.unk_token = model.contains("unk_token") && model["unk_token"].is_string()
                          ? model["unk_token"].get<std::string>() : "<unk>";
  options.prepend = false;
  for (const json& n : members(file.value("normalizer", json()), "normalizers")) {
    if (n.is_null()) continue;
    const std::string kind = n.value("type", "?");
    if (kind == "Prepend" && n.value("prepend", "") == kSentencePieceSpace) {
      options.prepend = true;
    } else if (kind != "Replace" || n.value("content", "") != kSentencePieceSpace ||
               n.value("pattern", json()).value("String", "") != " ") {
      throw FileError(source + ": the normalizer " + kind + " " + n.dump().substr(0, 60) +
                      " is not one vkattn reads with SentencePiece's BPE (Prepend ▁, Replace ' ' by ▁)");
    }
  }
  const json pre = file.value("pre_tokenizer", json());
  if (!pre.is_null()) {
    if (pre_tokenizer_kind(pre) != "Metaspace" ||
        pre.value("replacement", kSentencePieceSpace) != kSentencePieceSpace) {
      throw FileError(source + ": the pre-tokenizer is " + pre_tokenizer_kind(pre) +
                      "; vkattn reads SentencePiece's BPE with Metaspace (replacement ▁) or none");
    }
    const std::string scheme = pre.contains("prepend_scheme") ? pre["prepend_scheme"].get<std::string>()
                               : pre.value("add_prefix_space", true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      throw FileError(source + ": Metaspace's prepend_scheme '" + scheme + "' is not always, first or never");
    }
    options.prepend = scheme != "never";
    options.prepend_first_only = scheme == "first";
    options.prepend_to_space = false;
    options.split = pre.value("split", true);
  }
  template_tokens(file.value("post_processor", json()), options.prefix, options.suffix, options.pair, source);
  if (config.is_object() && config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    options.prefix.clear();
    if (config["add_bos_token"].get<bool>()) options.prefix.push_back(config_token(config, "bos_token", source));
  }
  if (config.is_object() && config.contains("add_eos_token") && config["add_eos_token"].is_boolean()) {
    options.suffix.clear();
    if (config["add_eos_token"].get<bool>()) options.suffix.push_back(config_token(config, "eos_token", source));
  }
  std::vector<std::string> special;
  Vocab vocab = vocab_of(file, special, options.strips, source);
  return std::make_unique<SentencePieceBPE>(std::move(vocab), merges_of(model, source), std::move(special), source,
                                            std::move(options));
}

// WordPiece after BertNormalizer (or none) and BertPreTokenizer: BERT's.
std::unique_ptr<Tokenizer> word_piece(const json& file, const std::string& source) {
  const json& model = file.at("model");
  WordPieceOptions options;
  options.unk_token = model.value("unk_token", "[UNK]");
  options.continuing_subword_prefix = model.value("continuing_subword_prefix", "##");
  options.max_input_chars_per_word = model.value("max_input_chars_per_word", int64_t{100});
  const std::string pre = pre_tokenizer_kind(file.value("pre_tokenizer", json()));
  if (pre != "BertPreTokenizer") {
    throw FileError(source + ": the pre-tokenizer is " + pre + "; vkattn reads WordPiece after BertPreTokenizer");
  }
  const json normalizer = file.value("normalizer", json());
  if (normalizer.is_null()) {
    options.normalizer = {.clean_text = false, .handle_chinese_chars = false, .strip_accents = false,
                          .lowercase = false};
  } else if (normalizer.value("type", "?") == "BertNormalizer") {
    options.normalizer.clean_text = normalizer.value("clean_text", true);
    options.normalizer.handle_chinese_chars = normalizer.value("handle_chinese_chars", true);
    options.normalizer.lowercase = normalizer.value("lowercase", true);
    if (normalizer.contains("strip_accents") && !normalizer["strip_accents"].is_null()) {
      options.normalizer.strip_accents = normalizer["strip_accents"].get<bool>();
    }
  } else {
    throw FileError(source + ": the normalizer " + normalizer.value("type", "?") +
                    " is not one vkattn reads with WordPiece (BertNormalizer)");
  }
  options.prefix.clear();
  options.suffix.clear();
  options.pair.clear();
  template_tokens(file.value("post_processor", json()), options.prefix, options.suffix, options.pair, source);
  std::vector<std::string> special;
  Vocab vocab = vocab_of(file, special, options.strips, source);
  return std::make_unique<WordPiece>(std::move(vocab), std::move(special), source, std::move(options));
}

// tokenizer.json with a BPE model and a byte-level pre-tokenizer (GPT-2's, Llama 3's, Qwen2's) or
// SentencePiece's spaces and byte fallback (Llama 2's), or a WordPiece model (BERT's); `config`,
// tokenizer_config.json's object or null.
std::unique_ptr<Tokenizer> parse_tokenizer_files(std::string_view text, const std::string& source, const json& config) {
  json file;
  try {
    file = json::parse(text);
  } catch (const json::exception& e) {
    throw FileError(source + ": not JSON (" + e.what() + ")");
  }
  if (!file.is_object()) throw FileError(source + ": not a JSON object");
  try {
    const std::string type = file.at("model").value("type", "?");
    if (type == "BPE") return is_sentencepiece(file) ? sentencepiece_bpe(file, config, source) : byte_level_bpe(file, source);
    if (type == "WordPiece") return word_piece(file, source);
    throw FileError(source + ": the model is " + type + "; vkattn reads BPE (GPT-2's, Llama's) and WordPiece " +
                    "(BERT's) tokenizers so far");
  } catch (const json::exception& e) {
    throw FileError(source + ": " + e.what());
  }
}

}  // namespace

std::unique_ptr<Tokenizer> parse_tokenizer_json(std::string_view text, const std::string& source) {
  return parse_tokenizer_files(text, source, json());
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "tokenizer.json")) {
    json config;
    if (std::filesystem::exists(dir / "tokenizer_config.json")) {
      try {
        config = json::parse(io::read_text(dir / "tokenizer_config.json"));
      } catch (const json::exception& e) {
        throw FileError((dir / "tokenizer_config.json").string() + ": not JSON (" + e.what() + ")");
      }
    }
    return parse_tokenizer_files(io::read_text(dir / "tokenizer.json"), (dir / "tokenizer.json").string(), config);
  }
  if (std::filesystem::exists(dir / "vocab.json") && std::filesystem::exists(dir / "merges.txt")) {
    return std::make_unique<ByteLevelBPE>(ByteLevelBPE::from_files(dir / "vocab.json", dir / "merges.txt"));
  }
  if (std::filesystem::exists(dir / "vocab.txt")) {
    return std::make_unique<WordPiece>(WordPiece::from_files(dir / "vocab.txt", dir / "tokenizer_config.json"));
  }
  throw FileError(dir.string() + ": no tokenizer: none of tokenizer.json, vocab.json with merges.txt, vocab.txt");
}

std::vector<Offset> Tokenizer::offsets(std::string_view) const {
  throw ConfigError("this tokenizer does not say where its tokens came from in the text (offsets: WordPiece's and "
                    "byte-level BPE's do, SentencePiece's and a text normalised to NFC do not)");
}

EncodedPair Tokenizer::encode_pair(std::string_view, std::string_view) const {
  throw ConfigError("this tokenizer has no template for a pair of texts (its post-processor's \"pair\"): "
                    "give the pair's ids and token types");
}

}  // namespace vkattn::text
