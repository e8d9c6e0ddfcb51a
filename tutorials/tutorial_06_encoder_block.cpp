// Lesson 06: the transformer encoder block around attention: residual connections, layer_norm,
// the feed-forward network (linear1 -> relu or gelu -> linear2), post-norm against pre-norm, and
// a PyTorch nn.TransformerEncoder run from its state_dict.
//
// Follows example 3 of "How can I use PyTorch's nn.MultiheadAttention?" (its hand-written
// TransformerEncoderLayer is torch's nn.TransformerEncoderLayer(d_model=4, nhead=2,
// dim_feedforward=4) with relu, post-norm) and the TransformerEncoderBlock of "Self-attention in
// PyTorch" (post-norm, exact GELU, dim_feedforward = 4·E). It corrects the first once:
//  - It runs its layer, built without batch_first, on x = randn(2, 5, 4) and prints
//    torch.Size([2, 5, 4]). PyTorch reads that x as (L, N, E): 5 sequences of 2 tokens, as in
//    lesson 05. vkattn's encoder is batch-first, so the same computation is x as (N=5, L=2, E=4).
//
// Run: build/bin/tutorial_06_encoder_block [--images DIR] [--device D]
#include <cmath>
#include <sstream>

#include "tutorials/lesson.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tracing/compare.h"

using namespace vkattn;

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 06: the encoder block: residuals, layer_norm, feed-forward, post- and pre-norm", [](tutorial::Lesson& lesson) {
    // ---- 1: the article's layer, step by step ----
    lesson.say(
        "Example 3 of the article wraps nn.MultiheadAttention in a TransformerEncoderLayer:\n"
        "  x = norm1(x + self_attn(x))             the residual, then layer_norm: post-norm\n"
        "  x = norm2(x + linear2(relu(linear1(x))))  the feed-forward network, its residual, layer_norm\n"
        "That is torch's nn.TransformerEncoderLayer(d_model=4, nhead=2, dim_feedforward=4). Its x (2, 5, 4) "
        "without batch_first is 5 sequences of 2 tokens; batch-first that is x (N=5, L=2, E=4).");
    // An encoder never returns attention weights, so by default it runs the fused flash_attention;
    // this lesson asks for the unfused steps to show scores, softmax and values one by one.
    const EncoderOptions each_step{.attention = AttentionPath::unfused};
    const TransformerEncoderLayer article({.d_model = 4, .nhead = 2, .dim_feedforward = 4});
    const Tensor x = random_tensor({5, 2, 4}, 1);
    auto [y, y_cpu] = lesson.part("TransformerEncoderLayer(d_model=4, nhead=2, dim_feedforward=4), post-norm, relu",
                                  [&](Backend& b) { return article.forward(b, x, each_step); },
                                  {{"q_proj", "self.self_attn(x, x, x): lesson 05's recipe, on (N, L, E) = (5, 2, 4)"},
                                   {"split_heads_q", "q.view(N, L, H, d).transpose(1, 2): 2 heads of d = 2"},
                                   {"k_proj", "the same for k (lesson 04 has each attention step)"},
                                   {"v_proj", "and for v"},
                                   {"split_heads_k", "the same for k"},
                                   {"split_heads_v", "and for v"},
                                   {"attention_scores", "q @ k.transpose(-2, -1) / math.sqrt(2): (N, H, L, L)"},
                                   {"softmax", "F.softmax(dim=-1)"},
                                   {"attention_values", "attn @ v"},
                                   {"merge_heads", "transpose(1, 2).reshape(N, L, E)"},
                                   {"out_proj", "self.self_attn.out_proj: the attention sub-block's output"},
                                   {"residual_add1", "x + self.dropout1(attn_output): the residual, dropout off "
                                                     "in eval(). Shapes unchanged"},
                                   {"norm1", "x = self.norm1(...): each token's 4 features to mean 0, "
                                             "variance 1, then · weight + bias"},
                                   {"linear1", "self.linear1(x): E = 4 -> dim_feedforward = 4 features"},
                                   {"relu", "F.relu: negatives to 0"},
                                   {"linear2", "self.linear2(...): dim_feedforward -> E"},
                                   {"residual_add2", "x + self.dropout2(ff_output): the second residual"},
                                   {"norm2", "self.norm2(...): post-norm, the layer ends normalised"}});
    lesson.say("Encoder Layer Output Shape: " + shape_string(y.shape) +
               "  <- every step keeps (N, L, E) but linear1, which widens to dim_feedforward\n"
               "(here 4, as the article's; torch's default is 2048, the SimpleTransformer's 4·E)");

    // ---- 2: layer_norm ----
    lesson.say(
        "layer_norm normalises each token's features: subtract their mean, divide by √(var + eps) with the "
        "biased variance (÷ E), then scale by weight and shift by bias, both learnt, one per feature.");
    const Tensor row({1, 6}, {1, 2, 3, 4, 5, 100});
    const Tensor ones({6}, std::vector<float>(6, 1.0f)), zeros({6});
    auto [normed, normed_cpu] = lesson.part("layer_norm of one token with weight 1 and bias 0", [&](Backend& b) {
      return b.download(b.layer_norm("norm1", b.upload("x", row), b.upload("norm1.weight", ones), b.upload("norm1.bias", zeros), 1e-5f));
    }, {{"norm1", "F.layer_norm(x, (6,), weight, bias, eps=1e-5): (x - mean) / √(var + eps) · weight + bias, "
                  "over the last axis"}});
    lesson.grid("before:", row, {}, 3);
    lesson.grid("after: mean 0, variance 1 (the outlier 100 squeezes the rest together)", normed, {}, 3);
    std::vector<float> both_rows = row.data;
    both_rows.insert(both_rows.end(), normed.data.begin(), normed.data.end());
    lesson.images("layer_norm_before_after", Tensor({2, 6}, both_rows), {},
                  {.title = "one token before (row 0) and after (row 1) layer_norm", .rows = "0 before, 1 after",
                   .cols = "feature"});

    // ---- 3: the activations ----
    lesson.say(
        "The feed-forward network's activation: relu (torch's default) cuts negatives to 0; gelu, x·Φ(x) with Φ "
        "the normal CDF (exact, with erf: torch's default approximate='none'), bends smoothly below 0.");
    const Tensor points({1, 7}, {-3, -1, -0.5f, 0, 0.5f, 1, 3});
    auto [acts, acts_cpu] = lesson.part("relu and gelu of -3 … 3", [&](Backend& b) {
      Value p = b.upload("x", points);
      return std::pair{b.download(b.relu("relu", p)), b.download(b.gelu("gelu", p))};
    }, {{"relu", "F.relu(x) = max(x, 0)"},
        {"gelu", "F.gelu(x) = x · Φ(x) = x · (1 + erf(x / √2)) / 2"}});
    lesson.grid("x:", points, {}, 4);
    lesson.grid("relu(x):", acts.first, {}, 4);
    lesson.grid("gelu(x): note gelu(-0.5) = -0.1543, not 0", acts.second, {}, 4);

    // ---- 4: post-norm against pre-norm ----
    lesson.say(
        "norm_first=True (pre-norm, as GPT-2 and most recent models) normalises before each sub-block and "
        "adds the residual after it; the stream between layers is never normalised:\n"
        "  x = x + self_attn(norm1(x));  x = x + ffn(norm2(x))");
    TransformerEncoderLayerConfig post_config{.d_model = 8, .nhead = 2, .dim_feedforward = 16, .activation = Activation::gelu};
    TransformerEncoderLayerConfig pre_config = post_config;
    pre_config.norm_first = true;
    const auto weights = TransformerEncoderLayerWeights::random(post_config, 2);
    const TransformerEncoderLayer post(post_config, weights), pre(pre_config, weights);
    const Tensor z = random_tensor({1, 3, 8}, 3);
    auto [pre_out, pre_out_cpu] = lesson.part("the same weights, norm_first=True: norm1 comes first, residual_add2 last",
                                              [&](Backend& b) { return pre.forward(b, z, each_step); },
                                              {{"norm1", "self.norm1(x) first: attention sees normalised "
                                                         "tokens, (1, 3, 8)"},
                                               {"residual_add1", "x + self._sa_block(...): the residual adds "
                                                                 "to the un-normalised x"},
                                               {"norm2", "self.norm2(x) before the feed-forward network"},
                                               {"gelu", "activation='gelu' this time: F.gelu, exact (erf)"}});
    Tensor post_out = post.forward(lesson.cpu(), z, each_step);
    auto row_std = [](const Tensor& t, int64_t i) {  // the spread of token i's features
      const int64_t E = t.dim(-1);
      double mean = 0, var = 0;
      for (int64_t f = 0; f < E; ++f) mean += t.data[static_cast<size_t>(i * E + f)] / static_cast<double>(E);
      for (int64_t f = 0; f < E; ++f) var += std::pow(t.data[static_cast<size_t>(i * E + f)] - mean, 2) / static_cast<double>(E);
      return std::sqrt(var);
    };
    std::ostringstream spread;
    spread.precision(3);
    spread << std::fixed << "the spread (standard deviation) of token 0's features: post-norm " << row_std(post_out, 0)
           << ", pre-norm " << row_std(pre_out, 0) << ", the input " << row_std(z, 0) << "\n"
           << "post-norm ends in norm2: unit variance, rescaled by norm2.weight (here 0.75 … 1.25); pre-norm ends in "
           << "residual_add2, so the stream keeps the input's scale plus what each sub-block adds";
    lesson.say(spread.str());

    // ---- 5: a trained nn.TransformerEncoder ----
    const std::string dir = VKATTN_TUTORIAL_DATA;
    lesson.say(
        "nn.TransformerEncoder(layer, num_layers=2, norm=LayerNorm) deep-copies the layer; its state_dict names "
        "every tensor by its path: layers.0.self_attn.in_proj_weight, layers.1.linear1.weight, norm.weight, …. "
        "This one (" + dir + ") was saved by tests/golden_encoder/generate.py with gelu, post-norm, "
        "and a src_key_padding_mask; vkattn encode runs the same file from the command line.");
    io::EncoderState state = io::load_encoder(dir + "/weights.safetensors");
    state.config.layer.activation = Activation::gelu;  // not in a state_dict: torch's constructor argument
    const TransformerEncoder encoder(state.config, state.weights);
    const Tensor src = io::read_npy(dir + "/src.npy");
    EncoderOptions options{.src_key_padding_mask = io::read_npy(dir + "/src_key_padding_mask.npy"),
                           .attention = AttentionPath::unfused};
    auto [encoded, encoded_cpu] = lesson.check(
        "nn.TransformerEncoder from its state_dict: 2 layers and the final norm",
        [&](Backend& b) { return encoder.forward(b, src, options); },
        "Its table would show part 1's 18 steps twice, scoped layers.0. and layers.1. (with the padding mask "
        "as an attention_mask step in each), then the final norm: vkattn encode --trace prints it.");
    std::ostringstream torch;
    torch << state.config.num_layers << " layers, d_model " << state.config.layer.d_model << ", nhead "
          << state.config.layer.nhead << ", dim_feedforward " << state.config.layer.dim_feedforward << ": output "
          << shape_string(encoded.shape) << "; max |vkattn gpu - PyTorch| = "
          << compare_values(encoded, io::read_npy(dir + "/expected_output.npy"), 1e-4, 0).max_abs_error;
    lesson.say(torch.str());
  });
}
