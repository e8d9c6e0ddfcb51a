#pragma once
// What a masked language model (BertForMaskedLM's head, RoBERTa's, DistilBERT's: Bert::masked_lm)
// puts at each masked token of a text, as Hugging Face's fill-mask pipeline gives it: at every
// position holding the mask token, the likeliest tokens of the vocabulary and their probabilities.
// C++ (`vkattn run --model DIR --text "… [MASK] …"`) and Python (PretrainedEncoder.fill_mask)
// both read them from here.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vkattn/io/pretrained.h"
#include "vkattn/tensor.h"

namespace vkattn::io {

// The encoder's mask token as its tokenizer writes it — BERT's "[MASK]", RoBERTa's "<mask>" —
// or "" where its vocabulary has neither.
std::string mask_token(const Pretrained& model);
// Its id, or -1 where there is none.
int64_t mask_token_id(const Pretrained& model);

// The positions of ids (T) that hold the mask token, in order; none where there is no mask token.
std::vector<int64_t> mask_positions(const Pretrained& model, std::span<const int64_t> ids);

// One candidate for a masked position: the pipeline's token, token_str and score.
struct Fill {
  int64_t id = 0;
  std::string token;  // the tokenizer's text of id alone (bytes, as Tokenizer::decode gives them)
  double probability = 0.0;
};

// At each of `positions` (mask_positions'), the top_k likeliest tokens (all V where top_k > V) by
// the softmax of that position's logits in double, the likeliest first (ties: the lower id).
// logits (1, T, V): Bert::masked_lm's. ShapeError where logits is not (1, T, V) or a position is
// not in [0, T); ConfigError for top_k < 1.
std::vector<std::vector<Fill>> mask_fills(const Pretrained& model, std::span<const int64_t> positions,
                                          const Tensor& logits, int64_t top_k);

}  // namespace vkattn::io
