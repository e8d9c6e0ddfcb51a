// Lesson 04: multi-head attention from scratch: projections, split heads, per-head attention,
// concatenation, output projection, with every shape.
//
// Follows "Implementing multi-head self-attention from scratch" and the MultiHeadAttention of
// "How to implement self-attention in PyTorch" (embed_dim 512, 8 heads, x of (2, 10, 512)):
//   Q, K, V = W_q x, W_k x, W_v x                  (B, T, E)     = (2, 10, 512)
//   .view(B, T, H, d).transpose(1, 2)              (B, H, T, d)  = (2, 8, 10, 64)    split_heads
//   softmax(Q Kᵀ / √d)                             (B, H, T, T)  = (2, 8, 10, 10)
//   · V                                            (B, H, T, d)  = (2, 8, 10, 64)
//   .transpose(1, 2).contiguous().view(B, T, E)    (B, T, E)     = (2, 10, 512)      merge_heads
//   W_o                                            (B, T, E)     = (2, 10, 512)
// Each head attends with its own 64 of the 512 features; merge_heads concatenates the 8 results.
// Then the same weights through vkattn's MultiHeadAttention module: the same numbers.
//
// Run: build/bin/tutorial_04_multi_head_from_scratch [--images DIR] [--device D]
#include <sstream>

#include "tutorials/lesson.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/compare.h"

using namespace vkattn;

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 04: multi-head self-attention from scratch, every shape", [](tutorial::Lesson& lesson) {
    const int64_t B = 2, T = 10, E = 512, H = 8;
    const MultiHeadAttentionConfig config{.embed_dim = E, .num_heads = H, .batch_first = true};
    const MultiHeadAttentionWeights w = MultiHeadAttentionWeights::random(config, 1);
    const Tensor x = random_tensor({B, T, E}, 2);

    lesson.say(
        "MultiHeadAttention(embed_dim=512, num_heads=8) on x (2, 10, 512): B = 2 sequences of T = 10 tokens, "
        "E = 512 features each, and d = 512 / 8 = 64 features per head. Step by step, as the articles write "
        "it; above each step, its PyTorch line:");
    const tutorial::Notes notes{
        {"q_proj", "Q = self.W_q(x): x·W_qᵀ + b, each token's 512 features mixed into 512 new ones. "
                   "(B, T, E) stays (B, T, E)"},
        {"split_heads_q", "Q.view(B, T, H, d).transpose(1, 2): E = 512 cut into H = 8 heads of d = 64, and the "
                          "head axis moved before T. (B, T, E) -> (B, H, T, d)"},
        {"k_proj", "K = self.W_k(x): the same with W_k: what each token offers to be matched on"},
        {"split_heads_k", "K.view(B, T, H, d).transpose(1, 2)"},
        {"v_proj", "V = self.W_v(x): the same with W_v: what each token hands on once matched"},
        {"split_heads_v", "V.view(B, T, H, d).transpose(1, 2)"},
        {"attention_scores", "scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k): every query against every "
                             "key of its head; d is summed away, a second T appears. (B, H, T, T). The 1/√64 "
                             "keeps the scores' spread near 1 whatever d is (lesson 02 shows why)"},
        {"softmax", "weights = F.softmax(scores, dim=-1): exp of each score over its row's sum; each row of "
                    "T keys sums to 1. Shape unchanged"},
        {"attention_values", "out = weights @ V: each query's weights average the value rows; the key axis is "
                             "summed away. (B, H, T, T)·(B, H, T, d) -> (B, H, T, d)"},
        {"merge_heads", "out.transpose(1, 2).contiguous().view(B, T, E): heads back behind T, their 8 × 64 "
                        "features side by side: the concatenation. (B, T, E)"},
        {"out_proj", "self.W_o(out): mixes what the heads found into each token's 512 features"},
    };
    auto [mine, mine_cpu] = lesson.part("by hand: projections, split, attend, merge, project", [&](Backend& b) {
      Value X = b.upload("x", x);
      auto project = [&](const char* step, const Value& in, const Tensor& weight, const std::optional<Tensor>& bias) {
        Value W = b.upload(std::string(step) + ".weight", weight), bias_value = b.upload(std::string(step) + ".bias", *bias);
        return b.linear(step, in, W, &bias_value);  // (B, T, E)
      };
      Value Q = b.split_heads("split_heads_q", project("q_proj", X, w.q_proj_weight, w.q_proj_bias), H);  // (B, H, T, d)
      Value K = b.split_heads("split_heads_k", project("k_proj", X, w.k_proj_weight, w.k_proj_bias), H);
      Value V = b.split_heads("split_heads_v", project("v_proj", X, w.v_proj_weight, w.v_proj_bias), H);
      Value weights = b.softmax("softmax", b.attention_scores("attention_scores", Q, K));  // (B, H, T, T)
      Value heads = b.attention_values("attention_values", weights, V);                     // (B, H, T, d)
      Value out = project("out_proj", b.merge_heads("merge_heads", heads), w.out_proj_weight, w.out_proj_bias);
      return std::pair{b.download(out), b.download(weights)};
    }, notes);
    std::ostringstream shapes;
    shapes << "Output shape: " << shape_string(mine.first.shape) << "\nAttention weights shape (per head): "
           << shape_string(mine.second.shape) << "\n"
           << "What to notice: only attention_scores and attention_values change what the numbers mean; "
              "split_heads and merge_heads move them (their max |gpu - cpu| is the step before's), and every "
              "projection keeps (B, T, E). The output's first values, token 0: gpu "
           << leading_values(mine.first, 4) << ", cpu " << leading_values(mine_cpu.first, 4);
    lesson.say(shapes.str());
    lesson.grid("one head's weights: sequence 0, head 3 (10 queries x 10 keys)", mine.second, {0, 3}, 3);
    Tensor first_sequence({H, T, T}, std::vector<float>(mine.second.data.begin(), mine.second.data.begin() + H * T * T));
    lesson.images("heads_b0", first_sequence, {"h"}, {.title = "attention weights of sequence 0"});

    const MultiHeadAttention mha(config, w);
    auto [module, module_cpu] = lesson.check("MultiHeadAttention.forward, weights per head", [&](Backend& b) {
      ForwardOptions options;
      options.average_attn_weights = false;
      return mha.forward(b, x, x, x, options);
    }, "The same weights through vkattn's MultiHeadAttention module (the recipe nn.MultiheadAttention "
       "follows). Its table would repeat the one above: the same 11 steps and shapes, with q_proj, k_proj "
       "and v_proj first, then the three split_heads, and the same values.");
    ValueDiff out = compare_values(module.output, mine.first, 1e-6, 1e-6);
    ValueDiff weights = compare_values(*module.weights, mine.second, 1e-6, 1e-6);
    std::ostringstream same;
    same << "module against by hand, on the GPU: output max |difference| " << out.max_abs_error << ", weights "
         << weights.max_abs_error << (out.mismatches || weights.mismatches ? "  (they should be equal!)" : "  (the same recipe)");
    lesson.say(same.str());
    if (out.mismatches || weights.mismatches) throw std::runtime_error("the module and the hand-written recipe differ");
  });
}
