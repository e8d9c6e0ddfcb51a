// The encoder against PyTorch: every fixture in tests/golden_encoder/ (generate.py there runs
// nn.TransformerEncoderLayer / nn.TransformerEncoder in float64) through the state_dict loader,
// on both backends and both attention paths, within 1e-4; the steps a trace shows; the GPU
// against the reference on random layers of awkward sizes; and the loader's and module's errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "examples/simple_transformer.h"
#include "tests/support/expect_error.h"
#include "tests/support/golden.h"
#include "tests/support/gpu.h"
#include "tests/support/printers.h"
#include "tests/support/tolerance.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/transformer_encoder.h"

namespace vkattn {
namespace {

namespace fs = std::filesystem;
using testing::random_tensor;

constexpr testing::Tolerance kTorchTolerance{.atol = 1e-4f, .rtol = 0.0f};
const fs::path kGolden = VKATTN_GOLDEN_ENCODER_DIR;

nlohmann::json read_config(const fs::path& dir) {
  std::ifstream in(dir / "config.json");
  return nlohmann::json::parse(in);
}

// The fixture's module, loaded as `vkattn encode` loads it, with what config.json adds.
io::EncoderState load_fixture(const fs::path& dir) {
  auto config = read_config(dir);
  auto state = io::load_encoder(dir / "weights.safetensors");
  auto& layer = state.config.layer;
  layer.activation = config.at("activation") == "gelu" ? Activation::gelu : Activation::relu;
  layer.norm_first = config.at("norm_first").get<bool>();
  layer.layer_norm_eps = config.at("layer_norm_eps").get<float>();
  return state;
}

EncoderOptions fixture_options(const fs::path& dir, AttentionPath path) {
  EncoderOptions options;
  if (fs::exists(dir / "src_key_padding_mask.npy")) options.src_key_padding_mask = io::read_npy(dir / "src_key_padding_mask.npy");
  options.is_causal = read_config(dir).at("is_causal").get<bool>();
  options.attention = path;
  return options;
}

std::vector<std::string> encoder_fixtures() {
  std::vector<std::string> names;
  for (const auto& name : testing::fixture_folders(kGolden)) {
    if (read_config(kGolden / name).at("module") != "SimpleTransformer") names.push_back(name);
  }
  return names;
}

TEST(EncoderFixtures, CoverWhatTheEncoderIssueAsksFor) {
  int layers[4] = {}, post = 0, pre = 0, gelu = 0, relu = 0, norm = 0, no_norm = 0, padding = 0, no_padding = 0;
  for (const auto& name : encoder_fixtures()) {
    auto c = read_config(kGolden / name);
    layers[std::min<int64_t>(3, c.at("num_layers").get<int64_t>())]++;
    (c.at("norm_first").get<bool>() ? pre : post)++;
    (c.at("activation") == "gelu" ? gelu : relu)++;
    (c.at("final_norm").get<bool>() ? norm : no_norm)++;
    (fs::exists(kGolden / name / "src_key_padding_mask.npy") ? padding : no_padding)++;
  }
  EXPECT_TRUE(layers[1] && layers[2] && layers[3]) << "1, 2 and 3 layers";
  EXPECT_TRUE(post && pre && gelu && relu && norm && no_norm && padding && no_padding);
}

class EncoderGolden
    : public testing::GpuTest,
      public ::testing::WithParamInterface<std::tuple<std::string, std::string, AttentionPath>> {};

TEST_P(EncoderGolden, MatchesPyTorch) {
  const auto& [name, backend_name, path] = GetParam();
  const fs::path dir = kGolden / name;
  auto config = read_config(dir);
  auto state = load_fixture(dir);
  ASSERT_EQ(state.config.num_layers, config.at("num_layers").get<int64_t>());
  ASSERT_EQ(state.config.final_norm, config.at("final_norm").get<bool>());
  ASSERT_EQ(state.config.layer.dim_feedforward, config.at("dim_feedforward").get<int64_t>());
  ASSERT_EQ(state.config.layer.nhead, config.at("nhead").get<int64_t>());
  ASSERT_EQ(state.single_layer, config.at("module") == "TransformerEncoderLayer");

  Backend& backend = backend_name == "gpu" ? static_cast<Backend&>(gpu()) : cpu();
  Tensor src = io::read_npy(dir / "src.npy");
  EncoderOptions options = fixture_options(dir, path);
  Tensor out = state.single_layer
                   ? TransformerEncoderLayer(state.config.layer, state.weights.layers[0]).forward(backend, src, options)
                   : TransformerEncoder(state.config, state.weights).forward(backend, src, options);
  Tensor expected = io::read_npy(dir / "expected_output.npy");
  EXPECT_EQ(out.shape, expected.shape);
  EXPECT_TRUE(testing::all_close(out, expected, kTorchTolerance));
  RecordProperty("max_abs_error", std::to_string(testing::max_abs_error(out, expected)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EncoderGolden,
                         ::testing::Combine(::testing::ValuesIn(encoder_fixtures()), ::testing::Values("gpu", "cpu"),
                                            ::testing::Values(AttentionPath::unfused, AttentionPath::fused)),
                         [](const auto& p) {
                           return std::get<0>(p.param) + "_" + std::get<1>(p.param) +
                                  (std::get<2>(p.param) == AttentionPath::fused ? "_fused" : "_unfused");
                         });

// ---- the article's SimpleTransformer: embedding, positions, blocks, mean pool, classifier ----------
class SimpleTransformerGolden : public testing::GpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(SimpleTransformerGolden, GivesPyTorchsLogits) {
  const fs::path dir = kGolden / "simple_transformer";
  auto model = examples::SimpleTransformer::load(dir / "weights.safetensors");
  EXPECT_EQ(model.num_layers(), 2u);
  EXPECT_EQ(model.block_config().activation, Activation::gelu);
  Backend& backend = GetParam() == "gpu" ? static_cast<Backend&>(gpu()) : cpu();
  StepRecorder recorder(false);
  backend.add_tracer(recorder);
  Tensor logits = model.forward(backend, io::read_npy(dir / "tokens.npy"));
  backend.remove_tracer(recorder);
  EXPECT_TRUE(testing::all_close(logits, io::read_npy(dir / "expected_logits.npy"), kTorchTolerance, {"b", "class"}));
  const auto& steps = recorder.steps();
  ASSERT_GE(steps.size(), 5u);
  EXPECT_EQ(steps[0].event.name, "embedding");
  EXPECT_EQ(steps[1].event.name, "pos_encoding");
  EXPECT_EQ(steps[1].event.op, "positional_encoding");
  EXPECT_EQ(steps[2].event.name, "blocks.0.self_attn.q_proj");
  EXPECT_EQ(steps[steps.size() - 2].event.name, "mean_pool");
  EXPECT_EQ(steps.back().event.name, "classifier");
}
INSTANTIATE_TEST_SUITE_P(Backends, SimpleTransformerGolden, ::testing::Values("gpu", "cpu"));

TEST(SimpleTransformer, RefusesATokenOutsideTheVocabulary) {
  auto model = examples::SimpleTransformer::load(kGolden / "simple_transformer" / "weights.safetensors");
  ReferenceBackend cpu;
  Tensor tokens({2, 3}, {1, 2, 3, 4, 50, 6}, DType::int64);
  testing::expect_error<ShapeError>([&] { model.forward(cpu, tokens); },
                                    {"token 50 at (1, 1) is outside the vocabulary [0, 50)"});
  testing::expect_error<ShapeError>([&] { model.forward(cpu, random_tensor({2, 3}, 1)); },
                                    {"tokens are float32 (2, 3); int64 token ids (B, T) are expected"});
}

TEST(SimpleTransformer, NamesAMissingTensorByTheArticlesName) {
  auto file = io::read_safetensors(kGolden / "simple_transformer" / "weights.safetensors");
  file.tensors.erase("blocks.1.ff.3.weight");
  testing::expect_error<FileError>([&] { examples::SimpleTransformer::from_state_dict(file, 0, "m.safetensors"); },
                                   {"m.safetensors: missing tensor 'blocks.1.ff.3.weight', expected shape (16, 64)"});
}

// ---- the trace: every step, under its module path -------------------------------------------------
class EncoderTrace : public testing::GpuTest {};

std::vector<std::string> step_names(Backend& backend, const std::function<void()>& run) {
  StepRecorder recorder(false);
  backend.add_tracer(recorder);
  run();
  backend.remove_tracer(recorder);
  std::vector<std::string> names;
  for (const auto& s : recorder.steps()) names.push_back(s.event.name);
  return names;
}

std::vector<std::string> attention_steps(const std::string& scope, bool masked) {
  std::vector<std::string> steps = {"q_proj", "split_heads_q", "k_proj", "split_heads_k", "v_proj", "split_heads_v",
                                    "attention_scores"};
  if (masked) steps.push_back("attention_mask");
  for (const char* s : {"softmax", "attention_values", "merge_heads", "out_proj"}) steps.push_back(s);
  for (auto& s : steps) s = scope + s;
  return steps;
}

TEST_F(EncoderTrace, ShowsEveryStepOfEveryLayerUnderItsModulePath) {
  const fs::path dir = kGolden / "encoder2_post_gelu_norm_padding";
  auto state = load_fixture(dir);
  TransformerEncoder encoder(state.config, state.weights);
  Tensor src = io::read_npy(dir / "src.npy");
  std::vector<std::string> expected;
  for (std::string layer : {"layers.0.", "layers.1."}) {  // post-norm, gelu
    auto attention = attention_steps(layer + "self_attn.", true);
    expected.insert(expected.end(), attention.begin(), attention.end());
    for (const char* s : {"residual_add1", "norm1", "linear1", "gelu", "linear2", "residual_add2", "norm2"}) {
      expected.push_back(layer + s);
    }
  }
  expected.push_back("norm");
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    EXPECT_EQ(step_names(*backend, [&] { encoder.forward(*backend, src, fixture_options(dir, AttentionPath::unfused)); }),
              expected)
        << backend->name();
  }
}

TEST_F(EncoderTrace, PreNormNormalisesBeforeEachSubBlock) {
  TransformerEncoderLayerConfig config{.d_model = 8, .nhead = 2, .dim_feedforward = 5, .norm_first = true};
  TransformerEncoderLayer layer(config);
  std::vector<std::string> expected = {"norm1"};
  auto attention = attention_steps("self_attn.", false);
  expected.insert(expected.end(), attention.begin(), attention.end());
  for (const char* s : {"residual_add1", "norm2", "linear1", "relu", "linear2", "residual_add2"}) expected.push_back(s);
  EXPECT_EQ(step_names(gpu(), [&] { layer.forward(gpu(), random_tensor({2, 3, 8}, 1), {.attention = AttentionPath::unfused}); }),
            expected);
}

TEST_F(EncoderTrace, TheFusedPathReplacesTheAttentionCoreWithOneStepAndIsTheDefault) {
  TransformerEncoderLayer layer({.d_model = 8, .nhead = 2, .dim_feedforward = 5});
  for (AttentionPath path : {AttentionPath::fused, AttentionPath::automatic}) {
    auto names = step_names(gpu(), [&] { layer.forward(gpu(), random_tensor({2, 3, 8}, 1), {.attention = path}); });
    EXPECT_NE(std::find(names.begin(), names.end(), "self_attn.flash_attention"), names.end());
    EXPECT_EQ(std::find(names.begin(), names.end(), "self_attn.softmax"), names.end());
  }
}

// ---- random layers of awkward sizes: the GPU against the reference ----------------------------------
class EncoderSweep : public testing::GpuTest,
                     public ::testing::WithParamInterface<std::tuple<int, int, int, int, bool, bool>> {};
TEST_P(EncoderSweep, GpuMatchesReference) {
  auto [B, L, H, d, norm_first, gelu] = GetParam();
  TransformerEncoderConfig config{.layer = {.d_model = H * d, .nhead = H, .dim_feedforward = 3 * d + 1,
                                            .activation = gelu ? Activation::gelu : Activation::relu,
                                            .norm_first = norm_first},
                                  .num_layers = 2, .final_norm = true};
  TransformerEncoder encoder(config, TransformerEncoderWeights::random(config, 7));
  Tensor src = random_tensor({B, L, H * d}, 8);
  EncoderOptions options{.src_key_padding_mask = testing::random_bool_mask({B, L}, 0.3f, 9), .is_causal = true};
  // a fully masked row: item 0's every key is padding (both backends give that query zeros from attention)
  for (int j = 0; j < L; ++j) options.src_key_padding_mask->data[j] = 1.0f;
  EXPECT_TRUE(testing::all_close(encoder.forward(gpu(), src, options), encoder.forward(cpu(), src, options),
                                 {.atol = 2e-5f, .rtol = 2e-5f}, {"b", "t", "f"}));
}
INSTANTIATE_TEST_SUITE_P(Sizes, EncoderSweep,
                         ::testing::Values(std::tuple{1, 1, 1, 1, false, false}, std::tuple{2, 3, 3, 1, true, true},
                                           std::tuple{3, 17, 1, 17, false, true}, std::tuple{1, 113, 4, 3, true, false},
                                           std::tuple{2, 65, 2, 33, false, true}));

// ---- on values already on the backend ------------------------------------------------------------------
class EncoderOnTheBackend : public testing::GpuTest {};
TEST_F(EncoderOnTheBackend, ChainsWithoutTheHostAndEqualsTheForwardFromIt) {
  TransformerEncoderConfig config{.layer = {.d_model = 12, .nhead = 3, .dim_feedforward = 7, .norm_first = true},
                                  .num_layers = 2, .final_norm = true};
  TransformerEncoder encoder(config, TransformerEncoderWeights::random(config, 11));
  TransformerEncoderLayer layer(config.layer, TransformerEncoderLayerWeights::random(config.layer, 12));
  const EncoderOptions options{.src_key_padding_mask = testing::random_bool_mask({2, 17}, 0.3f, 14), .is_causal = true};
  const EncoderOptions flat_options{.mask = testing::random_bool_mask({17, 17}, 0.2f, 15)};
  for (const Shape& shape : {Shape{2, 17, 12}, Shape{17, 12}}) {
    const Tensor src = random_tensor(shape, 13);
    const EncoderOptions& o = shape.size() == 3 ? options : flat_options;
    const Tensor want = layer.forward(cpu(), encoder.forward(cpu(), src, o), o);
    for (Backend* b : {static_cast<Backend*>(&cpu()), static_cast<Backend*>(&gpu())}) {
      encoder.keep_weights_on(*b);
      layer.keep_weights_on(*b);
      const Value x = b->upload("src", src);
      (void)layer.forward(*b, encoder.forward(*b, x, o), o);  // the weights go up
      const uint64_t up = b->uploaded_bytes(), down = b->downloaded_bytes();
      const Value y = layer.forward(*b, encoder.forward(*b, x, o), o);
      const Tensor& mask = o.mask ? *o.mask : *o.src_key_padding_mask;
      EXPECT_EQ(b->uploaded_bytes() - up, 3 * mask.data.size() * sizeof(float))
          << "only the mask crosses, to each of the three self-attentions";
      EXPECT_EQ(b->downloaded_bytes(), down) << b->name();
      EXPECT_EQ(y.shape, shape);
      EXPECT_TRUE(testing::all_close(b->download(y), want, {.atol = 2e-5f, .rtol = 2e-5f})) << b->name();
    }
  }
}

TEST_F(EncoderOnTheBackend, NamesWhatIsWrongWithTheValue) {
  const TransformerEncoderLayer layer({.d_model = 8, .nhead = 2, .dim_feedforward = 5});
  const Value wide = cpu().upload("src", random_tensor({2, 3, 6}, 1));
  testing::expect_error<ShapeError>([&] { (void)(layer.forward(cpu(), wide)); },
                                    {"TransformerEncoderLayer.forward: src (2, 3, 6) on the backend must be float32, "
                                     "(B, L, E) batch-first or (L, E) unbatched, with E = d_model = 8"});
  const Value x = cpu().upload("src", random_tensor({2, 3, 8}, 1));
  testing::expect_error<ShapeError>(
      [&] { (void)(layer.forward(cpu(), x, {.src_key_padding_mask = Tensor({2, 4}, DType::boolean)})); },
      {"src_key_padding_mask (2, 4) must be (B, L) = (2, 3) for src (2, 3, 8)"});
}

// ---- errors ------------------------------------------------------------------------------------------
class EncoderErrors : public ::testing::Test {
 protected:
  TransformerEncoderLayer layer{{.d_model = 8, .nhead = 2, .dim_feedforward = 5}};
  ReferenceBackend cpu;
};

TEST_F(EncoderErrors, NameTheInputAtFault) {
  testing::expect_error<ShapeError>([&] { (void)(layer.forward(cpu, random_tensor({2, 3, 6}, 1))); }, {"TransformerEncoderLayer.forward: src (2, 3, 6) has 6 features but d_model=8"});
  testing::expect_error<ShapeError>([&] { (void)(layer.forward(cpu, random_tensor({2, 3, 8}, 1), {.src_key_padding_mask = Tensor({2, 4}, DType::boolean)})); }, {"src_key_padding_mask (2, 4) must be (B, L) = (2, 3) for src (2, 3, 8)"});
  testing::expect_error<ShapeError>([&] { (void)(layer.forward(cpu, random_tensor({3, 8}, 1), {.mask = Tensor({3, 4})})); }, {"mask (3, 4) must be (L, L) = (3, 3) or (H, L, L) = (2, 3, 3)"});
  testing::expect_error<ShapeError>([&] { (void)(layer.forward(cpu, random_tensor({1, 2, 3, 8}, 1))); }, {"must be (B, L, E) batch-first, or (L, E)"});
}

TEST_F(EncoderErrors, RefuseABadConfig) {
  testing::expect_error<ConfigError>([&] { (void)(TransformerEncoderLayer({.d_model = 8, .nhead = 3})); }, {"embed_dim=8 is not divisible by num_heads=3"});
  testing::expect_error<ConfigError>([&] { (void)(TransformerEncoderLayer({.d_model = 8, .nhead = 2, .dim_feedforward = 0})); }, {"dim_feedforward=0"});
  TransformerEncoderLayerConfig c{.d_model = 8, .nhead = 2, .dim_feedforward = 5};
  auto w = TransformerEncoderLayerWeights::random(c, 1);
  w.linear2_weight = Tensor({8, 4});
  testing::expect_error<ShapeError>([&] { (void)(TransformerEncoderLayer(c, w)); }, {"weight linear2.weight is float32 (8, 4) but the config needs float32 (E, F) = (8, 5)"});
  TransformerEncoderConfig ec{.layer = c, .num_layers = 2, .final_norm = true};
  auto ew = TransformerEncoderWeights::random(ec, 1);
  ew.norm.reset();
  testing::expect_error<ShapeError>([&] { (void)(TransformerEncoder(ec, ew)); }, {"final_norm is on but norm.weight / norm.bias are missing"});
}

// A state_dict with one tensor renamed, dropped or reshaped, as a user's file might be.
class EncoderStateDict : public ::testing::Test {
 protected:
  io::Safetensors file = io::read_safetensors(kGolden / "encoder2_post_gelu_norm_padding" / "weights.safetensors");
  void rename(const std::string& from, const std::string& to) {
    auto node = file.tensors.extract(from);
    ASSERT_FALSE(node.empty()) << from;
    node.key() = to;
    file.tensors.insert(std::move(node));
  }
  io::EncoderState load() { return io::encoder_from_state_dict(file, 0, "w.safetensors"); }
};

TEST_F(EncoderStateDict, ReadsTheLayerCountAndWidthsFromTheFile) {
  auto state = load();
  EXPECT_EQ(state.config.num_layers, 2);
  EXPECT_EQ(state.config.layer.d_model, 16);
  EXPECT_EQ(state.config.layer.dim_feedforward, 32);
  EXPECT_EQ(state.config.layer.nhead, 2);
  EXPECT_TRUE(state.config.final_norm);
  EXPECT_FALSE(state.single_layer);
  // torch's defaults for what a state_dict does not hold
  EXPECT_EQ(state.config.layer.activation, Activation::relu);
  EXPECT_FALSE(state.config.layer.norm_first);
  EXPECT_FLOAT_EQ(state.config.layer.layer_norm_eps, 1e-5f);
}

TEST_F(EncoderStateDict, NamesAMissingTensorInFull) {
  file.tensors.erase("layers.1.norm2.bias");
  testing::expect_error<FileError>([&] { (void)(load()); }, {"w.safetensors: missing tensor 'layers.1.norm2.bias', expected shape (E,) = (16,)"});
}

TEST_F(EncoderStateDict, NamesAMissingAttentionTensorInFull) {
  file.tensors.erase("layers.0.self_attn.in_proj_bias");
  testing::expect_error<FileError>([&] { (void)(load()); }, {"missing tensor 'layers.0.self_attn.in_proj_bias'"});
}

TEST_F(EncoderStateDict, RefusesAGapInTheLayers) {
  for (const char* name : {"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                           "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                           "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}) {
    rename(std::string("layers.1.") + name, std::string("layers.2.") + name);
  }
  testing::expect_error<FileError>([&] { (void)(load()); }, {"layer 1 is missing: the file has layers.N for N in {0, 2}"});
}

TEST_F(EncoderStateDict, RefusesAnUnexpectedTensor) {
  rename("layers.0.linear1.bias", "layers.0.linear1.b");
  testing::expect_error<FileError>([&] { (void)(load()); }, {"unexpected tensor 'layers.0.linear1.b' (32,) in an nn.TransformerEncoder state_dict"});
}

TEST_F(EncoderStateDict, RefusesLayersOfDifferentWidths) {
  file.tensors["layers.1.linear1.weight"] = Tensor({31, 16});
  file.tensors["layers.1.linear1.bias"] = Tensor({31});
  file.tensors["layers.1.linear2.weight"] = Tensor({16, 31});
  testing::expect_error<FileError>([&] { (void)(load()); }, {"'layers.1.' has d_model 16 and dim_feedforward 31 but layers.0 has 16 and 32"});
}

TEST_F(EncoderStateDict, RefusesAMisShapedFeedForward) {
  file.tensors["layers.0.linear2.weight"] = Tensor({16, 30});
  testing::expect_error<FileError>([&] { (void)(load()); }, {"tensor 'layers.0.linear2.weight' has shape (16, 30), expected (E, F) = (16, 32)"});
}

TEST_F(EncoderStateDict, ReadsASingleLayersNames) {
  auto single = io::load_encoder(kGolden / "layer_post_relu" / "weights.safetensors");
  EXPECT_TRUE(single.single_layer);
  EXPECT_EQ(single.config.num_layers, 1);
  EXPECT_FALSE(single.config.final_norm);
}

}  // namespace
}  // namespace vkattn
