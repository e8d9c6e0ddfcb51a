// Lesson 03: masks. A causal mask (no query sees a later key), a key padding mask (no query
// sees a padding token), -inf against -1e9, and a fully masked row.
//
// The attention_mask step adds the masks to the scores: 0 where a key may be seen, -inf where it
// may not, so that softmax gives it weight exp(-inf) = 0. PyTorch's bool masks mean True =
// blocked (nn.MultiheadAttention's attn_mask and key_padding_mask); the article "How to implement
// self-attention in PyTorch" builds the opposite, torch.tril(ones) with True = keep, and blocks
// where mask == 0. Both say the same thing; print the grid and check which one you hold.
//
// -1e9 (the other article's choice) works like -inf while some key in the row is visible. When
// every key of a row is blocked, they part: with -1e9 the row's scores all become -1e9, softmax
// spreads the weight evenly over the blocked keys, and the query silently attends to padding;
// with -inf PyTorch returns NaN; vkattn returns zeros (the query attends to nothing).
//
// Run: build/bin/tutorial_03_masks [--images DIR] [--device D]
#include <cmath>
#include <sstream>

#include "tutorials/lesson.h"

using namespace vkattn;

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 03: causal and padding masks, -inf against -1e9, fully masked rows", [](tutorial::Lesson& lesson) {
    // ---- 1: causal ----
    const int64_t T = 5, d = 64;
    Tensor causal({T, T}, DType::boolean);  // True = blocked: key j after query i
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = i + 1; j < T; ++j) causal.at({i, j}) = 1.0f;
    lesson.grid("causal mask, x = blocked (PyTorch's convention: True blocks key j > query i):", causal);
    lesson.images("causal_mask", causal, {}, {.title = "causal mask (grey: blocked)"});
    lesson.say("The article's torch.tril(ones(5, 5)) is its complement: 1 (keep) on and below the diagonal.");
    const Tensor x = random_tensor({1, 1, T, d}, 1);  // Q = K = V, one head
    auto [causal_weights, causal_cpu] = lesson.part("causal self-attention, T = 5", [&](Backend& b) {
      Value X = b.upload("Q = K = V", x);
      Value scores = b.attention_scores("attention_scores", X, X);
      Value masked = b.attention_mask("attention_mask", scores, nullptr, nullptr, /*causal=*/true);  // -inf above the diagonal
      Value weights = b.softmax("softmax", masked);
      b.attention_values("attention_values", weights, X);
      return b.download(weights);
    }, {{"attention_scores", "scores = q @ k.transpose(-2, -1) / math.sqrt(64): every query against every key, "
                             "(1, 1, 5, 5)"},
        {"attention_mask", "scores.masked_fill(mask == 0, float('-inf')): -inf above the diagonal, the "
                           "scores elsewhere. Shape unchanged"},
        {"softmax", "F.softmax(scores, dim=-1): exp(-inf) = 0, so each row spreads over keys 0..i only"},
        {"attention_values", "weights @ v: query i mixes the values of tokens 0..i, never a later one"}});
    lesson.grid("masked attention weights (GPU): row i spreads over keys 0..i only", causal_weights, {0, 0}, 3);
    lesson.images("causal_weights", causal_weights, {"b", "h"}, {.title = "causal attention weights"});

    // ---- 2: key padding ----
    lesson.say(
        "Key padding: two sequences of 5 tokens, the second only 3 long and padded with 2 tokens.\n"
        "key_padding_mask is (B, S): True (or -inf) where the key is padding. No query may attend to it.");
    const int64_t B = 2, S = 5;
    Tensor padding({B, S});  // additive: 0 = a real token, -inf = padding
    padding.at({1, 3}) = padding.at({1, 4}) = -INFINITY;
    const Tensor q = random_tensor({B, 1, S, d}, 2);
    auto [padded, padded_cpu] = lesson.part("key padding, B = 2, S = 5", [&](Backend& b) {
      Value Q = b.upload("Q = K = V", q), M = b.upload("key_padding_mask", padding);
      Value masked = b.attention_mask("attention_mask", b.attention_scores("attention_scores", Q, Q), nullptr, &M, false);
      Value weights = b.softmax("softmax", masked);
      b.attention_values("attention_values", weights, Q);
      return b.download(weights);
    }, {{"attention_mask", "scores + key_padding_mask.view(B, 1, 1, S): the (B, S) mask broadcast over heads and "
                           "queries; -inf in sequence 1's keys 3 and 4"}});
    lesson.grid("weights of sequence b = 1: keys 3 and 4 (padding) get 0", padded, {1, 0}, 3);
    lesson.images("padding_weights", padded, {"b", "h"}, {.title = "attention weights with key padding"});

    // ---- 3: -inf against -1e9, and a fully masked row ----
    lesson.say(
        "-inf or -1e9? Row 0 below blocks keys 2 and 3; row 1 blocks every key (a query whose keys are all padding).");
    const Tensor scores = random_tensor({1, 1, 2, 4}, 3);
    Tensor minus_inf({2, 4}), minus_1e9({2, 4});
    for (auto [i, j] : {std::pair<int64_t, int64_t>{0, 2}, {0, 3}, {1, 0}, {1, 1}, {1, 2}, {1, 3}}) {
      minus_inf.at({i, j}) = -INFINITY;
      minus_1e9.at({i, j}) = -1e9f;
    }
    auto [rows, rows_cpu] = lesson.part("the same scores masked with -1e9 and with -inf", [&](Backend& b) {
      Value s = b.upload("scores", scores), big = b.upload("attn_mask -1e9", minus_1e9), inf = b.upload("attn_mask -inf", minus_inf);
      Value with_1e9 = b.softmax("softmax_1e9", b.attention_mask("attention_mask_1e9", s, &big, nullptr, false));
      Value with_inf = b.softmax("softmax_inf", b.attention_mask("attention_mask_inf", s, &inf, nullptr, false));
      return std::pair{b.download(with_1e9), b.download(with_inf)};
    }, {{"attention_mask_1e9", "scores.masked_fill(mask, -1e9): a blocked score becomes -1e9, whatever it was"},
        {"softmax_1e9", "F.softmax(dim=-1): row 1's scores are all -1e9, so all equal: each gets 1/4"},
        {"attention_mask_inf", "scores.masked_fill(mask, float('-inf'))"},
        {"softmax_inf", "F.softmax(dim=-1): row 1 is all -inf; PyTorch gives NaN, vkattn zeros"}});
    lesson.grid("weights with -1e9:", rows.first, {0, 0}, 3);
    lesson.grid("weights with -inf:", rows.second, {0, 0}, 3);
    std::ostringstream why;
    why << "Row 0 is the same either way. Row 1 is not: with -1e9 every score became -1e9 (the scores are lost in "
        << "float32 next to 1e9), and softmax gave each blocked key " << rows.first.at({0, 0, 1, 0})
        << ": the query attends to padding and nothing says so.\n"
        << "With -inf, PyTorch's softmax computes 0/0 = NaN for that row, and the NaN spreads through the output.\n"
        << "vkattn's softmax returns zeros for a fully masked row: the query attends to nothing, its output is "
        << "just out_proj's bias.";
    lesson.say(why.str());
  });
}
