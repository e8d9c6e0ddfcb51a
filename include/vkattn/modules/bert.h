#pragma once
// Bert: BERT's encoder — Hugging Face's BertModel, and RoBERTa's and DistilBERT's (the same but
// for their positions, token types and heads) — as a recipe of steps:
//   embeddings.word_embeddings (embedding)              ids (B, T) -> (B, T, E)
//   embeddings.token_type_embeddings (embedding)        token_type_ids (B, T) -> (B, T, E)
//   embeddings.add_token_types (residual_add)           words + token types (not DistilBERT's:
//                                                       type_vocab_size 0)
//   embeddings.position_embeddings (positional_encoding)  + a learnt row per position 0 … T-1
//     or, RoBERTa's (config.padding_idx), (embedding)   position ids (B, T) -> (B, T, E): the row
//     and embeddings.add_positions (residual_add)       of each token's position, counted from
//                                                       padding_idx + 1 over the tokens that are
//                                                       not padding; padding_idx's for padding
//   embeddings.LayerNorm (layer_norm)
//   layers.N.…                                          post-norm TransformerEncoderLayer with
//                                                       exact gelu: norm1(x + self_attn(x)), …
//   pooler.first_token, pooler.dense (linear),          tanh(dense(x[:, 0])): the [CLS] row
//     pooler.tanh
// and, for masked_lm() (BertForMaskedLM's head, cls.predictions), from the last hidden state:
//   cls.predictions.transform.dense (linear), …gelu,    (B, T, E) -> (B, T, E)
//     …LayerNorm (layer_norm)
//   cls.predictions.decoder (linear)                    -> (B, T, V): · word_embeddingsᵀ + bias
// and, for classify(), as config.classifier says: BertForSequenceClassification's head, from the
// pooler's output,
//   classifier (linear)                                 (B, E) -> (B, num_labels): the logits
// or RobertaForSequenceClassification's (DistilBertForSequenceClassification's), on the first token,
//   classifier.first_token, classifier.dense (linear),  tanh(dense(x[:, 0])): (B, T, E) -> (B, E)
//     classifier.tanh (classifier.relu)
//   classifier.out_proj (linear)                        (B, E) -> (B, num_labels): the logits
// or a …ForTokenClassification's, on every token,
//   classifier (linear)                                 (B, T, E) -> (B, T, num_labels)
// or a …ForQuestionAnswering's, on every token,
//   qa_outputs (linear)                                 (B, T, E) -> (B, T, 2): each token's logits
//                                                       of starting and of ending the answer
// Padding is a key_padding_mask (True = padding), as torch's: Hugging Face's attention_mask is its
// opposite (1 = a token to attend to). Padded positions are computed like any other; no query
// attends to them. Dropout is the identity (eval mode).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/keeps_weights.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tensor.h"

namespace vkattn {

// The classifier a Bert with labels (num_labels > 0) has: Hugging Face's heads.
enum class BertClassifier {
  pooled,       // BertForSequenceClassification's: a linear layer on the pooler's output
  first_token,  // RobertaForSequenceClassification's: dense and tanh on the first token, then out_proj
                // (DistilBertForSequenceClassification's: relu)
  tokens,       // BertForTokenClassification's, RobertaForTokenClassification's: a linear layer on
                // every token's hidden state
  spans,        // …ForQuestionAnswering's qa_outputs: a linear layer on every token's hidden state to
                // its two logits, of starting and of ending the answer (num_labels 2; io::answers)
};

// Hugging Face's config.json names in the comments.
struct BertConfig {
  int64_t vocab_size = 0;         // V                                   vocab_size
  int64_t max_positions = 0;      // P: the longest sequence             max_position_embeddings
  int64_t type_vocab_size = 2;    // the token types (sentence A, B)     type_vocab_size
                                  // (0: none, DistilBERT's)
  int64_t num_layers = 1;         //                                     num_hidden_layers
  TransformerEncoderLayerConfig layer;  // E hidden_size, H num_attention_heads, F intermediate_size,
                                        // gelu (hidden_act), layer_norm_eps, post-norm
  bool pooler = true;             // BertModel(add_pooling_layer=True)
  bool masked_lm = false;         // BertForMaskedLM's head (cls.predictions)
  int64_t num_labels = 0;         // the classifier's labels; 0: none                num_labels, id2label
  BertClassifier classifier = BertClassifier::pooled;  // which, where num_labels > 0
  ActivationStep first_token_activation = ActivationStep::tanh;  // first_token's, after its dense layer
  // RoBERTa's positions (Hugging Face's create_position_ids_from_input_ids): a token whose id is
  // not padding_idx takes the row padding_idx + 1 + the number of such tokens before it, a padding
  // token the row padding_idx. None: rows 0 … T-1, BERT's.
  std::optional<int64_t> padding_idx;  //                                pad_token_id (RoBERTa's)
};

// BertForMaskedLM's head (cls.predictions): the vocabulary's scores of each position.
struct BertMaskedLMWeights {
  Tensor dense_weight, dense_bias;  // (E, E), (E,): transform.dense
  LayerNormWeights norm;            // (E,) each: transform.LayerNorm
  Tensor bias;                      // (V,): predictions.bias (the decoder's)
  std::optional<Tensor> decoder_weight;  // (V, E) when not tied to embeddings.word_embeddings
};

struct BertWeights {
  Tensor word_embeddings;        // (V, E)   embeddings.word_embeddings.weight
  Tensor position_embeddings;    // (P, E)   embeddings.position_embeddings.weight
  Tensor token_type_embeddings;  // (types, E)  embeddings.token_type_embeddings.weight
  LayerNormWeights embeddings_norm;  // (E,) each: embeddings.LayerNorm
  std::vector<TransformerEncoderLayerWeights> layers;  // encoder.layer.N.… under torch's names
  Tensor pooler_weight, pooler_bias;  // (E, E), (E,): pooler.dense; none without the pooler
  std::optional<BertMaskedLMWeights> masked_lm;  // with config.masked_lm
  Tensor classifier_weight, classifier_bias;     // (num_labels, E), (num_labels,): classifier; none without
                                                 // (first_token's: classifier.out_proj)
  Tensor classifier_dense_weight, classifier_dense_bias;  // (E, E), (E,): classifier.dense, first_token's

  // Embeddings U(-1, 1), linear weights U(-1/√in, 1/√in), norms 1 ± 0.25 and ± 0.25, from `seed`.
  static BertWeights random(const BertConfig& config, uint32_t seed);
};

struct BertOutput {
  Tensor last_hidden_state;             // (B, T, E)
  std::optional<Tensor> pooler_output;  // (B, E), with the pooler
};

// BertOutput left on the backend (Bert::forward_on_device)
struct BertValues {
  Value last_hidden_state;             // (B, T, E)
  std::optional<Value> pooler_output;  // (B, E), with the pooler
};

class Bert : public KeepsWeights {
 public:
  // Validates the config (ConfigError) and every weight's shape (ShapeError naming it).
  Bert(BertConfig config, BertWeights weights);

  const BertConfig& config() const { return config_; }
  const BertWeights& weights() const { return weights_; }

  // ids (B, T) int64; token_type_ids (B, T) int64 in [0, type_vocab_size), zeros when absent
  // (none where the model has no token types);
  // key_padding_mask (B, T), bool True = padding, or float added; `attention` each layer's path
  // (LanguageModel::forward's). One traced pass "bert".
  BertOutput forward(Backend& backend, const Tensor& ids, const std::optional<Tensor>& token_type_ids = {},
                     const std::optional<Tensor>& key_padding_mask = {},
                     AttentionPath attention = AttentionPath::automatic) const;
  // forward()'s pass with its outputs left on `backend` (Backend::download reads them back), for
  // a module there to take as they lie (MultiHeadAttention::forward on Values): the ids cross to
  // the device, nothing comes back. Torch's BertModel on CUDA.
  BertValues forward_on_device(Backend& backend, const Tensor& ids, const std::optional<Tensor>& token_type_ids = {},
                               const std::optional<Tensor>& key_padding_mask = {},
                               AttentionPath attention = AttentionPath::automatic) const;

  // BertForMaskedLM's logits (B, T, V) of the same inputs: what the vocabulary would put at each
  // position ([MASK]'s fill is its likeliest). ConfigError when the checkpoint has no such head.
  // One traced pass "bert_masked_lm".
  Tensor masked_lm(Backend& backend, const Tensor& ids, const std::optional<Tensor>& token_type_ids = {},
                   const std::optional<Tensor>& key_padding_mask = {},
                   AttentionPath attention = AttentionPath::automatic) const;

  // The classifier's logits of the same inputs (config.classifier): a sequence classifier's
  // (B, num_labels) (softmax them for single-label classification, sigmoid for multi-label; one
  // label is a regression's value), a token classifier's (B, T, num_labels) (a label for each
  // token: a named entity's part, say), a question-answering head's (B, T, 2) (each token's
  // logits of starting and of ending the answer: io::answers reads them). ConfigError when the
  // checkpoint has no classifier. One traced pass "bert_classify".
  Tensor classify(Backend& backend, const Tensor& ids, const std::optional<Tensor>& token_type_ids = {},
                  const std::optional<Tensor>& key_padding_mask = {},
                  AttentionPath attention = AttentionPath::automatic) const;

  int64_t vocab_size() const { return config_.vocab_size; }
  // The most tokens a sequence may have: max_positions, less RoBERTa's rows up to padding_idx
  int64_t max_tokens() const { return config_.max_positions - (config_.padding_idx ? *config_.padding_idx + 1 : 0); }
  uint64_t parameter_count() const;
  // Its layers in a line or two: "vocab 30522, 512 positions, 12 × TransformerEncoderLayer(…)"
  std::string describe() const;

 private:
  // word + token type + position embeddings, then embeddings.LayerNorm: (B, T, E)
  Value embed(Backend& backend, const Tensor& ids, const std::optional<Value>& token_types) const;
  // The classifier's logits (B, num_labels) or (B, T, num_labels) from the last hidden state (B, T, E)
  Value classifier(Backend& backend, const Value& x) const;
  // pooler.dense and tanh on each sequence's first row: (B, T, E) -> (B, E)
  Value pool(Backend& backend, const Value& x) const;
  // cls.predictions on the last hidden state: (B, T, E) -> (B, T, V)
  Value predict_tokens(Backend& backend, const Value& x) const;
  // forward()'s and masked_lm()'s inputs checked: the token types (zeros when absent) and the
  // layers' options
  struct Inputs {
    Tensor types;
    ForwardOptions attention;
  };
  Inputs check_inputs(const std::string& who, const Tensor& ids, const std::optional<Tensor>& token_type_ids,
                      const std::optional<Tensor>& key_padding_mask, AttentionPath path) const;
  // The encoder's steps: embeddings and layers -> the last hidden state (B, T, E)
  Value encode(Backend& backend, const Tensor& ids, const Inputs& inputs) const;
  // forward()'s steps: encode(), then the pooler where the model has one
  BertValues outputs(Backend& backend, const Tensor& ids, const Inputs& inputs) const;

  BertConfig config_;
  BertWeights weights_;
  std::vector<TransformerEncoderLayer> layers_;
};

}  // namespace vkattn
