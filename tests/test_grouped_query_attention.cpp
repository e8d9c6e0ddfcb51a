// GroupedQueryAttention (Llama / Mistral / Qwen attention): torch's definitions
// (tests/golden_grouped_query/generate.py) on both backends and both paths within 1e-4; token by
// token with a cache of H_kv heads equal to the whole forward, windows included; shared heads equal
// to K and V projections copied per query head (bit for bit); the steps in the trace with their
// shapes; and one-line errors for bad configurations and state_dicts.
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
                                         "qwen_bias_partial", "offset_window");

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
}
INSTANTIATE_TEST_SUITE_P(Fixtures, GroupedQueryDecode,
                         ::testing::Combine(::testing::Values("gqa_half", "mqa_theta500k", "window_padding",
                                                              "qwen_bias_partial"),
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

// ---- bad configurations and state_dicts: one line each --------------------------------------------
TEST(GroupedQueryErrors, BadConfigurationsNameWhatIsWrong) {
  expect_error<ConfigError>([] { GroupedQueryAttention({.hidden_size = 32, .num_heads = 8, .num_kv_heads = 3}); },
                            {"num_heads=8 is not a multiple of num_kv_heads=3"});
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
  GroupedQueryAttentionConfig config{.hidden_size = 32, .num_heads = 4, .num_kv_heads = 2};
  GroupedQueryAttentionWeights w = GroupedQueryAttentionWeights::random(config, 1);
  w.k_proj_weight = random_tensor({32, 32}, 2);
  expect_error<ShapeError>([&] { GroupedQueryAttention(config, w); },
                           {"weight k_proj.weight is float32 (32, 32)", "(H_kv·d, E) = (16, 32)"});
  ReferenceBackend cpu;
  GroupedQueryAttention module(config);
  expect_error<ShapeError>([&] { module.forward(cpu, random_tensor({2, 5, 16}, 3)); },
                           {"GroupedQueryAttention.forward: x (2, 5, 16) must be (B, T, E) or (T, E) with E"});
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
  file.tensors["in_proj_weight"] = random_tensor({96, 32}, 1);
  expect_error<FileError>([&] { io::grouped_query_from_state_dict(file, {}, "w.safetensors"); },
                          {"unexpected tensor 'in_proj_weight' (96, 32)", "nn.MultiheadAttention's"});
}

}  // namespace
}  // namespace vkattn
