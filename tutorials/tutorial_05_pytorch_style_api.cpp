// Lesson 05: the nn.MultiheadAttention-style API: batch_first, cross-attention with kdim/vdim,
// weights averaged or per head, a PyTorch state_dict loaded from a safetensors file, and the
// packed in_proj GEMM PyTorch runs for self-attention.
//
// Follows "How can I use PyTorch's nn.MultiheadAttention?", and corrects it twice:
//  - Its example 1 calls MultiheadAttention(embed_dim=4, num_heads=2) on x = randn(2, 5, 4)
//    "batch size 2, sequence length 5". Without batch_first=True PyTorch reads (L, N, E): 5
//    sequences of length 2, and the weights come back (N, L, S) = (5, 2, 2), not (2, 5, 5).
//  - Its example 2 passes qdim=8. nn.MultiheadAttention has no qdim (PyTorch raises TypeError:
//    unexpected keyword argument 'qdim'): the query must have embed_dim features; only keys
//    (kdim) and values (vdim) may differ.
// The encoder layer of its example 3 is lesson 06's.
//
// Run: build/bin/tutorial_05_pytorch_style_api [--images DIR] [--device D]
#include <sstream>

#include "tutorials/lesson.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/compare.h"

using namespace vkattn;

namespace {

std::string describe(const AttentionResult& r) {
  return "output " + shape_string(r.output.shape) + ", weights " + shape_string(r.weights->shape);
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 05: the nn.MultiheadAttention API, batch_first, kdim/vdim, weights, state_dict", [](tutorial::Lesson& lesson) {
    // ---- 1 and 2: batch_first ----
    const Tensor x = random_tensor({2, 5, 4}, 1);
    lesson.say(
        "Example 1 of the article: MultiheadAttention(embed_dim=4, num_heads=2) on x (2, 5, 4).\n"
        "batch_first is False by default, so x is read as (L, N, E) = 5 sequences of 2 tokens.");
    const MultiHeadAttention seq_first({.embed_dim = 4, .num_heads = 2});
    auto [r1, r1_cpu] = lesson.part(
        "batch_first=False: x is (L=2, N=5, E=4)", [&](Backend& b) { return seq_first.forward(b, x); },
        {{"q_proj", "F.linear(query, W_q, b_q), W_q the first E rows of in_proj_weight: (N, L, E) stays (N, L, E)"},
         {"k_proj", "F.linear(key, W_k, b_k): in_proj_weight's rows E..2E"},
         {"v_proj", "F.linear(value, W_v, b_v): its rows 2E..3E"},
         {"split_heads_q", "q.view(L, N * H, d).transpose(0, 1), in PyTorch's own words: 2 heads of d = 2. "
                           "(N, L, E) -> (N, H, L, d)"},
         {"split_heads_k", "the same for k"},
         {"split_heads_v", "the same for v"},
         {"attention_scores", "q @ k.transpose(-2, -1) / math.sqrt(d): (N, H, L, S), here L = S = 2"},
         {"softmax", "F.softmax(attn, dim=-1): rows of S keys summing to 1"},
         {"attention_values", "attn @ v: (N, H, L, S)·(N, H, S, d) -> (N, H, L, d)"},
         {"merge_heads", "out.transpose(0, 1).contiguous().view(L * N, E): heads concatenated. (N, L, E)"},
         {"out_proj", "F.linear(out, out_proj.weight, out_proj.bias)"},
         {"average_heads", "attn.mean(dim=1) (need_weights=True): the heads' weights averaged. "
                           "(N, H, L, S) -> (N, L, S)"}});
    lesson.say("batch_first=False: " + describe(r1) + "  <- weights are (N, L, S) = (5, 2, 2)\n"
               "(the steps above ran on (N, L, E) = (5, 2, 4): the module puts the batch first before q_proj)");
    const MultiHeadAttention batch_first({.embed_dim = 4, .num_heads = 2, .batch_first = true});
    auto [r2, r2_cpu] = lesson.part(
        "batch_first=True: x is (N=2, L=5, E=4)", [&](Backend& b) { return batch_first.forward(b, x); },
        {{"q_proj", "the same recipe: now N = 2 sequences of L = 5 tokens, so every (N, …) shape above turns"},
         {"attention_scores", "(N, H, L, S) = (2, 2, 5, 5): 5 tokens attend to 5"}});
    lesson.say("batch_first=True:  " + describe(r2) + "  <- what the article meant: (2, 5, 5)");
    lesson.images("weights_batch_first", *r2.weights, {"b"}, {.title = "weights averaged over heads"});

    // ---- 3: cross-attention with kdim / vdim ----
    lesson.say(
        "Example 2 projects q to 8 features and passes qdim=8, which PyTorch rejects. The query must have "
        "embed_dim features; keys may have kdim and values vdim. Cross-attention: 5 queries over 7 keys.");
    const MultiHeadAttention cross({.embed_dim = 4, .num_heads = 2, .kdim = 6, .vdim = 3, .batch_first = true});
    const Tensor q = random_tensor({2, 5, 4}, 2), k = random_tensor({2, 7, 6}, 3), v = random_tensor({2, 7, 3}, 4);
    auto [r3, r3_cpu] = lesson.part("embed_dim=4, kdim=6, vdim=3: q (2,5,4), k (2,7,6), v (2,7,3)", [&](Backend& b) {
      return cross.forward(b, q, k, v);
    }, {{"k_proj", "F.linear(key, k_proj_weight, b_k): k_proj_weight is (E, kdim) = (4, 6): 6 features in, 4 out"},
        {"v_proj", "F.linear(value, v_proj_weight, b_v): (E, vdim) = (4, 3)"},
        {"attention_scores", "q @ k.transpose(-2, -1) / math.sqrt(d): 5 queries against 7 keys, L ≠ S: "
                             "(N, H, 5, 7)"},
        {"attention_values", "attn @ v: the 7 keys summed away, back to the 5 queries: (N, H, 5, d)"}});
    lesson.say("cross-attention: " + describe(r3) + ": L = 5 queries, S = 7 keys, output back to embed_dim 4");
    try {
      cross.forward(lesson.cpu(), random_tensor({2, 5, 8}, 5), k, v);
    } catch (const ShapeError& e) {
      lesson.say(std::string("and a query of 8 features, as the article's, is refused:\n  ") + e.what());
    }

    // ---- 4: weights averaged or per head ----
    lesson.say(
        "need_weights=True returns the weights averaged over the heads, (N, L, S); average_attn_weights=False "
        "returns each head's, (N, H, L, S). The average is the mean of the per-head planes:");
    auto [r4, r4_cpu] = lesson.check("the weights averaged, then per head", [&](Backend& b) {
      ForwardOptions per_head;
      per_head.average_attn_weights = false;
      return std::pair{cross.forward(b, q, k, v), cross.forward(b, q, k, v, per_head)};
    }, "The two forwards' table would repeat part 3's twice: the second has no average_heads step, and "
       "returns the softmax's (N, H, L, S) as it is.");
    Tensor mean({2, 5, 7});
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 7; ++j) mean.at({n, i, j}) = (r4.second.weights->at({n, 0, i, j}) + r4.second.weights->at({n, 1, i, j})) / 2;
    std::ostringstream avg;
    avg << "averaged " << shape_string(r4.first.weights->shape) << ", per head " << shape_string(r4.second.weights->shape)
        << "; max |averaged - mean of the heads| = " << compare_values(*r4.first.weights, mean, 1e-6, 1e-6).max_abs_error;
    lesson.say(avg.str());
    lesson.images("weights_per_head", *r4.second.weights, {"b", "h"}, {.title = "cross-attention weights per head"});

    // ---- 5: a PyTorch state_dict ----
    const std::string dir = VKATTN_TUTORIAL_DATA;
    lesson.say(
        "Loading weights PyTorch trained: safetensors.torch.save_file(mha.state_dict(), 'W.safetensors').\n"
        "This one (" + dir + "/weights.safetensors) was saved by tests/golden/generate.py, with the "
        "output nn.MultiheadAttention computed for its query. in_proj_weight is split into q, k, v; num_heads "
        "comes from the file's __metadata__ (or vkattn run --heads).");
    io::AttentionState state = io::load_attention(dir + "/weights.safetensors");
    state.config.batch_first = true;
    const MultiHeadAttention trained(state.config, state.weights);
    const Tensor query = io::read_npy(dir + "/query.npy");
    auto [r5, r5_cpu] = lesson.check(
        "nn.MultiheadAttention from its state_dict", [&](Backend& b) { return trained.forward(b, query); },
        "Its table would be part 2's with the file's weights and shapes.");
    const Tensor torch_output = io::read_npy(dir + "/expected_output.npy");
    std::ostringstream torch;
    torch << "embed_dim " << state.config.embed_dim << ", num_heads " << state.config.num_heads << ": " << describe(r5)
          << "; max |vkattn gpu - PyTorch| = " << compare_values(r5.output, torch_output, 1e-4, 0).max_abs_error;
    lesson.say(torch.str());

    // ---- 6: in_proj, PyTorch's packed projection ----
    lesson.say(
        "PyTorch keeps q, k and v's projections stacked in one in_proj_weight (3·E, E), and for self-attention "
        "(query is key is value) it runs them as one GEMM, (B, L, E) -> (B, L, 3·E), then takes q, k, v apart "
        "with .chunk(3, -1). pack_in_proj does the same: one in_proj step, and each split_heads reads its third.");
    const ForwardOptions packed{.need_weights = false, .attention = AttentionPath::fused, .pack_in_proj = true};
    auto [r6, r6_cpu] = lesson.part("one in_proj GEMM instead of q_proj, k_proj, v_proj",
                                    [&](Backend& b) { return trained.forward(b, query, packed); },
                                    {{"in_proj", "F.linear(x, in_proj_weight, in_proj_bias): (B, L, E)·(3·E, E)ᵀ "
                                                 "-> (B, L, 3·E), q, k and v side by side"},
                                     {"split_heads_q", ".chunk(3, -1)[0].view(B, L, H, d).transpose(1, 2): "
                                                       "reads the first E of every row"},
                                     {"flash_attention", "F.scaled_dot_product_attention(q, k, v): scores, "
                                                         "softmax and · v in one step, no (L, S) tensor kept "
                                                         "(lesson 07)"}});
    std::ostringstream same;
    same << "max |packed - separate projections| = " << compare_values(r6.output, r5.output, 1e-5, 1e-5).max_abs_error
         << "; max |packed - PyTorch| = " << compare_values(r6.output, torch_output, 1e-4, 0).max_abs_error;
    lesson.say(same.str());
  });
}
