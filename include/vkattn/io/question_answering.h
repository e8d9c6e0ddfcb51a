#pragma once
// What an extractive question answerer (…ForQuestionAnswering: Bert::classify's (1, T, 2) logits
// of a question and its context joined as a pair) answers, as Hugging Face's question-answering
// pipeline gives it: the spans of the context likeliest to be the answer. Each token's start and
// end logits become probabilities by a softmax over the context's tokens (and the template's first
// token, [CLS] or <s>, whose probability then counts for no span); a span of tokens s … e, s <= e
// < s + max_answer_len, scores P(start = s) · P(end = e). C++ (`vkattn run --model DIR --text
// QUESTION --text-pair CONTEXT`) and Python (PretrainedEncoder.answer) both read them from here.
#include <cstddef>
#include <cstdint>
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
};

struct Answer {
  double score = 0.0;  // P(start) · P(end); the impossible answer's: [CLS]'s two probabilities
  int64_t first_token = 0, last_token = 0;  // the span's tokens in the pair's ids (0, 0: no answer)
  size_t begin = 0, end = 0;                // its bytes [begin, end) of the context
  std::string text;                         // context[begin, end): the answer
};

// The answers of `context` (encoded as the pair's second text, after the question) among its
// top_k likeliest spans (ties: the earlier start, then the earlier end), the likeliest first:
// spans whose texts are the same but for the case of ASCII letters are one answer, the first's
// span with their scores summed, as the pipeline merges them (so there may be fewer than top_k);
// the impossible answer, where asked, ranked among them. pair: Tokenizer::encode_pair(question,
// context), with its offsets. logits (1, T, 2): Bert::classify's on the pair's ids. ShapeError
// where logits is not (1, T, 2) for the pair's T; ConfigError where top_k or max_answer_len is
// below 1 or the pair has no offsets (a tokenizer that does not say where its tokens came from).
std::vector<Answer> answers(const text::EncodedPair& pair, std::string_view context, const Tensor& logits,
                            const AnswerOptions& options = {});

}  // namespace vkattn::io
