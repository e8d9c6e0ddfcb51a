// Checkpoint folders as the Hugging Face hub lays them out: models/tiny_gpt2 (GPT-2's
// architecture, saved as save_pretrained saves it) against torch's own logits and greedy tokens,
// on the GPU and the reference; the same weights under GPT2Model's names, in shards and in BF16;
// and a one-line error naming the file and tensor for each way a folder can be wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/expect_error.h"
#include "tests/support/gpu.h"
#include "tests/support/safetensors_writer.h"
#include "vkattn/errors.h"
#include "vkattn/io/pretrained.h"
#include "vkattn/io/safetensors.h"

namespace vkattn {
namespace {

using nlohmann::json;
using testing::expect_error;
namespace fs = std::filesystem;

const fs::path kTinyGpt2 = fs::path(VKATTN_SOURCE_DIR) / "models/tiny_gpt2";

json expected() {
  std::ifstream in(kTinyGpt2 / "expected.json");
  return json::parse(in);
}

// A copy of tiny_gpt2's folder under the temporary directory, its weights replaced by `tensors`
// (nothing: the same file).
fs::path copy_of_tiny_gpt2(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("vkattn_test_pretrained_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* file : {"config.json", "vocab.json", "merges.txt", "model.safetensors"}) {
    fs::copy_file(kTinyGpt2 / file, dir / file);
  }
  return dir;
}

std::map<std::string, Tensor> tiny_gpt2_tensors() { return io::read_safetensors(kTinyGpt2 / "model.safetensors").tensors; }

void rewrite_config(const fs::path& dir, const std::function<void(json&)>& change) {
  json config;
  std::ifstream(dir / "config.json") >> config;
  change(config);
  std::ofstream(dir / "config.json") << config.dump();
}

// The logits of the prompt's last position.
std::vector<float> last_logits(Backend& backend, const io::Pretrained& p, const std::vector<int64_t>& ids) {
  Tensor input({1, static_cast<int64_t>(ids.size())}, std::vector<float>(ids.begin(), ids.end()), DType::int64);
  Tensor logits = p.model.forward(backend, input);
  const int64_t V = logits.dim(2);
  return std::vector<float>(logits.data.end() - V, logits.data.end());
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
  EXPECT_EQ(p.model.config().layer.activation, Activation::gelu_tanh);
  EXPECT_EQ(p.eos_token_id, p.tokenizer->token_id("<|endoftext|>"));
  const auto prompt = p.tokenizer->encode(e["prompt"].get<std::string>());
  ASSERT_EQ(prompt, e["prompt_ids"].get<std::vector<int64_t>>());  // the C++ BPE on merges learnt in Python
  const auto torch_logits = e["last_logits"].get<std::vector<float>>();
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    EXPECT_LT(max_difference(last_logits(*backend, p, prompt), torch_logits), 1e-4f) << backend->name();
  }
  // greedy with the KV cache: torch's tokens, one at a time
  const auto want = e["tokens"].get<std::vector<int64_t>>();
  KVCache cache = p.model.make_cache(gpu(), 1, static_cast<int64_t>(prompt.size() + want.size()));
  std::vector<int64_t> step = prompt, got;
  for (size_t i = 0; i < want.size(); ++i) {
    Tensor ids({1, static_cast<int64_t>(step.size())}, std::vector<float>(step.begin(), step.end()), DType::int64);
    Tensor logits = p.model.decode(gpu(), ids, cache);
    const int64_t V = logits.dim(2);
    const auto last = logits.data.end() - V;
    got.push_back(std::max_element(last, logits.data.end()) - last);
    step = {got.back()};
  }
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

TEST(PretrainedFolders, WhatIsWrongIsNamed) {
  expect_error<FileError>([] { io::load_pretrained("/nonexistent/vkattn"); }, {"/nonexistent/vkattn", "not a folder"});

  auto llama = copy_of_tiny_gpt2("llama");
  rewrite_config(llama, [](json& c) { c["architectures"] = {"LlamaForCausalLM"}, c["model_type"] = "llama"; });
  expect_error<ConfigError>([&] { io::load_pretrained(llama); }, {"config.json", "LlamaForCausalLM", "llama", "GPT2LMHeadModel"});

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

  auto tokenizer = copy_of_tiny_gpt2("tokenizer");
  fs::remove(tokenizer / "merges.txt");
  expect_error<FileError>([&] { io::load_pretrained(tokenizer); }, {"no tokenizer"});
}

}  // namespace
}  // namespace vkattn
