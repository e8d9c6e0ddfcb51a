// A hub checkpoint folder: config.json picks the architecture, the safetensors files hold the
// weights (one file or shards), the tokenizer files the tokenizer.
#include "vkattn/io/pretrained.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

#include "engine/io/checkpoints.h"
#include "engine/io/file.h"
#include "reference/reference.h"
#include "vkattn/errors.h"
#include "vkattn/io/safetensors.h"
#include "vkattn/modules/causal_lm.h"
#include "vkattn/modules/llama.h"

namespace vkattn::io {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json read_json(const fs::path& path) {
  const auto bytes = read_file(path);
  try {
    return json::parse(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const json::exception& e) {
    throw FileError(path.string() + ": not JSON (" + e.what() + ")");
  }
}

// The shards model.safetensors.index.json names, and which tensor each holds.
std::map<std::string, std::string> weight_map(const fs::path& index) {
  const json file = read_json(index);
  if (!file.contains("weight_map") || !file["weight_map"].is_object()) {
    throw FileError(index.string() + ": no weight_map {\"tensor\": \"shard file\"}");
  }
  std::map<std::string, std::string> map;
  for (const auto& [tensor, shard] : file["weight_map"].items()) {
    if (!shard.is_string() || shard.get<std::string>().find('/') != std::string::npos) {
      throw FileError(index.string() + ": weight_map's '" + tensor + "' is " + shard.dump() +
                      ", not a file name in the folder");
    }
    map[tensor] = shard.get<std::string>();
  }
  return map;
}

// The tensors of a checkpoint folder: model.safetensors, or every shard its index names; their
// dtype in the files ("F32", "BF16", "mixed") and their bytes there.
std::map<std::string, Tensor> read_checkpoint_tensors(const fs::path& dir, std::string& stored_dtype,
                                                      uint64_t& stored_bytes) {
  std::vector<std::string> shards;
  std::map<std::string, std::string> expected;  // tensor -> shard, from the index
  if (fs::exists(dir / "model.safetensors")) {
    shards = {"model.safetensors"};
  } else if (fs::exists(dir / "model.safetensors.index.json")) {
    expected = weight_map(dir / "model.safetensors.index.json");
    std::set<std::string> distinct;
    for (const auto& [tensor, shard] : expected) distinct.insert(shard);
    shards.assign(distinct.begin(), distinct.end());
  } else if (fs::exists(dir / "pytorch_model.bin")) {
    throw FileError(dir.string() + ": the weights are pytorch_model.bin (a pickle); vkattn reads model.safetensors " +
                    "(save_pretrained(..., safe_serialization=True) writes it)");
  } else {
    throw FileError(dir.string() + ": no model.safetensors or model.safetensors.index.json");
  }
  std::map<std::string, Tensor> tensors;
  std::set<std::string> dtypes;
  uint64_t bytes = 0;
  for (const auto& shard : shards) {
    Safetensors file = read_safetensors(dir / shard);
    for (auto& [name, t] : file.tensors) {
      const auto where = expected.find(name);
      if (!expected.empty() && (where == expected.end() || where->second != shard)) {
        throw FileError((dir / shard).string() + ": tensor '" + name + "' is not where the index puts it (" +
                        (where == expected.end() ? std::string("nowhere") : where->second) + ")");
      }
      const std::string& dtype = file.stored_dtypes.at(name);
      dtypes.insert(dtype);
      const uint64_t element = dtype == "F64" ? 8 : dtype == "F32" ? 4 : dtype == "BOOL" ? 1 : 2;
      bytes += static_cast<uint64_t>(t.data.size()) * element;
      if (!tensors.emplace(name, std::move(t)).second) {
        throw FileError((dir / shard).string() + ": tensor '" + name + "' is in another shard too");
      }
    }
  }
  for (const auto& [name, shard] : expected) {
    if (!tensors.contains(name)) {
      throw FileError((dir / shard).string() + ": the index puts tensor '" + name + "' here, but it is not");
    }
  }
  stored_dtype = dtypes.size() == 1 ? *dtypes.begin() : dtypes.empty() ? "none" : "mixed";
  stored_bytes = bytes;
  return tensors;
}

}  // namespace

// Every float tensor rounded to `to` (bfloat16 or float16), to nearest even (NaN stays NaN), and
// marked so. ConfigError naming the tensor where a finite weight is past float16's range.
static void round_weights(std::map<std::string, Tensor>& tensors, Narrow to, const fs::path& dir) {
  for (auto& [name, t] : tensors) {
    if (t.dtype != DType::float32 || t.narrow == to) continue;
    for (float& v : t.data) {
      if (std::isnan(v)) continue;
      const float rounded = reference::round_to(v, static_cast<int>(to));
      if (std::isinf(rounded) && !std::isinf(v)) {
        throw ConfigError(dir.string() + ": weights_dtype float16: " + name + " holds " + std::to_string(v) +
                          ", past float16's largest, 65504 (bfloat16 keeps float32's range)");
      }
      v = rounded;
    }
    t.narrow = to;
  }
}

Pretrained load_pretrained(const fs::path& dir, const LoadOptions& options) {
  if (!fs::is_directory(dir)) {
    throw FileError(dir.string() + ": not a folder (a checkpoint is config.json and its files)");
  }
  if (!fs::exists(dir / "config.json")) {
    throw FileError(dir.string() + ": no config.json (a checkpoint folder as the hub lays it out has config.json, " +
                    "model.safetensors and the tokenizer's files)");
  }
  const json config = read_json(dir / "config.json");
  if (!config.is_object()) throw FileError((dir / "config.json").string() + ": not a JSON object");
  const std::string model_type = config.value("model_type", "");
  std::string architecture = model_type;
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string()) {
    architecture = config["architectures"][0].get<std::string>();
  }
  const bool gpt2 = architecture == "GPT2LMHeadModel" || architecture == "GPT2Model" || architecture == "gpt2";
  const bool llama = architecture == "LlamaForCausalLM" || architecture == "MistralForCausalLM" ||
                     architecture == "Qwen2ForCausalLM" || architecture == "Qwen3ForCausalLM" ||
                     architecture == "GemmaForCausalLM" || architecture == "Phi3ForCausalLM" ||
                     architecture == "llama" || architecture == "gemma" || architecture == "phi3";
  const bool bert = architecture == "BertModel" || architecture == "BertForMaskedLM" ||
                    architecture == "BertForPreTraining" || architecture == "BertForSequenceClassification" ||
                    architecture == "BertForTokenClassification" || architecture == "BertForQuestionAnswering" ||
                    architecture == "bert";
  const bool roberta = architecture == "RobertaModel" || architecture == "RobertaForMaskedLM" ||
                       architecture == "RobertaForSequenceClassification" ||
                       architecture == "RobertaForTokenClassification" ||
                       architecture == "RobertaForQuestionAnswering" || architecture == "roberta";
  const bool distilbert = architecture == "DistilBertModel" || architecture == "DistilBertForMaskedLM" ||
                          architecture == "DistilBertForSequenceClassification" ||
                          architecture == "DistilBertForTokenClassification" ||
                          architecture == "DistilBertForQuestionAnswering" || architecture == "distilbert";
  if (!gpt2 && !llama && !bert && !roberta && !distilbert) {
    throw ConfigError((dir / "config.json").string() + ": architecture '" + architecture + "' (model_type '" +
                      model_type + "') is not one vkattn runs yet (GPT2LMHeadModel, LlamaForCausalLM, " +
                      "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GemmaForCausalLM, Phi3ForCausalLM, " +
                      "BertModel, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification, " +
                      "BertForQuestionAnswering, RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification, " +
                      "RobertaForTokenClassification, RobertaForQuestionAnswering, DistilBertModel, " +
                      "DistilBertForMaskedLM, DistilBertForSequenceClassification, " +
                      "DistilBertForTokenClassification, DistilBertForQuestionAnswering)");
  }
  std::string dtype;
  uint64_t bytes = 0;
  auto tensors = read_checkpoint_tensors(dir, dtype, bytes);
  if (options.weights_dtype != Narrow::none) round_weights(tensors, options.weights_dtype, dir);
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<Bert> encoder;
  if (bert || roberta || distilbert) {
    checkpoints::BertState state = bert      ? checkpoints::bert(config, std::move(tensors), dir.string())
                                   : roberta ? checkpoints::roberta(config, std::move(tensors), dir.string())
                                             : checkpoints::distilbert(config, std::move(tensors), dir.string());
    encoder = std::make_unique<Bert>(state.config, std::move(state.weights));
  } else if (gpt2) {
    CausalLMState state = checkpoints::gpt2(config, std::move(tensors), dir.string());
    model = std::make_unique<CausalLM>(state.config, std::move(state.weights));
  } else {
    checkpoints::LlamaState state = checkpoints::llama(config, std::move(tensors), dir.string(), architecture);
    model = std::make_unique<Llama>(state.config, std::move(state.weights));
  }
  if (roberta && !fs::exists(dir / "tokenizer.json")) {
    throw FileError(dir.string() + ": no tokenizer.json: RoBERTa's tokenizer is read from it (vocab.json and " +
                    "merges.txt alone do not hold its <s> … </s> template and <mask>)");
  }
  auto tokenizer = text::load_tokenizer(dir);
  const int64_t rows = model ? model->vocab_size() : encoder->vocab_size();
  if (tokenizer->vocab_size() > rows) {
    throw FileError(dir.string() + ": the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                    " tokens but the model's embedding only " + std::to_string(rows) + " rows");
  }
  auto id = [&](const char* key) -> int64_t {
    return config.contains(key) && config[key].is_number_integer() ? config[key].get<int64_t>() : -1;
  };
  return Pretrained{.config = config,
                    .architecture = architecture,
                    .model = std::move(model),
                    .encoder = std::move(encoder),
                    .tokenizer = std::move(tokenizer),
                    .eos_token_id = id("eos_token_id"),
                    .stored_dtype = dtype,
                    .stored_bytes = bytes};
}

}  // namespace vkattn::io
