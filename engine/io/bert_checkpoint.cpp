// BERT as the hub stores it (BertModel; BertForMaskedLM's and BertForPreTraining's files under
// "bert."; the masked-LM head "cls.predictions" where there), read as a Bert: the same recipe
// under torch's names.
//   embeddings.{word,position,token_type}_embeddings, embeddings.LayerNorm   as they are
//   encoder.layer.N.attention.self.query, key, value    layers.N.self_attn.q_proj, k_proj, v_proj
//   encoder.layer.N.attention.output.dense              layers.N.self_attn.out_proj
//   encoder.layer.N.attention.output.LayerNorm          layers.N.norm1 (post-norm)
//   encoder.layer.N.intermediate.dense, output.dense    layers.N.linear1, linear2 (hidden_act between)
//   encoder.layer.N.output.LayerNorm                    layers.N.norm2
//   pooler.dense                                        pooler.dense, then tanh
//   classifier (BertForSequenceClassification's)        classifier, on the pooler's output
// Older files name a LayerNorm's weight and bias gamma and beta (TensorFlow's): read too.
#include "engine/io/checkpoints.h"
#include "vkattn/errors.h"

namespace vkattn::io::checkpoints {

using nlohmann::json;

BertState bert(const json& config_json, std::map<std::string, Tensor> file, const std::string& dir) {
  const ConfigReader config(config_json, dir);
  config.require("is_decoder", false, false);
  config.require("add_cross_attention", false, false);
  const std::string positions = config.text("position_embedding_type", "absolute");
  if (positions != "absolute") {
    throw config.error("position_embedding_type '" + positions + "' is not supported by vkattn (absolute)");
  }
  const int64_t E = config.size("hidden_size"), H = config.size("num_attention_heads");
  const int64_t F = config.size("intermediate_size"), layers = config.size("num_hidden_layers");
  const int64_t V = config.size("vocab_size"), P = config.size("max_position_embeddings");
  const int64_t types = config.size("type_vocab_size", 2);
  if (E % H != 0) {
    throw config.error("hidden_size " + std::to_string(E) + " is not a multiple of num_attention_heads " +
                       std::to_string(H));
  }

  CheckpointTensors tensors(std::move(file), dir, "bert.");
  auto norm = [&](const std::string& name) {
    const bool tf = !tensors.has(name + ".weight") && tensors.has(name + ".gamma");
    return LayerNormWeights{tensors.take(name + (tf ? ".gamma" : ".weight"), {E}, "(E,)"),
                            tensors.take(name + (tf ? ".beta" : ".bias"), {E}, "(E,)")};
  };

  BertState state;
  auto& c = state.config;
  c.vocab_size = V;
  c.max_positions = P;
  c.type_vocab_size = types;
  c.num_layers = layers;
  c.layer = {.d_model = E, .nhead = H, .dim_feedforward = F, .activation = config.activation("hidden_act", "gelu"),
             .layer_norm_eps = config.number("layer_norm_eps", 1e-12f), .norm_first = false};
  auto& w = state.weights;
  w.word_embeddings = tensors.take("embeddings.word_embeddings.weight", {V, E}, "(vocab_size, hidden_size)");
  w.position_embeddings =
      tensors.take("embeddings.position_embeddings.weight", {P, E}, "(max_position_embeddings, hidden_size)");
  w.token_type_embeddings =
      tensors.take("embeddings.token_type_embeddings.weight", {types, E}, "(type_vocab_size, hidden_size)");
  w.embeddings_norm = norm("embeddings.LayerNorm");
  tensors.ignore("embeddings.position_ids");  // a buffer: 0 … P-1
  for (int64_t i = 0; i < layers; ++i) {
    const std::string l = "encoder.layer." + std::to_string(i) + ".";
    TransformerEncoderLayerWeights layer;
    auto& a = layer.self_attn;
    a.q_proj_weight = tensors.take(l + "attention.self.query.weight", {E, E}, "(E, E)");
    a.q_proj_bias = tensors.take(l + "attention.self.query.bias", {E}, "(E,)");
    a.k_proj_weight = tensors.take(l + "attention.self.key.weight", {E, E}, "(E, E)");
    a.k_proj_bias = tensors.take(l + "attention.self.key.bias", {E}, "(E,)");
    a.v_proj_weight = tensors.take(l + "attention.self.value.weight", {E, E}, "(E, E)");
    a.v_proj_bias = tensors.take(l + "attention.self.value.bias", {E}, "(E,)");
    a.out_proj_weight = tensors.take(l + "attention.output.dense.weight", {E, E}, "(E, E)");
    a.out_proj_bias = tensors.take(l + "attention.output.dense.bias", {E}, "(E,)");
    layer.norm1 = norm(l + "attention.output.LayerNorm");
    layer.linear1_weight = tensors.take(l + "intermediate.dense.weight", {F, E}, "(intermediate_size, E)");
    layer.linear1_bias = tensors.take(l + "intermediate.dense.bias", {F}, "(intermediate_size,)");
    layer.linear2_weight = tensors.take(l + "output.dense.weight", {E, F}, "(E, intermediate_size)");
    layer.linear2_bias = tensors.take(l + "output.dense.bias", {E}, "(E,)");
    layer.norm2 = norm(l + "output.LayerNorm");
    w.layers.push_back(std::move(layer));
  }
  if (auto weight = tensors.take_if_there("pooler.dense.weight", {E, E}, "(E, E)")) {
    w.pooler_weight = std::move(*weight);
    w.pooler_bias = tensors.take("pooler.dense.bias", {E}, "(E,)");
  } else {
    c.pooler = false;  // BertModel(add_pooling_layer=False), or a masked LM's file without one
  }
  // BertForMaskedLM's (and BertForPreTraining's) masked-LM head, its decoder tied to the word
  // embeddings unless the file has one of its own; the next-sentence head is not run
  if (tensors.has("cls.predictions.bias")) {
    c.masked_lm = true;
    const std::string at = "cls.predictions.";
    BertMaskedLMWeights m{.dense_weight = tensors.take(at + "transform.dense.weight", {E, E}, "(E, E)"),
                          .dense_bias = tensors.take(at + "transform.dense.bias", {E}, "(E,)"),
                          .norm = norm(at + "transform.LayerNorm"),
                          .bias = tensors.take(at + "bias", {V}, "(vocab_size,)")};
    m.decoder_weight = tensors.take_if_there(at + "decoder.weight", {V, E}, "(vocab_size, hidden_size)");
    tensors.ignore(at + "decoder.bias");  // predictions.bias again, when written
    w.masked_lm = std::move(m);
  }
  // BertForSequenceClassification's classifier, on the pooler's output: as many labels as
  // config.json's id2label names (num_labels where only that is written; Hugging Face's default 2)
  if (tensors.has("classifier.weight")) {
    if (!c.pooler) throw config.error("a classifier (classifier.weight) needs the pooler it reads (pooler.dense)");
    const auto& id2label = config_json.contains("id2label") ? config_json["id2label"] : json();
    c.num_labels = id2label.is_object() && !id2label.empty() ? static_cast<int64_t>(id2label.size())
                                                             : config.size("num_labels", 2);
    w.classifier_weight = tensors.take("classifier.weight", {c.num_labels, E}, "(num_labels, hidden_size)");
    w.classifier_bias = tensors.take("classifier.bias", {c.num_labels}, "(num_labels,)");
  }
  tensors.ignore_prefix("cls.seq_relationship.");
  tensors.check_all_taken("a BERT of " + std::to_string(layers) + " layers (embeddings, encoder.layer.0 … " +
                          std::to_string(layers - 1) + ", pooler)");
  return state;
}

}  // namespace vkattn::io::checkpoints
