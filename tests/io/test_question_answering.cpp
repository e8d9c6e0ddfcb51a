// io::answers: a question answerer's start and end logits read as Hugging Face's
// question-answering pipeline reads them — a softmax each over the context's tokens and [CLS],
// the question's tokens left out; spans that end before they start or run past max_answer_len
// left out; the answer's text widened to whole words; spans of one text merged; the impossible
// answer where asked — on a pair written out by hand: "Who?" and "Alice sat, reading."
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/support/expect_error.h"
#include "vkattn/errors.h"
#include "vkattn/io/question_answering.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn {
namespace {

using testing::expect_error;

const std::string kContext = "Alice sat, reading.";

// [CLS] who ? [SEP] alice sat , read ##ing . [SEP]: positions 0 … 10, the context 4 … 9
text::EncodedPair pair() {
  text::EncodedPair p;
  p.ids = {2, 10, 11, 3, 20, 21, 22, 23, 24, 25, 3};
  p.type_ids = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1};
  p.sequence_ids = {-1, 0, 0, -1, 1, 1, 1, 1, 1, 1, -1};
  p.offsets = {{},          {0, 3, 0},   {3, 4, 1},   {},           {0, 5, 0}, {6, 9, 1},
               {9, 10, 2},  {11, 15, 3}, {15, 18, 3}, {18, 19, 4},  {}};
  return p;
}

// (1, 11, 2): start[t] and end[t] interleaved
Tensor logits(const std::vector<float>& start, const std::vector<float>& end) {
  Tensor t({1, 11, 2});
  for (size_t i = 0; i < 11; ++i) t.data[2 * i] = start[i], t.data[2 * i + 1] = end[i];
  return t;
}

// softmax of v at i over [CLS] (0) and the context (4 … 9): the question's tokens and the [SEP]s
// take no part
double p(const std::vector<float>& v, size_t i) {
  double sum = 0.0;
  for (size_t t : {0, 4, 5, 6, 7, 8, 9}) sum += std::exp(double(v[t]));
  return std::exp(double(v[i])) / sum;
}

//                                  [CLS] who  ?  [SEP] alice sat  ,  read ##ing  .  [SEP]
const std::vector<float> kStart = {0.0f, 50, 50, 50, 0.0f, 5.0f, 0, 0.0f, 0.0f, 0.0f, 50};
const std::vector<float> kEnd = {0.0f, 50, 50, 50, 5.5f, 0.0f, 0, 1.0f, 0.0f, 4.0f, 50};

TEST(Answers, ASpanScoresItsStartsAndEndsProbabilitiesOverTheContext) {
  // the question's and [SEP]'s logits of 50 count for nothing: the likeliest span starts at "sat"
  // (5) and ends at "." (9): e^5 · e^4 against "Alice" alone (4, 4), e^0 · e^5.5
  const std::vector<io::Answer> a = io::answers({pair()}, kContext, logits(kStart, kEnd));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].text, "sat, reading.");
  EXPECT_EQ(a[0].first_token, 5);
  EXPECT_EQ(a[0].last_token, 9);
  EXPECT_EQ(a[0].begin, 6u);
  EXPECT_EQ(a[0].end, 19u);
  EXPECT_NEAR(a[0].score, p(kStart, 5) * p(kEnd, 9), 1e-12);

  // the three likeliest, in order: then (5, 7), e^5 · e^1, widened to "reading"'s end; then
  // "Alice" (4, 4), e^5.5, before the spans of e^5 from "sat" (5, 5), (5, 6), (5, 8)
  const std::vector<io::Answer> three = io::answers({pair()}, kContext, logits(kStart, kEnd), {.top_k = 3});
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[1].text, "sat, reading");
  EXPECT_NEAR(three[1].score, p(kStart, 5) * p(kEnd, 7), 1e-12);
  EXPECT_EQ(three[2].text, "Alice");
  EXPECT_NEAR(three[2].score, p(kStart, 4) * p(kEnd, 4), 1e-12);
}

TEST(Answers, MaxAnswerLenLeavesOutLongerSpans) {
  // (5, 9) is 5 tokens: at 3 at most, (5, 7) is the likeliest
  const std::vector<io::Answer> a = io::answers({pair()}, kContext, logits(kStart, kEnd), {.max_answer_len = 3});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].first_token, 5);
  EXPECT_EQ(a[0].last_token, 7);
  EXPECT_EQ(a[0].text, "sat, reading");  // "read" widened to its word
  const auto apart = io::answers({pair()}, kContext, logits(kStart, kEnd), {.max_answer_len = 3, .align_to_words = false});
  EXPECT_EQ(apart[0].text, "sat, read");
  // one token: "Alice" (4, 4) at e^0 · e^5.5 against "sat" (5, 5) at e^5 · e^0
  EXPECT_EQ(io::answers({pair()}, kContext, logits(kStart, kEnd), {.max_answer_len = 1})[0].text, "Alice");
}

TEST(Answers, AnAnswerIsWidenedToWholeWordsAndSpansOfOneTextAreOne) {
  //                          [CLS] who  ?  [SEP] alice sat  ,  read ##ing  .  [SEP]
  const std::vector<float> start = {0.0f, 0, 0, 0, 0.0f, 0.0f, 0, 3.0f, 3.5f, 0.0f, 0};
  const std::vector<float> end = {0.0f, 0, 0, 0, 0.0f, 0.0f, 0, 0.0f, 4.0f, 0.0f, 0};
  // (8, 8), "##ing" alone, is "reading" whole; "ing" without align_to_words
  const auto apart = io::answers({pair()}, kContext, logits(start, end), {.align_to_words = false});
  EXPECT_EQ(apart[0].text, "ing");
  EXPECT_EQ(apart[0].begin, 15u);
  // (8, 8) and (7, 8) are both "reading": one answer, the likelier span's, the two scores summed
  const auto merged = io::answers({pair()}, kContext, logits(start, end), {.top_k = 2});
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0].text, "reading");
  EXPECT_EQ(merged[0].first_token, 8);
  EXPECT_NEAR(merged[0].score, (p(start, 8) + p(start, 7)) * p(end, 8), 1e-12);
  // without widening they are "ing" and "reading"
  const auto two = io::answers({pair()}, kContext, logits(start, end), {.top_k = 2, .align_to_words = false});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].text, "reading");
}

TEST(Answers, TheImpossibleAnswerIsScoredByCls) {
  //                          [CLS] who  ?  [SEP] alice sat  ,  read ##ing  .  [SEP]
  const std::vector<float> start = {6.0f, 0, 0, 0, 2.0f, 0.0f, 0, 0.0f, 0.0f, 0.0f, 0};
  const std::vector<float> end = {6.0f, 0, 0, 0, 2.0f, 0.0f, 0, 0.0f, 0.0f, 0.0f, 0};
  // [CLS] takes its share of the softmax, but no span starts there
  const auto answer = io::answers({pair()}, kContext, logits(start, end));
  EXPECT_EQ(answer[0].text, "Alice");
  EXPECT_NEAR(answer[0].score, p(start, 4) * p(end, 4), 1e-12);
  const auto with_none = io::answers({pair()}, kContext, logits(start, end), {.top_k = 2, .handle_impossible_answer = true});
  ASSERT_EQ(with_none.size(), 2u);
  EXPECT_EQ(with_none[0].text, "");
  EXPECT_EQ(with_none[0].end, 0u);
  EXPECT_NEAR(with_none[0].score, p(start, 0) * p(end, 0), 1e-12);
  EXPECT_EQ(with_none[1].text, "Alice");
  // one answer: the impossible one, the likelier
  EXPECT_EQ(io::answers({pair()}, kContext, logits(start, end), {.handle_impossible_answer = true})[0].text, "");
}

TEST(Answers, BadInputsAreOneLineErrors) {
  expect_error<ShapeError>([] { io::answers({pair()}, kContext, Tensor({1, 11, 3})); },
                           {"logits must be (W, T, 2) for W=1 windows of up to T=11 tokens", "(1, 11, 3)"});
  expect_error<ShapeError>([] { io::answers({pair()}, kContext, Tensor({1, 10, 2})); }, {"(1, 10, 2)"});
  expect_error<ShapeError>([] { io::answers({pair()}, kContext, Tensor({2, 11, 2})); }, {"W=1", "(2, 11, 2)"});
  expect_error<ShapeError>([] { io::answers({}, kContext, Tensor({0, 11, 2})); }, {"W=0"});
  expect_error<ConfigError>([] { io::answers({pair()}, kContext, logits(kStart, kEnd), {.top_k = 0}); },
                            {"top_k=0", "must be at least 1"});
  expect_error<ConfigError>([] { io::answers({pair()}, kContext, logits(kStart, kEnd), {.max_answer_len = 0}); },
                            {"max_answer_len=0"});
  text::EncodedPair bare = pair();
  bare.offsets.clear();  // a tokenizer that gives none (SentencePiece's)
  expect_error<ConfigError>([&] { io::answers({bare}, kContext, logits(kStart, kEnd)); }, {"the pair has no offsets"});
  expect_error<ShapeError>([] { io::answers({pair()}, "Alice", logits(kStart, kEnd)); },
                           {"not within the context's 5 bytes"});
  text::EncodedPair empty = pair();  // "Who?" and "": [CLS] who ? [SEP] [SEP]
  for (int64_t id : {3, 4, 5, 6, 7, 8, 9}) empty.sequence_ids[size_t(id)] = -1;
  expect_error<ShapeError>([&] { io::answers({empty}, "", logits(kStart, kEnd)); },
                           {"the context has no tokens, so no answer"});
}

// Two spans whose texts differ in case alone are one answer, as Python's str.lower() finds them
// the same: "Élan" and "élan", "ΟΔΟΣ" and "οδος" (a final sigma lowercased as 'ς')
TEST(Answers, SpansOfOneTextButForCaseAreOneAnswer) {
  for (const auto& [first, second] : {std::pair<std::string, std::string>{"Élan", "élan"}, {"ΟΔΟΣ", "οδος"}}) {
    const std::string context = first + " and " + second;  // [CLS] q [SEP] first and second [SEP]
    text::EncodedPair p;
    p.ids = {2, 10, 3, 20, 21, 22, 3}, p.type_ids = {0, 0, 0, 1, 1, 1, 1}, p.sequence_ids = {-1, 0, -1, 1, 1, 1, -1};
    const size_t a = first.size(), b = a + 5;
    p.offsets = {{}, {0, 1, 0}, {}, {0, a, 0}, {a + 1, a + 4, 1}, {b, b + second.size(), 2}, {}};
    Tensor logits({1, 7, 2});
    for (size_t t : {3, 5}) logits.data[2 * t] = logits.data[2 * t + 1] = 4.0f;  // the two words, one token each
    const std::vector<io::Answer> found = io::answers({p}, context, logits, {.top_k = 2, .max_answer_len = 1});
    ASSERT_EQ(found.size(), 1u) << first;
    EXPECT_EQ(found[0].text, first);
    const double each = std::exp(4.0) / (1.0 + 2.0 * std::exp(4.0) + 1.0);  // over [CLS] and the three words
    EXPECT_NEAR(found[0].score, 2.0 * each * each, 1e-12) << first;
  }
}

// A long context cut into windows (text::windows) as a fast tokenizer cuts it with
// truncation="only_second", return_overflowing_tokens: [CLS] q [SEP] c0 … c9 [SEP], 14 tokens, in
// windows of 9 leave room for 5 of the context's: windows from c0, c3 (stride 2: c3 and c4
// shared), c6, the last ending at c9.
text::EncodedPair long_pair() {
  text::EncodedPair p;
  p.ids = {2, 10, 3}, p.type_ids = {0, 0, 0}, p.sequence_ids = {-1, 0, -1};
  p.offsets = {{}, {0, 1, 0}, {}};
  for (int64_t c = 0; c < 10; ++c) {
    p.ids.push_back(100 + c), p.type_ids.push_back(1), p.sequence_ids.push_back(1);
    p.offsets.push_back({size_t(2 * c), size_t(2 * c + 1), c});
  }
  p.ids.push_back(3), p.type_ids.push_back(1), p.sequence_ids.push_back(-1), p.offsets.emplace_back();
  return p;
}

TEST(Windows, CutTheSecondTextAsAFastTokenizersOverflow) {
  const std::vector<text::EncodedPair> w = text::windows(long_pair(), 9, 2);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].ids, (std::vector<int64_t>{2, 10, 3, 100, 101, 102, 103, 104, 3}));
  EXPECT_EQ(w[1].ids, (std::vector<int64_t>{2, 10, 3, 103, 104, 105, 106, 107, 3}));
  EXPECT_EQ(w[2].ids, (std::vector<int64_t>{2, 10, 3, 106, 107, 108, 109, 3}));
  EXPECT_EQ(w[2].sequence_ids, (std::vector<int64_t>{-1, 0, -1, 1, 1, 1, 1, -1}));
  EXPECT_EQ(w[2].type_ids, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(w[1].offsets[3], (text::Offset{6, 7, 3}));  // c3: still its bytes and word of the whole context
  // no stride: windows side by side; a pair that fits: itself
  const std::vector<text::EncodedPair> apart = text::windows(long_pair(), 10, 0);
  ASSERT_EQ(apart.size(), 2u);
  EXPECT_EQ(apart[1].ids, (std::vector<int64_t>{2, 10, 3, 106, 107, 108, 109, 3}));
  EXPECT_EQ(text::windows(long_pair(), 14, 5)[0].ids, long_pair().ids);
  EXPECT_EQ(text::windows(long_pair(), 14, 5).size(), 1u);
  EXPECT_EQ(text::windows(long_pair(), 13, 0).size(), 2u);
}

TEST(Windows, RefuseNoRoomAndAStrideOfAWholeWindow) {
  expect_error<ConfigError>([] { text::windows(long_pair(), 4, 0); },
                            {"take 4 tokens", "no room for the second text in windows of 4"});
  expect_error<ConfigError>([] { text::windows(long_pair(), 9, 5); }, {"stride=5", "below the 5 tokens"});
  expect_error<ConfigError>([] { text::windows(long_pair(), 9, -1); }, {"stride=-1"});
}

// The windows' logits, each row window w's, padded to 10 positions with logits that would win
// were they read: start and end logits given per context token c0 … c9 (the same in every window
// that holds it), `cls` for [CLS], 50 for the question, [SEP] and the padding.
Tensor window_logits(const std::vector<text::EncodedPair>& w, const std::vector<float>& start,
                     const std::vector<float>& end, float cls = 0.0f) {
  Tensor t({int64_t(w.size()), 10, 2});
  for (size_t r = 0; r < w.size(); ++r) {
    for (size_t i = 0; i < 10; ++i) {
      float* at = &t.data[(r * 10 + i) * 2];
      at[0] = at[1] = i == 0 ? cls : 50.0f;
      if (i < w[r].ids.size() && w[r].sequence_ids[i] == 1) {
        const auto c = size_t(w[r].ids[i] - 100);
        at[0] = start[c], at[1] = end[c];
      }
    }
  }
  return t;
}

TEST(Answers, OfAContextInWindowsMergeAcrossTheirOverlap) {
  const std::string context = "a b c d e f g h i j";  // c_k at bytes 2k
  const std::vector<text::EncodedPair> w = text::windows(long_pair(), 9, 2);
  // c3 … c4 is the likeliest span, in windows 0 and 1 (which share c3, c4); c9 alone in window 2;
  // c5's start (window 1's alone) makes window 1's P([CLS]) the lowest
  const std::vector<float> start = {0, 0, 0, 6, 0, 7, 0, 0, 0, 3}, end = {0, 0, 0, 0, 6, 0, 0, 0, 0, 3};
  auto softmax = [](const std::vector<float>& v, size_t at, const std::vector<size_t>& over, float cls) {
    double sum = std::exp(double(cls));
    for (size_t c : over) sum += std::exp(double(v[c]));
    return std::exp(double(at == 99 ? cls : v[at])) / sum;  // 99: [CLS]
  };
  const std::vector<size_t> w0 = {0, 1, 2, 3, 4}, w1 = {3, 4, 5, 6, 7}, w2 = {6, 7, 8, 9};
  const std::vector<io::Answer> a = io::answers(w, context, window_logits(w, start, end), {.top_k = 2});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].text, "d e");
  EXPECT_EQ(a[0].window, 0);
  EXPECT_EQ(a[0].first_token, 6);
  EXPECT_EQ(a[0].last_token, 7);
  EXPECT_NEAR(a[0].score,
              softmax(start, 3, w0, 0) * softmax(end, 4, w0, 0) + softmax(start, 3, w1, 0) * softmax(end, 4, w1, 0),
              1e-12);
  EXPECT_EQ(a[1].text, "j");  // window 2's, where c9 competes with c6 … c8 alone
  EXPECT_EQ(a[1].window, 2);
  EXPECT_EQ(a[1].first_token, 6);
  EXPECT_NEAR(a[1].score, softmax(start, 9, w2, 0) * softmax(end, 9, w2, 0), 1e-12);
  // no answer: scored by the lowest of the windows' P([CLS]) · P([CLS])
  const std::vector<io::Answer> none =
      io::answers(w, context, window_logits(w, start, end, 8.0f), {.top_k = 9, .handle_impossible_answer = true});
  auto cls = [&](const std::vector<size_t>& over) { return softmax(start, 99, over, 8) * softmax(end, 99, over, 8); };
  const auto impossible = std::find_if(none.begin(), none.end(), [](const io::Answer& x) { return x.text.empty(); });
  ASSERT_NE(impossible, none.end());
  EXPECT_NEAR(impossible->score, std::min({cls(w0), cls(w1), cls(w2)}), 1e-12);
  EXPECT_LT(cls(w1), std::min(cls(w0), cls(w2)));  // the middle window's: neither the first's nor the last's
}

}  // namespace
}  // namespace vkattn
