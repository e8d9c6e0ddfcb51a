// Checkpoint folders as the Hugging Face hub lays them out: models/tiny_gpt2 (GPT-2's
// architecture) and models/tiny_llama (Llama's, BF16, a tokenizer.json), each saved as
// save_pretrained saves it, against torch's own logits and greedy tokens, on the GPU and the
// reference; the same weights under other names, in shards, in BF16, as Qwen2 and Mistral read
// them; and a one-line error naming the file and tensor for each way a folder can be wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/checkpoint_folder.h"
#include "tests/support/expect_error.h"
#include "tests/support/gpu.h"
#include "tests/support/safetensors_writer.h"
#include "vkattn/errors.h"
#include "vkattn/io/pretrained.h"
#include "vkattn/io/safetensors.h"
#include "vkattn/modules/causal_lm.h"
#include "vkattn/modules/generation.h"
#include "vkattn/modules/llama.h"

namespace vkattn {
namespace {

using nlohmann::json;
using testing::copy_of;
using testing::expect_error;
using testing::rewrite_config;
namespace fs = std::filesystem;

const fs::path kTinyGpt2 = fs::path(VKATTN_SOURCE_DIR) / "models/tiny_gpt2";
const fs::path kTinyLlama = fs::path(VKATTN_SOURCE_DIR) / "models/tiny_llama";

json expected(const fs::path& model = kTinyGpt2) { return testing::read_json(model / "expected.json"); }

fs::path copy_of_tiny_gpt2(const std::string& name) { return copy_of(kTinyGpt2, name); }

std::map<std::string, Tensor> tensors_of(const fs::path& model) {
  return io::read_safetensors(model / "model.safetensors").tensors;
}
std::map<std::string, Tensor> tiny_gpt2_tensors() { return tensors_of(kTinyGpt2); }

// The logits of the prompt's last position.
std::vector<float> last_logits(Backend& backend, const LanguageModel& model, const std::vector<int64_t>& ids) {
  Tensor input({1, static_cast<int64_t>(ids.size())}, std::vector<float>(ids.begin(), ids.end()), DType::int64);
  Tensor logits = model.forward(backend, input);
  const int64_t V = logits.dim(2);
  return std::vector<float>(logits.data.end() - V, logits.data.end());
}

std::vector<float> last_logits(Backend& backend, const io::Pretrained& p, const std::vector<int64_t>& ids) {
  return last_logits(backend, *p.model, ids);
}

// The greedy tokens after `prompt`, one at a time through the KV cache.
std::vector<int64_t> greedy(Backend& backend, const LanguageModel& model, const std::vector<int64_t>& prompt, size_t n) {
  return Generation(backend, model, prompt, {.max_new_tokens = static_cast<int64_t>(n)}).run();
}

float max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

class Pretrained : public testing::GpuTest {};

TEST_F(Pretrained, TinyGpt2MatchesTorchsLogitsAndGreedyTokensOnBothBackends) {
  const io::Pretrained p = io::load_pretrained(kTinyGpt2);
  const json e = expected();
  EXPECT_EQ(p.architecture, "GPT2LMHeadModel");
  EXPECT_EQ(p.stored_dtype, "F32");
  EXPECT_EQ(dynamic_cast<const CausalLM&>(*p.model).config().layer.activation, Activation::gelu_tanh);
  EXPECT_EQ(p.eos_token_id, p.tokenizer->token_id("<|endoftext|>"));
  const auto prompt = p.tokenizer->encode(e["prompt"].get<std::string>());
  ASSERT_EQ(prompt, e["prompt_ids"].get<std::vector<int64_t>>());  // the C++ BPE on merges learnt in Python
  const auto torch_logits = e["last_logits"].get<std::vector<float>>();
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    EXPECT_LT(max_difference(last_logits(*backend, p, prompt), torch_logits), 1e-4f) << backend->name();
  }
  // greedy with the KV cache: torch's tokens, one at a time
  const auto want = e["tokens"].get<std::vector<int64_t>>();
  const auto got = greedy(gpu(), *p.model, prompt, want.size());
  EXPECT_EQ(got, want);
  EXPECT_EQ(p.tokenizer->decode(got), e["text"].get<std::string>());
}

TEST_F(Pretrained, GPT2ModelsNamesShardsAndBF16AreTheSameModel) {
  const io::Pretrained reference = io::load_pretrained(kTinyGpt2);
  const std::vector<int64_t> ids = reference.tokenizer->encode("Alice was");
  const auto logits = last_logits(cpu(), reference, ids);

  // the hub's gpt2 folder: GPT2Model's names (no "transformer."), the causal mask as a buffer
  auto bare = copy_of_tiny_gpt2("bare");
  std::map<std::string, Tensor> renamed;
  for (auto& [name, t] : tiny_gpt2_tensors()) renamed.emplace(name.substr(std::string("transformer.").size()), t);
  renamed.emplace("h.0.attn.bias", Tensor({1, 1, 4, 4}));
  testing::write_safetensors(bare / "model.safetensors", renamed);
  EXPECT_EQ(last_logits(cpu(), io::load_pretrained(bare), ids), logits);

  // two shards and their index
  auto sharded = copy_of_tiny_gpt2("sharded");
  fs::remove(sharded / "model.safetensors");
  std::map<std::string, Tensor> first, second;
  json map;
  for (auto& [name, t] : tiny_gpt2_tensors()) {
    const bool in_first = name.find(".h.1.") == std::string::npos;
    (in_first ? first : second).emplace(name, t);
    map[name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  testing::write_safetensors(sharded / "model-00001-of-00002.safetensors", first);
  testing::write_safetensors(sharded / "model-00002-of-00002.safetensors", second);
  std::ofstream(sharded / "model.safetensors.index.json") << json{{"metadata", json::object()}, {"weight_map", map}}.dump();
  EXPECT_EQ(last_logits(cpu(), io::load_pretrained(sharded), ids), logits);

  // BF16: half the bytes, logits within bfloat16's rounding of the weights
  auto bf16 = copy_of_tiny_gpt2("bf16");
  testing::write_safetensors(bf16 / "model.safetensors", tiny_gpt2_tensors(), "BF16");
  const io::Pretrained half = io::load_pretrained(bf16);
  EXPECT_EQ(half.stored_dtype, "BF16");
  EXPECT_EQ(half.stored_bytes * 2, reference.stored_bytes);
  const float difference = max_difference(last_logits(gpu(), half, ids), logits);
  EXPECT_GT(difference, 0.0f);  // rounded, so not the same numbers
  EXPECT_LT(difference, 0.25f);
}

// tiny_llama: grouped-query attention with RoPE, RMSNorm, SwiGLU, BF16 weights, tokenizer.json
TEST_F(Pretrained, TinyLlamaMatchesTorchsLogitsAndGreedyTokensOnBothBackends) {
  const io::Pretrained p = io::load_pretrained(kTinyLlama);
  const json e = expected(kTinyLlama);
  EXPECT_EQ(p.architecture, "LlamaForCausalLM");
  EXPECT_EQ(p.stored_dtype, "BF16");
  const auto& config = dynamic_cast<const Llama&>(*p.model).config();
  EXPECT_EQ(config.attention.kv_heads(), 2);
  EXPECT_FALSE(config.tie_word_embeddings);
  const auto prompt = p.tokenizer->encode(e["prompt"].get<std::string>());
  ASSERT_EQ(prompt, e["prompt_ids"].get<std::vector<int64_t>>());
  const auto torch_logits = e["last_logits"].get<std::vector<float>>();
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    EXPECT_LT(max_difference(last_logits(*backend, p, prompt), torch_logits), 1e-4f) << backend->name();
  }
  const auto want = e["tokens"].get<std::vector<int64_t>>();
  EXPECT_EQ(greedy(gpu(), *p.model, prompt, want.size()), want);
}

// logits_to_keep (Hugging Face's): the last n positions' logits alone, the final norm and lm_head
// run on those rows only — GPT-2's recipe (CausalLM) and Llama's, through forward and decode, on
// both backends, two sequences at once; a negative n is named; and generation reads back the
// next token's logits alone, V floats a pass, where it read (1, T, V) for a prompt of T before.
TEST_F(Pretrained, LogitsToKeepAreTheLastPositionsOfTheFullForward) {
  for (const fs::path& folder : {kTinyGpt2, kTinyLlama}) {
    SCOPED_TRACE(folder.filename().string());
    const io::Pretrained p = io::load_pretrained(folder);
    const LanguageModel& model = *p.model;
    const auto prompt = p.tokenizer->encode("Alice was beginning to get very tired");
    const int64_t B = 2, T = static_cast<int64_t>(prompt.size()), V = model.vocab_size();
    ASSERT_GT(T, 4);
    std::vector<float> rows(prompt.begin(), prompt.end());
    rows.insert(rows.end(), prompt.rbegin(), prompt.rend());  // the second sequence: the prompt reversed
    const Tensor ids({B, T}, rows, DType::int64);
    // (B, T, V) -> its last n positions (B, n, V)
    auto last = [&](const Tensor& logits, int64_t n) {
      Tensor out({B, n, V});
      for (int64_t b = 0; b < B; ++b) {
        std::copy_n(logits.data.begin() + (b * T + T - n) * V, n * V, out.data.begin() + b * n * V);
      }
      return out;
    };
    for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
      SCOPED_TRACE(backend->name());
      const Tensor full = model.forward(*backend, ids);       // (B, T, V)
      for (int64_t n : {int64_t{1}, int64_t{3}, T, T + 4}) {  // n >= T: every position, as x[:, -n:]
        const int64_t kept = std::min(n, T);
        const Tensor logits = model.forward(*backend, ids, {}, AttentionPath::automatic, n);
        ASSERT_EQ(logits.shape, (Shape{B, kept, V})) << "n = " << n;
        EXPECT_LT(max_difference(logits.data, last(full, kept).data), 1e-5f) << "n = " << n;
      }
      KVCache cache = model.make_cache(*backend, B, T);
      const Tensor decoded = model.decode(*backend, ids, cache, {.logits_to_keep = 2});  // (B, 2, V)
      ASSERT_EQ(decoded.shape, (Shape{B, 2, V}));
      EXPECT_LT(max_difference(decoded.data, last(full, 2).data), 1e-5f);
      const std::string who = p.architecture == "GPT2LMHeadModel" ? "CausalLM.forward" : "Llama.forward";
      expect_error<ConfigError>([&] { model.forward(*backend, ids, {}, AttentionPath::automatic, -1); },
                                {who + ": logits_to_keep=-1 must be >= 0 (n: the last n positions' logits; 0: "
                                       "every position's)"});
    }
    const uint64_t before = gpu().downloaded_bytes();
    const auto tokens = Generation(gpu(), model, prompt, {.max_new_tokens = 3}).run();
    ASSERT_EQ(tokens.size(), 3u);  // three passes: the prompt's and two tokens'; the last needs no logits
    EXPECT_EQ(gpu().downloaded_bytes() - before, uint64_t(3 * V) * sizeof(float));
  }
}

// forward_on_device: the forward's pass with its logits left on the backend, for GPT-2's recipe
// and Llama's on both backends, two sequences with padding and logits_to_keep: read back, the
// forward's bit for bit; nothing read back before; its errors named as its own.
TEST_F(Pretrained, LogitsLeftOnTheDeviceAreTheForwardsOnceReadBack) {
  for (const fs::path& folder : {kTinyGpt2, kTinyLlama}) {
    SCOPED_TRACE(folder.filename().string());
    io::Pretrained p = io::load_pretrained(folder);
    LanguageModel& model = *p.model;
    const auto prompt = p.tokenizer->encode("Alice was beginning to get very tired");
    const int64_t B = 2, T = static_cast<int64_t>(prompt.size()), V = model.vocab_size();
    std::vector<float> rows(prompt.begin(), prompt.end());
    rows.insert(rows.end(), prompt.rbegin(), prompt.rend());
    const Tensor ids({B, T}, rows, DType::int64);
    Tensor padding({B, T}, std::vector<float>(size_t(B * T), 0.0f), DType::boolean);
    padding.data[size_t(B * T - 1)] = padding.data[size_t(B * T - 2)] = 1.0f;  // the second's last two
    for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
      SCOPED_TRACE(backend->name());
      model.keep_weights_on(*backend);
      for (int64_t n : {int64_t{0}, int64_t{1}}) {
        const Tensor want = model.forward(*backend, ids, padding, AttentionPath::automatic, n);
        const uint64_t down = backend->downloaded_bytes();
        const Value logits = model.forward_on_device(*backend, ids, padding, AttentionPath::automatic, n);
        EXPECT_EQ(backend->downloaded_bytes(), down) << "nothing is read back";
        EXPECT_EQ(logits.shape, (Shape{B, n ? n : T, V}));
        EXPECT_EQ(backend->download(logits).data, want.data) << "n = " << n;
      }
      const std::string who = p.architecture == "GPT2LMHeadModel" ? "CausalLM" : "Llama";
      expect_error<ConfigError>([&] { model.forward_on_device(*backend, ids, {}, AttentionPath::automatic, -1); },
                                {who + ".forward_on_device: logits_to_keep=-1 must be >= 0"});
    }
  }
}

// tiny_llama's BF16 matrices stay BF16 on the GPU, 2 bytes each (its norms' vectors float32), and
// give, widened by the shaders, the logits the reference gives from their float32 copy; the
// reference keeps every weight float32.
TEST_F(Pretrained, ASixteenBitCheckpointsMatricesStaySixteenBitOnTheGpu) {
  const io::Pretrained p = io::load_pretrained(kTinyLlama);
  const auto ids = p.tokenizer->encode("Alice was beginning to get");
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    Generation generation(*backend, *p.model, ids, {.max_new_tokens = 1});
    generation.prompt_pass();
    const KeptWeights& kept = *generation.cache()->kept_weights(*backend);
    uint64_t matrices = 0, vectors = 0;
    for (const auto& [name, value] : kept.values) {
      const bool matrix = value.rank() == 2;
      (matrix ? matrices : vectors) += uint64_t(element_count(value.shape));
      EXPECT_EQ(value.narrow, matrix && backend == &gpu() ? Narrow::bfloat16 : Narrow::none) << name;
    }
    EXPECT_EQ(matrices + vectors, uint64_t(p.model->parameter_count()));
    EXPECT_EQ(kept.bytes(), backend == &gpu() ? matrices * 2 + vectors * 4 : (matrices + vectors) * 4);
  }
  EXPECT_LT(max_difference(last_logits(gpu(), p, ids), last_logits(cpu(), p, ids)), 1e-4f);
}

// weights_dtype bfloat16 or float16: an F32 checkpoint rounded as it is read gives the model its
// BF16 or F16 copy is (written by the safetensors writer, rounding to nearest even too), bit for
// bit on the GPU, its matrices kept 16-bit there.
TEST_F(Pretrained, AnF32CheckpointRoundedAsItIsReadIsItsSixteenBitCopy) {
  const io::Pretrained as_is = io::load_pretrained(kTinyGpt2);
  const auto ids = as_is.tokenizer->encode("Alice was beginning");
  for (auto [dtype, narrow] : {std::pair{"BF16", Narrow::bfloat16}, {"F16", Narrow::float16}}) {
    SCOPED_TRACE(dtype);
    auto copy = copy_of_tiny_gpt2(std::string(dtype) + "_copy");
    testing::write_safetensors(copy / "model.safetensors", tiny_gpt2_tensors(), dtype);
    const io::Pretrained rounded = io::load_pretrained(kTinyGpt2, {.weights_dtype = narrow});
    const io::Pretrained stored = io::load_pretrained(copy);
    EXPECT_EQ(rounded.stored_dtype, "F32");  // what the files hold
    EXPECT_EQ(stored.stored_dtype, dtype);
    const auto logits = last_logits(gpu(), rounded, ids);
    EXPECT_EQ(logits, last_logits(gpu(), stored, ids));
    EXPECT_GT(max_difference(logits, last_logits(gpu(), as_is, ids)), 0.0f);  // rounded: other numbers
    Generation generation(gpu(), *rounded.model, ids, {.max_new_tokens = 1});
    generation.prompt_pass();
    EXPECT_LT(generation.cache()->kept_weights(gpu())->bytes(),
              uint64_t(rounded.model->parameter_count()) * 4 * 55 / 100);
  }
}

// float16 holds at most 65504: a weight past it is named, not made infinite (torch's .half() would)
TEST_F(Pretrained, AWeightPastFloat16sRangeIsNamed) {
  auto big = copy_of_tiny_gpt2("past_float16");
  auto tensors = tiny_gpt2_tensors();
  tensors.at("transformer.h.1.mlp.c_fc.weight").data[7] = 70000.0f;
  testing::write_safetensors(big / "model.safetensors", tensors);
  expect_error<ConfigError>([&] { io::load_pretrained(big, {.weights_dtype = Narrow::float16}); },
                            {"weights_dtype float16: transformer.h.1.mlp.c_fc.weight holds 70000.000000, past "
                             "float16's largest, 65504 (bfloat16 keeps float32's range)"});
  EXPECT_NO_THROW(io::load_pretrained(big, {.weights_dtype = Narrow::bfloat16}));
}

// The same weights as Qwen2 reads them (q/k/v biases, here zero), as Mistral with a window longer
// than the text, and tied (lm_head from embed_tokens): each the logits it must give.
TEST_F(Pretrained, LlamaVariantsReadTheirSettings) {
  const io::Pretrained llama = io::load_pretrained(kTinyLlama);
  const auto ids = llama.tokenizer->encode("Alice was beginning to get");
  const auto logits = last_logits(cpu(), llama, ids);

  auto qwen2 = copy_of(kTinyLlama, "qwen2");
  rewrite_config(qwen2, [](json& c) { c["architectures"] = {"Qwen2ForCausalLM"}, c["model_type"] = "qwen2"; });
  auto weights = tensors_of(kTinyLlama);
  for (int layer : {0, 1}) {
    for (const auto& [proj, size] : {std::pair{"q_proj", 64}, {"k_proj", 32}, {"v_proj", 32}}) {
      weights["model.layers." + std::to_string(layer) + ".self_attn." + proj + ".bias"] = Tensor({size});
    }
  }
  testing::write_safetensors(qwen2 / "model.safetensors", weights);
  const io::Pretrained q = io::load_pretrained(qwen2);
  EXPECT_TRUE(dynamic_cast<const Llama&>(*q.model).config().attention.attention_bias);
  EXPECT_FALSE(dynamic_cast<const Llama&>(*q.model).config().attention.o_proj_bias);
  EXPECT_LT(max_difference(last_logits(cpu(), q, ids), logits), 1e-6f);
  // Qwen2's window only from max_window_layers on (here past the last layer: none), or where
  // layer_types says; torch holds the windowed layers' logits (test_pretrained.py)
  rewrite_config(qwen2, [](json& c) {
    c["use_sliding_window"] = true, c["sliding_window"] = 2, c["max_window_layers"] = 2;
  });
  const io::Pretrained unwindowed = io::load_pretrained(qwen2);
  auto windowed = [&](const std::string& part) {
    return io::load_pretrained(qwen2).model->describe().find(part) != std::string::npos;
  };
  EXPECT_TRUE(windowed("window 2 in no layer"));
  EXPECT_LT(max_difference(last_logits(cpu(), unwindowed, ids), logits), 1e-6f);
  rewrite_config(qwen2, [](json& c) { c["max_window_layers"] = 0; });
  EXPECT_TRUE(windowed("window 2,"));  // in every layer
  rewrite_config(qwen2, [](json& c) { c["max_window_layers"] = -1; });
  expect_error<ConfigError>([&] { io::load_pretrained(qwen2); },
                            {"config.json", "max_window_layers is -1, not an integer >= 0"});
  rewrite_config(qwen2, [](json& c) { c.erase("max_window_layers"), c["layer_types"] = {"full_attention"}; });
  expect_error<ConfigError>([&] { io::load_pretrained(qwen2); },
                            {"config.json", R"(layer_types ["full_attention"] is not a list of num_hidden_layers 2)"});
  rewrite_config(qwen2, [](json& c) { c["layer_types"] = {"full_attention", "chunked_attention"}; });
  expect_error<ConfigError>([&] { io::load_pretrained(qwen2); },
                            {R"(layer_types[1] is "chunked_attention", not "sliding_attention" or "full_attention")"});
  rewrite_config(qwen2, [](json& c) { c["layer_types"] = {"full_attention", "sliding_attention"}; });
  EXPECT_TRUE(windowed("window 2 in layer 1,"));
  rewrite_config(qwen2, [](json& c) { c.erase("layer_types"), c["use_sliding_window"] = false; });
  const auto& read = dynamic_cast<const Llama&>(*llama.model);
  LlamaConfig config = read.config();
  config.windowed_layers = {true};
  expect_error<ConfigError>([&] { Llama(config, read.weights()); }, {"windowed_layers has 1 entries for num_layers=2"});
  config.windowed_layers = {false, true};
  expect_error<ConfigError>([&] { Llama(config, read.weights()); }, {"attention.sliding_window is 0 (none)"});
  // Qwen2's q/k/v_proj always have biases: Llama's file, read as Qwen2's, lacks them
  fs::copy_file(kTinyLlama / "model.safetensors", qwen2 / "model.safetensors", fs::copy_options::overwrite_existing);
  expect_error<FileError>([&] { io::load_pretrained(qwen2); }, {"missing tensor 'layers.0.self_attn.q_proj.bias'"});

  auto mistral = copy_of(kTinyLlama, "mistral");
  rewrite_config(mistral, [](json& c) { c["architectures"] = {"MistralForCausalLM"}, c["sliding_window"] = 64; });
  const io::Pretrained m = io::load_pretrained(mistral);
  EXPECT_EQ(dynamic_cast<const Llama&>(*m.model).config().attention.sliding_window, 64);
  EXPECT_LT(max_difference(last_logits(gpu(), m, ids), logits), 1e-4f);
  rewrite_config(mistral, [](json& c) { c["sliding_window"] = 2; });  // each query sees 2 keys: other logits
  EXPECT_GT(max_difference(last_logits(cpu(), io::load_pretrained(mistral), ids), logits), 1e-2f);

  // Phi-3: q/k/v_proj packed in qkv_proj, gate/up_proj in gate_up_proj, read apart (torch holds
  // the order, and partial_rotary_factor, in test_pretrained.py)
  auto phi3 = copy_of(kTinyLlama, "phi3");
  rewrite_config(phi3, [](json& c) { c["architectures"] = {"Phi3ForCausalLM"}, c["model_type"] = "phi3"; });
  weights = tensors_of(kTinyLlama);
  for (const std::string n : {"model.layers.0.", "model.layers.1."}) {
    auto packed = [&](const std::string& name, std::initializer_list<std::string> parts) {
      std::vector<Tensor> taken;
      for (const auto& part : parts) taken.push_back(weights.extract(n + part + ".weight").mapped());
      weights[n + name + ".weight"] = taken.size() == 3 ? stack_rows({&taken[0], &taken[1], &taken[2]})
                                                        : stack_rows({&taken[0], &taken[1]});
    };
    packed("self_attn.qkv_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"});
    packed("mlp.gate_up_proj", {"mlp.gate_proj", "mlp.up_proj"});
  }
  testing::write_safetensors(phi3 / "model.safetensors", weights);
  EXPECT_EQ(last_logits(cpu(), io::load_pretrained(phi3), ids), logits);
  rewrite_config(phi3, [](json& c) { c["partial_rotary_factor"] = 0.1; });  // 1.6 of 16 features
  expect_error<ConfigError>([&] { io::load_pretrained(phi3); },
                            {"partial_rotary_factor 0.100000 must be in (0, 1] and give an even number of features of "
                             "head_dim 16 to turn"});
  rewrite_config(phi3, [](json& c) { c["partial_rotary_factor"] = 0.05; });  // none of 16: not "all", as 0 says
  expect_error<ConfigError>([&] { io::load_pretrained(phi3); }, {"partial_rotary_factor 0.050000 must be in (0, 1]"});
  rewrite_config(phi3, [](json& c) { c.erase("partial_rotary_factor"); });
  fs::copy_file(kTinyLlama / "model.safetensors", phi3 / "model.safetensors", fs::copy_options::overwrite_existing);
  expect_error<FileError>([&] { io::load_pretrained(phi3); },
                          {"missing tensor 'layers.0.self_attn.qkv_proj.weight'", "((H + 2·H_kv)·d, E) = (128, 64)"});

  auto tied = copy_of(kTinyLlama, "tied");
  rewrite_config(tied, [](json& c) { c["tie_word_embeddings"] = true; });
  weights = tensors_of(kTinyLlama);
  weights.erase("lm_head.weight");
  testing::write_safetensors(tied / "model.safetensors", weights);
  const io::Pretrained t = io::load_pretrained(tied);
  weights["lm_head.weight"] = weights["model.embed_tokens.weight"];  // untied, the same rows
  auto untied = copy_of(kTinyLlama, "untied");
  testing::write_safetensors(untied / "model.safetensors", weights);
  EXPECT_EQ(last_logits(cpu(), t, ids), last_logits(cpu(), io::load_pretrained(untied), ids));
  EXPECT_EQ(t.model->parameter_count() + 513 * 64, llama.model->parameter_count());
}

// Qwen3: Llama's recipe with each head's q and k RMS-normalised (q_norm, k_norm) before RoPE. Here
// tiny_llama's weights with the norms of the golden fixture qwen3_qk_norm (d 16, as here; its
// attention is held to torch there): read into the attention's own, q's and k's apart, with
// rms_norm_eps, they give the logits of the Llama built with them, not those without them.
TEST_F(Pretrained, Qwen3ReadsItsQkNorms) {
  const io::Pretrained llama = io::load_pretrained(kTinyLlama);
  const auto ids = llama.tokenizer->encode("Alice was beginning to get");
  auto norms = io::read_safetensors(fs::path(VKATTN_SOURCE_DIR) / "tests/golden_grouped_query/qwen3_qk_norm" /
                                    "weights.safetensors").tensors;
  auto qwen3 = copy_of(kTinyLlama, "qwen3");
  rewrite_config(qwen3, [](json& c) { c["architectures"] = {"Qwen3ForCausalLM"}, c["model_type"] = "qwen3"; });
  auto tensors = tensors_of(kTinyLlama);
  LlamaConfig config = dynamic_cast<const Llama&>(*llama.model).config();
  LlamaWeights weights = dynamic_cast<const Llama&>(*llama.model).weights();
  config.attention.qk_norm = true;
  config.attention.qk_norm_eps = config.rms_norm_eps;
  for (int layer : {0, 1}) {
    const std::string n = "model.layers." + std::to_string(layer) + ".self_attn.";
    tensors[n + "q_norm.weight"] = *(weights.layers[layer].self_attn.q_norm_weight = norms.at("q_norm.weight"));
    tensors[n + "k_norm.weight"] = *(weights.layers[layer].self_attn.k_norm_weight = norms.at("k_norm.weight"));
  }
  testing::write_safetensors(qwen3 / "model.safetensors", tensors);
  const io::Pretrained q = io::load_pretrained(qwen3);
  const auto& attention = dynamic_cast<const Llama&>(*q.model).config().attention;
  EXPECT_TRUE(attention.qk_norm);
  EXPECT_EQ(attention.qk_norm_eps, 1e-5f);  // tiny_llama's rms_norm_eps
  EXPECT_EQ(q.model->parameter_count(), llama.model->parameter_count() + 2 * 2 * 16);
  const auto logits = last_logits(gpu(), q, ids);
  EXPECT_LT(max_difference(logits, last_logits(cpu(), Llama(config, weights), ids)), 1e-4f);
  EXPECT_GT(max_difference(logits, last_logits(cpu(), llama, ids)), 1e-2f);
  // Llama's file read as Qwen3's lacks them
  fs::copy_file(kTinyLlama / "model.safetensors", qwen3 / "model.safetensors", fs::copy_options::overwrite_existing);
  expect_error<FileError>([&] { io::load_pretrained(qwen3); },
                          {"missing tensor 'layers.0.self_attn.q_norm.weight'", "(head_dim,)"});
}

// Gemma: Llama's recipe with the embeddings times √E, RMSNorms that scale by 1 + weight, a GeGLU
// (hidden_activation's gelu_pytorch_tanh over hidden_act's gelu, as Hugging Face's GemmaMLP) and
// lm_head tied to embed_tokens (Gemma's default). Here tiny_llama's weights saved as Gemma's: read
// with each norm 1 + its file's, they give the logits of the Llama built so, not tiny_llama's;
// without hidden_activation, hidden_act's exact gelu; model_type alone names it too.
TEST_F(Pretrained, GemmaReadsItsScaledEmbeddingsUnitOffsetNormsAndGeGLU) {
  const io::Pretrained llama = io::load_pretrained(kTinyLlama);
  const auto ids = llama.tokenizer->encode("Alice was beginning to get");
  auto gemma = copy_of(kTinyLlama, "gemma");
  rewrite_config(gemma, [](json& c) {
    c["architectures"] = {"GemmaForCausalLM"}, c["model_type"] = "gemma", c["hidden_act"] = "gelu";
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c.erase("tie_word_embeddings");
  });
  auto tensors = tensors_of(kTinyLlama);
  tensors.erase("lm_head.weight");
  testing::write_safetensors(gemma / "model.safetensors", tensors);
  LlamaConfig config = dynamic_cast<const Llama&>(*llama.model).config();
  LlamaWeights weights = dynamic_cast<const Llama&>(*llama.model).weights();
  config.tie_word_embeddings = true;
  config.hidden_act = ActivationStep::gelu_tanh;
  config.embedding_scale = 8.0f;  // √64
  weights.lm_head = Tensor();
  auto plus_one = [](Tensor t) {
    for (float& v : t.data) v += 1.0f;
    return t;
  };
  weights.norm = plus_one(weights.norm);
  for (auto& l : weights.layers) {
    l.input_layernorm = plus_one(l.input_layernorm);
    l.post_attention_layernorm = plus_one(l.post_attention_layernorm);
  }
  const io::Pretrained g = io::load_pretrained(gemma);
  const auto& read = dynamic_cast<const Llama&>(*g.model);
  EXPECT_EQ(read.config().hidden_act, ActivationStep::gelu_tanh);
  EXPECT_EQ(read.config().embedding_scale, 8.0f);
  EXPECT_TRUE(read.config().tie_word_embeddings);
  EXPECT_EQ(read.weights().norm.data, weights.norm.data);
  EXPECT_EQ(read.weights().layers[1].post_attention_layernorm.data, weights.layers[1].post_attention_layernorm.data);
  const auto logits = last_logits(gpu(), g, ids);
  EXPECT_LT(max_difference(logits, last_logits(cpu(), Llama(config, weights), ids)), 1e-4f);
  EXPECT_GT(max_difference(logits, last_logits(cpu(), llama, ids)), 1e-2f);
  EXPECT_NE(g.model->describe().find("GeGLU (tanh) 64 -> 172 -> 64; lm_head tied to embed_tokens;\n"
                                     "  embeddings times 8"), std::string::npos) << g.model->describe();
  rewrite_config(gemma, [](json& c) { c.erase("hidden_activation"), c.erase("architectures"); });
  EXPECT_EQ(dynamic_cast<const Llama&>(*io::load_pretrained(gemma).model).config().hidden_act, ActivationStep::gelu);
}

TEST(PretrainedFolders, WhatIsWrongIsNamed) {
  expect_error<FileError>([] { io::load_pretrained("/nonexistent/vkattn"); }, {"/nonexistent/vkattn", "not a folder"});

  auto t5 = copy_of_tiny_gpt2("t5");
  rewrite_config(t5, [](json& c) { c["architectures"] = {"T5ForConditionalGeneration"}, c["model_type"] = "t5"; });
  expect_error<ConfigError>([&] { io::load_pretrained(t5); },
                            {"config.json", "T5ForConditionalGeneration", "t5", "GPT2LMHeadModel", "BertModel"});

  auto config = copy_of_tiny_gpt2("config");
  rewrite_config(config, [](json& c) { c.erase("n_embd"); });
  expect_error<ConfigError>([&] { io::load_pretrained(config); }, {"config.json", "no n_embd"});
  rewrite_config(config, [](json& c) { c["n_embd"] = 64, c["activation_function"] = "swish"; });
  expect_error<ConfigError>([&] { io::load_pretrained(config); }, {"activation_function 'swish'"});
  rewrite_config(config, [](json& c) { c["activation_function"] = "gelu_new", c["scale_attn_by_inverse_layer_idx"] = true; });
  expect_error<ConfigError>([&] { io::load_pretrained(config); }, {"scale_attn_by_inverse_layer_idx"});

  auto tensors = copy_of_tiny_gpt2("tensors");
  auto weights = tiny_gpt2_tensors();
  weights.erase("transformer.h.1.mlp.c_fc.bias");
  testing::write_safetensors(tensors / "model.safetensors", weights);
  expect_error<FileError>([&] { io::load_pretrained(tensors); }, {"missing tensor 'h.1.mlp.c_fc.bias'", "(F,) = (256,)"});
  weights = tiny_gpt2_tensors();
  weights["transformer.h.0.attn.c_attn.weight"] = Tensor({192, 64});  // stored (out, in), as a Linear's
  testing::write_safetensors(tensors / "model.safetensors", weights);
  expect_error<FileError>([&] { io::load_pretrained(tensors); }, {"'h.0.attn.c_attn.weight'", "(192, 64)", "(E, 3·E) = (64, 192)"});
  weights = tiny_gpt2_tensors();
  weights["transformer.h.2.ln_1.weight"] = Tensor({64});
  testing::write_safetensors(tensors / "model.safetensors", weights);
  expect_error<FileError>([&] { io::load_pretrained(tensors); }, {"unexpected tensor 'h.2.ln_1.weight'", "2 layers"});

  auto scaled = copy_of(kTinyLlama, "scaled");
  rewrite_config(scaled, [](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}}; });
  expect_error<ConfigError>([&] { io::load_pretrained(scaled); }, {"config.json", "rope_scaling of type 'yarn'", "not supported"});
  rewrite_config(scaled, [](json& c) { c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; });
  expect_error<ConfigError>([&] { io::load_pretrained(scaled); }, {"config.json", "rope_scaling's low_freq_factor is missing"});
  rewrite_config(scaled, [](json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 0.5}}; });
  expect_error<ConfigError>([&] { io::load_pretrained(scaled); }, {"config.json", "factor must be >= 1"});
  rewrite_config(scaled, [](json& c) { c.erase("rope_scaling"), c["hidden_act"] = "relu"; });
  expect_error<ConfigError>([&] { io::load_pretrained(scaled); },
                            {"hidden_act 'relu' is not one vkattn runs (silu, gelu_pytorch_tanh, gelu)"});
  rewrite_config(scaled, [](json& c) { c["hidden_act"] = "silu", c["num_key_value_heads"] = 3; });
  expect_error<ConfigError>([&] { io::load_pretrained(scaled); }, {"num_attention_heads 4 is not a multiple of num_key_value_heads 3"});
  rewrite_config(scaled, [](json& c) { c["num_key_value_heads"] = 4; });  // the file's k_proj has 2 heads
  expect_error<FileError>([&] { io::load_pretrained(scaled); }, {"'layers.0.self_attn.k_proj.weight'", "(32, 64)", "(H_kv·d, E) = (64, 64)"});

  auto pickle = copy_of_tiny_gpt2("pickle");
  fs::rename(pickle / "model.safetensors", pickle / "pytorch_model.bin");
  expect_error<FileError>([&] { io::load_pretrained(pickle); }, {"pytorch_model.bin", "model.safetensors"});

  auto shards = copy_of_tiny_gpt2("shards");
  fs::rename(shards / "model.safetensors", shards / "model-00001-of-00001.safetensors");
  json map;
  for (const auto& [name, t] : tiny_gpt2_tensors()) map[name] = "model-00001-of-00001.safetensors";
  map["transformer.extra"] = "model-00001-of-00001.safetensors";
  std::ofstream(shards / "model.safetensors.index.json") << json{{"weight_map", map}}.dump();
  expect_error<FileError>([&] { io::load_pretrained(shards); }, {"model-00001-of-00001.safetensors", "'transformer.extra'", "not"});
  map.erase("transformer.extra");
  map.erase("transformer.wpe.weight");  // in the shard, but the index does not say so
  std::ofstream(shards / "model.safetensors.index.json") << json{{"weight_map", map}}.dump();
  expect_error<FileError>([&] { io::load_pretrained(shards); }, {"'transformer.wpe.weight' is not where the index puts it (nowhere)"});

  auto tokenizer = copy_of_tiny_gpt2("tokenizer");
  fs::remove(tokenizer / "merges.txt");
  expect_error<FileError>([&] { io::load_pretrained(tokenizer); }, {"no tokenizer"});
}

}  // namespace
}  // namespace vkattn
