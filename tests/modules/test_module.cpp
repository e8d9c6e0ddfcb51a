// MultiHeadAttention, GPU against the reference, over every mask kind and combination, the
// module options (kdim/vdim, bias, add_bias_kv, add_zero_attn, layouts, weights averaged or per
// head), and the properties PyTorch users rely on: causality, zeros for fully masked rows.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <tuple>

#include "engine/backends/sizing_backend.h"
#include "engine/vulkan/context.h"
#include "engine/vulkan/recorder.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/modules/causal_lm.h"
#include "vkattn/modules/grouped_query_attention.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/modules/transformer.h"
#include "vkattn/modules/transformer_decoder.h"
#include "vkattn/modules/transformer_encoder.h"

namespace vkattn {
namespace {

using ::testing::Bool;
using ::testing::Combine;
using ::testing::Values;
using testing::all_close;
using testing::random_bool_mask;
using testing::random_tensor;

class Module : public testing::GpuTest {
 protected:
  // Runs both backends and checks output and weights agree within atol = rtol = 1e-5.
  AttentionResult expect_backends_agree(const MultiHeadAttention& mha, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const ForwardOptions& options) {
    AttentionResult want = mha.forward(cpu(), q, k, v, options);
    AttentionResult got = mha.forward(gpu(), q, k, v, options);
    EXPECT_TRUE(all_close(got.output, want.output)) << "output";
    EXPECT_EQ(got.weights.has_value(), want.weights.has_value());
    if (got.weights && want.weights) {
      EXPECT_TRUE(all_close(*got.weights, *want.weights)) << "weights";
    }
    for (float x : got.output.data) EXPECT_TRUE(std::isfinite(x)) << "non-finite output";
    return got;
  }
  // The fused path (flash_attention, no weights) gives the unfused output on both backends.
  void expect_fused_matches(const MultiHeadAttention& mha, const Tensor& q, const Tensor& k, const Tensor& v,
                            ForwardOptions options, const Tensor& unfused_output) {
    options.need_weights = false;
    options.attention = AttentionPath::fused;
    AttentionResult fused = expect_backends_agree(mha, q, k, v, options);
    EXPECT_TRUE(all_close(fused.output, unfused_output)) << "fused against unfused";
  }
};

// ---- every mask kind and combination, on cross-attention with L ≠ S ------------------------------
enum class AttnMask { none, bool2d, float2d, bool3d, float3d };
enum class Padding { none, boolean, additive };
void PrintTo(AttnMask m, std::ostream* out) {
  *out << std::array{"no_attn_mask", "bool2d", "float2d", "bool3d", "float3d"}[static_cast<size_t>(m)];
}
void PrintTo(Padding p, std::ostream* out) {
  *out << std::array{"no_padding", "bool_padding", "float_padding"}[static_cast<size_t>(p)];
}

Tensor float_mask(Shape shape, uint32_t seed) {
  Tensor m = random_tensor(std::move(shape), seed);
  for (size_t i = 0; i < m.data.size(); i += 4) m.data[i] = -INFINITY;  // some blocked entries
  return m;
}

class Masks : public Module, public ::testing::WithParamInterface<std::tuple<AttnMask, Padding, bool, bool>> {};
TEST_P(Masks, GpuMatchesReference) {
  auto [attn, padding, causal, average] = GetParam();
  const int64_t B = 2, L = 5, S = 7, E = 12, H = 3;
  MultiHeadAttentionConfig c{.embed_dim = E, .num_heads = H, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 1));
  Tensor q = random_tensor({B, L, E}, 2), kv = random_tensor({B, S, E}, 3);
  ForwardOptions o;
  o.is_causal = causal;
  o.average_attn_weights = average;
  switch (attn) {
    case AttnMask::none: break;
    case AttnMask::bool2d: o.attn_mask = random_bool_mask({L, S}, 0.3f, 4); break;
    case AttnMask::float2d: o.attn_mask = float_mask({L, S}, 4); break;
    case AttnMask::bool3d: o.attn_mask = random_bool_mask({B * H, L, S}, 0.3f, 4); break;
    case AttnMask::float3d: o.attn_mask = float_mask({B * H, L, S}, 4); break;
  }
  if (padding == Padding::boolean) o.key_padding_mask = random_bool_mask({B, S}, 0.3f, 5);
  if (padding == Padding::additive) o.key_padding_mask = float_mask({B, S}, 5);
  AttentionResult r = expect_backends_agree(mha, q, kv, kv, o);
  EXPECT_EQ(r.weights->shape, average ? Shape({B, L, S}) : Shape({B, H, L, S}));
  expect_fused_matches(mha, q, kv, kv, o, r.output);
}
INSTANTIATE_TEST_SUITE_P(All, Masks,
                         Combine(Values(AttnMask::none, AttnMask::bool2d, AttnMask::float2d, AttnMask::bool3d, AttnMask::float3d),
                                 Values(Padding::none, Padding::boolean, Padding::additive), Bool(), Bool()),
                         [](const auto& case_info) {  // bool2d_float_padding_causal_per_head
                           const auto& p = case_info.param;
                           return ::testing::PrintToString(std::get<0>(p)) + "_" +
                                  ::testing::PrintToString(std::get<1>(p)) + (std::get<2>(p) ? "_causal" : "") +
                                  (std::get<3>(p) ? "_averaged" : "_per_head");
                         });

// ---- module options and shapes --------------------------------------------------------------------
struct Case {
  int64_t B, L, S, E, H, kdim, vdim;
  bool bias, add_bias_kv, add_zero_attn;
};
void PrintTo(const Case& k, std::ostream* os) {
  *os << "B" << k.B << " L" << k.L << " S" << k.S << " E" << k.E << " H" << k.H << " kdim" << k.kdim << " vdim" << k.vdim
      << (k.bias ? " bias" : "") << (k.add_bias_kv ? " bias_kv" : "") << (k.add_zero_attn ? " zero_attn" : "");
}
class Configs : public Module, public ::testing::WithParamInterface<Case> {};
TEST_P(Configs, GpuMatchesReference) {
  Case k = GetParam();
  MultiHeadAttentionConfig c{.embed_dim = k.E, .num_heads = k.H, .bias = k.bias, .add_bias_kv = k.add_bias_kv,
                             .add_zero_attn = k.add_zero_attn, .kdim = k.kdim, .vdim = k.vdim, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 7));
  Tensor q = random_tensor({k.B, k.L, k.E}, 8), key = random_tensor({k.B, k.S, c.key_dim()}, 9),
         value = random_tensor({k.B, k.S, c.value_dim()}, 10);
  ForwardOptions o;
  o.key_padding_mask = random_bool_mask({k.B, k.S}, 0.2f, 11);
  o.is_causal = true;
  AttentionResult r = expect_backends_agree(mha, q, key, value, o);
  expect_fused_matches(mha, q, key, value, o, r.output);
  int64_t appended = (k.add_bias_kv ? 1 : 0) + (k.add_zero_attn ? 1 : 0);
  EXPECT_EQ(r.output.shape, (Shape{k.B, k.L, k.E}));
  EXPECT_EQ(r.weights->shape, (Shape{k.B, k.L, k.S + appended}));
}
INSTANTIATE_TEST_SUITE_P(
    Sweep, Configs,
    Values(Case{1, 1, 1, 1, 1, 0, 0, true, false, false},        // everything 1
           Case{1, 1, 1, 8, 8, 0, 0, true, false, false},        // H = E: d = 1
           Case{3, 17, 17, 12, 1, 0, 0, true, false, false},     // H = 1
           Case{2, 17, 113, 24, 4, 0, 0, true, false, false},    // L ≠ S, S not a multiple of 64
           Case{2, 113, 3, 24, 6, 0, 0, false, false, false},    // no bias
           Case{2, 5, 7, 12, 3, 5, 9, true, false, false},       // kdim ≠ vdim ≠ E
           Case{2, 5, 7, 12, 3, 17, 3, false, false, false},
           Case{2, 5, 7, 12, 3, 0, 0, true, true, false},        // add_bias_kv
           Case{2, 5, 7, 12, 3, 0, 0, true, false, true},        // add_zero_attn
           Case{3, 4, 6, 16, 4, 5, 7, true, true, true},         // both, with kdim/vdim
           Case{1, 65, 65, 64, 8, 0, 0, true, false, false}));   // a workgroup and one

// ---- properties ------------------------------------------------------------------------------------
TEST_F(Module, TheFusedPathIsOneFlashAttentionStepAndReturnsNoWeights) {
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 1));
  ForwardOptions o;
  o.attention = AttentionPath::fused;
  EXPECT_THROW(mha.forward(cpu(), random_tensor({1, 3, 8}, 2), o), ConfigError) << "need_weights is true by default";
  o.need_weights = false;
  o.is_causal = true;
  StepRecorder steps(false);
  gpu().add_tracer(steps);
  AttentionResult r = mha.forward(gpu(), random_tensor({1, 3, 8}, 2), o);
  gpu().remove_tracer(steps);
  EXPECT_FALSE(r.weights);
  std::vector<std::string> names;
  for (const auto& step : steps.steps()) names.push_back(step.event.name);
  EXPECT_EQ(names, (std::vector<std::string>{"q_proj", "split_heads_q", "k_proj", "split_heads_k", "v_proj",
                                             "split_heads_v", "flash_attention", "merge_heads", "out_proj"}));
}


// ---- pack_in_proj: self-attention's q, k, v from one GEMM by the (3E, E) in_proj_weight -----------
struct PackedCase {
  int64_t B, L, E, H;
};
void PrintTo(const PackedCase& k, std::ostream* os) { *os << "B" << k.B << " L" << k.L << " E" << k.E << " H" << k.H; }
class PackedInProj : public Module, public ::testing::WithParamInterface<PackedCase> {};
TEST_P(PackedInProj, GivesTheSeparateProjectionsOutputOnBothPaths) {
  PackedCase k = GetParam();
  MultiHeadAttentionConfig c{.embed_dim = k.E, .num_heads = k.H, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 31));
  Tensor x = random_tensor({k.B, k.L, k.E}, 32);
  for (AttentionPath path : {AttentionPath::unfused, AttentionPath::fused}) {
    ForwardOptions separate{.need_weights = path == AttentionPath::unfused, .is_causal = true, .attention = path};
    ForwardOptions packed = separate;
    packed.pack_in_proj = true;
    packed.key_padding_mask = separate.key_padding_mask = random_bool_mask({k.B, k.L}, 0.3f, 33);
    AttentionResult want = mha.forward(cpu(), x, separate);
    AttentionResult got = expect_backends_agree(mha, x, x, x, packed);
    EXPECT_TRUE(all_close(got.output, want.output)) << attention_path_name(path);
    if (want.weights) {
      EXPECT_TRUE(all_close(*got.weights, *want.weights)) << "weights";
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Sweep, PackedInProj,
                         Values(PackedCase{1, 1, 1, 1},      // everything 1
                                PackedCase{2, 3, 15, 5},     // d = 3: one float per invocation
                                PackedCase{3, 17, 12, 3},    // d = 4: one vec4
                                PackedCase{2, 113, 24, 4},   // d = 6
                                PackedCase{1, 65, 64, 8}));  // a workgroup and one

TEST_F(Module, PackedInProjIsOneStepForSelfAttentionOnly) {
  auto names_of = [&](const MultiHeadAttention& mha, const Tensor& q, const Tensor& kv) {
    StepRecorder steps(false);
    gpu().add_tracer(steps);
    mha.forward(gpu(), q, kv, kv, {.need_weights = false, .attention = AttentionPath::fused, .pack_in_proj = true});
    gpu().remove_tracer(steps);
    std::vector<std::string> names;
    for (const auto& step : steps.steps()) names.push_back(step.event.name);
    return names;
  };
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 34));
  Tensor x = random_tensor({1, 3, 8}, 35), memory = random_tensor({1, 4, 8}, 36);
  const std::vector<std::string> packed = {"in_proj", "split_heads_q", "split_heads_k", "split_heads_v",
                                           "flash_attention", "merge_heads", "out_proj"};
  EXPECT_EQ(names_of(mha, x, x), packed);
  const std::vector<std::string> separate = {"q_proj", "split_heads_q", "k_proj", "split_heads_k", "v_proj",
                                             "split_heads_v", "flash_attention", "merge_heads", "out_proj"};
  EXPECT_EQ(names_of(mha, x, memory), separate) << "cross-attention has two inputs";
  MultiHeadAttentionConfig with_bias_kv = c;
  with_bias_kv.add_bias_kv = true;
  std::vector<std::string> appended = separate;
  appended.insert(appended.begin() + 5, "add_bias_v");
  appended.insert(appended.begin() + 3, "add_bias_k");
  EXPECT_EQ(names_of(MultiHeadAttention(with_bias_kv), x, x), appended) << "bias_k is appended before the split";
  MultiHeadAttentionConfig kdim = c;
  kdim.kdim = kdim.vdim = 8;  // kdim given but equal to E: still one (3E, E) in_proj_weight
  EXPECT_EQ(names_of(MultiHeadAttention(kdim), x, x), packed);
}

TEST_F(Module, FullyMaskedRowsGiveZeroWeightsAndTheOutputBias) {
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 3));
  Tensor x = random_tensor({2, 4, 8}, 4);
  ForwardOptions o;
  o.attn_mask = Tensor({4, 4}, DType::boolean);
  for (int j = 0; j < 4; ++j) o.attn_mask->at({2, j}) = 1.0f;  // query 2 may see nothing
  o.average_attn_weights = false;
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    AttentionResult r = mha.forward(*backend, x, o);
    for (int b = 0; b < 2; ++b) {
      for (int h = 0; h < 2; ++h)
        for (int j = 0; j < 4; ++j) EXPECT_EQ(r.weights->at({b, h, 2, j}), 0.0f) << backend->name();
      // a zero attention row leaves only out_proj's bias
      for (int e = 0; e < 8; ++e) EXPECT_FLOAT_EQ(r.output.at({b, 2, e}), mha.weights().out_proj_bias->data[e]) << backend->name();
      // the other rows are untouched: their weights sum to 1
      float sum = 0;
      for (int j = 0; j < 4; ++j) sum += r.weights->at({b, 0, 1, j});
      EXPECT_NEAR(sum, 1.0f, 1e-6f);
    }
  }
}

TEST_F(Module, CausalOutputsIgnoreFutureTokens) {
  MultiHeadAttentionConfig c{.embed_dim = 16, .num_heads = 4, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 5));
  Tensor x = random_tensor({2, 9, 16}, 6);
  ForwardOptions o;
  o.is_causal = true;
  Tensor before = mha.forward(gpu(), x, o).output;
  const int changed = 6;
  Tensor y = x;
  for (int b = 0; b < 2; ++b)
    for (int e = 0; e < 16; ++e) y.at({b, changed, e}) += 3.0f;
  Tensor after = mha.forward(gpu(), y, o).output;
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 9; ++t) {
      float diff = 0;
      for (int e = 0; e < 16; ++e) diff = std::max(diff, std::fabs(after.at({b, t, e}) - before.at({b, t, e})));
      if (t < changed) EXPECT_EQ(diff, 0.0f) << "position " << t << " saw the future";
      else EXPECT_GT(diff, 1e-3f) << "position " << t << " should see token " << changed;
    }
}

TEST_F(Module, SequenceFirstAndUnbatchedLayoutsMatchBatchFirst) {
  MultiHeadAttentionConfig bf{.embed_dim = 12, .num_heads = 3, .batch_first = true};
  MultiHeadAttentionConfig sf = bf;
  sf.batch_first = false;
  auto w = MultiHeadAttentionWeights::random(bf, 9);
  MultiHeadAttention batch_first(bf, w), seq_first(sf, w);
  const int64_t B = 3, L = 5, E = 12;
  Tensor x = random_tensor({B, L, E}, 10);
  Tensor x_seq({L, B, E});
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < L; ++t)
      for (int e = 0; e < E; ++e) x_seq.at({t, b, e}) = x.at({b, t, e});
  AttentionResult want = batch_first.forward(gpu(), x);
  AttentionResult got = seq_first.forward(gpu(), x_seq);
  ASSERT_EQ(got.output.shape, (Shape{L, B, E}));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < L; ++t)
      for (int e = 0; e < E; ++e) EXPECT_FLOAT_EQ(got.output.at({t, b, e}), want.output.at({b, t, e}));
  EXPECT_EQ(got.weights->shape, (Shape{B, L, L}));  // weights stay batch-first, as in PyTorch
  EXPECT_EQ(got.weights->data, want.weights->data);

  // unbatched (L, E) = batch of one
  Tensor one({L, E}, std::vector<float>(x.data.begin(), x.data.begin() + L * E));
  ForwardOptions per_head;
  per_head.average_attn_weights = false;
  AttentionResult single = batch_first.forward(gpu(), one, per_head);
  AttentionResult batched = batch_first.forward(gpu(), Tensor({1, L, E}, one.data), per_head);
  EXPECT_EQ(single.output.shape, (Shape{L, E}));
  EXPECT_EQ(single.weights->shape, (Shape{3, L, L}));
  EXPECT_EQ(single.output.data, batched.output.data);
}

TEST_F(Module, UnbatchedMasksUseUnbatchedShapes) {
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 12));
  ForwardOptions o;
  o.key_padding_mask = random_bool_mask({6}, 0.3f, 13);         // (S,)
  o.attn_mask = random_bool_mask({2, 4, 6}, 0.2f, 14);           // (H, L, S)
  expect_backends_agree(mha, random_tensor({4, 8}, 15), random_tensor({6, 8}, 16), random_tensor({6, 8}, 17), o);
}

TEST_F(Module, WeightsAveragedArePerHeadWeightsMeaned) {
  MultiHeadAttentionConfig c{.embed_dim = 12, .num_heads = 4, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 18));
  Tensor x = random_tensor({2, 5, 12}, 19);
  ForwardOptions per_head;
  per_head.average_attn_weights = false;
  Tensor all = *mha.forward(gpu(), x, per_head).weights;
  Tensor avg = *mha.forward(gpu(), x).weights;
  Tensor mean({2, 5, 5});
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 4; ++h)
      for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 5; ++j) mean.at({b, i, j}) += all.at({b, h, i, j}) / 4.0f;
  EXPECT_TRUE(all_close(avg, mean, {1e-6f, 1e-5f}, {"b", "i", "j"}));
  ForwardOptions none;
  none.need_weights = false;
  EXPECT_FALSE(mha.forward(gpu(), x, none).weights.has_value());
}

TEST_F(Module, ASecondForwardOfAShapeAllocatesNothingAndEmptyCacheFreesAll) {
  MultiHeadAttentionConfig c{.embed_dim = 16, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 20));
  Tensor x = random_tensor({2, 17, 16}, 21), kv = random_tensor({2, 9, 16}, 22);
  const auto& context = gpu().context();
  const uint64_t baseline = context.allocated_bytes();
  for (AttentionPath path : {AttentionPath::unfused, AttentionPath::fused}) {
    ForwardOptions o{.need_weights = path == AttentionPath::unfused, .attention = path};
    AttentionResult first = mha.forward(gpu(), x, kv, kv, o);
    const uint64_t buffers = context.buffers_created(), held = context.allocated_bytes();
    const size_t descriptor_pools = gpu().recorder().descriptor_pools();
    AttentionResult second = mha.forward(gpu(), x, kv, kv, o);
    EXPECT_EQ(context.buffers_created(), buffers) << attention_path_name(path) << ": the second forward made buffers";
    EXPECT_LE(context.allocated_bytes(), held);
    EXPECT_EQ(gpu().recorder().descriptor_pools(), descriptor_pools);
    EXPECT_EQ(first.output.data, second.output.data) << "a reused buffer changed a result";
    if (first.weights) {
      EXPECT_EQ(first.weights->data, second.weights->data);
    }
  }
  gpu().empty_cache();
  EXPECT_EQ(context.allocated_bytes(), baseline) << "device buffers outlived the forwards and the cache";
}

// ---- forwards on tensors on the backend, weights kept there ---------------------------------------
// Cross-attention with L ≠ S and kdim ≠ vdim ≠ E, on both paths and both backends: the same
// numbers as the forward from the host, bit for bit (the same steps on the same data), and, once
// the weights are kept, nothing carried either way.
TEST_F(Module, AForwardOnTensorsOnTheBackendEqualsTheHostsAndCarriesNothingOnceWeightsAreKept) {
  MultiHeadAttentionConfig c{.embed_dim = 16, .num_heads = 2, .kdim = 12, .vdim = 20, .batch_first = true};
  const MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 30));
  const Tensor q = random_tensor({2, 17, 16}, 31), k = random_tensor({2, 9, 12}, 32), v = random_tensor({2, 9, 20}, 33);
  const uint64_t weight_bytes = (16 * 16 + 16 * 12 + 16 * 20 + 16 * 16 + 4 * 16) * sizeof(float);
  for (Backend* b : {static_cast<Backend*>(&cpu()), static_cast<Backend*>(&gpu())}) {
    for (AttentionPath path : {AttentionPath::unfused, AttentionPath::fused}) {
      SCOPED_TRACE(b->name() + " " + attention_path_name(path));
      const ForwardOptions o{.need_weights = false, .attention = path};
      const Tensor host = mha.forward(*b, q, k, v, o).output;
      MultiHeadAttention kept = mha;
      kept.keep_weights_on(*b);
      const Value qv = b->upload("query", q), kv = b->upload("key", k), vv = b->upload("value", v);
      for (int pass = 0; pass < 3; ++pass) {
        const uint64_t up = b->uploaded_bytes(), down = b->downloaded_bytes();
        const Value out = kept.forward(*b, qv, kv, vv, o).output;
        EXPECT_EQ(b->uploaded_bytes() - up, pass == 0 ? weight_bytes : 0) << "pass " << pass;
        EXPECT_EQ(b->downloaded_bytes(), down) << "the output stays on the backend";
        EXPECT_EQ(out.shape, (Shape{2, 17, 16}));
        EXPECT_EQ(b->download(out).data, host.data) << "pass " << pass;
      }
      const uint64_t up = b->uploaded_bytes();
      EXPECT_EQ(kept.forward(*b, q, k, v, o).output.data, host.data) << "a host forward takes the kept weights too";
      EXPECT_EQ(b->uploaded_bytes() - up, (q.size() + k.size() + v.size()) * sizeof(float)) << "the inputs alone";
    }
  }
}

TEST_F(Module, NewWeightsAndAFailedPassSendTheWeightsAgain) {
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 40));
  const MultiHeadAttention other(c, MultiHeadAttentionWeights::random(c, 41));
  const Tensor x = random_tensor({1, 5, 8}, 42);
  mha.keep_weights_on(gpu());
  const Value xv = gpu().upload("x", x);
  const ForwardOptions o{.need_weights = false};
  mha.forward(gpu(), xv, xv, xv, o);
  mha.set_weights(other.weights());
  uint64_t up = gpu().uploaded_bytes();
  EXPECT_TRUE(all_close(gpu().download(mha.forward(gpu(), xv, xv, xv, o).output), other.forward(cpu(), x, o).output))
      << "the new weights, not the kept old ones";
  EXPECT_GT(gpu().uploaded_bytes(), up);
  // a pass that fails may never have run its uploads: the kept weights go with it
  const Value flat = gpu().upload("flat", random_tensor({5, 8}, 43));
  try {
    mha.forward(gpu(), flat, flat, flat, o);
    FAIL() << "a (L, E) tensor on the backend was taken";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("query (5, 8) on the backend must be batch-first (B, T, features)"),
              std::string::npos)
        << e.what();
  }
  up = gpu().uploaded_bytes();
  mha.forward(gpu(), xv, xv, xv, o);
  EXPECT_GT(gpu().uploaded_bytes(), up) << "the weights went up again";
}

// A module that keeps its weights on `gpu`: its first pass there uploads them, later ones carry
// up only their inputs (`input_bytes`), and each gives what the module without kept weights gives.
template <class Module, class Forward>
void expect_keeps_weights(Backend& gpu, Module module, const Forward& forward, uint64_t input_bytes) {
  const Tensor want = forward(module);
  module.keep_weights_on(gpu);
  for (int pass = 0; pass < 3; ++pass) {
    const uint64_t up = gpu.uploaded_bytes();
    EXPECT_EQ(forward(module).data, want.data) << "pass " << pass;
    const uint64_t carried = gpu.uploaded_bytes() - up;
    if (pass == 0) {
      EXPECT_GT(carried, input_bytes) << "the first pass sends the weights";
    } else {
      EXPECT_EQ(carried, input_bytes) << "pass " << pass << " sent more than its inputs";
    }
  }
}

TEST_F(Module, EveryModuleKeepsItsWeightsOnTheBackendAskedAndSendsOnlyItsInputs) {
  TransformerEncoderLayerConfig layer{.d_model = 8, .nhead = 2, .dim_feedforward = 16};
  const Tensor src = random_tensor({2, 5, 8}, 50), tgt = random_tensor({2, 3, 8}, 51);
  const uint64_t src_bytes = src.size() * 4, tgt_bytes = tgt.size() * 4;
  {
    SCOPED_TRACE("TransformerEncoderLayer");
    expect_keeps_weights(gpu(), TransformerEncoderLayer(layer), [&](const auto& m) { return m.forward(gpu(), src); },
                         src_bytes);
  }
  {
    SCOPED_TRACE("TransformerEncoder");
    TransformerEncoderConfig c{layer, 2, true};
    expect_keeps_weights(gpu(), TransformerEncoder(c, TransformerEncoderWeights::random(c, 52)),
                         [&](const auto& m) { return m.forward(gpu(), src); }, src_bytes);
  }
  {
    SCOPED_TRACE("TransformerDecoderLayer");
    expect_keeps_weights(gpu(), TransformerDecoderLayer(layer),
                         [&](const auto& m) { return m.forward(gpu(), tgt, src); }, src_bytes + tgt_bytes);
  }
  {
    SCOPED_TRACE("TransformerDecoder");
    TransformerDecoderConfig c{layer, 2, true};
    expect_keeps_weights(gpu(), TransformerDecoder(c, TransformerDecoderWeights::random(c, 53)),
                         [&](const auto& m) { return m.forward(gpu(), tgt, src); }, src_bytes + tgt_bytes);
  }
  {
    SCOPED_TRACE("Transformer");
    TransformerConfig c{layer, 1, 1};
    expect_keeps_weights(gpu(), Transformer(c, TransformerWeights::random(c, 54)),
                         [&](const auto& m) { return m.forward(gpu(), src, tgt); }, src_bytes + tgt_bytes);
  }
  {
    SCOPED_TRACE("GroupedQueryAttention");
    GroupedQueryAttentionConfig c{.hidden_size = 8, .num_heads = 4, .num_kv_heads = 2};
    // and RoPE's tables for the pass's positions, of q and of k: inv_freq (d/2) and cos_sin (T, d/2, 2)
    const int64_t d = 2, T = 5;
    expect_keeps_weights(gpu(), GroupedQueryAttention(c, GroupedQueryAttentionWeights::random(c, 55)),
                         [&](const auto& m) { return m.forward(gpu(), src).output; },
                         src_bytes + 2 * (d / 2 + T * d) * 4);
  }
  {
    SCOPED_TRACE("CausalLM");
    CausalLMConfig c{.vocab_size = 11, .max_positions = 9, .layer = layer, .num_layers = 2};
    Tensor ids({2, 4}, {1, 2, 3, 4, 5, 6, 7, 10}, DType::int64);
    // and the position table's rows of the pass's T = 4 positions (CausalLM::embed)
    expect_keeps_weights(gpu(), CausalLM(c, CausalLMWeights::random(c, 56)),
                         [&](const auto& m) { return m.forward(gpu(), ids); }, ids.size() * 4 + 4 * 8 * 4);
  }
}

TEST_F(Module, AFusedPassHoldsTheProjectionsAndOneMoreActivationAtOnce) {
  // Every tensor may take a buffer still in flight (VulkanBackendOptions::reuse_in_flight_bytes
  // = 0, what tensors of 4 MiB and more do by default): with the layout steps folded, the fused
  // pass then holds at most four (L, E) activations at once, the three projections, stored as
  // heads, and the step writing after them, whatever L; the input's buffer goes to
  // flash_attention. Staging: the input's and the output's.
  MultiHeadAttentionConfig c{.embed_dim = 16, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 25));
  Tensor x = random_tensor({1, 33, 16}, 26);
  const ForwardOptions fused{.need_weights = false, .attention = AttentionPath::fused};
  const uint64_t activation = 33 * 16 * sizeof(float), weights = (4 * 16 * 16 + 4 * 16) * sizeof(float);
  auto peak_of = [&](uint64_t reuse_in_flight_bytes, const ForwardOptions& options, bool fold = true) {
    VulkanBackendOptions backend_options;
    backend_options.reuse_in_flight_bytes = reuse_in_flight_bytes;
    backend_options.fold_layout_steps = fold;
    VulkanBackend gpu(testing::shared_context(), backend_options);
    const auto& context = gpu.context();
    context.reset_peak();
    const uint64_t before = context.allocated_bytes();
    Tensor out = mha.forward(gpu, x, options).output;
    EXPECT_TRUE(all_close(out, mha.forward(cpu(), x, fused).output, {1e-5f, 1e-5f}, {"b", "l", "e"}));
    return context.peak_allocated_bytes() - before;
  };
  const uint64_t reusing = peak_of(0, fused), overlapping = peak_of(uint64_t(1) << 40, fused);
  EXPECT_LE(reusing, 2 * weights + (4 + 2) * activation) << "weights and their staging, 4 activations, 2 staging";
  EXPECT_GE(overlapping, reusing + activation) << "small steps overlap, holding more";
  // The layout steps as copies: the input is held until v_proj has read it, beside q and k split,
  // v_proj's product and its copy: one activation more.
  const uint64_t copying = peak_of(0, fused, false);
  EXPECT_EQ(copying, reusing + activation);
  EXPECT_GE(peak_of(uint64_t(1) << 40, fused, false), copying + activation);
  // pack_in_proj holds the packed (L, 3E) projection until all three heads are split from it,
  // and its buffer, three activations long, then fits no (L, E) tensor: flash_attention's output
  // takes a new one. Three activations more than the separate projections, let go of one by one.
  ForwardOptions packed = fused;
  packed.pack_in_proj = true;
  EXPECT_EQ(peak_of(0, packed), reusing + 3 * activation);
}

TEST_F(Module, ResidentForwardsThatHoldTheLastOutputMakeNoBuffers) {
  // As a caller on the device does (vkattn bench --resident, a chain of layers): the last
  // forward's output is held until the next forward returns. Its buffer comes back to the pool
  // after the next pass began; the pass after must find it there, not make a new one.
  MultiHeadAttentionConfig c{.embed_dim = 16, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 25));
  mha.keep_weights_on(gpu());
  const Value x = gpu().upload("x", random_tensor({2, 17, 16}, 26));
  const auto& context = gpu().context();
  for (AttentionPath path : {AttentionPath::unfused, AttentionPath::fused}) {
    ForwardOptions o{.need_weights = false, .attention = path};
    Value last = mha.forward(gpu(), x, x, x, o).output;
    last = mha.forward(gpu(), x, x, x, o).output;
    const uint64_t buffers = context.buffers_created();
    for (int i = 0; i < 3; ++i) last = mha.forward(gpu(), x, x, x, o).output;
    EXPECT_EQ(context.buffers_created(), buffers) << attention_path_name(path) << ": "
                                                  << context.buffers_created() - buffers << " buffers in 3 forwards";
    const Tensor host = gpu().download(x);
    EXPECT_TRUE(all_close(gpu().download(last), mha.forward(cpu(), host, host, host, o).output, {1e-4f, 1e-4f},
                          {"b", "l", "e"}));
  }
}

TEST_F(Module, APassReusesTheBuffersOfTensorsItHasFinishedWith) {
  // 4 layers of the same shape: each layer's intermediates and weights are free again by the
  // next layer. (Staging buffers are reused only from one submission to the next: not counted.)
  TransformerEncoderConfig config;
  config.layer = {.d_model = 32, .nhead = 4, .dim_feedforward = 64};
  config.num_layers = 4;
  TransformerEncoder encoder(config, TransformerEncoderWeights::random(config, 23));
  Tensor x = random_tensor({2, 33, 32}, 24);
  gpu().empty_cache();
  const auto& context = gpu().context();
  auto device_buffers = [&] { return context.buffers_created() - context.staging_buffers_created(); };
  const uint64_t before = device_buffers();
  Tensor ours = encoder.forward(gpu(), x);
  const uint64_t made = device_buffers() - before;
  SizingBackend sizing;
  encoder.forward(sizing, x);
  EXPECT_LT(made, sizing.tensors().size() / 2) << made << " buffers for " << sizing.tensors().size() << " tensors";
  Tensor expected = encoder.forward(cpu(), x);
  EXPECT_TRUE(all_close(ours, expected, {1e-4f, 1e-4f}, {"b", "l", "e"}));
}

}  // namespace
}  // namespace vkattn
