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
//   classifier (BertForTokenClassification's)           classifier, on every token
//   qa_outputs (…ForQuestionAnswering's, every family's)  qa_outputs, on every token: 2 logits
// RoBERTa's files (RobertaModel; RobertaForMaskedLM's and RobertaForSequenceClassification's
// under "roberta.") name the encoder as BERT's; its positions count from pad_token_id + 1
// (Bert's padding_idx), and its heads are
//   lm_head.dense, lm_head.layer_norm, lm_head.bias     cls.predictions.transform.dense,
//     (lm_head.decoder tied to the word embeddings)       .transform.LayerNorm, .bias (gelu between)
//   classifier.dense, classifier.out_proj               classifier.dense (tanh after it, on the
//                                                       first token), classifier.out_proj
//   classifier (RobertaForTokenClassification's)        classifier, on every token
// DistilBERT's files (DistilBertModel; …ForMaskedLM's, …ForSequenceClassification's and
// …ForTokenClassification's, under "distilbert.") have no token types and name the rest as
//   embeddings.{word,position}_embeddings, .LayerNorm  as they are (no token_type_embeddings)
//   transformer.layer.N.attention.q_lin … out_lin       layers.N.self_attn.q_proj … out_proj
//   transformer.layer.N.sa_layer_norm, output_layer_norm  layers.N.norm1, norm2 (post-norm)
//   transformer.layer.N.ffn.lin1, ffn.lin2              layers.N.linear1, linear2 (activation between)
//   vocab_transform, vocab_layer_norm, vocab_projector  cls.predictions.transform.dense, …LayerNorm,
//                                                       .decoder (tied) and its bias
//   pre_classifier, classifier                          classifier.dense (relu after it, on the
//                                                       first token), classifier.out_proj
// Older files name a LayerNorm's weight and bias gamma and beta (TensorFlow's): read too.
#include "engine/io/checkpoints.h"
#include "vkattn/errors.h"

namespace vkattn::io::checkpoints {

using nlohmann::json;

namespace {

// RoBERTa's checkpoints, or BERT's (which name their encoders alike)
enum class Family { bert, roberta };

// A LayerNorm's weight and bias (E,) each under `name` (".weight" and ".bias", or TensorFlow's
// ".gamma" and ".beta")
LayerNormWeights layer_norm(CheckpointTensors& tensors, const std::string& name, int64_t E) {
  const bool tf = !tensors.has(name + ".weight") && tensors.has(name + ".gamma");
  return LayerNormWeights{tensors.take(name + (tf ? ".gamma" : ".weight"), {E}, "(E,)"),
                          tensors.take(name + (tf ? ".beta" : ".bias"), {E}, "(E,)")};
}

// A post-norm encoder layer's tensors, as each family names them under its layer's prefix
struct LayerNames {
  std::string q, k, v, out, norm1, linear1, linear2, norm2;
};
const LayerNames kBertLayer{
    "attention.self.query",       "attention.self.key", "attention.self.value", "attention.output.dense",
    "attention.output.LayerNorm", "intermediate.dense", "output.dense",         "output.LayerNorm"};
const LayerNames kDistilBertLayer{"attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin",
                                  "sa_layer_norm",   "ffn.lin1",        "ffn.lin2",        "output_layer_norm"};

// Layer `l` (its names' prefix, "encoder.layer.3."): attention, norm1, linear1, linear2, norm2
TransformerEncoderLayerWeights encoder_layer(CheckpointTensors& tensors, const std::string& l, const LayerNames& names,
                                             int64_t E, int64_t F) {
  TransformerEncoderLayerWeights layer;
  auto& a = layer.self_attn;
  a.q_proj_weight = tensors.take(l + names.q + ".weight", {E, E}, "(E, E)");
  a.q_proj_bias = tensors.take(l + names.q + ".bias", {E}, "(E,)");
  a.k_proj_weight = tensors.take(l + names.k + ".weight", {E, E}, "(E, E)");
  a.k_proj_bias = tensors.take(l + names.k + ".bias", {E}, "(E,)");
  a.v_proj_weight = tensors.take(l + names.v + ".weight", {E, E}, "(E, E)");
  a.v_proj_bias = tensors.take(l + names.v + ".bias", {E}, "(E,)");
  a.out_proj_weight = tensors.take(l + names.out + ".weight", {E, E}, "(E, E)");
  a.out_proj_bias = tensors.take(l + names.out + ".bias", {E}, "(E,)");
  layer.norm1 = layer_norm(tensors, l + names.norm1, E);
  layer.linear1_weight = tensors.take(l + names.linear1 + ".weight", {F, E}, "(intermediate_size, E)");
  layer.linear1_bias = tensors.take(l + names.linear1 + ".bias", {F}, "(intermediate_size,)");
  layer.linear2_weight = tensors.take(l + names.linear2 + ".weight", {E, F}, "(E, intermediate_size)");
  layer.linear2_bias = tensors.take(l + names.linear2 + ".bias", {E}, "(E,)");
  layer.norm2 = layer_norm(tensors, l + names.norm2, E);
  return layer;
}

// The encoder both families share (embeddings, layers, the pooler where the file has one); the
// heads are left in `tensors` for the family's reader.
BertState encoder(const json& config_json, CheckpointTensors& tensors, const std::string& dir, Family family) {
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

  BertState state;
  auto& c = state.config;
  c.vocab_size = V;
  c.max_positions = P;
  c.type_vocab_size = types;
  c.num_layers = layers;
  c.layer = {.d_model = E, .nhead = H, .dim_feedforward = F, .activation = config.activation("hidden_act", "gelu"),
             .layer_norm_eps = config.number("layer_norm_eps", 1e-12f), .norm_first = false};
  if (family == Family::roberta) {  // RobertaEmbeddings' padding_idx: config.json's pad_token_id (1 in roberta-base)
    const json pad = config_json.value("pad_token_id", json(1));
    if (!pad.is_number_integer() || pad.get<int64_t>() < 0 || pad.get<int64_t>() + 1 >= P) {
      throw config.error("pad_token_id " + pad.dump() + " is not a token id below max_position_embeddings - 1 = " +
                         std::to_string(P - 1) + " (RoBERTa's positions count from it)");
    }
    c.padding_idx = pad.get<int64_t>();
  }
  auto& w = state.weights;
  w.word_embeddings = tensors.take("embeddings.word_embeddings.weight", {V, E}, "(vocab_size, hidden_size)");
  w.position_embeddings =
      tensors.take("embeddings.position_embeddings.weight", {P, E}, "(max_position_embeddings, hidden_size)");
  w.token_type_embeddings =
      tensors.take("embeddings.token_type_embeddings.weight", {types, E}, "(type_vocab_size, hidden_size)");
  w.embeddings_norm = layer_norm(tensors, "embeddings.LayerNorm", E);
  tensors.ignore("embeddings.position_ids");  // buffers: 0 … P-1, zeros
  tensors.ignore("embeddings.token_type_ids");
  for (int64_t i = 0; i < layers; ++i) {
    w.layers.push_back(encoder_layer(tensors, "encoder.layer." + std::to_string(i) + ".", kBertLayer, E, F));
  }
  if (auto weight = tensors.take_if_there("pooler.dense.weight", {E, E}, "(E, E)")) {
    w.pooler_weight = std::move(*weight);
    w.pooler_bias = tensors.take("pooler.dense.bias", {E}, "(E,)");
  } else {
    c.pooler = false;  // BertModel(add_pooling_layer=False), or a masked LM's file without one
  }
  return state;
}

// A masked-LM head's tensors, as each family names them: its dense layer and norm, the vocabulary's
// bias, and the decoder (tied to the word embeddings unless the file has a weight of its own)
struct MaskedLMNames {
  std::string dense, norm, bias, decoder;
};
const MaskedLMNames kBertMaskedLM{"cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                                  "cls.predictions.bias", "cls.predictions.decoder"};
const MaskedLMNames kRobertaMaskedLM{"lm_head.dense", "lm_head.layer_norm", "lm_head.bias", "lm_head.decoder"};
const MaskedLMNames kDistilBertMaskedLM{"vocab_transform", "vocab_layer_norm", "vocab_projector.bias",
                                        "vocab_projector"};

// A masked-LM head: dense, hidden_act, norm, then the decoder and its bias
void masked_lm_head(BertState& state, CheckpointTensors& tensors, const MaskedLMNames& names) {
  const int64_t E = state.config.layer.d_model, V = state.config.vocab_size;
  state.config.masked_lm = true;
  BertMaskedLMWeights m{.dense_weight = tensors.take(names.dense + ".weight", {E, E}, "(E, E)"),
                        .dense_bias = tensors.take(names.dense + ".bias", {E}, "(E,)"),
                        .norm = layer_norm(tensors, names.norm, E),
                        .bias = tensors.take(names.bias, {V}, "(vocab_size,)")};
  m.decoder_weight = tensors.take_if_there(names.decoder + ".weight", {V, E}, "(vocab_size, hidden_size)");
  if (names.decoder + ".bias" != names.bias) tensors.ignore(names.decoder + ".bias");  // the bias again, when written
  state.weights.masked_lm = std::move(m);
}

// A classifier's labels: as many as config.json's id2label names (num_labels where only that is
// written; Hugging Face's default 2)
int64_t label_count(const json& config_json, const std::string& dir) {
  const auto& id2label = config_json.contains("id2label") ? config_json["id2label"] : json();
  if (id2label.is_object() && !id2label.empty()) return static_cast<int64_t>(id2label.size());
  return ConfigReader(config_json, dir).size("num_labels", 2);
}

// Whether config.json's architecture is a token classifier's (BertForTokenClassification,
// RobertaForTokenClassification): its classifier reads every token, not the sequence
bool classifies_tokens(const json& config_json) {
  const json& names = config_json.contains("architectures") ? config_json["architectures"] : json();
  return names.is_array() && !names.empty() && names[0].is_string() &&
         names[0].get<std::string>().ends_with("ForTokenClassification");
}

// classifier.weight and .bias (num_labels, E), (num_labels,): a sequence classifier's on the
// pooler's output, or a token classifier's
void linear_classifier(BertState& state, CheckpointTensors& tensors, const json& config_json, const std::string& dir) {
  auto& c = state.config;
  c.classifier = classifies_tokens(config_json) ? BertClassifier::tokens : BertClassifier::pooled;
  if (c.classifier == BertClassifier::pooled && !c.pooler) {
    throw ConfigReader(config_json, dir)
        .error("a sequence classifier (classifier.weight) needs the pooler it reads (pooler.dense)");
  }
  c.num_labels = label_count(config_json, dir);
  const int64_t E = c.layer.d_model;
  state.weights.classifier_weight = tensors.take("classifier.weight", {c.num_labels, E}, "(num_labels, hidden_size)");
  state.weights.classifier_bias = tensors.take("classifier.bias", {c.num_labels}, "(num_labels,)");
}

// A classifier on the first token (a sequence classifier without a pooler): its dense layer, the
// activation after it and its output layer, as each family names them
struct FirstTokenHeadNames {
  std::string dense, out;
  ActivationStep activation;
};
const FirstTokenHeadNames kRobertaHead{"classifier.dense", "classifier.out_proj", ActivationStep::tanh};
const FirstTokenHeadNames kDistilBertHead{"pre_classifier", "classifier", ActivationStep::relu};

// RobertaClassificationHead, DistilBertForSequenceClassification's: dense, activation, out
void first_token_head(BertState& state, CheckpointTensors& tensors, const FirstTokenHeadNames& names,
                      const json& config_json, const std::string& dir) {
  auto& c = state.config;
  auto& w = state.weights;
  const int64_t E = c.layer.d_model;
  c.classifier = BertClassifier::first_token;
  c.first_token_activation = names.activation;
  c.num_labels = label_count(config_json, dir);
  w.classifier_dense_weight = tensors.take(names.dense + ".weight", {E, E}, "(E, E)");
  w.classifier_dense_bias = tensors.take(names.dense + ".bias", {E}, "(E,)");
  w.classifier_weight = tensors.take(names.out + ".weight", {c.num_labels, E}, "(num_labels, E)");
  w.classifier_bias = tensors.take(names.out + ".bias", {c.num_labels}, "(num_labels,)");
}

// …ForQuestionAnswering's head, every family's: qa_outputs (2, E), (2,), each token's logits of
// starting and of ending the answer
void question_answering_head(BertState& state, CheckpointTensors& tensors) {
  auto& c = state.config;
  c.classifier = BertClassifier::spans;
  c.num_labels = 2;
  const int64_t E = c.layer.d_model;
  state.weights.classifier_weight = tensors.take("qa_outputs.weight", {2, E}, "(2, hidden_size)");
  state.weights.classifier_bias = tensors.take("qa_outputs.bias", {2}, "(2,)");
}

std::string described(const char* family, int64_t layers) {
  return std::string("a ") + family + " of " + std::to_string(layers) + " layers (embeddings, encoder.layer.0 … " +
         std::to_string(layers - 1) + ", pooler)";
}

}  // namespace

BertState bert(const json& config_json, std::map<std::string, Tensor> file, const std::string& dir) {
  CheckpointTensors tensors(std::move(file), dir, "bert.");
  BertState state = encoder(config_json, tensors, dir, Family::bert);
  // BertForMaskedLM's (and BertForPreTraining's) masked-LM head; the next-sentence head is not run
  if (tensors.has(kBertMaskedLM.bias)) masked_lm_head(state, tensors, kBertMaskedLM);
  // BertForSequenceClassification's classifier, or BertForTokenClassification's
  if (tensors.has("classifier.weight")) linear_classifier(state, tensors, config_json, dir);
  if (tensors.has("qa_outputs.weight")) question_answering_head(state, tensors);  // BertForQuestionAnswering's
  tensors.ignore_prefix("cls.seq_relationship.");
  tensors.check_all_taken(described("BERT", state.config.num_layers));
  return state;
}

BertState roberta(const json& config_json, std::map<std::string, Tensor> file, const std::string& dir) {
  CheckpointTensors tensors(std::move(file), dir, "roberta.");
  BertState state = encoder(config_json, tensors, dir, Family::roberta);
  if (tensors.has(kRobertaMaskedLM.bias)) masked_lm_head(state, tensors, kRobertaMaskedLM);
  // RobertaForSequenceClassification's head (RobertaClassificationHead): its own dense and tanh on
  // the first token, then out_proj; RobertaForTokenClassification's: classifier on every token
  if (tensors.has(kRobertaHead.dense + ".weight")) {
    first_token_head(state, tensors, kRobertaHead, config_json, dir);
  } else if (tensors.has("classifier.weight")) {
    linear_classifier(state, tensors, config_json, dir);
  }
  if (tensors.has("qa_outputs.weight")) question_answering_head(state, tensors);  // RobertaForQuestionAnswering's
  tensors.check_all_taken(described("RoBERTa", state.config.num_layers));
  return state;
}

BertState distilbert(const json& config_json, std::map<std::string, Tensor> file, const std::string& dir) {
  const ConfigReader config(config_json, dir);
  const int64_t E = config.size("dim"), H = config.size("n_heads"), F = config.size("hidden_dim");
  const int64_t layers = config.size("n_layers"), V = config.size("vocab_size");
  const int64_t P = config.size("max_position_embeddings");
  if (E % H != 0) {
    throw config.error("dim " + std::to_string(E) + " is not a multiple of n_heads " + std::to_string(H));
  }
  CheckpointTensors tensors(std::move(file), dir, "distilbert.");
  BertState state;
  auto& c = state.config;
  c.vocab_size = V;
  c.max_positions = P;
  c.type_vocab_size = 0;
  c.num_layers = layers;
  c.pooler = false;
  // DistilBERT's LayerNorms take eps 1e-12, whatever config.json says
  c.layer = {.d_model = E,
             .nhead = H,
             .dim_feedforward = F,
             .activation = config.activation("activation", "gelu"),
             .layer_norm_eps = 1e-12f,
             .norm_first = false};
  auto& w = state.weights;
  w.word_embeddings = tensors.take("embeddings.word_embeddings.weight", {V, E}, "(vocab_size, dim)");
  w.position_embeddings =
      tensors.take("embeddings.position_embeddings.weight", {P, E}, "(max_position_embeddings, dim)");
  w.embeddings_norm = layer_norm(tensors, "embeddings.LayerNorm", E);
  tensors.ignore("embeddings.position_ids");  // a buffer: 0 … P-1
  for (int64_t i = 0; i < layers; ++i) {
    w.layers.push_back(encoder_layer(tensors, "transformer.layer." + std::to_string(i) + ".", kDistilBertLayer, E, F));
  }
  if (tensors.has(kDistilBertMaskedLM.bias)) masked_lm_head(state, tensors, kDistilBertMaskedLM);
  // DistilBertForSequenceClassification's head: pre_classifier and relu on the first token, then
  // classifier; DistilBertForTokenClassification's: classifier on every token
  if (tensors.has(kDistilBertHead.dense + ".weight")) {
    first_token_head(state, tensors, kDistilBertHead, config_json, dir);
  } else if (tensors.has("classifier.weight")) {
    linear_classifier(state, tensors, config_json, dir);
  }
  if (tensors.has("qa_outputs.weight")) question_answering_head(state, tensors);  // …ForQuestionAnswering's
  tensors.check_all_taken("a DistilBERT of " + std::to_string(layers) + " layers (embeddings, transformer.layer.0 … " +
                          std::to_string(layers - 1) + ")");
  return state;
}

}  // namespace vkattn::io::checkpoints
