#pragma once
// What a classifier's logits say, by label, for `vkattn run --model` on a …ForSequenceClassification
// or …ForTokenClassification folder: config.json's id2label names the labels (LABEL_i where it
// names none, as Hugging Face's default config does).
#include <ostream>
#include <span>

#include "vkattn/io/pretrained.h"
#include "vkattn/tensor.h"

namespace vkattn::cli {

// A sequence's logits (1, num_labels): its labels by probability, the likeliest first (softmax;
// sigmoid each for problem_type multi_label_classification; one label is a regression's value).
// A token classifier's (1, T, num_labels): each token of `ids` and its likeliest label.
void print_labels(std::ostream& out, const io::Pretrained& model, std::span<const int64_t> ids, const Tensor& logits);

}  // namespace vkattn::cli
