#pragma once
// Text to token ids and back, as the Hugging Face hub's checkpoints define them:
//   byte-level BPE   GPT-2's: vocab.json + merges.txt, or a tokenizer.json whose model is BPE
//                    with the ByteLevel pre-tokenizer, alone (GPT-2's pattern) or after a Split
//                    by its own pattern (Llama 3's, Qwen2's), NFC first or not, special tokens
//                    around each text by its TemplateProcessing (a BOS).
//   SentencePiece's BPE  Llama 2's, Mistral's, TinyLlama's: a tokenizer.json whose model is BPE
//                    with byte_fallback, spaces as "▁" (a Prepend + Replace normalizer, or the
//                    Metaspace pre-tokenizer), characters outside the vocabulary as byte tokens.
//   WordPiece        BERT's: vocab.txt (+ tokenizer_config.json's do_lower_case), or a
//                    tokenizer.json whose model is WordPiece with BertNormalizer and
//                    BertPreTokenizer; [CLS] … [SEP] around each text.
// A text is UTF-8. encode() matches the special tokens first, as they are written (GPT-2's
// <|endoftext|>, BERT's [MASK]); the text between them is normalised, split into words and each
// word into tokens by the model. decode() gives the tokens' text: bytes for byte-level BPE (a
// sequence that ends inside a UTF-8 character gives those bytes as they are), words joined by
// spaces for WordPiece.
// Bad files and bad text are FileError / ShapeError with one line naming the file and the entry.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vkattn::text {

// Where a token came from: bytes [begin, end) of the text it was encoded from (Hugging Face's
// offset_mapping, in bytes of UTF-8 rather than characters), and the word of that text it is part
// of, counted from 0 (Hugging Face's word_ids: the pre-tokenizer's words — BERT's split at spaces
// and punctuation, byte-level BPE's pieces — and each special token written in the text one). A
// template's token, which is in no text, has (0, 0) and word -1.
struct Offset {
  size_t begin = 0, end = 0;
  int64_t word = -1;
  bool operator==(const Offset&) const = default;
};

// Two texts as one sequence (encode_pair): the ids, each id's token type (segment), and which
// text each came from (Hugging Face's sequence_ids: 0, 1, or -1 for a template's token).
// offsets: each id's bytes in the text it came from, where the tokenizer gives offsets (else
// empty).
struct EncodedPair {
  std::vector<int64_t> ids, type_ids, sequence_ids;
  std::vector<Offset> offsets;
};

// A pair too long for a model, cut as a fast tokenizer cuts it with truncation="only_second",
// max_length and stride, return_overflowing_tokens (Hugging Face's question-answering pipeline:
// max_seq_len, doc_stride): every window holds the template's tokens and all of the first text,
// and `room` = max_length - their count of the second's; window w holds the second's tokens from
// w · (room - stride), the last one its end, so that neighbours share `stride` tokens. Each
// window's ids, types, sequence ids and offsets are the pair's (offsets still into the whole
// second text). One window, the pair itself, where it fits in max_length. ConfigError where the
// first text and the template leave no room (room < 1) or stride is negative or not below room.
std::vector<EncodedPair> windows(const EncodedPair& pair, int64_t max_length, int64_t stride);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  // Each id of encode(text)'s bytes in `text`: for WordPiece the characters a token's normalised
  // text came from ("Café" -> "cafe": bytes 0 … 5), for byte-level BPE its bytes without the
  // whitespace around them (RoBERTa's trim_offsets). ConfigError for a tokenizer that gives none
  // (SentencePiece's; a byte-level BPE's text changed by NFC).
  virtual std::vector<Offset> offsets(std::string_view text) const;
  // A pair of texts — a question and its context, two sentences — joined as the tokenizer's
  // template for pairs joins them (a post-processor's "pair"): BERT's [CLS] a [SEP] b [SEP],
  // token types 0 up to the first [SEP], 1 after; RoBERTa's <s> a </s></s> b </s>, all 0. Each
  // text is encoded alone, as encode() encodes it. ConfigError where the tokenizer has no
  // template for pairs (GPT-2's, Llama's).
  virtual EncodedPair encode_pair(std::string_view a, std::string_view b) const;
  // The ids' text; a ShapeError names an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int64_t> ids) const = 0;
  // The text of ids that continue others (a stream's next piece): decode()'s, but where decoding
  // drops what encoding put before a text (SentencePiece's space), kept.
  virtual std::string decode_continuation(std::span<const int64_t> ids) const { return decode(ids); }
  virtual int64_t vocab_size() const = 0;
  // The id of a token of the vocabulary (e.g. "<|endoftext|>"), or -1.
  virtual int64_t token_id(const std::string& token) const = 0;
};

// A checkpoint folder's tokenizer: tokenizer.json when there is one, else vocab.json +
// merges.txt (GPT-2's), else vocab.txt (BERT's). A FileError names the folder when it has none,
// and the model or the part of it vkattn does not read.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir);
// tokenizer.json's text; errors start with `source`.
std::unique_ptr<Tokenizer> parse_tokenizer_json(std::string_view text, const std::string& source);

}  // namespace vkattn::text
