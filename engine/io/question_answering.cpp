#include "vkattn/io/question_answering.h"

#include <algorithm>
#include <cmath>

#include <unicode/locid.h>
#include <unicode/unistr.h>

#include "vkattn/errors.h"
#include "vkattn/io/probabilities.h"

namespace vkattn::io {

namespace {

struct Span {
  double score;
  int64_t s, e;  // its first and last token
};

// The top_k likeliest spans s … e of a window's context (in_context), s <= e < s + max_answer_len,
// each scored P(start = s) · P(end = e); ties: the earlier start, then the earlier end
std::vector<Span> likeliest_spans(const std::vector<double>& start, const std::vector<double>& end,
                                  const std::vector<bool>& in_context, const AnswerOptions& options) {
  const auto T = static_cast<int64_t>(in_context.size());
  std::vector<Span> spans;
  for (int64_t s = 0; s < T; ++s) {
    if (!in_context[size_t(s)]) continue;
    for (int64_t e = s; e < std::min(T, s + options.max_answer_len); ++e) {
      if (in_context[size_t(e)]) spans.push_back({start[size_t(s)] * end[size_t(e)], s, e});
    }
  }
  const auto kept = std::min(spans.size(), static_cast<size_t>(options.top_k));
  std::partial_sort(spans.begin(), spans.begin() + static_cast<std::ptrdiff_t>(kept), spans.end(),
                    [](const Span& a, const Span& b) {
                      return a.score > b.score || (a.score == b.score && (a.s < b.s || (a.s == b.s && a.e < b.e)));
                    });
  spans.resize(kept);
  return spans;
}

// The pipeline's test for one answer: the same text once lowercased (Python's str.lower(): each
// character's full lowercase mapping, a final 'Σ' a 'ς')
bool same_text(std::string_view a, std::string_view b) {
  auto lower = [](std::string_view text) {
    std::string out;
    icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())))
        .toLower(icu::Locale::getRoot())
        .toUTF8String(out);
    return out;
  };
  return a == b || lower(a) == lower(b);
}

}  // namespace

QuestionInputs question_inputs(const text::Tokenizer& tokenizer, std::string_view question, std::string_view context,
                               const AnswerOptions& options, int64_t max_tokens) {
  const int64_t max_seq_len = options.max_seq_len.value_or(std::min<int64_t>(384, max_tokens));
  if (max_seq_len < 1 || max_seq_len > max_tokens) {
    throw ConfigError("max_seq_len=" + std::to_string(max_seq_len) + " must be from 1 to the " +
                      std::to_string(max_tokens) + " tokens the model takes");
  }
  const int64_t doc_stride = options.doc_stride.value_or(std::min<int64_t>(max_seq_len / 2, 128));
  if (doc_stride < 0 || doc_stride > max_seq_len) {
    throw ConfigError("doc_stride=" + std::to_string(doc_stride) + " must be from 0 to max_seq_len=" +
                      std::to_string(max_seq_len));
  }
  QuestionInputs in;
  in.windows = text::windows(tokenizer.encode_pair(question, context), max_seq_len, doc_stride);
  const auto W = static_cast<int64_t>(in.windows.size());
  int64_t T = 0;
  for (const text::EncodedPair& w : in.windows) T = std::max(T, static_cast<int64_t>(w.ids.size()));
  in.ids = Tensor({W, T}, DType::int64);
  in.type_ids = Tensor({W, T}, DType::int64);
  Tensor padding({W, T}, DType::boolean);
  for (size_t w = 0; w < size_t(W); ++w) {
    const text::EncodedPair& window = in.windows[w];
    for (size_t t = 0; t < size_t(T); ++t) {
      const size_t at = w * size_t(T) + t;
      const bool inside = t < window.ids.size();
      in.ids.data[at] = inside ? float(window.ids[t]) : 0.0f;
      in.type_ids.data[at] = inside && t < window.type_ids.size() ? float(window.type_ids[t]) : 0.0f;
      padding.data[at] = inside ? 0.0f : 1.0f;
    }
  }
  if (W > 1) in.key_padding_mask = std::move(padding);
  return in;
}

std::vector<Answer> answers(const std::vector<text::EncodedPair>& windows, std::string_view context,
                            const Tensor& logits, const AnswerOptions& options) {
  const auto W = static_cast<int64_t>(windows.size());
  int64_t longest = 0;
  for (const text::EncodedPair& w : windows) longest = std::max(longest, static_cast<int64_t>(w.ids.size()));
  if (W == 0 || logits.rank() != 3 || logits.shape[0] != W || logits.shape[1] < longest || logits.shape[2] != 2) {
    throw ShapeError("answers: logits must be (W, T, 2) for W=" + std::to_string(W) + " windows of up to T=" +
                     std::to_string(longest) + " tokens (each token's start and end logits), got " +
                     shape_string(logits.shape));
  }
  if (options.top_k < 1 || options.max_answer_len < 1) {
    throw ConfigError("answers: top_k=" + std::to_string(options.top_k) + " and max_answer_len=" +
                      std::to_string(options.max_answer_len) + " must be at least 1");
  }
  std::vector<Answer> out;
  double impossible = INFINITY;  // the lowest of the windows' scores for no answer
  for (int64_t w = 0; w < W; ++w) {
    const text::EncodedPair& pair = windows[size_t(w)];
    const auto T = static_cast<int64_t>(pair.ids.size());
    if (pair.offsets.size() != pair.ids.size() || pair.sequence_ids.size() != pair.ids.size()) {
      throw ConfigError("answers: the pair has no offsets: its tokenizer does not say where its tokens came from in "
                        "the context, so no answer's text can be cut from it");
    }
    // pass 1: where an answer may start or end — the context's tokens; the softmax also takes the
    // template's first token ([CLS], <s>), as the pipeline keeps its cls_token unmasked
    std::vector<bool> in_context(static_cast<size_t>(T)), allowed(static_cast<size_t>(T));
    for (size_t t = 0; t < size_t(T); ++t) allowed[t] = in_context[t] = pair.sequence_ids[t] == 1;
    if (std::find(in_context.begin(), in_context.end(), true) == in_context.end()) {
      throw ShapeError("answers: the context has no tokens, so no answer: give it at least one");
    }
    const bool cls = T > 0 && pair.sequence_ids[0] == -1;
    if (cls) allowed[0] = true;
    // the window's row of logits: start and end interleaved, (T, 2)
    const std::span<const float> row(logits.data.data() + size_t(w) * size_t(logits.shape[1]) * 2, size_t(T) * 2);
    const std::vector<double> start = softmax(row, 2, &allowed), end = softmax(row.subspan(1), 2, &allowed);
    if (cls) impossible = std::min(impossible, start[0] * end[0]);

    // pass 2: the window's top_k spans
    const std::vector<Span> spans = likeliest_spans(start, end, in_context, options);

    // pass 3: each span's bytes of the context: from its first token's word's start to its last
    // token's word's end (align_to_words: the words' tokens in this window), or from its first
    // token's start to its last token's end; spans of the same text (two starts in one word, the
    // same span in two windows) are one answer, their scores summed
    for (const Span& span : spans) {
      int64_t first = span.s, last = span.e;
      if (options.align_to_words) {
        const int64_t first_word = pair.offsets[size_t(first)].word, last_word = pair.offsets[size_t(last)].word;
        auto in_word = [&](int64_t t, int64_t word) {  // token t is of the context's word `word`
          return pair.sequence_ids[size_t(t)] == 1 && pair.offsets[size_t(t)].word == word;
        };
        while (first > 0 && in_word(first - 1, first_word)) --first;
        while (last + 1 < T && in_word(last + 1, last_word)) ++last;
      }
      const size_t begin = pair.offsets[size_t(first)].begin, finish = pair.offsets[size_t(last)].end;
      if (finish > context.size() || begin > finish) {
        throw ShapeError("answers: the pair's offsets (" + std::to_string(begin) + ", " + std::to_string(finish) +
                         ") are not within the context's " + std::to_string(context.size()) + " bytes");
      }
      const std::string text(context.substr(begin, finish - begin));
      auto same = std::find_if(out.begin(), out.end(), [&](const Answer& a) { return same_text(a.text, text); });
      if (same != out.end()) {
        same->score += span.score;
      } else {
        out.push_back({span.score, w, span.s, span.e, begin, finish, text});
      }
    }
  }
  // no answer: an empty text, scored by the template's first token as start and end
  if (options.handle_impossible_answer && impossible != INFINITY) out.push_back({impossible, 0, 0, 0, 0, 0, ""});
  std::stable_sort(out.begin(), out.end(), [](const Answer& a, const Answer& b) { return a.score > b.score; });
  if (out.size() > size_t(options.top_k)) out.resize(size_t(options.top_k));
  return out;
}

}  // namespace vkattn::io
