// Lesson 10: attention since 2017.
//
// The articles teach the attention of "Attention Is All You Need": H query heads and H key/value
// heads, positions added to the embeddings before the block. The open models a learner meets next
// (Llama, Mistral, Qwen, Gemma) change three things, each a classic source of shape and axis bugs:
//   grouped-query attention — H query heads share H_kv < H key/value heads (multi-query: one);
//     K and V are (B, H_kv, S, d), and query head h reads key/value head h / (H / H_kv):
//     repeat_interleave's order, not repeat's;
//   rotary position embeddings (RoPE) — q and k rotated pair by pair by an angle that grows with
//     the position, after the heads are split: Q·Kᵀ then depends on how far apart two positions
//     are, not where they are; the pairs are halves (GPT-NeoX, Hugging Face) or neighbours (GPT-J,
//     Meta's Llama code), and a checkpoint does not say which;
//   a sliding window (Mistral) — causal, and each query sees only the last W keys.
//
// Run: build/bin/tutorial_10_attention_since_2017 [--images DIR] [--device D]
#include <cmath>
#include <stdexcept>
#include <iomanip>
#include <numbers>
#include <sstream>

#include "reference/reference.h"
#include "tutorials/lesson.h"
#include "vkattn/modules/grouped_query_attention.h"

using namespace vkattn;

namespace {

// The lesson's words for a grouped-query attention's steps.
const tutorial::Notes kSteps = {
    {"q_proj", "q = self.q_proj(x): (B, T, H·d), the H query heads side by side"},
    {"k_proj", "k = self.k_proj(x): (B, T, H_kv·d), fewer columns: only H_kv key heads"},
    {"v_proj", "v = self.v_proj(x): (B, T, H_kv·d)"},
    {"split_heads_q", "q.view(B, T, H, d).transpose(1, 2): (B, H, T, d)"},
    {"split_heads_k", "k.view(B, T, H_kv, d).transpose(1, 2): (B, H_kv, T, d)"},
    {"split_heads_v", "v.view(B, T, H_kv, d).transpose(1, 2): (B, H_kv, T, d)"},
    {"rotary_embedding_q", "q * cos + rotate_half(q) * sin: each pair of q's features turned by position · θ^(-2i/d)"},
    {"rotary_embedding_k", "the same rotation for k (v is never rotated); the small second input is inv_freq, (d/2,)"},
    {"attention_scores", "q @ k.transpose(-2, -1) / √d with k's head h / (H / H_kv) for query head h: no copy"},
    {"attention_mask", "causal, and with a window W also -inf for keys W or more behind the query"},
    {"softmax", "F.softmax(scores, dim=-1) over the keys each query may see"},
    {"attention_values", "weights @ v, v's head shared as k's was: (B, H, T, d)"},
    {"flash_attention", "the fused path: scores, causal mask, softmax and weights @ v in one step, K and V's "
                        "heads shared as above: (B, H, T, d)"},
    {"merge_heads", ".transpose(1, 2).reshape(B, T, H·d)"},
    {"o_proj", "self.o_proj(o): back to (B, T, E)"}};

std::string mib(uint64_t bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 10: attention since 2017 — GQA, MQA, RoPE, sliding windows",
                       [](tutorial::Lesson& lesson) {
    const int64_t E = 32, H = 4, d = 8, T = 6;
    const Tensor x = random_tensor({1, T, E}, 1);

    // ---- 1: MHA, MQA and GQA on the same input ---------------------------------------------------
    lesson.say("One input x (1, 6, 32) and H = 4 query heads of d = 8. Grouped-query attention with "
               "H_kv = 2: two key/value heads, each shared by two query heads. Watch k_proj's and "
               "split_heads_k's shapes.");
    const GroupedQueryAttentionConfig gqa_config{.hidden_size = E, .num_heads = H, .num_kv_heads = 2};
    const GroupedQueryAttention gqa(gqa_config);
    lesson.part("grouped-query attention, H = 4, H_kv = 2", [&](Backend& b) {
      return gqa.forward(b, x, {.attention = AttentionPath::unfused}).output;
    }, kSteps);
    std::ostringstream kinds;
    kinds << "The same input through the three kinds (C = 4096 positions of cache, one layer, B = 1):\n"
          << "  kind  H_kv  K and V          KV cache for C = 4096\n";
    for (auto [name, kv] : {std::pair{"MHA", H}, std::pair{"GQA", int64_t{2}}, std::pair{"MQA", int64_t{1}}}) {
      GroupedQueryAttentionConfig config = gqa_config;
      config.num_kv_heads = kv;
      const uint64_t bytes = 2ull * static_cast<uint64_t>(kv * 4096 * d) * 4;
      kinds << "  " << std::left << std::setw(6) << name << std::setw(6) << kv << std::setw(17)
            << shape_string({1, kv, T, d}) << "2 × " << kv << " × 4096 × " << d << " × 4 bytes = " << mib(bytes) << "\n";
      lesson.check(std::string(name) + ", H_kv = " + std::to_string(kv), [&, config](Backend& b) {
        return GroupedQueryAttention(config).forward(b, x).output;
      }, std::string(name) + " with H_kv = " + std::to_string(kv) + ": the same steps, K and V (1, " +
             std::to_string(kv) + ", 6, 8), fused:");
    }
    lesson.say(kinds.str() + "A model of 32 query heads with 8 key/value heads (Llama 3 8B) keeps a "
               "quarter of MHA's cache: that is what lets it hold long contexts.");

    // ---- 2: RoPE as a picture, and why Q·Kᵀ then depends on the distance ------------------------
    const int64_t positions = 16, pairs = d / 2;
    Tensor angle({positions, pairs});
    for (int64_t p = 0; p < positions; ++p)
      for (int64_t i = 0; i < pairs; ++i)
        angle.at({p, i}) = std::fmod(static_cast<float>(p) * reference::rotary_inverse_frequency(i, d, 10000.0f),
                                     2.0f * std::numbers::pi_v<float>);
    lesson.say("RoPE turns pair i of a head's features by the angle position · θ^(-2i/d), θ = 10000: "
               "pair 0 turns by 1 radian a position, pair 3 by 0.001. The angle (mod 2π) for "
               "positions 0 … 15 (rows) and pairs 0 … 3 (columns):");
    lesson.grid("rotation angle in radians, mod 2π", angle, {}, 3);
    lesson.images("rope_angles", angle, {}, {.title = "RoPE angle (mod 2π)", .rows = "position", .cols = "pair i"});
    const Tensor q1 = random_tensor({1, 1, 1, d}, 2), k1 = random_tensor({1, 1, 1, d}, 3);
    auto score = [&](Backend& b, int64_t m, int64_t n) {  // q at position m, k at position n
      Value q = b.rotary_embedding("rotary_embedding_q", b.upload("q", q1), m, 10000.0f, 0, RotaryConvention::half);
      Value k = b.rotary_embedding("rotary_embedding_k", b.upload("k", k1), n, 10000.0f, 0, RotaryConvention::half);
      return b.download(b.attention_scores("attention_scores", q, k)).data[0];
    };
    auto [rotated, rotated_cpu] = lesson.part("one query and one key, 2 positions apart", [&](Backend& b) {
      return score(b, 5, 3);
    }, {{"rotary_embedding_q", "the query at position 5: its pairs turned by 5 · θ^(-2i/d)"},
        {"rotary_embedding_k", "the key at position 3"},
        {"attention_scores", "q · k / √d: the angles subtract, so only 5 - 3 = 2 is left"}});
    std::ostringstream distance;
    distance << std::fixed << std::setprecision(6) << "The same q and k at other positions, GPU:\n";
    for (auto [m, n] : {std::pair{int64_t{5}, int64_t{3}}, {int64_t{12}, int64_t{10}}, {int64_t{1002}, int64_t{1000}},
                        {int64_t{5}, int64_t{4}}, {int64_t{12}, int64_t{8}}}) {
      const float s = score(lesson.gpu(), m, n);
      distance << "  q at " << std::setw(4) << m << ", k at " << std::setw(4) << n << " (i - j = " << m - n
               << "): score " << std::setw(10) << s << "\n";
      if (m - n == 2 && std::abs(s - rotated) > 1e-4f) throw std::runtime_error("RoPE's scores at distance 2 differ");
    }
    lesson.say(distance.str() + "Distance 2 gives " + std::to_string(rotated) + " wherever the pair sits "
               "(to float rounding); other distances give other scores. Positions added to the input, "
               "as in 2017, give no such rule.");

    // ---- 3: the two conventions -------------------------------------------------------------------
    GroupedQueryAttentionConfig pairs_config = gqa_config;
    pairs_config.rope = RotaryConvention::pairs;
    const GroupedQueryAttention pairs_module(pairs_config, gqa.weights());
    auto [halves_out, halves_cpu] = lesson.part("RoPE on halves (Hugging Face)", [&](Backend& b) {
      return gqa.forward(b, x).output;
    }, kSteps);
    const Tensor pairs_out = pairs_module.forward(lesson.gpu(), x).output;
    float worst = 0;
    for (size_t i = 0; i < pairs_out.data.size(); ++i) worst = std::max(worst, std::abs(pairs_out.data[i] - halves_out.data[i]));
    std::ostringstream conventions;
    conventions << std::setprecision(3) << "The same weights with RoPE on neighbouring pairs (2i, 2i + 1) instead "
                << "of halves (i, i + d/2): max |difference| " << worst << " over the output, position 0 "
                << "excepted (its angle is 0 either way). Nothing fails and the shapes agree: the wrong "
                << "convention gives a model that runs and is wrong. Meta's Llama weights converted to "
                << "Hugging Face's format had their q_proj and k_proj rows permuted to make halves right.";
    lesson.say(conventions.str());

    // ---- 4: a sliding window as a mask -----------------------------------------------------------
    const int64_t L = 8, W = 3;
    Tensor window({L, L}, DType::boolean);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) window.at({i, j}) = reference::causally_blocked(true, W, i, j) ? 1.0f : 0.0f;
    lesson.grid("sliding window W = 3, x = blocked: query i sees keys i - 2, i - 1, i", window);
    lesson.images("window_mask", window, {}, {.title = "causal mask with a window of 3 (grey: blocked)"});
    const Tensor qk = random_tensor({1, 1, L, d}, 4);
    auto [windowed, windowed_cpu] = lesson.part("attention with a window of 3 keys", [&](Backend& b) {
      Value X = b.upload("Q = K = V", qk);
      Value masked = b.attention_mask("attention_mask", b.attention_scores("attention_scores", X, X), nullptr,
                                      nullptr, true, W);
      return b.download(b.softmax("softmax", masked));
    }, {{"attention_scores", "every query against every key, (1, 1, 8, 8)"},
        {"attention_mask", "causal with window=3: -inf above the diagonal and 3 or more keys back"},
        {"softmax", "each row spreads over at most 3 keys"}});
    lesson.grid("attention weights with the window (GPU)", windowed, {0, 0}, 3);
    lesson.images("window_weights", windowed, {"b", "h"}, {.title = "attention weights, window 3"});
    lesson.say("The fused flash_attention starts each row at its window and so skips the keys before it: "
               "at L = 4096 a window of 512 visits about a quarter of the causal scores "
               "(bench_grouped_query measures the time). Stacked layers still carry older tokens forward, one window per layer.");
  });
}
