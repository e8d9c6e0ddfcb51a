#pragma once
// What an extractive question answerer (…ForQuestionAnswering: Bert::classify's (W, T, 2) logits
// of a question and its context joined as a pair, in W windows where the context is long) answers,
// as Hugging Face's question-answering pipeline gives it: the spans of the context likeliest to be
// the answer. Each token's start and
// end logits become probabilities by a softmax over the context's tokens (and the template's first
// token, [CLS] or <s>, whose probability then counts for no span); a span of tokens s … e, s <= e
// < s + max_answer_len, scores P(start = s) · P(end = e). C++ (`vkattn run --model DIR --text
// QUESTION --text-pair CONTEXT`) and Python (PretrainedEncoder.answer) both read them from here.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vkattn/tensor.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn::io {

// The pipeline's arguments of the same names, with its defaults.
struct AnswerOptions {
  int64_t top_k = 1;                      // how many answers, the likeliest first
  int64_t max_answer_len = 15;            // an answer's tokens at most
  bool align_to_words = true;             // an answer's text widened to the whole words of its ends
  bool handle_impossible_answer = false;  // also "no answer" (an empty one), scored by [CLS]'s start and end
  // A context too long for one pass is read in windows (text::windows) of max_seq_len tokens
  // each, question and template included, neighbours sharing doc_stride of the context's tokens.
  // Defaults: max_seq_len min(384, the tokens the model takes), doc_stride min(max_seq_len / 2, 128).
  std::optional<int64_t> max_seq_len, doc_stride;
};

struct Answer {
  double score = 0.0;  // P(start) · P(end); the impossible answer's: [CLS]'s two probabilities
  int64_t window = 0;  // the window of the context it was found in (question_inputs' windows)
  int64_t first_token = 0, last_token = 0;  // the span's tokens in that window's ids (0, 0: no answer)
  size_t begin = 0, end = 0;                // its bytes [begin, end) of the context
  std::string text;                         // context[begin, end): the answer
};

// A question and its context as a question answerer reads them: the pair (Tokenizer::encode_pair)
// cut into windows (text::windows, by options.max_seq_len and doc_stride), and the windows as one
// batch, each a row, the shorter ones padded at the end.
struct QuestionInputs {
  std::vector<text::EncodedPair> windows;
  Tensor ids;               // (W, T) int64, padding 0
  Tensor type_ids;          // (W, T) int64
  std::optional<Tensor> key_padding_mask;  // (W, T) bool, true past a window's end; none for one window
};
// ConfigError where max_seq_len is below 1 or over max_tokens (the longest input the model
// takes), doc_stride is negative or larger than max_seq_len, or the question leaves no room
// for the context (text::windows).
QuestionInputs question_inputs(const text::Tokenizer& tokenizer, std::string_view question, std::string_view context,
                               const AnswerOptions& options, int64_t max_tokens);

// The answers of `context` (encoded as each window's second text, after the question) among
// each window's top_k likeliest spans (ties: the earlier start, then the earlier end), the
// likeliest first: spans whose texts are the same once lowercased (as Python's str.lower()) — in one
// window, or in two that overlap — are one answer, the first's span with their scores summed, as
// the pipeline merges them (so there may be fewer than top_k); the impossible answer, where asked,
// ranked among them with the lowest of the windows' scores for it. windows: question_inputs'
// (or a single Tokenizer::encode_pair(question, context)), with their offsets. logits (W, T, 2):
// Bert::classify's on their batch, row w window w's (padded past its end). ShapeError where
// logits is not (W, T, 2) with T at least the longest window's; ConfigError where top_k or
// max_answer_len is below 1 or a window has no offsets (a tokenizer that does not say where its
// tokens came from).
std::vector<Answer> answers(const std::vector<text::EncodedPair>& windows, std::string_view context,
                            const Tensor& logits, const AnswerOptions& options = {});

}  // namespace vkattn::io
