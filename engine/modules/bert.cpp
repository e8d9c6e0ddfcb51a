#include "vkattn/modules/bert.h"

#include <cmath>
#include <random>
#include <sstream>

#include "engine/modules/block.h"
#include "engine/modules/checks.h"
#include "engine/modules/pass.h"
#include "engine/modules/random_weights.h"
#include "vkattn/errors.h"

namespace vkattn {
namespace {

const std::string kBert = "Bert";

// The classifier's output layer, by torch's name: a question answerer's qa_outputs, RoBERTa's
// classifier.out_proj (after its own dense layer), or classifier
std::string classifier_name(const BertConfig& c) {
  return c.classifier == BertClassifier::spans ? "qa_outputs"
         : c.classifier == BertClassifier::first_token ? "classifier.out_proj"
                                                       : "classifier";
}

}  // namespace

BertWeights BertWeights::random(const BertConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t E = c.layer.d_model;
  BertWeights w;
  w.word_embeddings = uniform({c.vocab_size, E}, -1.0f, 1.0f, rng);
  w.position_embeddings = uniform({c.max_positions, E}, -1.0f, 1.0f, rng);
  if (c.type_vocab_size > 0) w.token_type_embeddings = uniform({c.type_vocab_size, E}, -1.0f, 1.0f, rng);
  w.embeddings_norm = random_norm(E, rng);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    w.layers.push_back(TransformerEncoderLayerWeights::random(c.layer, seed + 100 * static_cast<uint32_t>(i + 1)));
  }
  if (c.pooler) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(E));
    w.pooler_weight = uniform({E, E}, -bound, bound, rng);
    w.pooler_bias = uniform({E}, -bound, bound, rng);
  }
  if (c.num_labels > 0) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(E));
    if (c.classifier == BertClassifier::first_token) {
      w.classifier_dense_weight = uniform({E, E}, -bound, bound, rng);
      w.classifier_dense_bias = uniform({E}, -bound, bound, rng);
    }
    w.classifier_weight = uniform({c.num_labels, E}, -bound, bound, rng);
    w.classifier_bias = uniform({c.num_labels}, -bound, bound, rng);
  }
  if (c.masked_lm) {  // tied to word_embeddings, as BertForMaskedLM's
    const float bound = 1.0f / std::sqrt(static_cast<float>(E));
    w.masked_lm = BertMaskedLMWeights{.dense_weight = uniform({E, E}, -bound, bound, rng),
                                      .dense_bias = uniform({E}, -bound, bound, rng),
                                      .norm = random_norm(E, rng),
                                      .bias = uniform({c.vocab_size}, -bound, bound, rng)};
  }
  return w;
}

Bert::Bert(BertConfig config, BertWeights weights) : config_(config), weights_(std::move(weights)) {
  const auto& c = config_;
  for (auto [name, size] :
       {std::pair{"vocab_size", c.vocab_size}, {"max_positions", c.max_positions}, {"num_layers", c.num_layers}}) {
    if (size < 1) throw ConfigError("Bert: " + std::string(name) + "=" + std::to_string(size) + " must be >= 1");
  }
  if (c.type_vocab_size < 0) {
    throw ConfigError("Bert: type_vocab_size=" + std::to_string(c.type_vocab_size) + " must be >= 0 (0: none)");
  }
  if (c.first_token_activation != ActivationStep::tanh && c.first_token_activation != ActivationStep::relu) {
    throw ConfigError(std::string("Bert: first_token_activation ") + op_name(c.first_token_activation) +
                      " is not tanh or relu");
  }
  if (c.layer.norm_first) throw ConfigError("Bert: its layers are post-norm (norm_first=false)");
  const int64_t E = c.layer.d_model;
  const auto& w = weights_;
  checks::weight(kBert, "embeddings.word_embeddings.weight", w.word_embeddings, {c.vocab_size, E}, "(V, E)");
  checks::weight(kBert, "embeddings.position_embeddings.weight", w.position_embeddings, {c.max_positions, E}, "(P, E)");
  if (c.type_vocab_size > 0) {
    checks::weight(kBert, "embeddings.token_type_embeddings.weight", w.token_type_embeddings, {c.type_vocab_size, E},
                   "(type_vocab_size, E)");
  } else if (w.token_type_embeddings.size() != 0) {
    throw ShapeError("Bert: embeddings.token_type_embeddings is given but the config has no token types");
  }
  checks::weight(kBert, "embeddings.LayerNorm.weight", w.embeddings_norm.weight, {E}, "(E,)");
  checks::weight(kBert, "embeddings.LayerNorm.bias", w.embeddings_norm.bias, {E}, "(E,)");
  if (c.pooler) {
    checks::weight(kBert, "pooler.dense.weight", w.pooler_weight, {E, E}, "(E, E)");
    checks::weight(kBert, "pooler.dense.bias", w.pooler_bias, {E}, "(E,)");
  } else if (w.pooler_weight.size() != 0 || w.pooler_bias.size() != 0) {
    throw ShapeError("Bert: pooler.dense is given but the config has no pooler");
  }
  const bool first_token = c.num_labels > 0 && c.classifier == BertClassifier::first_token;
  if (c.num_labels < 0 || (c.num_labels > 0 && c.classifier == BertClassifier::pooled && !c.pooler)) {
    throw ConfigError("Bert: num_labels=" + std::to_string(c.num_labels) +
                      " must be >= 0, and a classifier of the pooled output (num_labels > 0) needs the pooler it "
                      "reads");
  }
  if (c.num_labels > 0 && c.classifier == BertClassifier::spans && c.num_labels != 2) {
    throw ConfigError("Bert: a question-answering head (qa_outputs) gives each token 2 logits, a start's and an "
                      "end's; num_labels=" + std::to_string(c.num_labels));
  }
  if (c.padding_idx &&
      (*c.padding_idx < 0 || *c.padding_idx >= c.vocab_size || *c.padding_idx + 1 >= c.max_positions)) {
    throw ConfigError("Bert: padding_idx=" + std::to_string(*c.padding_idx) +
                      " must be a token id below vocab_size=" + std::to_string(c.vocab_size) +
                      " and leave positions after it below max_positions=" + std::to_string(c.max_positions));
  }
  const std::string out = classifier_name(c);
  if (c.num_labels > 0) {
    checks::weight(kBert, out + ".weight", w.classifier_weight, {c.num_labels, E}, "(num_labels, E)");
    checks::weight(kBert, out + ".bias", w.classifier_bias, {c.num_labels}, "(num_labels,)");
  } else if (w.classifier_weight.size() != 0 || w.classifier_bias.size() != 0) {
    throw ShapeError("Bert: classifier is given but the config has no labels (num_labels=0)");
  }
  if (first_token) {
    checks::weight(kBert, "classifier.dense.weight", w.classifier_dense_weight, {E, E}, "(E, E)");
    checks::weight(kBert, "classifier.dense.bias", w.classifier_dense_bias, {E}, "(E,)");
  } else if (w.classifier_dense_weight.size() != 0 || w.classifier_dense_bias.size() != 0) {
    throw ShapeError("Bert: classifier.dense is given but the config's classifier has none (only first_token's has)");
  }
  if (c.masked_lm != w.masked_lm.has_value()) {
    throw ShapeError(std::string("Bert: the config ") + (c.masked_lm ? "has" : "has no") +
                     " masked-LM head but its weights (cls.predictions) are " + (c.masked_lm ? "missing" : "given"));
  }
  if (const auto& m = w.masked_lm) {
    checks::weight(kBert, "cls.predictions.transform.dense.weight", m->dense_weight, {E, E}, "(E, E)");
    checks::weight(kBert, "cls.predictions.transform.dense.bias", m->dense_bias, {E}, "(E,)");
    checks::weight(kBert, "cls.predictions.transform.LayerNorm.weight", m->norm.weight, {E}, "(E,)");
    checks::weight(kBert, "cls.predictions.transform.LayerNorm.bias", m->norm.bias, {E}, "(E,)");
    checks::weight(kBert, "cls.predictions.bias", m->bias, {c.vocab_size}, "(V,)");
    if (m->decoder_weight) {
      checks::weight(kBert, "cls.predictions.decoder.weight", *m->decoder_weight, {c.vocab_size, E}, "(V, E)");
    }
  }
  if (static_cast<int64_t>(w.layers.size()) != c.num_layers) {
    throw ShapeError("Bert: " + std::to_string(w.layers.size()) + " layers of weights for num_layers=" +
                     std::to_string(c.num_layers));
  }
  for (const auto& layer : w.layers) layers_.emplace_back(c.layer, layer);
}

namespace {

// RoBERTa's position ids (B, T) of ids (B, T): padding_idx + 1 + the count of tokens that are
// not padding so far, padding_idx for padding.
Tensor position_ids(const Tensor& ids, int64_t padding_idx) {
  Tensor positions(ids.shape, DType::int64);
  const int64_t T = ids.dim(1);
  for (int64_t b = 0; b < ids.dim(0); ++b) {
    int64_t count = 0;
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b * T + t);
      const bool padding = static_cast<int64_t>(ids.data[i]) == padding_idx;
      if (!padding) ++count;
      positions.data[i] = static_cast<float>(padding ? padding_idx : padding_idx + count);
    }
  }
  return positions;
}

// activation(dense(x[:, 0])): (B, T, E) -> (B, E), as `<scope>.first_token`, `.dense`, `.tanh`
// (or `.relu`)
Value first_token_dense(Backend& backend, const std::string& scope, const Value& x, const Tensor& weight,
                        const Tensor& bias, ActivationStep activation = ActivationStep::tanh) {
  Value first = backend.first_token(scope + ".first_token", x);  // (B, E)
  Value w = backend.upload_matrix(scope + ".dense.weight", weight);
  Value b = backend.upload_weight(scope + ".dense.bias", bias);
  return backend.linear_activation(scope + ".dense", scope + "." + op_name(activation), activation, first, w, &b);
}

}  // namespace

Value Bert::embed(Backend& backend, const Tensor& ids, const std::optional<Value>& token_types) const {
  const auto& w = weights_;
  Value x = backend.embedding("embeddings.word_embeddings", backend.upload("ids", ids),
                              backend.upload_matrix("embeddings.word_embeddings.weight", w.word_embeddings));
  if (token_types) {  // Hugging Face's order: words + token types, then + positions
    Value types =
        backend.embedding("embeddings.token_type_embeddings", *token_types,
                          backend.upload_matrix("embeddings.token_type_embeddings.weight", w.token_type_embeddings));
    x = backend.residual_add("embeddings.add_token_types", x, types);  // (B, T, E)
  }
  if (config_.padding_idx) {  // RoBERTa's: a row per token, by its position id
    Value positions = backend.embedding(
        "embeddings.position_embeddings", backend.upload("position_ids", position_ids(ids, *config_.padding_idx)),
        backend.upload_matrix("embeddings.position_embeddings.weight", w.position_embeddings));
    x = backend.residual_add("embeddings.add_positions", x, positions);
  } else {
    x = backend.positional_encoding(
        "embeddings.position_embeddings", x,
        backend.upload_weight("embeddings.position_embeddings.weight", w.position_embeddings));
  }
  return block::norm_step(backend, "embeddings.LayerNorm", x, w.embeddings_norm, config_.layer.layer_norm_eps);
}

Value Bert::pool(Backend& backend, const Value& x) const {
  return first_token_dense(backend, "pooler", x, weights_.pooler_weight, weights_.pooler_bias);  // (B, E)
}

Value Bert::classifier(Backend& backend, const Value& x) const {
  const auto& w = weights_;
  if (config_.classifier == BertClassifier::first_token) {  // RoBERTa's: dense and tanh, then out_proj
    Value h = first_token_dense(backend, "classifier", x, w.classifier_dense_weight, w.classifier_dense_bias,
                                config_.first_token_activation);
    Value weight = backend.upload_matrix("classifier.out_proj.weight", w.classifier_weight);
    Value bias = backend.upload_weight("classifier.out_proj.bias", w.classifier_bias);
    return backend.linear("classifier.out_proj", h, weight, &bias);  // (B, num_labels)
  }
  const std::string name = classifier_name(config_);  // classifier, or a question answerer's qa_outputs
  Value weight = backend.upload_matrix(name + ".weight", w.classifier_weight);
  Value bias = backend.upload_weight(name + ".bias", w.classifier_bias);
  // on every token (B, T, num_labels), or on the pooler's output (B, num_labels)
  const bool every_token = config_.classifier == BertClassifier::tokens || config_.classifier == BertClassifier::spans;
  return backend.linear(name, every_token ? x : pool(backend, x), weight, &bias);
}

Value Bert::predict_tokens(Backend& backend, const Value& x) const {
  const BertMaskedLMWeights& m = *weights_.masked_lm;
  // tied: the embedding's table, the same kept weight as embed()'s (so named outside the scope)
  Value decoder = m.decoder_weight
                      ? backend.upload_matrix("cls.predictions.decoder.weight", *m.decoder_weight)
                      : backend.upload_matrix("embeddings.word_embeddings.weight", weights_.word_embeddings);
  StepScope head(backend, "cls.predictions");
  Value h = [&] {  // transform: LayerNorm(hidden_act(dense(x))), (B, T, E)
    StepScope transform(backend, "transform");
    Value weight = backend.upload_matrix("dense.weight", m.dense_weight);
    Value bias = backend.upload_weight("dense.bias", m.dense_bias);
    Value dense = block::linear_activate(backend, "dense", x, weight, &bias, config_.layer.activation);
    return block::norm_step(backend, "LayerNorm", dense, m.norm, config_.layer.layer_norm_eps);
  }();
  Value bias = backend.upload_weight("bias", m.bias);
  return backend.linear("decoder", h, decoder, &bias);  // (B, T, V)
}

Bert::Inputs Bert::check_inputs(const std::string& who, const Tensor& ids, const std::optional<Tensor>& token_type_ids,
                                const std::optional<Tensor>& key_padding_mask, AttentionPath path) const {
  const int64_t first_position = config_.padding_idx ? *config_.padding_idx + 1 : 0;
  checks::token_ids(who, ids, config_.vocab_size, first_position, config_.max_positions, "rows of position_embeddings");
  Tensor types(ids.shape, DType::int64);  // zeros: every token of sentence A
  if (token_type_ids && config_.type_vocab_size == 0) {
    throw ShapeError(who + ": token_type_ids are given but this model has none (type_vocab_size=0: DistilBERT's)");
  }
  if (token_type_ids) {
    const Tensor& t = *token_type_ids;
    if (t.dtype != DType::int64 || t.shape != ids.shape) {
      throw ShapeError(who + ": token_type_ids are " + dtype_name(t.dtype) + " " + shape_string(t.shape) +
                       "; they must be int64 of the ids' shape " + shape_string(ids.shape));
    }
    for (size_t i = 0; i < t.data.size(); ++i) {
      if (t.data[i] < 0 || t.data[i] >= static_cast<float>(config_.type_vocab_size)) {
        throw ShapeError(who + ": token type " + std::to_string(static_cast<int64_t>(t.data[i])) + " at index " +
                         std::to_string(i) + " is outside [0, " + std::to_string(config_.type_vocab_size) +
                         ") (type_vocab_size)");
      }
    }
    types = t;
  }
  ForwardOptions attention;
  attention.need_weights = false;
  attention.attention = path;
  if (key_padding_mask) {
    attention.key_padding_mask =
        checks::padding_mask(who, "key_padding_mask", *key_padding_mask, ids.shape, "(B, T)", ids.shape);
  }
  return {std::move(types), std::move(attention)};
}

Value Bert::encode(Backend& b, const Tensor& ids, const Inputs& inputs) const {
  std::optional<Value> types;
  if (config_.type_vocab_size > 0) types = b.upload("token_type_ids", inputs.types);
  Value x = embed(b, ids, types);
  for (size_t i = 0; i < layers_.size(); ++i) {
    StepScope scope(b, "layers." + std::to_string(i));
    x = layers_[i].steps(b, x, inputs.attention);  // (B, T, E)
  }
  return x;
}

BertValues Bert::outputs(Backend& b, const Tensor& ids, const Inputs& inputs) const {
  BertValues out{encode(b, ids, inputs), std::nullopt};
  if (config_.pooler) out.pooler_output = pool(b, out.last_hidden_state);
  return out;
}

BertOutput Bert::forward(Backend& backend, const Tensor& ids, const std::optional<Tensor>& token_type_ids,
                         const std::optional<Tensor>& key_padding_mask, AttentionPath path) const {
  const Inputs inputs = check_inputs("Bert.forward", ids, token_type_ids, key_padding_mask, path);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return in_pass(backend, "bert", [&] {
    backend.preflight("bert", [&](Backend& b) { outputs(b, ids, inputs); });
    const BertValues values = outputs(backend, ids, inputs);
    BertOutput out{backend.download(values.last_hidden_state), std::nullopt};
    if (values.pooler_output) out.pooler_output = backend.download(*values.pooler_output);
    return out;
  });
}

BertValues Bert::forward_on_device(Backend& backend, const Tensor& ids, const std::optional<Tensor>& token_type_ids,
                                   const std::optional<Tensor>& key_padding_mask, AttentionPath path) const {
  const Inputs inputs = check_inputs("Bert.forward_on_device", ids, token_type_ids, key_padding_mask, path);
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return run_pass_on_device(backend, "bert", [&](Backend& b) { return outputs(b, ids, inputs); });
}

Tensor Bert::masked_lm(Backend& backend, const Tensor& ids, const std::optional<Tensor>& token_type_ids,
                       const std::optional<Tensor>& key_padding_mask, AttentionPath path) const {
  if (!config_.masked_lm) {
    throw ConfigError("Bert.masked_lm: this BERT has no masked-LM head (cls.predictions: BertForMaskedLM's)");
  }
  const Inputs inputs = check_inputs("Bert.masked_lm", ids, token_type_ids, key_padding_mask, path);
  auto recipe = [&](Backend& b) { return predict_tokens(b, encode(b, ids, inputs)); };
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return run_pass(backend, "bert_masked_lm", recipe);
}

Tensor Bert::classify(Backend& backend, const Tensor& ids, const std::optional<Tensor>& token_type_ids,
                      const std::optional<Tensor>& key_padding_mask, AttentionPath path) const {
  if (config_.num_labels == 0) {
    throw ConfigError(
        "Bert.classify: this BERT has no classifier (BertForSequenceClassification's or "
        "BertForTokenClassification's head: classifier.weight)");
  }
  const Inputs inputs = check_inputs("Bert.classify", ids, token_type_ids, key_padding_mask, path);
  auto recipe = [&](Backend& b) { return classifier(b, encode(b, ids, inputs)); };
  KeepWeights keep(backend, kept_on(backend), weights_owner());
  return run_pass(backend, "bert_classify", recipe);
}

uint64_t Bert::parameter_count() const {
  auto count = [](const Tensor& t) { return static_cast<uint64_t>(t.size()); };
  const auto& w = weights_;
  uint64_t n = count(w.word_embeddings) + count(w.position_embeddings) + count(w.token_type_embeddings) +
               count(w.embeddings_norm.weight) + count(w.embeddings_norm.bias) + count(w.pooler_weight) +
               count(w.pooler_bias) + count(w.classifier_weight) + count(w.classifier_bias) +
               count(w.classifier_dense_weight) + count(w.classifier_dense_bias);
  for (const auto& layer : w.layers) n += layer.parameter_count();
  if (const auto& m = w.masked_lm) {
    n += count(m->dense_weight) + count(m->dense_bias) + count(m->norm.weight) + count(m->norm.bias) + count(m->bias);
    if (m->decoder_weight) n += count(*m->decoder_weight);
  }
  return n;
}

std::string Bert::describe() const {
  const auto& c = config_;
  const auto& l = c.layer;
  std::ostringstream out;
  out << "vocab " << c.vocab_size << ", " << c.max_positions << " positions";
  if (c.padding_idx) out << " (counted from " << *c.padding_idx + 1 << ")";
  if (c.type_vocab_size > 0) {
    out << ", " << c.type_vocab_size << (c.type_vocab_size == 1 ? " token type" : " token types");
  }
  out << ", " << c.num_layers << " × TransformerEncoderLayer(d_model=" << l.d_model << ", nhead=" << l.nhead
      << ",\n  dim_feedforward=" << l.dim_feedforward << ", " << activation_name(l.activation) << ", post-norm)"
      << (c.pooler ? ", pooler" : "") << (c.masked_lm ? ", masked-LM head" : "");
  if (c.num_labels > 0 && c.classifier == BertClassifier::spans) {
    out << ", question-answering head (qa_outputs)";
  } else if (c.num_labels > 0) {
    out << (c.classifier == BertClassifier::tokens ? ", token classifier of " : ", classifier of ") << c.num_labels
        << (c.num_labels == 1 ? " label" : " labels");
  }
  return out.str();
}

}  // namespace vkattn
