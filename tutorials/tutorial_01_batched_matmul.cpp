// Lesson 01: Q·Kᵀ on 4-D tensors, and which layout makes it attention.
//
// The article "How can I multiply two 4D tensors in PyTorch for self-attention?" builds Q, K, V
// as (batch, seq, heads, head_dim) = (32, 128, 8, 64) and multiplies Q by K.transpose(-2, -1).
// It says the result is (batch, seq, heads, seq). It is not: matmul works on the last two dims,
// so on (B, T, H, d) it multiplies each position's (H, d) matrix by its (d, H) transpose and
// gives (B, T, H, H), attention between the heads of one position. Attention between positions
// needs the heads moved forward first, (B, T, H, d) -> (B, H, T, d) (split_heads, torch's
// .transpose(1, 2)); then Q·Kᵀ is (B, H, T, T), softmax and ·V give (B, H, T, d), and
// merge_heads (transpose back and reshape) gives (B, T, H·d), the article's example 3.
//
// Run: build/bin/tutorial_01_batched_matmul [--images DIR] [--device D]
#include <sstream>

#include "tutorials/lesson.h"

using namespace vkattn;

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 01: batched Q·Kᵀ on 4-D tensors, (B,T,H,d) against (B,H,T,d)", [](tutorial::Lesson& lesson) {
    const int64_t B = 32, T = 128, H = 8, d = 64;  // the article's sizes
    const Tensor q = random_tensor({B, T, H, d}, 1), k = random_tensor({B, T, H, d}, 2), v = random_tensor({B, T, H, d}, 3);

    lesson.say(
        "Q, K and V are (B, T, H, d) = (32, 128, 8, 64), as the article makes them. attention_scores "
        "multiplies the last two dims, Q · Kᵀ, per index of the first two (and by 1/√d). Given (B, T, H, d) "
        "it treats T as the head axis and H as the sequence:");
    auto [wrong, wrong_cpu] = lesson.part("Q·Kᵀ in the (B, T, H, d) layout", [&](Backend& b) {
      return b.download(b.attention_scores("scores_wrong_layout", b.upload("Q (B,T,H,d)", q), b.upload("K (B,T,H,d)", k)));
    }, {{"scores_wrong_layout", "Q @ K.transpose(-2, -1) / math.sqrt(d) on (B, T, H, d): matmul pairs the last two "
                                "axes, (H, d)·(d, H), so d is summed away and a second H appears: (B, T, H, H)"}});
    std::ostringstream shape;
    shape << "scores_wrong_layout is " << shape_string(wrong.shape)
          << " = (B, T, H, H): for each of the 128 positions, 8 x 8 products of one head's query with "
             "another head's key at the SAME position. No position looks at any other: this is not attention, "
             "and not the (B, T, H, T) = (32, 128, 8, 128) the article prints.";
    lesson.say(shape.str());
    Tensor first_position({H, H}, std::vector<float>(wrong.data.begin(), wrong.data.begin() + H * H));
    lesson.images("scores_wrong_layout_b0_t0", first_position, {},
                  {.title = "Q·Kᵀ in the (B,T,H,d) layout at b=0, t=0: heads against heads",
                   .rows = "query head", .cols = "key head"});

    lesson.say(
        "The right way: move the heads forward, (B, T, H, d) -> (B, H, T, d). (B, T, H, d) is the same "
        "memory as (B, T, E) with E = H·d, so split_heads does it (torch: .view(B, T, H, d).transpose(1, 2)).");
    auto [right, right_cpu] = lesson.part("split_heads, then Q·Kᵀ, softmax, ·V, merge_heads", [&](Backend& b) {
      auto heads = [&](const char* step, const char* name, const Tensor& t) {
        return b.split_heads(step, view(b.upload(name, t), {B, T, H * d}), H);  // (B, H, T, d)
      };
      Value qh = heads("split_heads_q", "Q", q), kh = heads("split_heads_k", "K", k), vh = heads("split_heads_v", "V", v);
      Value scores = b.attention_scores("attention_scores", qh, kh);   // (B, H, T, T)
      Value weights = b.softmax("softmax", scores);                     // (B, H, T, T), rows sum to 1
      Value context = b.attention_values("attention_values", weights, vh);  // (B, H, T, d)
      return std::pair{b.download(b.merge_heads("merge_heads", context)), b.download(weights)};  // (B, T, H·d)
    }, {{"split_heads_q", "Q.view(B, T, H, d).transpose(1, 2): the same numbers, the head axis moved before T: "
                          "(B, T, H·d) -> (B, H, T, d)"},
        {"split_heads_k", "K.view(B, T, H, d).transpose(1, 2)"},
        {"split_heads_v", "V.view(B, T, H, d).transpose(1, 2)"},
        {"attention_scores", "Q @ K.transpose(-2, -1) / math.sqrt(d): now the last two axes are (T, d)·(d, T): "
                             "d summed away, every position against every position. (B, H, T, T)"},
        {"softmax", "F.softmax(scores, dim=-1): each row of 128 keys becomes weights summing to 1"},
        {"attention_values", "weights @ V: (T, T)·(T, d) per head, the key axis summed away: (B, H, T, d)"},
        {"merge_heads", "out.transpose(1, 2).reshape(B, T, H * d): heads back behind T and concatenated: "
                        "the article's example 3"}});
    std::ostringstream done;
    done << "attention_scores is (B, H, T, T) = (32, 8, 128, 128): every position against every position, per head.\n"
         << "merge_heads gives " << shape_string(right.first.shape)
         << " = (B, T, H·d), the concatenated heads the output projection takes.\n"
         << "The wrong layout made " << element_count(wrong.shape) << " scores; the right one "
         << B * H * T * T << ": 16 times more, because T = 128 is 16 times H = 8.";
    lesson.say(done.str());
    Tensor first_head({T, T}, std::vector<float>(right.second.data.begin(), right.second.data.begin() + T * T));
    lesson.images("weights_b0_h0", first_head, {}, {.title = "attention weights at b=0, h=0: positions against positions"});
  });
}
