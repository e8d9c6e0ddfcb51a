// GroupedQueryAttention (Llama / Mistral / Qwen attention): torch's definitions
// (tests/golden_grouped_query/generate.py) on both backends and both paths within 1e-4; token by
// token with a cache of H_kv heads equal to the whole forward, windows included; shared heads equal
// to K and V projections copied per query head (bit for bit); the steps in the trace with their
// shapes; forwards on values left on the backend; and one-line errors for bad configurations and
// state_dicts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "tests/support/expect_error.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/grouped_query_attention.h"
#include "reference/reference.h"
#include "vkattn/tracing/check.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {
namespace {

namespace fs = std::filesystem;
using testing::all_close;
using testing::expect_error;
using testing::random_tensor;
constexpr testing::Tolerance kTorch{1e-4f, 1e-4f};

struct Fixture {
  GroupedQueryAttention module;
  Tensor x, expected;
  GroupedQueryOptions options;
};

Fixture read_fixture(const std::string& name) {
  const fs::path dir = fs::path(VKATTN_GOLDEN_GROUPED_QUERY_DIR) / name;
  std::ifstream in(dir / "config.json");
  const auto json = nlohmann::json::parse(in);
  GroupedQueryAttentionConfig config;
  config.rope = parse_rotary_convention(json.at("rope").get<std::string>());
  config.rope_theta = json.at("rope_theta").get<float>();
  config.rotary_dims = json.at("rotary_dims").get<int64_t>();
  config.sliding_window = json.at("window").get<int64_t>();
  io::GroupedQueryState state = io::load_grouped_query(dir / "weights.safetensors", config);
  EXPECT_EQ(state.config.kv_heads(), json.at("num_kv_heads").get<int64_t>());
  GroupedQueryOptions options;
  options.position = json.at("position").get<int64_t>();
  if (fs::exists(dir / "key_padding_mask.npy")) options.key_padding_mask = io::read_npy(dir / "key_padding_mask.npy");
  return {GroupedQueryAttention(state.config, state.weights), io::read_npy(dir / "x.npy"),
          io::read_npy(dir / "expected_output.npy"), options};
}

const auto kFixtures = ::testing::Values("gqa_half", "gqa_pairs", "mqa_theta500k", "mha_llama", "window_padding",
                                         "qwen_bias_partial", "offset_window", "qwen3_qk_norm");

class GroupedQueryGolden : public testing::GpuTest,
                           public ::testing::WithParamInterface<std::tuple<std::string, std::string, AttentionPath>> {};
TEST_P(GroupedQueryGolden, MatchesTorchsDefinition) {
  const auto& [name, backend_name, path] = GetParam();
  Fixture f = read_fixture(name);
  Backend& backend = backend_name == "gpu" ? static_cast<Backend&>(gpu()) : cpu();
  f.options.attention = path;
  AttentionResult result = f.module.forward(backend, f.x, f.options);
  EXPECT_TRUE(all_close(result.output, f.expected, kTorch, {"b", "t", "f"}));
}
INSTANTIATE_TEST_SUITE_P(Fixtures, GroupedQueryGolden,
                         ::testing::Combine(kFixtures, ::testing::Values("gpu", "cpu"),
                                            ::testing::Values(AttentionPath::fused, AttentionPath::unfused)),
                         [](const auto& p) {
                           return std::get<0>(p.param) + "_" + std::get<1>(p.param) + "_" +
                                  attention_path_name(std::get<2>(p.param));
                         });

// The same weights under the other RoPE convention: the bug of a checkpoint loaded with the wrong one.
TEST(GroupedQueryConventions, TheWrongConventionGivesAnotherOutput) {
  Fixture f = read_fixture("gqa_half");
  GroupedQueryAttentionConfig swapped = f.module.config();
  swapped.rope = RotaryConvention::pairs;
  ReferenceBackend cpu;
  Tensor wrong = GroupedQueryAttention(swapped, f.module.weights()).forward(cpu, f.x).output;
  EXPECT_GT(testing::max_abs_error(wrong, f.expected), 0.05f);
}

// Qwen3's heads without their q_norm and k_norm: the bug of a Qwen3 checkpoint read as a Qwen2.
TEST(GroupedQueryNorms, LeavingOutQwen3sQkNormGivesAnotherOutput) {
  Fixture f = read_fixture("qwen3_qk_norm");
  ASSERT_TRUE(f.module.config().qk_norm);
  EXPECT_EQ(f.module.config().dim(), 16);  // d ≠ E / H = 8
  GroupedQueryAttentionConfig plain = f.module.config();
  plain.qk_norm = false;
  GroupedQueryAttentionWeights weights = f.module.weights();
  weights.q_norm_weight.reset();
  weights.k_norm_weight.reset();
  ReferenceBackend cpu;
  Tensor wrong = GroupedQueryAttention(plain, weights).forward(cpu, f.x, f.options).output;
  EXPECT_GT(testing::max_abs_error(wrong, f.expected), 0.05f);
}

// ---- decoding with a cache of H_kv heads ---------------------------------------------------------
class GroupedQueryDecode : public testing::GpuTest,
                           public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};
TEST_P(GroupedQueryDecode, TokenByTokenEqualsTheWholeForward) {
  const auto& [name, backend_name] = GetParam();
  Fixture f = read_fixture(name);
  Backend& backend = backend_name == "gpu" ? static_cast<Backend&>(gpu()) : cpu();
  const int64_t B = f.x.dim(0), T = f.x.dim(1), E = f.x.dim(2);
  Tensor whole = f.module.forward(backend, f.x).output;
  KVCache cache = f.module.make_cache(backend, B, T + 2);
  EXPECT_EQ(cache.heads(), f.module.config().kv_heads());
  // a prompt of 3 positions, then one at a time
  auto rows = [&](int64_t begin, int64_t count) {
    Tensor part({B, count, E});
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(f.x.data.begin() + (b * T + begin) * E, count * E, part.data.begin() + b * count * E);
    return part;
  };
  std::vector<Tensor> outputs{f.module.decode(backend, rows(0, 3), cache)};
  for (int64_t t = 3; t < T; ++t) outputs.push_back(f.module.decode(backend, rows(t, 1), cache));
  EXPECT_EQ(cache.length(), T);
  Tensor decoded({B, T, E});
  int64_t t0 = 0;
  for (const Tensor& o : outputs) {
    const int64_t n = o.dim(1);
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(o.data.begin() + b * n * E, n * E, decoded.data.begin() + (b * T + t0) * E);
    t0 += n;
  }
  EXPECT_TRUE(all_close(decoded, whole, {}, {"b", "t", "f"}));
  EXPECT_TRUE(cache.kept_weights(backend)->values.contains("o_proj.weight")) << "the steps' weights were not kept";
}
INSTANTIATE_TEST_SUITE_P(Fixtures, GroupedQueryDecode,
                         ::testing::Combine(::testing::Values("gqa_half", "mqa_theta500k", "window_padding",
                                                              "qwen_bias_partial", "qwen3_qk_norm"),
                                            ::testing::Values("gpu", "cpu")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

TEST(GroupedQueryCache, HoldsHkvHeadsAQuarterOfMultiHeadAttentions) {
  ReferenceBackend cpu;
  GroupedQueryAttentionConfig config{.hidden_size = 64, .num_heads = 8, .num_kv_heads = 2};
  GroupedQueryAttentionConfig mha = config;
  mha.num_kv_heads = 8;
  KVCache grouped = GroupedQueryAttention(config).make_cache(cpu, 2, 100);
  KVCache full = GroupedQueryAttention(mha).make_cache(cpu, 2, 100);
  EXPECT_EQ(grouped.bytes(), 2u * 2 * 2 * 100 * 8 * 4);  // keys and values, B, H_kv, C, d, 4 bytes
  EXPECT_EQ(full.bytes(), 4 * grouped.bytes());
}

// ---- shared heads are the copied heads ----------------------------------------------------------
// With H_kv < H, the module equals one with H_kv = H whose k_proj and v_proj rows are each
// key/value head's repeated for its query heads (repeat_interleave on the weights): bit for bit.
TEST_F(GroupedQueryDecode, SharedHeadsEqualCopiedProjectionsBitForBit) {
  GroupedQueryAttentionConfig config{.hidden_size = 32, .num_heads = 8, .num_kv_heads = 2, .attention_bias = true,
                                     .sliding_window = 6};
  GroupedQueryAttention grouped(config);
  GroupedQueryAttentionConfig copied_config = config;
  copied_config.num_kv_heads = 8;
  GroupedQueryAttentionWeights copied = grouped.weights();
  const int64_t d = config.dim(), E = config.hidden_size, group = 4;
  auto repeat_rows = [&](const Tensor& t) {  // (H_kv·d, …) -> (H·d, …), head by head
    const int64_t cols = t.rank() == 2 ? t.dim(1) : 1;
    Tensor out(t.rank() == 2 ? Shape{8 * d, cols} : Shape{8 * d});
    for (int64_t h = 0; h < 8; ++h)
      std::copy_n(t.data.begin() + h / group * d * cols, d * cols, out.data.begin() + h * d * cols);
    return out;
  };
  copied.k_proj_weight = repeat_rows(copied.k_proj_weight);
  copied.v_proj_weight = repeat_rows(copied.v_proj_weight);
  copied.k_proj_bias = repeat_rows(*copied.k_proj_bias);
  copied.v_proj_bias = repeat_rows(*copied.v_proj_bias);
  GroupedQueryAttention mha(copied_config, copied);
  Tensor x = random_tensor({2, 19, E}, 7);
  for (AttentionPath path : {AttentionPath::fused, AttentionPath::unfused}) {
    GroupedQueryOptions options{.attention = path};
    for (Backend* b : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
      EXPECT_EQ(grouped.forward(*b, x, options).output.data, mha.forward(*b, x, options).output.data)
          << b->name() << " " << attention_path_name(path);
    }
  }
}

// ---- the trace: each new step with its shapes -------------------------------------------------------
TEST_F(GroupedQueryDecode, TheTraceShowsEveryStepWithItsShapes) {
  GroupedQueryAttention module({.hidden_size = 32, .num_heads = 8, .num_kv_heads = 2, .sliding_window = 4});
  StepRecorder recorder(false);
  gpu().add_tracer(recorder);
  module.forward(gpu(), random_tensor({2, 5, 32}, 1), {.attention = AttentionPath::unfused});
  gpu().remove_tracer(recorder);
  std::vector<std::pair<std::string, Shape>> steps;
  for (const auto& step : recorder.steps()) steps.emplace_back(step.event.name, step.event.output.shape);
  const std::vector<std::pair<std::string, Shape>> expected{
      {"q_proj", {2, 5, 32}},        {"split_heads_q", {2, 8, 5, 4}},      {"k_proj", {2, 5, 8}},
      {"split_heads_k", {2, 2, 5, 4}}, {"v_proj", {2, 5, 8}},              {"split_heads_v", {2, 2, 5, 4}},
      {"rotary_embedding_q", {2, 8, 5, 4}}, {"rotary_embedding_k", {2, 2, 5, 4}},
      {"attention_scores", {2, 8, 5, 5}},   {"attention_mask", {2, 8, 5, 5}}, {"softmax", {2, 8, 5, 5}},
      {"attention_values", {2, 8, 5, 4}},   {"merge_heads", {2, 5, 32}},      {"o_proj", {2, 5, 32}}};
  EXPECT_EQ(steps, expected);
}

// ---- the check: RoPE's convention, θ and the head order, named -------------------------------------
// "Your" tensors are a recipe's own with one mistake: another convention or θ (a module so
// configured), or K's heads copied with .repeat (made here from the recipe's values).
std::vector<std::pair<std::string, Tensor>> recorded_steps(const GroupedQueryAttention& module, const Tensor& x) {
  ReferenceBackend cpu;
  StepRecorder recorder(true);
  cpu.add_tracer(recorder);
  module.forward(cpu, x, {.attention = AttentionPath::unfused});
  cpu.remove_tracer(recorder);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& step : recorder.steps()) out.emplace_back(step.event.name, *step.values);
  return out;
}

Tensor& step_of(std::vector<std::pair<std::string, Tensor>>& steps, const std::string& name) {
  for (auto& [n, t] : steps)
    if (n == name) return t;
  throw std::runtime_error("no step " + name);
}

// (B, H_kv, T, d) -> (B, H, T, d), head h a copy of head h mod H_kv: torch's .repeat(1, G, 1, 1)
Tensor repeat_heads(const Tensor& t, int64_t group) {
  const int64_t B = t.dim(0), H_kv = t.dim(1), plane = t.dim(2) * t.dim(3);
  Tensor out({B, H_kv * group, t.dim(2), t.dim(3)});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_kv * group; ++h)
      std::copy_n(t.data.begin() + (b * H_kv + h % H_kv) * plane, plane, out.data.begin() + (b * H_kv * group + h) * plane);
  return out;
}

class CheckSince2017 : public ::testing::Test {
 protected:
  GroupedQueryAttentionConfig config{.hidden_size = 32, .num_heads = 8, .num_kv_heads = 2};
  GroupedQueryAttention module{config};
  Tensor x = random_tensor({2, 5, 32}, 9);
  ReferenceBackend cpu;

  CheckReport check(const std::vector<std::pair<std::string, Tensor>>& yours) {
    return check_grouped_query(yours, module, cpu, x, {});
  }
};

TEST_F(CheckSince2017, TheRecipesOwnStepsAgree) {
  CheckReport report = check(recorded_steps(module, x));
  EXPECT_TRUE(report.ok()) << report.text();
}

TEST_F(CheckSince2017, NamesTheOtherRopeConvention) {
  GroupedQueryAttentionConfig pairs = config;
  pairs.rope = RotaryConvention::pairs;
  CheckReport report = check(recorded_steps(GroupedQueryAttention(pairs, module.weights()), x));
  ASSERT_TRUE(report.first_divergent) << report.text();
  const StepCheck& step = report.steps[*report.first_divergent];
  EXPECT_EQ(step.name, "rotary_embedding_q");
  EXPECT_NE(step.diagnosis.find("yours rotates neighbouring pairs (2i, 2i + 1"), std::string::npos) << step.diagnosis;
  EXPECT_NE(step.diagnosis.find("the recipe rotates halves"), std::string::npos) << step.diagnosis;
}

TEST_F(CheckSince2017, ReadsAnotherThetaOffTheRotation) {
  GroupedQueryAttentionConfig other = config;
  other.rope_theta = 500000.0f;
  CheckReport report = check(recorded_steps(GroupedQueryAttention(other, module.weights()), x));
  ASSERT_TRUE(report.first_divergent) << report.text();
  const StepCheck& step = report.steps[*report.first_divergent];
  EXPECT_EQ(step.name, "rotary_embedding_q");
  EXPECT_NE(step.diagnosis.find("θ = 500000; the recipe's θ = 10000"), std::string::npos) << step.diagnosis;
}

TEST_F(CheckSince2017, NamesRepeatForRepeatInterleave) {
  auto yours = recorded_steps(module, x);
  // K's heads copied with .repeat, recorded as split_heads_k (B, H, T, d), and the scores made from them
  Tensor& k = step_of(yours, "rotary_embedding_k");
  const Tensor q = step_of(yours, "rotary_embedding_q"), k_repeated = repeat_heads(k, 4);
  Tensor& scores = step_of(yours, "attention_scores");
  reference::attention_scores(q.data.data(), k_repeated.data.data(), scores.data.data(), 16, 5, 5, 4, 0.5f, 1);
  CheckReport report = check(yours);
  ASSERT_TRUE(report.first_divergent) << report.text();
  const StepCheck& step = report.steps[*report.first_divergent];
  EXPECT_EQ(step.name, "attention_scores");
  EXPECT_NE(step.diagnosis.find("key/value head h mod 2: K and V copied with .repeat(1, 4, 1, 1)"), std::string::npos)
      << step.diagnosis;
  EXPECT_NE(step.diagnosis.find(".repeat_interleave(4, dim=1)"), std::string::npos) << step.diagnosis;
  // the copied K itself, recorded in place of rotary_embedding_k: in repeat's order a mistake, in
  // repeat_interleave's the right copy (a note, still not vkattn's shape)
  k = k_repeated;
  report = check(yours);
  EXPECT_NE(report.steps[*report.first_divergent].diagnosis.find("copies the 2 key/value heads with .repeat"),
            std::string::npos)
      << report.text();
}

// ---- on values already on the backend ------------------------------------------------------------------
class GroupedQueryOnTheBackend : public testing::GpuTest {};

// Two attentions chained on the backend (a window, RoPE from position 5, padding) give the
// forward from the host's output and weights, with nothing read back and only the masks sent.
TEST_F(GroupedQueryOnTheBackend, ChainsWithoutTheHostAndEqualsTheForwardFromIt) {
  const GroupedQueryAttentionConfig c{.hidden_size = 24, .num_heads = 6, .num_kv_heads = 2, .sliding_window = 7};
  GroupedQueryAttention first(c, GroupedQueryAttentionWeights::random(c, 31));
  GroupedQueryAttention second(c, GroupedQueryAttentionWeights::random(c, 32));
  for (const Shape& shape : {Shape{2, 17, 24}, Shape{17, 24}}) {
    const bool batched = shape.size() == 3;
    GroupedQueryOptions o{.key_padding_mask = testing::random_bool_mask(batched ? Shape{2, 17} : Shape{17}, 0.2f, 33),
                          .need_weights = true, .average_attn_weights = !batched, .position = 5};
    const Tensor x = random_tensor(shape, 34);
    const AttentionResult want = second.forward(cpu(), first.forward(cpu(), x, o).output, o);
    for (Backend* b : {static_cast<Backend*>(&cpu()), static_cast<Backend*>(&gpu())}) {
      first.keep_weights_on(*b);
      second.keep_weights_on(*b);
      const Value in = b->upload("x", x);
      (void)second.forward(*b, first.forward(*b, in, o).output, o);  // the weights go up
      const uint64_t up = b->uploaded_bytes(), down = b->downloaded_bytes();
      const AttentionValues got = second.forward(*b, first.forward(*b, in, o).output, o);
      // each of the two passes sends the mask, and each rotary_embedding (q's and k's) its inverse
      // frequencies (d / 2) and the cos and sin of the T positions it rotates (T·d/2 each)
      const size_t d = 4, T = 17, rope = d / 2 + T * d;
      EXPECT_EQ(b->uploaded_bytes() - up, 2 * (o.key_padding_mask->data.size() + 2 * rope) * sizeof(float))
          << b->name() << ": only the masks and RoPE's tables cross";
      EXPECT_EQ(b->downloaded_bytes(), down) << b->name();
      EXPECT_EQ(got.output.shape, shape);
      EXPECT_TRUE(all_close(b->download(got.output), want.output, {.atol = 2e-5f, .rtol = 2e-5f})) << b->name();
      ASSERT_TRUE(got.weights.has_value());
      EXPECT_EQ(got.weights->shape, want.weights->shape) << "per head (B, H, T, T), or averaged and unbatched (T, T)";
      EXPECT_TRUE(all_close(b->download(*got.weights), *want.weights, {.atol = 2e-6f, .rtol = 2e-5f})) << b->name();
    }
  }
}

TEST_F(GroupedQueryOnTheBackend, NamesWhatIsWrongWithTheValue) {
  const GroupedQueryAttention module({.hidden_size = 32, .num_heads = 4, .num_kv_heads = 2});
  expect_error<ShapeError>([&] { module.forward(cpu(), cpu().upload("x", random_tensor({2, 5, 16}, 1))); },
                           {"GroupedQueryAttention.forward: x (2, 5, 16) must be (B, T, E) or (T, E) with E = "
                            "hidden_size = 32"});
  const Value x = cpu().upload("x", random_tensor({2, 5, 32}, 2));
  expect_error<ShapeError>([&] { module.forward(cpu(), x, {.key_padding_mask = Tensor({2, 4}, DType::boolean)}); },
                           {"GroupedQueryAttention.forward: key_padding_mask (2, 4) must be (B, T) = (2, 5)"});
  expect_error<ShapeError>([&] { module.forward(cpu(), x, {.position = -1}); },
                           {"GroupedQueryAttention.forward: position=-1 must be >= 0"});
  expect_error<ShapeError>([&] { module.forward(cpu(), cpu().upload("ids", Tensor({2, 5, 32}, DType::int64))); },
                           {"GroupedQueryAttention.forward: x (2, 5, 32) on the backend must be float32"});
}

// ---- bad configurations and state_dicts: one line each --------------------------------------------
TEST(GroupedQueryErrors, BadConfigurationsNameWhatIsWrong) {
  expect_error<ConfigError>([] { GroupedQueryAttention({.hidden_size = 32, .num_heads = 8, .num_kv_heads = 3}); },
                            {"num_heads=8 is not a multiple of num_kv_heads=3"});
  expect_error<ConfigError>([] { GroupedQueryAttention({.hidden_size = -32, .num_heads = 4}); },
                            {"hidden_size=-32, num_heads=4", "must be >= 1"});
  expect_error<ConfigError>([] { GroupedQueryAttention({.hidden_size = 30, .num_heads = 4}); },
                            {"hidden_size=30 is not divisible by num_heads=4"});
  expect_error<ConfigError>([] { GroupedQueryAttention({.hidden_size = 32, .num_heads = 4, .rotary_dims = 3}); },
                            {"rotary_dims=3 must be even"});
  expect_error<ConfigError>([] { GroupedQueryAttention({.hidden_size = 12, .num_heads = 4}); },  // d = 3: odd halves
                            {"rotary_dims=3 must be even", "head_dim=3"});
  expect_error<ConfigError>(
      [] { GroupedQueryAttention({.hidden_size = 32, .num_heads = 4, .causal = false, .sliding_window = 4}); },
      {"sliding_window=4", "needs causal attention"});
  expect_error<ConfigError>([] { GroupedQueryAttention({.hidden_size = 32, .num_heads = 4, .rope_theta = 0.5f}); },
                            {"rope_theta=0.5"});
  expect_error<ConfigError>(
      [] { GroupedQueryAttention({.hidden_size = 32, .num_heads = 4, .qk_norm = true, .qk_norm_eps = 0.0f}); },
      {"qk_norm_eps=0.000000 must be a finite number above 0"});
  GroupedQueryAttentionConfig config{.hidden_size = 32, .num_heads = 4, .num_kv_heads = 2};
  GroupedQueryAttentionWeights w = GroupedQueryAttentionWeights::random(config, 1);
  w.k_proj_weight = random_tensor({32, 32}, 2);
  expect_error<ShapeError>([&] { GroupedQueryAttention(config, w); },
                           {"weight k_proj.weight is float32 (32, 32)", "(H_kv·d, E) = (16, 32)"});
  GroupedQueryAttentionConfig normed = config;
  normed.qk_norm = true;
  GroupedQueryAttentionWeights n = GroupedQueryAttentionWeights::random(normed, 1);
  EXPECT_EQ(n.k_norm_weight->data, std::vector<float>(8, 1.0f));  // Hugging Face's RMSNorm starts at ones
  n.k_norm_weight.reset();
  expect_error<ShapeError>([&] { GroupedQueryAttention(normed, n); },
                           {"k_norm.weight is missing but qk_norm is on"});
  expect_error<ShapeError>([&] { GroupedQueryAttention(config, GroupedQueryAttentionWeights::random(normed, 1)); },
                           {"q_norm.weight is given but qk_norm is off"});
  ReferenceBackend cpu;
  GroupedQueryAttention module(config);
  expect_error<ShapeError>([&] { module.forward(cpu, random_tensor({2, 5, 16}, 3)); },
                           {"GroupedQueryAttention.forward: x (2, 5, 16) must be (B, T, E) or (T, E) with E"});
  KVCache cache = module.make_cache(cpu, 2, 8);
  expect_error<ShapeError>(
      [&] { module.decode(cpu, random_tensor({2, 1, 32}, 4), cache, {.key_padding_mask = Tensor({2, 3})}); },
      {"GroupedQueryAttention.decode: key_padding_mask (2, 3) must be (B, S) = (2, 1), S the cache's length after"});
  EXPECT_EQ(cache.length(), 0);
  KVCache wrong = KVCache(cpu, 1, 2, 4, 8, 8);
  expect_error<ShapeError>([&] { module.decode(cpu, random_tensor({2, 1, 32}, 4), wrong); },
                           {"GroupedQueryAttention.decode: the cache holds 1 layers of 2 sequences, 4 heads",
                            "needs 1 layer of 2 sequences, 2 heads"});
}

TEST(GroupedQueryErrors, StateDictsThatDisagreeAreFileErrors) {
  const fs::path weights = fs::path(VKATTN_GOLDEN_GROUPED_QUERY_DIR) / "gqa_half" / "weights.safetensors";
  expect_error<FileError>([&] { io::load_grouped_query(weights, {.num_kv_heads = 4}); },
                          {"--kv-heads 4 disagrees with tensor 'k_proj.weight' (16, 32): 2 heads of d = 8"});
  io::Safetensors file = io::read_safetensors(weights);
  file.tensors.erase("v_proj.weight");
  expect_error<FileError>([&] { io::grouped_query_from_state_dict(file, {}, "w.safetensors"); },
                          {"w.safetensors: missing tensor 'v_proj.weight', expected shape (H_kv·d, E) = (16, 32)"});
  expect_error<FileError>([&] { io::grouped_query_from_state_dict(file, {.num_heads = 3}, "w.safetensors"); },
                          {"--heads 3 disagrees with num_heads 4"});
  file.metadata.clear();
  expect_error<FileError>([&] { io::grouped_query_from_state_dict(file, {.num_heads = 3}, "w.safetensors"); },
                          {"tensor 'o_proj.weight' (32, 32) has 32 columns, not H·d for H = 3 heads"});
  io::Safetensors qwen3 = io::read_safetensors(fs::path(VKATTN_GOLDEN_GROUPED_QUERY_DIR) / "qwen3_qk_norm" /
                                              "weights.safetensors");
  qwen3.tensors.erase("k_norm.weight");
  expect_error<FileError>([&] { io::grouped_query_from_state_dict(qwen3, {}, "w.safetensors"); },
                          {"w.safetensors: missing tensor 'k_norm.weight', expected shape (d,) = (16,)"});
  qwen3.tensors["k_norm.weight"] = random_tensor({8}, 1);
  expect_error<FileError>([&] { io::grouped_query_from_state_dict(qwen3, {}, "w.safetensors"); },
                          {"tensor 'k_norm.weight' has shape (8,), expected (d,) = (16,)"});
  file.tensors["in_proj_weight"] = random_tensor({96, 32}, 1);
  expect_error<FileError>([&] { io::grouped_query_from_state_dict(file, {}, "w.safetensors"); },
                          {"unexpected tensor 'in_proj_weight' (96, 32)", "nn.MultiheadAttention's"});
}

}  // namespace
}  // namespace vkattn
