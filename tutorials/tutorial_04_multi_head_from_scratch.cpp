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
        "MultiHeadAttention(embed_dim=512, num_heads=8) on x (2, 10, 512): d = 512 / 8 = 64 features per head.\n"
        "Step by step, as the articles write it:");
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
    });
    std::ostringstream shapes;
    shapes << "Output shape: " << shape_string(mine.first.shape) << "\nAttention weights shape (per head): "
           << shape_string(mine.second.shape);
    lesson.say(shapes.str());
    lesson.grid("one head's weights: sequence 0, head 3 (10 queries x 10 keys)", mine.second, {0, 3}, 3);
    Tensor first_sequence({H, T, T}, std::vector<float>(mine.second.data.begin(), mine.second.data.begin() + H * T * T));
    lesson.images("heads_b0", first_sequence, {"h"}, {.title = "attention weights of sequence 0"});

    lesson.say("The same weights through vkattn's MultiHeadAttention module (the recipe nn.MultiheadAttention follows):");
    const MultiHeadAttention mha(config, w);
    auto [module, module_cpu] = lesson.part("MultiHeadAttention.forward, weights per head", [&](Backend& b) {
      ForwardOptions options;
      options.average_attn_weights = false;
      return mha.forward(b, x, x, x, options);
    });
    ValueDiff out = compare_values(module.output, mine.first, 1e-6, 1e-6);
    ValueDiff weights = compare_values(*module.weights, mine.second, 1e-6, 1e-6);
    std::ostringstream same;
    same << "module against by hand, on the GPU: output max |difference| " << out.max_abs_error << ", weights "
         << weights.max_abs_error << (out.mismatches || weights.mismatches ? "  (they should be equal!)" : "  (the same recipe)");
    lesson.say(same.str());
    if (out.mismatches || weights.mismatches) throw std::runtime_error("the module and the hand-written recipe differ");
  });
}
