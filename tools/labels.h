#pragma once
// What a head's logits say, for `vkattn run --model`: a …ForSequenceClassification or
// …ForTokenClassification folder's by label — config.json's id2label names the labels (LABEL_i
// where it names none, as Hugging Face's default config does) — and a masked LM's by the tokens
// likeliest at each [MASK], and a question answerer's by its answers.
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "vkattn/io/fill_mask.h"
#include "vkattn/io/pretrained.h"
#include "vkattn/io/question_answering.h"
#include "vkattn/tensor.h"

namespace vkattn::cli {

// A sequence's logits (1, num_labels): its labels by probability, the likeliest first (softmax;
// sigmoid each for problem_type multi_label_classification; one label is a regression's value).
// A token classifier's (1, T, num_labels): each token of `ids` and its likeliest label.
void print_labels(std::ostream& out, const io::Pretrained& model, std::span<const int64_t> ids, const Tensor& logits);

// A question answerer's logits (W, T, 2) of the windows of a pair (--text, the question, and
// --text-pair, the context; io::question_inputs): its answers (io::answers) with their scores and
// where each lies in the context (and in which window, where there are more than one).
void print_answers(std::ostream& out, const std::vector<text::EncodedPair>& windows, const std::string& context,
                   const Tensor& logits, const io::AnswerOptions& options);

// A masked LM's logits (1, T, V) at each of `positions` (io::mask_positions' of ids): its top_k
// likeliest tokens and their probabilities (io::mask_fills).
void print_fills(std::ostream& out, const io::Pretrained& model, std::span<const int64_t> positions,
                 const Tensor& logits, int64_t top_k);

}  // namespace vkattn::cli
