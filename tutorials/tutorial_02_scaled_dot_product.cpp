// Lesson 02: scaled dot-product attention, softmax(Q·Kᵀ / √d) · V, one piece at a time.
//
// Follows "How to implement self-attention in PyTorch": its NumPy example (3 tokens of 4
// features), then why the 1/√d is there, shown as numbers (with d = 512 the unscaled scores
// drive softmax to one-hot rows; scaled, the weights stay spread), then its SelfAttention
// module on (2, 5, 64). Every row of softmax sums to 1, and weights · V averages the values.
//
// Run: build/bin/tutorial_02_scaled_dot_product [--images DIR] [--device D]
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "tutorials/lesson.h"

using namespace vkattn;

namespace {

// Unit-variance inputs, like torch.randn (random_tensor is uniform on [-1, 1): variance 1/3).
Tensor randn_like(Shape shape, uint32_t seed) {
  Tensor t = random_tensor(std::move(shape), seed);
  for (float& v : t.data) v *= std::sqrt(3.0f);
  return t;
}

// The largest weight of each row of (…, S), averaged, and how many rows are one-hot (> 0.99).
std::string peakedness(const Tensor& p) {
  const int64_t S = p.shape.back(), rows = element_count(p.shape) / S;
  double sum = 0;
  int64_t one_hot = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float top = *std::max_element(p.data.begin() + r * S, p.data.begin() + (r + 1) * S);
    sum += top;
    one_hot += top > 0.99f;
  }
  std::ostringstream s;
  s << "mean largest weight " << sum / static_cast<double>(rows) << " (uniform would be " << 1.0 / static_cast<double>(S)
    << "), " << one_hot << " of " << rows << " rows one-hot";
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 02: scaled dot-product attention, softmax(Q·Kᵀ/√d)·V", [](tutorial::Lesson& lesson) {
    // ---- 1: the article's NumPy example: 3 tokens, 4 features, one head ----
    lesson.say(
        "X holds 3 tokens of 4 features. Three projections make Q, K, V (3, 4); scores = Q·Kᵀ/√4 is (3, 3): "
        "row i says how much token i attends to each token. softmax turns each row into weights summing to "
        "1, and weights · V mixes the value vectors. (vkattn keeps a batch and a head axis: (1, 1, 3, 4).)");
    const Tensor x = random_tensor({1, 3, 4}, 1);
    const Tensor w_q = random_tensor({4, 4}, 2), w_k = random_tensor({4, 4}, 3), w_v = random_tensor({4, 4}, 4);
    auto [p, p_cpu] = lesson.part("3 tokens, d = 4", [&](Backend& b) {
      Value X = b.upload("X", x);
      auto project = [&](const char* step, const char* name, const Tensor& w) {
        return view(b.linear(step, X, b.upload(name, w), nullptr), {1, 1, 3, 4});  // one head: (B, H, T, d)
      };
      Value Q = project("q_proj", "W_q", w_q), K = project("k_proj", "W_k", w_k), V = project("v_proj", "W_v", w_v);
      Value weights = b.softmax("softmax", b.attention_scores("attention_scores", Q, K));
      b.attention_values("attention_values", weights, V);  // (1, 1, 3, 4)
      return b.download(weights);
    }, {{"q_proj", "Q = X @ W_q: each token's 4 features mixed into 4 new ones; no bias here. (3, 4) stays (3, 4)"},
        {"k_proj", "K = X @ W_k"},
        {"v_proj", "V = X @ W_v"},
        {"attention_scores", "scores = Q @ K.T / np.sqrt(4): token i's query against token j's key, the 4 "
                             "features summed away: (3, 4)·(4, 3) -> (3, 3)"},
        {"softmax", "weights = softmax(scores, axis=-1): exp, then each row divided by its sum"},
        {"attention_values", "output = weights @ V: row i mixes the value rows by token i's weights: "
                             "(3, 3)·(3, 4) -> (3, 4)"}});
    lesson.grid("attention weights (GPU), row i = token i's weights over the tokens j:", p, {0, 0}, 4);
    std::ostringstream sums;
    sums << std::fixed << std::setprecision(6) << "row sums:";
    for (int64_t i = 0; i < 3; ++i) sums << " " << p.at({0, 0, i, 0}) + p.at({0, 0, i, 1}) + p.at({0, 0, i, 2});
    lesson.say(sums.str() + "  (softmax rows sum to 1)");
    lesson.images("weights_3_tokens", p, {"b", "h"}, {.title = "attention weights, 3 tokens"});

    // ---- 2: why 1/√d ----
    const int64_t d = 512, T = 8;
    lesson.say(
        "Why divide by √d? With unit-variance q and k, q·k is a sum of d products: its spread grows like √d. "
        "At d = 512 raw scores reach ±20 or more and softmax(raw) is nearly one-hot: almost all weight on one "
        "key, and gradients through the others vanish. Dividing by √512 = 22.6 brings the spread back to "
        "about 1. (attention_scores always divides by √d; given √d·Q it returns the raw Q·Kᵀ.)");
    const Tensor q = randn_like({1, 1, T, d}, 5), k = randn_like({1, 1, T, d}, 6);
    Tensor q_raw = q;
    for (float& v : q_raw.data) v *= std::sqrt(static_cast<float>(d));
    auto [both, both_cpu] = lesson.part("d = 512, with and without the 1/√d", [&](Backend& b) {
      Value K = b.upload("K", k);
      Value scaled = b.softmax("softmax_scaled", b.attention_scores("scores_scaled", b.upload("Q", q), K));
      Value raw = b.softmax("softmax_raw", b.attention_scores("scores_raw", b.upload("Q·√d", q_raw), K));
      return std::pair{b.download(scaled), b.download(raw)};
    }, {{"scores_scaled", "Q @ K.transpose(-2, -1) / math.sqrt(512): 8 queries against 8 keys, spread near 1"},
        {"softmax_scaled", "F.softmax(scores, dim=-1) of the scaled scores"},
        {"scores_raw", "Q @ K.transpose(-2, -1), unscaled: the same products, 22.6 times larger"},
        {"softmax_raw", "F.softmax of the raw scores: the largest score takes nearly all the weight"}});
    lesson.say("scaled:   " + peakedness(both.first) + "\nunscaled: " + peakedness(both.second));
    lesson.grid("weights with 1/√d (row i: query i over the 8 keys):", both.first, {0, 0}, 3);
    lesson.grid("weights without it:", both.second, {0, 0}, 3);

    // ---- 3: the article's SelfAttention module ----
    lesson.say(
        "The article's SelfAttention(64) on x (2, 5, 64): W_q, W_k, W_v without bias, scores / √64, "
        "softmax, · V. Its (B, T, T) weights are vkattn's (B, 1, T, T): one head.");
    const int64_t B = 2, L = 5, C = 64;
    const Tensor x3 = random_tensor({B, L, C}, 7);
    const Tensor wq = random_tensor({C, C}, 8), wk = random_tensor({C, C}, 9), wv = random_tensor({C, C}, 10);
    auto [out, out_cpu] = lesson.part("SelfAttention(64) on (2, 5, 64)", [&](Backend& b) {
      Value X = b.upload("x", x3);
      auto project = [&](const char* step, const char* name, const Tensor& w) {
        return view(b.linear(step, X, b.upload(name, w), nullptr), {B, 1, L, C});
      };
      Value Q = project("q_proj", "W_q", wq), K = project("k_proj", "W_k", wk), V = project("v_proj", "W_v", wv);
      Value weights = b.softmax("softmax", b.attention_scores("attention_scores", Q, K));  // (B, 1, T, T)
      Value output = b.attention_values("attention_values", weights, V);                  // (B, 1, T, C)
      return std::pair{b.download(view(output, {B, L, C})), b.download(weights)};
    }, {{"q_proj", "queries = self.query(x): nn.Linear(64, 64, bias=False), (2, 5, 64) stays (2, 5, 64)"},
        {"attention_scores", "torch.bmm(queries, keys.transpose(1, 2)) / (64 ** 0.5): (2, 5, 5) per batch, "
                             "vkattn's (2, 1, 5, 5) with its one head"},
        {"attention_values", "torch.bmm(attention, values): (2, 5, 5)·(2, 5, 64) -> (2, 5, 64)"}});
    std::ostringstream shapes;
    shapes << "Input shape: (2, 5, 64)\nOutput shape: " << shape_string(out.first.shape)
           << "\nAttention weights shape: " << shape_string(out.second.shape) << " (the article's (2, 5, 5), one head)";
    lesson.say(shapes.str());
  });
}
