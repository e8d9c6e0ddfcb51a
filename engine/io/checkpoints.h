#pragma once
// The architectures of the hub's checkpoints, each as one of vkattn's modules: config.json and the
// tensors under the hub's names in, the module's config and weights out (engine/io/pretrained.cpp
// reads the folder and picks one by config.json's "architectures"). The readers they share:
// ConfigReader (config.json's entries) and CheckpointTensors (each tensor taken once, by shape).
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "vkattn/io/state_dict.h"
#include "vkattn/modules/bert.h"
#include "vkattn/modules/llama.h"
#include "vkattn/tensor.h"

namespace vkattn::io::checkpoints {

// config.json's entries; ConfigError "DIR/config.json: …" naming the entry at fault.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& config, const std::string& dir) : config_(config), source_(dir + "/config.json") {}

  // A positive integer; `fallback` when absent or null (ConfigError when there is none).
  int64_t size(const char* key, std::optional<int64_t> fallback = std::nullopt) const;
  // A non-negative integer; `fallback` when absent or null.
  int64_t count(const char* key, int64_t fallback) const;
  float number(const char* key, float fallback) const;
  bool flag(const char* key, bool fallback) const;
  std::string text(const char* key, const std::string& fallback) const;
  // The activation a key names (hidden_act, activation_function): "gelu_new" and
  // "gelu_pytorch_tanh" are gelu's tanh approximation, "gelu" the exact one, and "relu".
  Activation activation(const char* key, const std::string& fallback) const;
  bool has(const char* key) const;  // present and not null
  // A setting vkattn does not run, refused by name unless it is `supported`.
  void require(const char* key, bool supported, bool fallback) const;
  ConfigError error(const std::string& what) const { return ConfigError(source_ + ": " + what); }

 private:
  const nlohmann::json& config_;
  std::string source_;
};

// A checkpoint's tensors under the hub's names: each taken once with its shape checked; those
// left over are named. FileError "DIR: …".
class CheckpointTensors {
 public:
  // `prefix` ("transformer.", "model.") is dropped from the names that have it.
  CheckpointTensors(std::map<std::string, Tensor> tensors, std::string dir, const std::string& prefix);

  // The tensor, float of `shape` (spelled e.g. "(E, 3·E)").
  const Tensor& take(const std::string& name, const Shape& shape, const std::string& spelled);
  // The same, when it is there.
  std::optional<Tensor> take_if_there(const std::string& name, const Shape& shape, const std::string& spelled);
  bool has(const std::string& name) const { return tensors_.contains(name); }
  void ignore(const std::string& name) { used_.insert(name); }  // a buffer vkattn has no use for
  void ignore_prefix(const std::string& prefix);                  // every tensor under it
  // FileError naming the first tensor neither taken nor ignored, in a model `described`.
  void check_all_taken(const std::string& described) const;

 private:
  std::map<std::string, Tensor> tensors_;
  std::string dir_;
  std::set<std::string> used_;
};

// GPT2LMHeadModel (or GPT2Model's names, without "transformer.") as a CausalLM.
CausalLMState gpt2(const nlohmann::json& config, std::map<std::string, Tensor> tensors, const std::string& dir);

// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM as a Llama.
struct LlamaState {
  LlamaConfig config;
  LlamaWeights weights;
};
LlamaState llama(const nlohmann::json& config, std::map<std::string, Tensor> tensors, const std::string& dir,
                 const std::string& architecture);

// BertModel, BertForMaskedLM, BertForPreTraining, BertForSequenceClassification (the "bert."
// encoder, the masked-LM head and classifier; not the next-sentence head) as a Bert.
struct BertState {
  BertConfig config;
  BertWeights weights;
};
BertState bert(const nlohmann::json& config, std::map<std::string, Tensor> tensors, const std::string& dir);
// RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification (the "roberta." encoder, the
// lm_head and classifier heads) as a Bert: positions from pad_token_id + 1, RoBERTa's classifier.
BertState roberta(const nlohmann::json& config, std::map<std::string, Tensor> tensors, const std::string& dir);
// DistilBertModel, DistilBertForMaskedLM, DistilBertForSequenceClassification,
// DistilBertForTokenClassification (the "distilbert." encoder; vocab_transform … vocab_projector;
// pre_classifier and classifier) as a Bert: no token types, BERT's positions, post-norm layers.
BertState distilbert(const nlohmann::json& config, std::map<std::string, Tensor> tensors, const std::string& dir);

}  // namespace vkattn::io::checkpoints
