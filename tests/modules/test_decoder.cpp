// The decoder against PyTorch: every fixture in tests/golden_decoder/ (generate.py there runs
// nn.TransformerDecoderLayer / nn.TransformerDecoder / nn.Transformer in float64) through the
// state_dict loaders, on both backends and both attention paths, within 1e-4; the steps a trace
// shows; decode() over a KVCache and memory projected once against the full forward at every
// position; forwards on values left on the backend (an encoder's output as memory); and the
// loaders' and modules' errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "tests/support/expect_error.h"
#include "tests/support/golden.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/transformer.h"
#include "vkattn/modules/transformer_decoder.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {
namespace {

namespace fs = std::filesystem;
using testing::all_close;
using testing::random_tensor;

constexpr testing::Tolerance kTorchTolerance{.atol = 1e-4f, .rtol = 0.0f};
const fs::path kGolden = VKATTN_GOLDEN_DECODER_DIR;

nlohmann::json read_config(const fs::path& dir) {
  std::ifstream in(dir / "config.json");
  return nlohmann::json::parse(in);
}

std::optional<Tensor> optional_npy(const fs::path& dir, const std::string& name) {
  if (!fs::exists(dir / (name + ".npy"))) return std::nullopt;
  return io::read_npy(dir / (name + ".npy"));
}

void apply_config(const nlohmann::json& config, TransformerEncoderLayerConfig& layer) {
  layer.activation = config.at("activation") == "gelu" ? Activation::gelu : Activation::relu;
  layer.norm_first = config.at("norm_first").get<bool>();
  layer.layer_norm_eps = config.at("layer_norm_eps").get<float>();
}

std::vector<std::string> fixtures() { return testing::fixture_folders(kGolden); }

TEST(DecoderFixtures, CoverWhatTheDecoderIssueAsksFor) {
  int layer = 0, decoder = 0, transformer = 0, post = 0, pre = 0, gelu = 0, relu = 0, unbatched = 0;
  int masks[4] = {};
  const char* mask_names[4] = {"tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask"};
  bool l_differs_from_s = false;
  for (const auto& name : fixtures()) {
    const fs::path dir = kGolden / name;
    auto c = read_config(dir);
    const std::string module = c.at("module");
    (module == "Transformer" ? transformer : module == "TransformerDecoder" ? decoder : layer)++;
    (c.at("norm_first").get<bool>() ? pre : post)++;
    (c.at("activation") == "gelu" ? gelu : relu)++;
    unbatched += c.at("unbatched").get<bool>();
    for (int i = 0; i < 4; ++i) masks[i] += fs::exists(dir / (std::string(mask_names[i]) + ".npy"));
    Tensor tgt = io::read_npy(dir / "tgt.npy");
    Tensor memory = io::read_npy(dir / (module == "Transformer" ? "src.npy" : "memory.npy"));
    l_differs_from_s |= tgt.dim(-2) != memory.dim(-2);
  }
  EXPECT_TRUE(layer && decoder && transformer && post && pre && gelu && relu && unbatched && l_differs_from_s);
  for (int i = 0; i < 4; ++i) EXPECT_GT(masks[i], 0) << mask_names[i];
}

class DecoderGolden
    : public testing::GpuTest,
      public ::testing::WithParamInterface<std::tuple<std::string, std::string, AttentionPath>> {};

TEST_P(DecoderGolden, MatchesPyTorch) {
  const auto& [name, backend_name, path] = GetParam();
  const fs::path dir = kGolden / name;
  const auto config = read_config(dir);
  const std::string module = config.at("module");
  Backend& backend = backend_name == "gpu" ? static_cast<Backend&>(gpu()) : cpu();
  Tensor tgt = io::read_npy(dir / "tgt.npy");
  Tensor out;
  if (module == "Transformer") {
    auto state = io::load_transformer(dir / "weights.safetensors");
    ASSERT_EQ(state.config.num_encoder_layers, config.at("num_encoder_layers").get<int64_t>());
    ASSERT_EQ(state.config.num_decoder_layers, config.at("num_layers").get<int64_t>());
    apply_config(config, state.config.layer);
    TransformerOptions options;
    options.tgt_mask = optional_npy(dir, "tgt_mask");
    options.memory_mask = optional_npy(dir, "memory_mask");
    options.src_key_padding_mask = optional_npy(dir, "src_key_padding_mask");
    options.tgt_key_padding_mask = optional_npy(dir, "tgt_key_padding_mask");
    options.memory_key_padding_mask = optional_npy(dir, "memory_key_padding_mask");
    options.tgt_is_causal = config.at("tgt_is_causal").get<bool>();
    options.attention = path;
    out = Transformer(state.config, state.weights).forward(backend, io::read_npy(dir / "src.npy"), tgt, options);
  } else {
    auto state = io::load_decoder(dir / "weights.safetensors");
    ASSERT_EQ(state.config.num_layers, config.at("num_layers").get<int64_t>());
    ASSERT_EQ(state.config.final_norm, config.at("final_norm").get<bool>());
    ASSERT_EQ(state.config.layer.dim_feedforward, config.at("dim_feedforward").get<int64_t>());
    ASSERT_EQ(state.config.layer.nhead, config.at("nhead").get<int64_t>());
    ASSERT_EQ(state.single_layer, module == "TransformerDecoderLayer");
    apply_config(config, state.config.layer);
    DecoderOptions options;
    options.tgt_mask = optional_npy(dir, "tgt_mask");
    options.memory_mask = optional_npy(dir, "memory_mask");
    options.tgt_key_padding_mask = optional_npy(dir, "tgt_key_padding_mask");
    options.memory_key_padding_mask = optional_npy(dir, "memory_key_padding_mask");
    options.tgt_is_causal = config.at("tgt_is_causal").get<bool>();
    options.attention = path;
    Tensor memory = io::read_npy(dir / "memory.npy");
    out = state.single_layer ? TransformerDecoderLayer(state.config.layer, state.weights.layers[0])
                                   .forward(backend, tgt, memory, options)
                             : TransformerDecoder(state.config, state.weights).forward(backend, tgt, memory, options);
  }
  Tensor expected = io::read_npy(dir / "expected_output.npy");
  EXPECT_EQ(out.shape, expected.shape);
  EXPECT_TRUE(all_close(out, expected, kTorchTolerance));
  RecordProperty("max_abs_error", std::to_string(testing::max_abs_error(out, expected)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecoderGolden,
                         ::testing::Combine(::testing::ValuesIn(fixtures()), ::testing::Values("gpu", "cpu"),
                                            ::testing::Values(AttentionPath::unfused, AttentionPath::fused)),
                         [](const auto& p) {
                           return std::get<0>(p.param) + "_" + std::get<1>(p.param) +
                                  (std::get<2>(p.param) == AttentionPath::fused ? "_fused" : "_unfused");
                         });

// ---- the steps, as a trace shows them -------------------------------------------------------------
class DecoderSteps : public testing::GpuTest {};

TEST_F(DecoderSteps, AreNamedByTorchsModulePathsInOrder) {
  TransformerDecoderLayerConfig c{.d_model = 8, .nhead = 2, .dim_feedforward = 12};
  TransformerDecoder decoder({c, 1, true}, TransformerDecoderWeights::random({c, 1, true}, 3));
  StepRecorder trace(false);
  cpu().add_tracer(trace);
  DecoderOptions options;
  options.tgt_is_causal = true;
  options.attention = AttentionPath::fused;
  decoder.forward(cpu(), random_tensor({1, 3, 8}, 1), random_tensor({1, 4, 8}, 2), options);
  cpu().remove_tracer(trace);
  std::vector<std::string> steps;
  for (const auto& step : trace.steps()) steps.push_back(step.event.name);
  const std::vector<std::string> expected = {
      "layers.0.self_attn.q_proj", "layers.0.self_attn.split_heads_q", "layers.0.self_attn.k_proj",
      "layers.0.self_attn.split_heads_k", "layers.0.self_attn.v_proj", "layers.0.self_attn.split_heads_v",
      "layers.0.self_attn.flash_attention", "layers.0.self_attn.merge_heads", "layers.0.self_attn.out_proj",
      "layers.0.residual_add1", "layers.0.norm1",
      "layers.0.multihead_attn.q_proj", "layers.0.multihead_attn.split_heads_q", "layers.0.multihead_attn.k_proj",
      "layers.0.multihead_attn.split_heads_k", "layers.0.multihead_attn.v_proj",
      "layers.0.multihead_attn.split_heads_v", "layers.0.multihead_attn.flash_attention",
      "layers.0.multihead_attn.merge_heads", "layers.0.multihead_attn.out_proj",
      "layers.0.residual_add2", "layers.0.norm2", "layers.0.linear1", "layers.0.relu", "layers.0.linear2",
      "layers.0.residual_add3", "layers.0.norm3", "norm"};
  EXPECT_EQ(steps, expected);
}

// ---- GPU against the reference on random decoders of awkward sizes ----------------------------------
struct Sizes {
  int64_t B, T, S, E, H, F;
  bool norm_first;
};
class DecoderSizes : public testing::GpuTest, public ::testing::WithParamInterface<Sizes> {};

TEST_P(DecoderSizes, GpuMatchesReferenceWithMasks) {
  const auto [B, T, S, E, H, F, norm_first] = GetParam();
  TransformerDecoderLayerConfig c{.d_model = E, .nhead = H, .dim_feedforward = F, .activation = Activation::gelu,
                                  .norm_first = norm_first};
  TransformerDecoder decoder({c, 2, true}, TransformerDecoderWeights::random({c, 2, true}, 7));
  DecoderOptions options;
  options.tgt_is_causal = true;
  Tensor padding({B, S}, DType::boolean);
  for (int64_t b = 0; b < B; ++b) padding.data[static_cast<size_t>(b * S + S - 1)] = b % 2 ? 1.0f : 0.0f;
  if (S > 1) options.memory_key_padding_mask = padding;
  Tensor tgt = random_tensor({B, T, E}, 1), memory = random_tensor({B, S, E}, 2);
  for (AttentionPath path : {AttentionPath::unfused, AttentionPath::fused}) {
    options.attention = path;
    Tensor expected = decoder.forward(cpu(), tgt, memory, options);
    EXPECT_TRUE(all_close(decoder.forward(gpu(), tgt, memory, options), expected)) << attention_path_name(path);
  }
}

INSTANTIATE_TEST_SUITE_P(Awkward, DecoderSizes,
                         ::testing::Values(Sizes{1, 1, 1, 4, 1, 3, false}, Sizes{2, 3, 17, 12, 3, 7, true},
                                           Sizes{3, 17, 3, 20, 5, 33, false}, Sizes{1, 113, 9, 8, 2, 16, true}));

// ---- generation: decode() over a cache equals the whole forward at every position ------------------
class DecoderDecode : public testing::GpuTest, public ::testing::WithParamInterface<std::tuple<std::string, int64_t>> {};

TEST_P(DecoderDecode, EqualsTheCausalForwardAtEveryPosition) {
  const auto& [backend_name, S] = GetParam();
  Backend& backend = backend_name == "gpu" ? static_cast<Backend&>(gpu()) : cpu();
  const int64_t B = 2, T = 9, E = 12;
  TransformerDecoderLayerConfig c{.d_model = E, .nhead = 3, .dim_feedforward = 20, .norm_first = true};
  TransformerDecoder decoder({c, 2, true}, TransformerDecoderWeights::random({c, 2, true}, 11));
  Tensor tgt = random_tensor({B, T, E}, 3), memory = random_tensor({B, S, E}, 4);
  Tensor memory_padding({B, S}, DType::boolean);  // sequence 1's memory is shorter by a third
  for (int64_t s = S - S / 3; s < S; ++s) memory_padding.data[static_cast<size_t>(S + s)] = 1.0f;
  DecoderOptions options;
  options.tgt_is_causal = true;
  options.memory_key_padding_mask = memory_padding;
  Tensor full = decoder.forward(backend, tgt, memory, options);  // (B, T, E)

  DecoderMemory kept = decoder.project_memory(backend, memory, memory_padding);
  ASSERT_EQ(kept.layers.size(), 2u);
  EXPECT_EQ(kept.layers[0].keys.shape, (Shape{B, 3, S, E / 3}));
  KVCache cache = decoder.make_cache(backend, B, T);  // exactly full at the end
  // the first 4 positions as a prompt, then one at a time
  int64_t done = 0;
  for (int64_t step : {4, 1, 1, 1, 1, 1}) {
    Tensor piece({B, step, E});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < step; ++t)
        for (int64_t e = 0; e < E; ++e)
          piece.data[static_cast<size_t>((b * step + t) * E + e)] = tgt.data[static_cast<size_t>((b * T + done + t) * E + e)];
    Tensor out = decoder.decode(backend, piece, kept, cache);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < step; ++t)
        for (int64_t e = 0; e < E; ++e) {
          const float got = out.data[static_cast<size_t>((b * step + t) * E + e)];
          const float want = full.data[static_cast<size_t>((b * T + done + t) * E + e)];
          ASSERT_NEAR(got, want, 1e-4f) << "sequence " << b << ", position " << done + t << ", feature " << e;
        }
    done += step;
  }
  EXPECT_EQ(cache.length(), T);
  EXPECT_TRUE(cache.kept_weights(backend)->values.contains("layers.1.multihead_attn.out_proj.weight"))
      << "the steps' weights were not kept";
  testing::expect_error<ShapeError>([&] { decoder.decode(backend, random_tensor({B, 1, E}, 5), kept, cache); },
                                    {"at most 9 positions (its capacity)"});
}

INSTANTIATE_TEST_SUITE_P(Memory, DecoderDecode,
                         ::testing::Combine(::testing::Values("gpu", "cpu"), ::testing::Values(1, 17, 113, 1000)),
                         [](const auto& p) { return std::get<0>(p.param) + "_S" + std::to_string(std::get<1>(p.param)); });

// ---- on values already on the backend ------------------------------------------------------------------
class DecoderOnTheBackend : public testing::GpuTest {};

// An encoder's output on the backend is the memory of a decoder and a decoder layer after it, as
// nn.Transformer chains them: nothing read back, only the masks sent, and the host's result.
TEST_F(DecoderOnTheBackend, ChainsFromAnEncoderWithoutTheHostAndEqualsTheForwardFromIt) {
  const TransformerEncoderLayerConfig c{.d_model = 12, .nhead = 3, .dim_feedforward = 7, .norm_first = true};
  TransformerEncoderLayer encoder(c, TransformerEncoderLayerWeights::random(c, 21));
  TransformerDecoder decoder({c, 2, true}, TransformerDecoderWeights::random({c, 2, true}, 22));
  TransformerDecoderLayer layer(c, TransformerDecoderLayerWeights::random(c, 23));
  const int64_t B = 2, T = 5, S = 17;
  const Tensor memory_padding = testing::random_bool_mask({B, S}, 0.3f, 24);
  const EncoderOptions encoding{.src_key_padding_mask = memory_padding};
  DecoderOptions batched;  // padding on both sides, causal
  batched.tgt_key_padding_mask = testing::random_bool_mask({B, T}, 0.2f, 25);
  batched.memory_key_padding_mask = memory_padding;
  batched.tgt_is_causal = true;
  DecoderOptions flat;  // unbatched: the two attention masks
  flat.tgt_mask = testing::random_bool_mask({T, T}, 0.2f, 26);
  flat.memory_mask = testing::random_bool_mask({T, S}, 0.3f, 27);
  for (const bool is_batched : {true, false}) {
    const Tensor src = random_tensor(is_batched ? Shape{B, S, 12} : Shape{S, 12}, 28);
    const Tensor tgt = random_tensor(is_batched ? Shape{B, T, 12} : Shape{T, 12}, 29);
    const DecoderOptions& o = is_batched ? batched : flat;
    const EncoderOptions e = is_batched ? encoding : EncoderOptions{};
    const Tensor memory = encoder.forward(cpu(), src, e);
    const Tensor want = layer.forward(cpu(), decoder.forward(cpu(), tgt, memory, o), memory, o);
    // the masks one forward sends: each of the 3 layers' two attentions its own, the encoder its padding
    uint64_t masks = 0;
    for (const auto* m : {&o.tgt_mask, &o.memory_mask, &o.tgt_key_padding_mask, &o.memory_key_padding_mask}) {
      if (*m) masks += 3 * (*m)->data.size() * sizeof(float);
    }
    if (e.src_key_padding_mask) masks += e.src_key_padding_mask->data.size() * sizeof(float);
    for (Backend* b : {static_cast<Backend*>(&cpu()), static_cast<Backend*>(&gpu())}) {
      encoder.keep_weights_on(*b);
      decoder.keep_weights_on(*b);
      layer.keep_weights_on(*b);
      const Value x = b->upload("src", src), y = b->upload("tgt", tgt);
      auto forward = [&] {
        const Value kept = encoder.forward(*b, x, e);
        return layer.forward(*b, decoder.forward(*b, y, kept, o), kept, o);
      };
      (void)forward();  // the weights go up
      const uint64_t up = b->uploaded_bytes(), down = b->downloaded_bytes();
      const Value out = forward();
      EXPECT_EQ(b->uploaded_bytes() - up, masks) << b->name() << ": only the masks cross";
      EXPECT_EQ(b->downloaded_bytes(), down) << b->name();
      EXPECT_EQ(out.shape, tgt.shape);
      EXPECT_TRUE(all_close(b->download(out), want, {.atol = 2e-5f, .rtol = 2e-5f})) << b->name();
    }
  }
}

TEST_F(DecoderOnTheBackend, TheTransformerToo) {
  const TransformerConfig c{.layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 6, .activation = Activation::gelu},
                            .num_encoder_layers = 2, .num_decoder_layers = 1};
  const Transformer transformer(c, TransformerWeights::random(c, 41));
  TransformerOptions batched{.src_key_padding_mask = testing::random_bool_mask({2, 9}, 0.3f, 42)};
  batched.memory_key_padding_mask = batched.src_key_padding_mask;
  batched.tgt_is_causal = true;
  const TransformerOptions flat{.src_mask = testing::random_bool_mask({9, 9}, 0.2f, 43),
                                .memory_mask = testing::random_bool_mask({4, 9}, 0.2f, 44)};
  for (const bool is_batched : {true, false}) {
    const Tensor src = random_tensor(is_batched ? Shape{2, 9, 8} : Shape{9, 8}, 45);
    const Tensor tgt = random_tensor(is_batched ? Shape{2, 4, 8} : Shape{4, 8}, 46);
    const TransformerOptions& o = is_batched ? batched : flat;
    const Tensor want = transformer.forward(cpu(), src, tgt, o);
    for (Backend* b : {static_cast<Backend*>(&cpu()), static_cast<Backend*>(&gpu())}) {
      const Value out = transformer.forward(*b, b->upload("src", src), b->upload("tgt", tgt), o);
      EXPECT_EQ(out.shape, tgt.shape);
      EXPECT_TRUE(all_close(b->download(out), want, {.atol = 2e-5f, .rtol = 2e-5f})) << b->name();
    }
  }
  const Value wide = cpu().upload("tgt", random_tensor({2, 4, 6}, 47));
  testing::expect_error<ShapeError>(
      [&] { (void)transformer.forward(cpu(), cpu().upload("src", random_tensor({2, 9, 8}, 48)), wide); },
      {"Transformer.forward: tgt (2, 4, 6) has 6 features but d_model=8"});
}

TEST_F(DecoderOnTheBackend, NamesWhatIsWrongWithTheValues) {
  const TransformerDecoderLayer layer({.d_model = 8, .nhead = 2, .dim_feedforward = 5});
  const Value tgt = cpu().upload("tgt", random_tensor({2, 3, 8}, 1));
  const Value wide = cpu().upload("memory", random_tensor({2, 4, 6}, 2));
  testing::expect_error<ShapeError>([&] { (void)(layer.forward(cpu(), tgt, wide)); },
                                    {"TransformerDecoderLayer.forward: memory (2, 4, 6) has 6 features but d_model=8"});
  const Value flat = cpu().upload("memory", random_tensor({4, 8}, 3));
  testing::expect_error<ShapeError>([&] { (void)(layer.forward(cpu(), tgt, flat)); },
                                    {"memory (4, 8) must be (B, S, E) like tgt (2, 3, 8)"});
  const Value memory = cpu().upload("memory", random_tensor({2, 4, 8}, 4));
  DecoderOptions options;
  options.memory_key_padding_mask = Tensor({2, 3}, DType::boolean);
  testing::expect_error<ShapeError>([&] { (void)(layer.forward(cpu(), tgt, memory, options)); },
                                    {"memory_key_padding_mask (2, 3) must be (B, S) = (2, 4)"});
  const Value ids = cpu().upload("ids", Tensor({2, 3, 8}, DType::int64));
  testing::expect_error<ShapeError>([&] { (void)(layer.forward(cpu(), ids, memory)); },
                                    {"TransformerDecoderLayer.forward: tgt (2, 3, 8) on the backend must be float32"});
}

// ---- errors --------------------------------------------------------------------------------------
class DecoderErrors : public testing::GpuTest {};

TEST_F(DecoderErrors, MemoryOfAnotherWidthIsAShapeErrorNamingIt) {
  TransformerDecoderLayer layer({.d_model = 8, .nhead = 2, .dim_feedforward = 12});
  testing::expect_error<ShapeError>(
      [&] { layer.forward(cpu(), random_tensor({1, 3, 8}, 1), random_tensor({1, 4, 6}, 2)); },
      {"TransformerDecoderLayer.forward", "memory (1, 4, 6) has 6 features but d_model=8"});
  testing::expect_error<ShapeError>(
      [&] { layer.forward(cpu(), random_tensor({2, 3, 8}, 1), random_tensor({1, 4, 8}, 2)); },
      {"must share the batch size"});
  DecoderOptions options;
  options.memory_key_padding_mask = Tensor({1, 3}, DType::boolean);
  testing::expect_error<ShapeError>(
      [&] { layer.forward(cpu(), random_tensor({1, 3, 8}, 1), random_tensor({1, 4, 8}, 2), options); },
      {"memory_key_padding_mask (1, 3) must be (B, S) = (1, 4)"});
}

TEST_F(DecoderErrors, AStateDictMissingADecoderKeyIsAFileErrorNamingIt) {
  io::Safetensors file = io::read_safetensors(kGolden / "decoder2_post_gelu_norm_padding" / "weights.safetensors");
  file.tensors.erase("layers.1.multihead_attn.out_proj.weight");
  testing::expect_error<FileError>([&] { io::decoder_from_state_dict(file, 0, "w.safetensors"); },
                                   {"w.safetensors", "layers.1.multihead_attn.out_proj.weight"});
  io::Safetensors encoder = io::read_safetensors(fs::path(VKATTN_GOLDEN_ENCODER_DIR) / "layer_post_relu" /
                                                 "weights.safetensors");
  testing::expect_error<FileError>([&] { io::decoder_from_state_dict(encoder, 0, "e.safetensors"); },
                                   {"e.safetensors", "multihead_attn"});
  io::Safetensors transformer =
      io::read_safetensors(kGolden / "transformer_pre_gelu" / "weights.safetensors");
  transformer.tensors.erase("decoder.norm.weight");
  testing::expect_error<FileError>([&] { io::transformer_from_state_dict(transformer, 0, "t.safetensors"); },
                                   {"t.safetensors", "decoder.norm.weight"});
}

}  // namespace
}  // namespace vkattn
