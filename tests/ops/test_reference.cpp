// The CPU reference against numbers worked out by hand, and the whole recipe on the CPU against
// an independent, naive multi-head attention written here from PyTorch's definition. The
// reference is the ground truth for every GPU test, so it is checked first.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "reference/reference.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/modules/multi_head_attention.h"

namespace vkattn {
namespace {

using testing::all_close;
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Reference, LinearIsXTimesWTransposedPlusBias) {
  const float x[] = {1, 2, 3, 4};           // (N=2, K=2)
  const float w[] = {1, 0, 0, 1, 1, 1};     // (M=3, K=2)
  const float b[] = {0.5f, 0, -1};          // (3,)
  float y[6];
  reference::linear(x, w, b, y, 2, 2, 3);
  EXPECT_EQ(std::vector<float>(y, y + 6), (std::vector<float>{1.5f, 2, 2, 3.5f, 4, 6}));
  reference::linear(x, w, nullptr, y, 2, 2, 3);
  EXPECT_EQ(std::vector<float>(y, y + 6), (std::vector<float>{1, 2, 3, 3, 4, 7}));
}

TEST(Reference, SplitHeadsGivesEachHeadItsFeatures) {
  // x (B=1, T=2, E=4) with H=2, d=2: token t, feature f = 10t + f
  const float x[] = {0, 1, 2, 3, 10, 11, 12, 13};
  float y[8];
  reference::split_heads(x, y, 1, 2, 2, 2);
  // (1, H=2, T=2, d=2): head 0 = features 0-1 of both tokens, head 1 = features 2-3
  EXPECT_EQ(std::vector<float>(y, y + 8), (std::vector<float>{0, 1, 10, 11, 2, 3, 12, 13}));
  float back[8];
  reference::merge_heads(y, back, 1, 2, 2, 2);
  EXPECT_EQ(std::vector<float>(back, back + 8), std::vector<float>(x, x + 8));
}

TEST(Reference, SplitHeadsTakesOneChunkOfAPackedProjection) {
  // x (B=1, T=2, 3·E) with E=2, H=2, d=1: token t, feature f = 10t + f; chunks q | k | v
  const float x[] = {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15};
  float y[4];
  reference::split_heads(x, y, 1, 2, 2, 1, 3, 1);  // k: features 2-3
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{2, 12, 3, 13}));
  reference::split_heads(x, y, 1, 2, 2, 1, 3, 2);  // v: features 4-5
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{4, 14, 5, 15}));
}

TEST(Reference, AppendRowAddsOnePosition) {
  const float x[] = {1, 2, 3, 4};  // (N=2, T=1, C=2)
  const float row[] = {7, 8};
  float y[8];
  reference::append_row(x, row, y, 2, 1, 2);
  EXPECT_EQ(std::vector<float>(y, y + 8), (std::vector<float>{1, 2, 7, 8, 3, 4, 7, 8}));
  reference::append_row(x, nullptr, y, 2, 1, 2);
  EXPECT_EQ(std::vector<float>(y, y + 8), (std::vector<float>{1, 2, 0, 0, 3, 4, 0, 0}));
}

TEST(Reference, AttentionScoresAreScaledDotProducts) {
  const float q[] = {1, 2};        // (BH=1, L=1, d=2)
  const float k[] = {3, 4, 1, 0};  // (BH=1, S=2, d=2)
  float s[2];
  reference::attention_scores(q, k, s, 1, 1, 2, 2, 0.5f, 1);
  EXPECT_FLOAT_EQ(s[0], 5.5f);  // (1·3 + 2·4) / 2
  EXPECT_FLOAT_EQ(s[1], 0.5f);
}

TEST(Reference, GroupedQueryHeadsShareTheirKeyAndValueHead) {
  // H = 4 query heads, H_kv = 2 key/value heads (group 2): query heads 0, 1 read key head 0 and
  // heads 2, 3 key head 1 — repeat_interleave, not repeat (which would give 0, 1, 0, 1)
  const float q[] = {1, 1, 1, 1};   // (BH=4, L=1, d=1)
  const float k[] = {2, 3};         // (BH/2=2, S=1, d=1)
  float s[4];
  reference::attention_scores(q, k, s, 4, 1, 1, 1, 1.0f, 2);
  EXPECT_EQ(std::vector<float>(s, s + 4), (std::vector<float>{2, 2, 3, 3}));
  const float p[] = {1, 1, 1, 1};   // (BH=4, L=1, S=1)
  float out[4];
  reference::attention_values(p, k, out, 4, 1, 1, 1, 2);
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{2, 2, 3, 3}));
}

TEST(Reference, AttentionMaskAddsMasksAndBlocksTheFuture) {
  const float scores[] = {1, 1, 1, 1};            // (B=1, H=1, L=2, S=2)
  const float attn[] = {0, -kInf, 0.5f, 0};       // (L, S)
  const float pad[] = {0, -2};                    // (B, S)
  float out[4];
  reference::attention_mask(scores, attn, 2, pad, false, 0, out, 1, 1, 2, 2);
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{1, -kInf, 1.5f, -1}));
  reference::attention_mask(scores, nullptr, 0, nullptr, true, 0, out, 1, 1, 2, 2);
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{1, -kInf, 1, 1}));
}

TEST(Reference, ASlidingWindowKeepsTheLastWKeys) {
  const std::vector<float> scores(16, 1.0f);  // (B=1, H=1, L=4, S=4)
  float out[16];
  reference::attention_mask(scores.data(), nullptr, 0, nullptr, true, 2, out, 1, 1, 4, 4);
  const float x = -kInf;  // window 2: row i sees keys i - 1 and i
  EXPECT_EQ(std::vector<float>(out, out + 16), (std::vector<float>{1, x, x, x, 1, 1, x, x, x, 1, 1, x, x, x, 1, 1}));
}

TEST(Reference, SoftmaxNormalisesStablyAndZeroesFullyMaskedRows) {
  const float x[] = {0, std::log(3.0f), 1000, 1000, -kInf, -kInf};  // (R=3, S=2)
  float y[6];
  reference::softmax(x, y, 3, 2);
  EXPECT_FLOAT_EQ(y[0], 0.25f);
  EXPECT_FLOAT_EQ(y[1], 0.75f);
  EXPECT_FLOAT_EQ(y[2], 0.5f);  // no overflow: the max is subtracted first
  EXPECT_FLOAT_EQ(y[3], 0.5f);
  EXPECT_EQ(y[4], 0.0f);  // fully masked: zeros, not NaN
  EXPECT_EQ(y[5], 0.0f);
}

TEST(Reference, AttentionValuesWeighValues) {
  const float p[] = {0.25f, 0.75f};   // (BH=1, L=1, S=2)
  const float v[] = {4, 8, 0, 4};     // (BH=1, S=2, d=2)
  float out[2];
  reference::attention_values(p, v, out, 1, 1, 2, 2, 1);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 5.0f);
}

TEST(Reference, AverageHeadsIsTheMeanOverHeads) {
  const float p[] = {1, 2, 3, 6};  // (B=1, H=2, plane=2)
  float avg[2];
  reference::average_heads(p, avg, 1, 2, 2);
  EXPECT_FLOAT_EQ(avg[0], 2.0f);
  EXPECT_FLOAT_EQ(avg[1], 4.0f);
}

TEST(Reference, LayerNormCentresScalesAndShifts) {
  const float x[] = {1, 2, 3, 5, 5, 5};  // (N=2, E=3); the second row is constant
  const float w[] = {1, 1, 2}, b[] = {0, 0, 1};
  float y[6];
  reference::layer_norm(x, w, b, y, 2, 3, 0.0f);  // mean 2, biased var 2/3
  EXPECT_FLOAT_EQ(y[0], -1.2247449f);
  EXPECT_FLOAT_EQ(y[1], 0.0f);
  EXPECT_FLOAT_EQ(y[2], 2 * 1.2247449f + 1);
  reference::layer_norm(x, w, b, y, 2, 3, 1e-5f);  // var 0: eps keeps it finite, every output is the bias
  EXPECT_EQ(std::vector<float>(y + 3, y + 6), (std::vector<float>{0, 0, 1}));
}

TEST(Reference, GeluIsXTimesTheNormalCdf) {
  const float x[] = {0, 1, -1, 3, -10, 10};
  float y[6];
  reference::gelu(x, y, 6);
  // torch.nn.functional.gelu(torch.tensor([0., 1, -1, 3, -10, 10], dtype=torch.float64))
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_FLOAT_EQ(y[1], 0.8413447460685429f);
  EXPECT_FLOAT_EQ(y[2], -0.15865525393145707f);
  EXPECT_FLOAT_EQ(y[3], 2.99595030590511f);
  EXPECT_FLOAT_EQ(y[4], -7.619853024160527e-23f);  // -10·Φ(-10); torch's 1 + erf form cancels to -0
  EXPECT_FLOAT_EQ(y[5], 10.0f);
}

TEST(Reference, GeluTanhIsTorchsTanhApproximation) {
  const float x[] = {0, 1, -1, 3, -10, 10, -5};
  float y[7];
  reference::gelu_tanh(x, y, 7);
  // torch.nn.functional.gelu(torch.tensor([0., 1, -1, 3, -10, 10, -5], dtype=torch.float64),
  //                          approximate='tanh')
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_FLOAT_EQ(y[1], 0.8411919906082768f);
  EXPECT_FLOAT_EQ(y[2], -0.15880800939172324f);
  EXPECT_FLOAT_EQ(y[3], 2.996362607918227f);
  EXPECT_NEAR(y[4], 0.0f, 1e-30f);  // torch's 1 + tanh form cancels to -0
  EXPECT_FLOAT_EQ(y[5], 10.0f);
  EXPECT_NEAR(y[6], -2.2917961972623857e-07f, 1e-12f);
}

TEST(Reference, RmsNormScalesEachRowByItsRootMeanSquare) {
  const float x[] = {1, 2, 3, 4, -0.5f, 0, 0.5f, 10}, w[] = {1, 0.5f, 2, -1};
  float y[8];
  reference::rms_norm(x, w, y, 2, 4, 1e-6f);
  // x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, in float64
  const double expected[] = {0.3651483473268884, 0.3651483473268884, 2.1908900839613303, -1.4605933893075536,
                             -0.09975093162567014, 0.0, 0.19950186325134028, -1.995018632513403};
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(y[i], static_cast<float>(expected[i])) << i;
}

TEST(Reference, SiluIsXTimesItsSigmoidAndMultiplyIsElementwise) {
  const float x[] = {0, 1, -1, 3, -20, 20, -100};
  float y[7];
  reference::silu(x, y, 7);
  // torch.nn.functional.silu(torch.tensor([0., 1, -1, 3, -20, 20, -100], dtype=torch.float64))
  const double expected[] = {0.0, 0.7310585786300049, -0.2689414213699951, 2.8577223804672998, -4.122307236380407e-08,
                             19.999999958776925, -3.720075976020836e-42};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y[i], static_cast<float>(expected[i])) << i;
  EXPECT_NEAR(y[6], 0.0f, 1e-38f);
  const float a[] = {2, -3, 0.5f}, b[] = {4, 5, -2};
  reference::multiply(a, b, y, 3);
  EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{8, -15, -1}));
}

TEST(Reference, TanhSaturatesWithoutNaN) {
  const float x[] = {0, 0.5f, -1, 3, -20, 20, 1e30f};
  float y[7];
  reference::tanh(x, y, 7);
  // torch.tanh(torch.tensor([0., 0.5, -1, 3, -20, 20, 1e30], dtype=torch.float64))
  const double expected[] = {0.0, 0.46211715726000974, -0.7615941559557649, 0.9950547536867305, -1.0, 1.0, 1.0};
  for (int i = 0; i < 7; ++i) EXPECT_FLOAT_EQ(y[i], static_cast<float>(expected[i])) << i;
}

TEST(Reference, ReluAndResidualAdd) {
  const float x[] = {-2, 0, 3}, r[] = {1, 1, -4};
  float y[3];
  reference::relu(x, y, 3);
  EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{0, 0, 3}));
  reference::residual_add(x, r, y, 3);
  EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{-1, 1, -1}));
}

TEST(Reference, EmbeddingPositionalEncodingAndMeanPool) {
  const float table[] = {0, 1, 10, 11, 20, 21};  // (V=3, E=2)
  const float ids[] = {2, 0, 5};                 // (N=3); 5 is outside the table
  float emb[6];
  reference::embedding(ids, table, emb, 3, 3, 2);
  EXPECT_EQ(std::vector<float>(emb, emb + 4), (std::vector<float>{20, 21, 0, 1}));
  EXPECT_TRUE(std::isnan(emb[4]) && std::isnan(emb[5]));
  reference::embedding(ids, table, emb, 2, 3, 2, 0.5f);  // Gemma's normalizer, here ½
  EXPECT_EQ(std::vector<float>(emb, emb + 4), (std::vector<float>{10, 10.5f, 0, 0.5f}));

  const float x[] = {1, 2, 3, 4, 5, 6, 7, 8};  // (B=2, T=2, E=2)
  const float pos[] = {100, 200, 300, 400, 500, 600};  // (P=3, E=2): the first T=2 rows are used
  float y[8];
  reference::positional_encoding(x, pos, y, 2, 2, 2);
  EXPECT_EQ(std::vector<float>(y, y + 8), (std::vector<float>{101, 202, 303, 404, 105, 206, 307, 408}));
  float pooled[4];
  reference::mean_pool(x, pooled, 2, 2, 2);
  EXPECT_EQ(std::vector<float>(pooled, pooled + 4), (std::vector<float>{2, 3, 6, 7}));
  reference::first_token(x, pooled, 2, 2, 2);
  EXPECT_EQ(std::vector<float>(pooled, pooled + 4), (std::vector<float>{1, 2, 5, 6}));
  reference::last_tokens(x, pooled, 2, 2, 1, 2);  // x[:, -1:] (B=2, n=1, E=2)
  EXPECT_EQ(std::vector<float>(pooled, pooled + 4), (std::vector<float>{3, 4, 7, 8}));
  const float rows[] = {1, 2, 3, 4, 5, 6};  // (B=2, T=3, E=1)
  float last[4];
  reference::last_tokens(rows, last, 2, 3, 2, 1);  // x[:, -2:] (B=2, n=2, E=1)
  EXPECT_EQ(std::vector<float>(last, last + 4), (std::vector<float>{2, 3, 5, 6}));
}

// torch.nn.MultiheadAttention from its definition, one (batch, head) at a time, in double:
// independent of every reference function.
struct Naive {
  Tensor output, weights;  // (B, L, E), (B, H, L, S)
};

Naive naive_attention(const MultiHeadAttentionConfig& c, const MultiHeadAttentionWeights& w, const Tensor& q_in,
                      const Tensor& k_in, const Tensor& v_in, bool causal) {
  int64_t B = q_in.dim(0), L = q_in.dim(1), S = k_in.dim(1), E = c.embed_dim, H = c.num_heads, d = E / H;
  auto project = [&](const Tensor& x, const Tensor& W, const std::optional<Tensor>& bias, int64_t b, int64_t t, int64_t f) {
    double acc = bias ? bias->data[f] : 0.0;
    for (int64_t k = 0; k < x.dim(2); ++k) acc += double(x.at({b, t, k})) * W.at({f, k});
    return acc;
  };
  Naive r{Tensor({B, L, E}), Tensor({B, H, L, S})};
  Tensor heads({B, L, E});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> s(S);
        double m = -1e300;
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int64_t c2 = 0; c2 < d; ++c2)
            dot += project(q_in, w.q_proj_weight, w.q_proj_bias, b, i, h * d + c2) *
                   project(k_in, w.k_proj_weight, w.k_proj_bias, b, j, h * d + c2);
          s[j] = (causal && j > i) ? -1e300 : dot / std::sqrt(double(d));
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) sum += (s[j] = (s[j] <= -1e300 ? 0.0 : std::exp(s[j] - m)));
        for (int64_t j = 0; j < S; ++j) r.weights.at({b, h, i, j}) = float(s[j] / sum);
        for (int64_t c2 = 0; c2 < d; ++c2) {
          double acc = 0;
          for (int64_t j = 0; j < S; ++j) acc += s[j] / sum * project(v_in, w.v_proj_weight, w.v_proj_bias, b, j, h * d + c2);
          heads.at({b, i, h * d + c2}) = float(acc);
        }
      }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t f = 0; f < E; ++f) r.output.at({b, i, f}) = float(project(heads, w.out_proj_weight, w.out_proj_bias, b, i, f));
  return r;
}

TEST(ReferenceModule, MatchesNaiveMultiHeadAttentionFromTheDefinition) {
  for (bool causal : {false, true}) {
    MultiHeadAttentionConfig c{.embed_dim = 12, .num_heads = 3, .kdim = 5, .vdim = 7, .batch_first = true};
    auto w = MultiHeadAttentionWeights::random(c, 11);
    MultiHeadAttention mha(c, w);
    Tensor q = testing::random_tensor({2, 4, 12}, 1), k = testing::random_tensor({2, 6, 5}, 2),
           v = testing::random_tensor({2, 6, 7}, 3);
    ForwardOptions options;
    options.is_causal = causal;
    options.average_attn_weights = false;
    ReferenceBackend cpu;
    AttentionResult got = mha.forward(cpu, q, k, v, options);
    Naive want = naive_attention(c, w, q, k, v, causal);
    EXPECT_TRUE(all_close(got.output, want.output, {1e-5f, 1e-5f}, {"b", "i", "e"})) << "causal=" << causal;
    EXPECT_TRUE(all_close(*got.weights, want.weights, {1e-6f, 1e-5f}, {"b", "h", "i", "j"})) << "causal=" << causal;
  }
}

}  // namespace
}  // namespace vkattn
