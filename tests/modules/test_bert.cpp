// BERT as the hub lays it out: models/tiny_bert (BertForMaskedLM's file, F16, vocab.txt) against
// torch's last_hidden_state and pooler_output for two texts batched with padding and for a pair
// of sentences with their token types, on the GPU and the reference; the module's own checks;
// and a one-line error naming the file, entry or tensor for each way a folder can be wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "tests/support/checkpoint_folder.h"
#include "tests/support/expect_error.h"
#include "tests/support/gpu.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/tolerance.h"
#include "vkattn/errors.h"
#include "vkattn/io/pretrained.h"
#include "vkattn/io/safetensors.h"
#include "vkattn/modules/bert.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {
namespace {

using nlohmann::json;
using testing::copy_of;
using testing::expect_error;
using testing::rewrite_config;
namespace fs = std::filesystem;

const fs::path kTinyBert = fs::path(VKATTN_SOURCE_DIR) / "models/tiny_bert";

Tensor int64_tensor(const json& rows) {
  const auto values = rows.get<std::vector<std::vector<int64_t>>>();
  std::vector<float> data;
  for (const auto& row : values) data.insert(data.end(), row.begin(), row.end());
  return Tensor({static_cast<int64_t>(values.size()), static_cast<int64_t>(values[0].size())}, data, DType::int64);
}

// torch's padding (attention_mask: 1 = a token) as vkattn's key_padding_mask (True = padding)
Tensor padding_of(const json& attention_mask) {
  Tensor mask = int64_tensor(attention_mask);
  mask.dtype = DType::boolean;
  for (float& v : mask.data) v = v == 0 ? 1.0f : 0.0f;
  return mask;
}

float max_difference(const Tensor& got, const json& want) {
  const auto w = want.get<std::vector<float>>();
  EXPECT_EQ(got.data.size(), w.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(got.data.size(), w.size()); ++i) worst = std::max(worst, std::abs(got.data[i] - w[i]));
  return worst;
}

class BertCheckpoint : public testing::GpuTest {};

// x (rows, in) · weightᵀ + bias (out, in), (out,), worked in double: (rows, out), each then put
// through `then` (the identity by default).
std::vector<double> affine(const std::vector<double>& x, const Tensor& weight, const Tensor& bias,
                           double (*then)(double) = [](double v) { return v; }) {
  const size_t out = bias.data.size(), in = weight.data.size() / out;
  std::vector<double> y;
  for (size_t r = 0; r < x.size() / in; ++r) {
    for (size_t o = 0; o < out; ++o) {
      double sum = bias.data[o];
      for (size_t i = 0; i < in; ++i) sum += x[r * in + i] * weight.data[o * in + i];
      y.push_back(then(sum));
    }
  }
  return y;
}

TEST_F(BertCheckpoint, TinyBertMatchesTorchsHiddenStatesAndPooledOutputOnBothBackends) {
  const io::Pretrained p = io::load_pretrained(kTinyBert);
  const json e = testing::read_json(kTinyBert / "expected.json");
  EXPECT_EQ(p.architecture, "BertForMaskedLM");
  EXPECT_EQ(p.stored_dtype, "F16");
  ASSERT_TRUE(p.encoder);
  EXPECT_FALSE(p.model);
  EXPECT_TRUE(p.encoder->config().pooler);
  EXPECT_EQ(p.encoder->config().layer.activation, Activation::gelu);
  // the C++ WordPiece on the vocabulary train.py wrote, against its Python one
  const auto& batch = e["batch"];
  for (size_t i = 0; i < 2; ++i) {
    auto ids = batch["ids"][i].get<std::vector<int64_t>>();
    ids.resize(static_cast<size_t>(std::count(batch["attention_mask"][i].begin(), batch["attention_mask"][i].end(), 1)));
    EXPECT_EQ(p.tokenizer->encode(e["texts"][i].get<std::string>()), ids);
  }
  const Tensor ids = int64_tensor(batch["ids"]), padding = padding_of(batch["attention_mask"]);
  const auto& pair = e["pair_case"];
  // and its pair of sentences: [CLS] A [SEP] B [SEP] with token types 0 … 0 1 … 1
  const text::EncodedPair joined = p.tokenizer->encode_pair(e["pair"][0].get<std::string>(), e["pair"][1].get<std::string>());
  EXPECT_EQ(joined.ids, pair["ids"][0].get<std::vector<int64_t>>());
  EXPECT_EQ(joined.type_ids, pair["token_type_ids"][0].get<std::vector<int64_t>>());
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    const BertOutput out = p.encoder->forward(*backend, ids, std::nullopt, padding);
    EXPECT_EQ(out.last_hidden_state.shape, (Shape{2, ids.dim(1), 64}));
    EXPECT_LT(max_difference(out.last_hidden_state, batch["last_hidden_state"]), 1e-4f) << backend->name();
    ASSERT_TRUE(out.pooler_output);
    EXPECT_LT(max_difference(*out.pooler_output, batch["pooler_output"]), 1e-4f) << backend->name();
    const BertOutput two = p.encoder->forward(*backend, int64_tensor(pair["ids"]), int64_tensor(pair["token_type_ids"]));
    EXPECT_LT(max_difference(two.last_hidden_state, pair["last_hidden_state"]), 1e-4f) << backend->name();
    EXPECT_LT(max_difference(*two.pooler_output, pair["pooler_output"]), 1e-4f) << backend->name();
  }
  // the token types change the numbers (they are read, not zeros)
  const BertOutput zeros = p.encoder->forward(cpu(), int64_tensor(pair["ids"]));
  EXPECT_GT(max_difference(zeros.last_hidden_state, pair["last_hidden_state"]), 1e-2f);
  // the padding too: without it the first row of the shorter text sees the [PAD]s
  const BertOutput unpadded = p.encoder->forward(cpu(), ids);
  EXPECT_GT(max_difference(unpadded.last_hidden_state, batch["last_hidden_state"]), 1e-2f);
}

// forward_on_device leaves the hidden states and the pooled output on the backend — the forward's
// numbers bit for bit once read back, torch's within 1e-4, nothing read back before — and a
// module there takes them as they lie: attention pooling over BERT's tokens (the head a user
// trains on top), the same as on the host's copy.
TEST_F(BertCheckpoint, ItsOutputsStayOnTheDeviceForTheNextModule) {
  io::Pretrained p = io::load_pretrained(kTinyBert);
  const json e = testing::read_json(kTinyBert / "expected.json");
  const auto& batch = e["batch"];
  const Tensor ids = int64_tensor(batch["ids"]), padding = padding_of(batch["attention_mask"]);
  MultiHeadAttention head({.embed_dim = 64, .num_heads = 4, .batch_first = true});
  const ForwardOptions o{.key_padding_mask = padding, .need_weights = false};
  for (Backend* b : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    SCOPED_TRACE(b->name());
    p.encoder->keep_weights_on(*b);
    head.keep_weights_on(*b);
    const BertOutput want = p.encoder->forward(*b, ids, std::nullopt, padding);
    const Tensor pooled_want = head.forward(*b, want.last_hidden_state, o).output;
    const uint64_t down = b->downloaded_bytes();
    const BertValues got = p.encoder->forward_on_device(*b, ids, std::nullopt, padding);
    const Value& x = got.last_hidden_state;
    const Value pooled = head.forward(*b, x, x, x, o).output;
    EXPECT_EQ(b->downloaded_bytes(), down) << "nothing is read back";
    EXPECT_EQ(x.shape, (Shape{2, ids.dim(1), 64}));
    const Tensor hidden = b->download(x);
    EXPECT_EQ(hidden.data, want.last_hidden_state.data);
    EXPECT_LT(max_difference(hidden, batch["last_hidden_state"]), 1e-4f);
    ASSERT_TRUE(got.pooler_output);
    EXPECT_EQ(b->download(*got.pooler_output).data, want.pooler_output->data);
    EXPECT_TRUE(testing::all_close(b->download(pooled), pooled_want, {.atol = 1e-5f, .rtol = 1e-5f}));
  }
  expect_error<ShapeError>([&] { p.encoder->forward_on_device(cpu(), ids, std::nullopt, ids); },
                           {"Bert.forward_on_device"});
}

// The trace lists the recipe's steps under BERT's names, each with its op.
TEST_F(BertCheckpoint, EveryStepIsTracedUnderItsName) {
  const io::Pretrained p = io::load_pretrained(kTinyBert);
  StepRecorder recorder(false);
  gpu().add_tracer(recorder);
  p.encoder->forward(gpu(), Tensor({1, 3}, {2, 7, 3}, DType::int64));
  gpu().remove_tracer(recorder);
  EXPECT_EQ(recorder.pass(), "bert");
  std::vector<std::string> names;
  for (const auto& s : recorder.steps()) names.push_back(s.event.name + " " + s.event.op);
  for (const char* step : {"embeddings.word_embeddings embedding", "embeddings.token_type_embeddings embedding",
                           "embeddings.add_token_types residual_add",
                           "embeddings.position_embeddings positional_encoding", "embeddings.LayerNorm layer_norm",
                           "layers.1.self_attn.q_proj linear", "layers.1.norm1 layer_norm", "layers.1.gelu gelu",
                           "layers.1.norm2 layer_norm", "pooler.first_token first_token", "pooler.dense linear",
                           "pooler.tanh tanh"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), step), names.end()) << step;
  }
  EXPECT_EQ(names.back(), "pooler.tanh tanh");
}

// BertForMaskedLM's head (cls.predictions), traced under its names, against the same arithmetic
// written out here from the last hidden state: LayerNorm(gelu(x · Wᵀ + b)) · word_embeddingsᵀ + bias
// (python/tests/test_bert.py holds it to torch's BertForMaskedLM too).
TEST_F(BertCheckpoint, TheMaskedLMHeadGivesTheVocabularysScoresOnBothBackends) {
  const io::Pretrained p = io::load_pretrained(kTinyBert);
  const Bert& bert = *p.encoder;
  ASSERT_TRUE(bert.config().masked_lm);
  EXPECT_NE(bert.describe().find("masked-LM head"), std::string::npos);
  const Tensor ids({1, 5}, {2, 7, 4, 9, 3}, DType::int64);  // [CLS] … [MASK] … [SEP]
  StepRecorder recorder(false);
  gpu().add_tracer(recorder);
  const Tensor logits = bert.masked_lm(gpu(), ids);
  gpu().remove_tracer(recorder);
  EXPECT_EQ(recorder.pass(), "bert_masked_lm");
  std::vector<std::string> names;
  for (const auto& s : recorder.steps()) names.push_back(s.event.name + " " + s.event.op);
  const std::vector<std::string> head{"cls.predictions.transform.dense linear", "cls.predictions.transform.gelu gelu",
                                      "cls.predictions.transform.LayerNorm layer_norm", "cls.predictions.decoder linear"};
  ASSERT_GE(names.size(), head.size());
  EXPECT_EQ(std::vector<std::string>(names.end() - 4, names.end()), head);

  const int64_t T = 5, E = 64, V = bert.vocab_size();
  ASSERT_EQ(logits.shape, (Shape{1, T, V}));
  const Tensor x = bert.forward(cpu(), ids).last_hidden_state;
  const auto& m = *bert.weights().masked_lm;
  const auto& table = bert.weights().word_embeddings;
  float worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> h(E);
    for (int64_t o = 0; o < E; ++o) {
      double v = m.dense_bias.data[o];
      for (int64_t i = 0; i < E; ++i) v += double(x.data[t * E + i]) * m.dense_weight.data[o * E + i];
      h[o] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    }
    double mean = 0, variance = 0;
    for (double v : h) mean += v / E;
    for (double v : h) variance += (v - mean) * (v - mean) / E;
    for (int64_t o = 0; o < E; ++o) {
      h[o] = (h[o] - mean) / std::sqrt(variance + bert.config().layer.layer_norm_eps) * m.norm.weight.data[o] +
             m.norm.bias.data[o];
    }
    for (int64_t v = 0; v < V; ++v) {
      double want = m.bias.data[v];
      for (int64_t o = 0; o < E; ++o) want += h[o] * table.data[v * E + o];
      worst = std::max(worst, float(std::abs(want - logits.data[t * V + v])));
    }
  }
  EXPECT_LT(worst, 1e-4f);
  const Tensor on_cpu = bert.masked_lm(cpu(), ids);
  EXPECT_TRUE(testing::all_close(logits, on_cpu));
}

// BertForSequenceClassification's head: classifier (num_labels, E) on the pooler's output, GPU and
// reference against the pooled output times the classifier by hand; its checks by name (the
// Python tests hold it to torch's logits).
TEST_F(BertCheckpoint, TheClassifierScoresThePooledOutputOnBothBackends) {
  BertConfig config{.vocab_size = 13,
                    .max_positions = 9,
                    .num_layers = 2,
                    .layer = {.d_model = 12, .nhead = 3, .dim_feedforward = 17, .activation = Activation::gelu},
                    .num_labels = 3};
  const Bert bert(config, BertWeights::random(config, 4));
  const Tensor ids({2, 5}, {2, 7, 3, 11, 1, 4, 4, 12, 0, 9}, DType::int64);
  const Tensor padding({2, 5}, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, DType::boolean);
  const Tensor pooled = *bert.forward(cpu(), ids, std::nullopt, padding).pooler_output;  // (2, E)
  const auto& w = bert.weights();
  const auto logits_by_hand = affine({pooled.data.begin(), pooled.data.end()}, w.classifier_weight, w.classifier_bias);
  const Tensor want({2, 3}, {logits_by_hand.begin(), logits_by_hand.end()});
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    const Tensor logits = bert.classify(*backend, ids, std::nullopt, padding);
    EXPECT_EQ(logits.shape, (Shape{2, 3})) << backend->name();
    EXPECT_TRUE(testing::all_close(logits, want)) << backend->name();
  }
  EXPECT_NE(bert.describe().find("classifier of 3 labels"), std::string::npos) << bert.describe();
  BertWeights wrong = bert.weights();
  wrong.classifier_bias = Tensor({2});
  expect_error<ShapeError>([&] { Bert(config, wrong); }, {"classifier.bias", "(2,)", "(num_labels,) = (3,)"});
  config.pooler = false;
  expect_error<ConfigError>([&] { Bert(config, BertWeights::random(config, 1)); },
                            {"num_labels=3", "a classifier of the pooled output (num_labels > 0) needs the pooler"});
  const io::Pretrained p = io::load_pretrained(kTinyBert);
  expect_error<ConfigError>([&] { p.encoder->classify(cpu(), ids); },
                            {"Bert.classify: this BERT has no classifier (BertForSequenceClassification's"});
}

// RoBERTa's recipe: each token's position row by its id (padding_idx + 1 on over the tokens that
// are not padding, padding_idx for padding, wherever the padding is), and its classification head
// (dense and tanh on the first token, then out_proj), on both backends; worked by hand here
// (python/tests/test_roberta.py holds it to torch).
TEST_F(BertCheckpoint, RobertasPositionsAndClassifierRunOnBothBackends) {
  BertConfig config{.vocab_size = 13,
                    .max_positions = 9,
                    .type_vocab_size = 1,
                    .num_layers = 2,
                    .layer = {.d_model = 12, .nhead = 3, .dim_feedforward = 17, .activation = Activation::gelu},
                    .pooler = false,
                    .num_labels = 3,
                    .classifier = BertClassifier::first_token,
                    .padding_idx = 1};
  const Bert bert(config, BertWeights::random(config, 4));
  const auto& w = bert.weights();
  // padded on the right, on the left, and a padding id inside a sequence
  const Tensor ids({3, 5}, {2, 7, 3, 1, 1, 1, 1, 4, 12, 9, 5, 1, 6, 0, 8}, DType::int64);
  const Tensor padding({3, 5}, {0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}, DType::boolean);
  const std::vector<int64_t> positions{2, 3, 4, 1, 1, 1, 1, 2, 3, 4, 2, 1, 3, 4, 5};
  std::optional<Tensor> hidden[2], logits[2];
  int i = 0;
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    StepRecorder recorder(true);
    backend->add_tracer(recorder);
    const BertOutput out = bert.forward(*backend, ids, std::nullopt, padding);
    backend->remove_tracer(recorder);
    EXPECT_FALSE(out.pooler_output.has_value()) << "no pooler";
    const auto rows = std::find_if(recorder.steps().begin(), recorder.steps().end(),
                                   [](const auto& s) { return s.event.name == "embeddings.position_embeddings"; });
    ASSERT_NE(rows, recorder.steps().end()) << backend->name();
    EXPECT_EQ(rows->event.op, "embedding");
    ASSERT_EQ(rows->values->shape, (Shape{3, 5, 12}));
    for (size_t t = 0; t < positions.size(); ++t) {
      for (int64_t e = 0; e < 12; ++e) {
        ASSERT_EQ(rows->values->data[t * 12 + e], w.position_embeddings.data[positions[t] * 12 + e])
            << backend->name() << ": token " << t << " takes position " << positions[t];
      }
    }
    hidden[i] = out.last_hidden_state;
    logits[i++] = bert.classify(*backend, ids, std::nullopt, padding);
  }
  EXPECT_TRUE(testing::all_close(*hidden[0], *hidden[1], {1e-5f, 1e-4f}));
  // out_proj(tanh(dense(x[:, 0]))) from the reference's hidden state, in double
  std::vector<double> first_rows;
  for (int64_t b = 0; b < 3; ++b) {
    const auto row = hidden[1]->data.begin() + b * 5 * 12;
    first_rows.insert(first_rows.end(), row, row + 12);
  }
  const auto h =
      affine(first_rows, w.classifier_dense_weight, w.classifier_dense_bias, [](double v) { return std::tanh(v); });
  const auto logits_by_hand = affine(h, w.classifier_weight, w.classifier_bias);
  const Tensor want({3, 3}, {logits_by_hand.begin(), logits_by_hand.end()});
  for (const auto& got : logits) EXPECT_TRUE(testing::all_close(*got, want, {1e-5f, 1e-4f}));
  EXPECT_NE(bert.describe().find("9 positions (counted from 2)"), std::string::npos) << bert.describe();
  // the longest sequence leaves padding_idx + 1 rows before its first position
  const Tensor longest({1, 7}, std::vector<float>(7, 5.0f), DType::int64);
  const Tensor too_long({1, 8}, std::vector<float>(8, 5.0f), DType::int64);
  EXPECT_NO_THROW(bert.forward(cpu(), longest));
  expect_error<ShapeError>([&] { bert.forward(cpu(), too_long); },
                           {"Bert.forward: positions 2 … 9 go past the 9 rows of position_embeddings"});
  for (int64_t bad : {-1, 8, 13}) {
    BertConfig wrong = config;
    wrong.padding_idx = bad;
    expect_error<ConfigError>([&] { Bert(wrong, BertWeights::random(config, 1)); },
                              {"padding_idx=" + std::to_string(bad), "must be a token id below vocab_size=13"});
  }
  BertWeights no_dense = w;
  no_dense.classifier_dense_weight = Tensor();
  expect_error<ShapeError>([&] { Bert(config, no_dense); }, {"classifier.dense.weight"});
  BertConfig tokens = config;
  tokens.classifier = BertClassifier::tokens;
  expect_error<ShapeError>([&] { Bert(tokens, w); },
                           {"classifier.dense is given but the config's classifier has none"});
}

// DistilBERT's recipe: no token types (no step for them, and token_type_ids refused), and its
// sequence classifier's relu after the dense layer on the first token, on both backends.
TEST_F(BertCheckpoint, DistilBertsEncoderHasNoTokenTypesAndItsClassifierARelu) {
  BertConfig config{.vocab_size = 13,
                    .max_positions = 9,
                    .type_vocab_size = 0,
                    .num_layers = 1,
                    .layer = {.d_model = 12, .nhead = 3, .dim_feedforward = 17, .activation = Activation::gelu},
                    .pooler = false,
                    .num_labels = 2,
                    .classifier = BertClassifier::first_token,
                    .first_token_activation = ActivationStep::relu};
  const Bert bert(config, BertWeights::random(config, 8));
  const auto& w = bert.weights();
  const Tensor ids({2, 4}, {2, 7, 3, 11, 1, 4, 0, 0}, DType::int64);
  const Tensor padding({2, 4}, {0, 0, 0, 0, 0, 0, 1, 1}, DType::boolean);
  StepRecorder recorder(false);
  gpu().add_tracer(recorder);
  const Tensor logits = bert.classify(gpu(), ids, std::nullopt, padding);
  gpu().remove_tracer(recorder);
  std::vector<std::string> names;
  for (const auto& s : recorder.steps()) names.push_back(s.event.name);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 3),
            (std::vector<std::string>{"embeddings.word_embeddings", "embeddings.position_embeddings",
                                      "embeddings.LayerNorm"}));
  EXPECT_NE(std::find(names.begin(), names.end(), "classifier.relu"), names.end());
  const Tensor hidden = bert.forward(cpu(), ids, std::nullopt, padding).last_hidden_state;  // (2, 4, E)
  std::vector<double> first_rows;
  for (int64_t b = 0; b < 2; ++b) {
    const auto row = hidden.data.begin() + b * 4 * 12;
    first_rows.insert(first_rows.end(), row, row + 12);
  }
  const auto h =
      affine(first_rows, w.classifier_dense_weight, w.classifier_dense_bias, [](double v) { return std::max(v, 0.0); });
  const auto logits_by_hand = affine(h, w.classifier_weight, w.classifier_bias);
  const Tensor want({2, 2}, {logits_by_hand.begin(), logits_by_hand.end()});
  EXPECT_TRUE(testing::all_close(logits, want, {1e-5f, 1e-4f}));
  EXPECT_TRUE(testing::all_close(bert.classify(cpu(), ids, std::nullopt, padding), want, {1e-5f, 1e-4f}));
  EXPECT_EQ(bert.describe().find("token type"), std::string::npos) << bert.describe();
  expect_error<ShapeError>(
      [&] {
        bert.forward(cpu(), ids, Tensor({2, 4}, DType::int64));
      },
      {"token_type_ids are given but this model has none (type_vocab_size=0"});
  BertConfig gelu = config;
  gelu.first_token_activation = ActivationStep::gelu;
  expect_error<ConfigError>([&] { Bert(gelu, w); }, {"first_token_activation gelu is not tanh or relu"});
  BertWeights types = w;
  types.token_type_embeddings = Tensor({1, 12});
  expect_error<ShapeError>([&] { Bert(config, types); }, {"token_type_embeddings is given but the config has no"});
}

// BertForTokenClassification's head (and RobertaForTokenClassification's): classifier (num_labels,
// E) on every token's hidden state, no pooler, (B, T, num_labels) on both backends against the
// product worked here in double.
TEST_F(BertCheckpoint, ATokenClassifierScoresEveryToken) {
  BertConfig config{.vocab_size = 13,
                    .max_positions = 9,
                    .num_layers = 1,
                    .layer = {.d_model = 12, .nhead = 3, .dim_feedforward = 17, .activation = Activation::gelu},
                    .pooler = false,
                    .num_labels = 5,
                    .classifier = BertClassifier::tokens};
  const Bert bert(config, BertWeights::random(config, 6));
  const auto& w = bert.weights();
  const Tensor ids({2, 3}, {2, 7, 3, 11, 1, 0}, DType::int64);
  const Tensor padding({2, 3}, {0, 0, 0, 0, 0, 1}, DType::boolean);
  const Tensor hidden = bert.forward(cpu(), ids, std::nullopt, padding).last_hidden_state;  // (2, 3, E)
  const auto logits_by_hand = affine({hidden.data.begin(), hidden.data.end()}, w.classifier_weight, w.classifier_bias);
  const Tensor want({2, 3, 5}, {logits_by_hand.begin(), logits_by_hand.end()});
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    const Tensor logits = bert.classify(*backend, ids, std::nullopt, padding);
    EXPECT_EQ(logits.shape, (Shape{2, 3, 5})) << backend->name();
    EXPECT_TRUE(testing::all_close(logits, want, {1e-5f, 1e-4f})) << backend->name();
  }
  EXPECT_NE(bert.describe().find("token classifier of 5 labels"), std::string::npos) << bert.describe();
}

TEST_F(BertCheckpoint, BadInputsAreNamed) {
  const io::Pretrained p = io::load_pretrained(kTinyBert);
  const Bert& bert = *p.encoder;
  const Tensor ids({1, 3}, {2, 7, 3}, DType::int64);
  expect_error<ShapeError>([&] { bert.forward(cpu(), ids, Tensor({1, 3}, {0, 2, 0}, DType::int64)); },
                           {"Bert.forward", "token type 2 at index 1", "[0, 2)", "type_vocab_size"});
  expect_error<ShapeError>([&] { bert.forward(cpu(), ids, Tensor({1, 2}, {0, 0}, DType::int64)); },
                           {"token_type_ids are int64 (1, 2)", "ids' shape (1, 3)"});
  expect_error<ShapeError>([&] { bert.forward(cpu(), Tensor({1, 65}, DType::int64)); },
                           {"Bert.forward", "positions 0 … 64", "64 rows of position_embeddings"});
  expect_error<ShapeError>([&] { bert.forward(cpu(), ids, std::nullopt, Tensor({1, 2}, DType::boolean)); },
                           {"key_padding_mask"});
  BertConfig config{.vocab_size = 10, .max_positions = 8, .layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 16,
                                                                    .activation = Activation::gelu}};
  BertWeights weights = BertWeights::random(config, 1);
  weights.pooler_bias = Tensor({7});
  expect_error<ShapeError>([&] { Bert(config, weights); }, {"pooler.dense.bias", "(7,)", "(E,) = (8,)"});
  config.layer.norm_first = true;
  expect_error<ConfigError>([&] { Bert(config, BertWeights::random(config, 1)); }, {"post-norm"});
}

TEST(BertFolders, WhatIsWrongIsNamed) {
  auto config = copy_of(kTinyBert, "bert_config");
  rewrite_config(config, [](json& c) { c["position_embedding_type"] = "relative_key"; });
  expect_error<ConfigError>([&] { io::load_pretrained(config); }, {"config.json", "position_embedding_type 'relative_key'"});
  rewrite_config(config, [](json& c) { c["position_embedding_type"] = "absolute", c["hidden_act"] = "swish"; });
  expect_error<ConfigError>([&] { io::load_pretrained(config); }, {"hidden_act 'swish'"});
  rewrite_config(config, [](json& c) { c["hidden_act"] = "gelu", c["is_decoder"] = true; });
  expect_error<ConfigError>([&] { io::load_pretrained(config); }, {"is_decoder"});

  auto tensors = copy_of(kTinyBert, "bert_tensors");
  auto weights = io::read_safetensors(kTinyBert / "model.safetensors").tensors;
  weights.erase("bert.encoder.layer.1.attention.self.key.bias");
  testing::write_safetensors(tensors / "model.safetensors", weights);
  expect_error<FileError>([&] { io::load_pretrained(tensors); }, {"missing tensor 'encoder.layer.1.attention.self.key.bias'"});
  weights = io::read_safetensors(kTinyBert / "model.safetensors").tensors;
  weights["bert.encoder.layer.2.output.dense.bias"] = Tensor({64});
  testing::write_safetensors(tensors / "model.safetensors", weights);
  expect_error<FileError>([&] { io::load_pretrained(tensors); }, {"unexpected tensor 'encoder.layer.2.output.dense.bias'", "2 layers"});

  // TensorFlow's names for a LayerNorm (gamma, beta), and no pooler: read as they are
  weights = io::read_safetensors(kTinyBert / "model.safetensors").tensors;
  weights["bert.embeddings.LayerNorm.gamma"] = weights.at("bert.embeddings.LayerNorm.weight");
  weights["bert.embeddings.LayerNorm.beta"] = weights.at("bert.embeddings.LayerNorm.bias");
  for (const char* name : {"bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias",
                           "bert.pooler.dense.weight", "bert.pooler.dense.bias"}) {
    weights.erase(name);
  }
  testing::write_safetensors(tensors / "model.safetensors", weights);
  const io::Pretrained renamed = io::load_pretrained(tensors), original = io::load_pretrained(kTinyBert);
  EXPECT_FALSE(renamed.encoder->config().pooler);
  ReferenceBackend cpu;
  const Tensor ids({1, 3}, {2, 7, 3}, DType::int64);
  const BertOutput a = renamed.encoder->forward(cpu, ids), b = original.encoder->forward(cpu, ids);
  EXPECT_EQ(a.last_hidden_state.data, b.last_hidden_state.data);
  EXPECT_FALSE(a.pooler_output);
  EXPECT_EQ(renamed.encoder->parameter_count() + 64 * 64 + 64, original.encoder->parameter_count());

  // BertModel's file (no cls.): no masked-LM head, said by name when asked for one
  weights = io::read_safetensors(kTinyBert / "model.safetensors").tensors;
  std::erase_if(weights, [](const auto& item) { return item.first.starts_with("cls."); });
  testing::write_safetensors(tensors / "model.safetensors", weights);
  const io::Pretrained bare = io::load_pretrained(tensors);
  EXPECT_FALSE(bare.encoder->config().masked_lm);
  expect_error<ConfigError>([&] { bare.encoder->masked_lm(cpu, ids); }, {"Bert.masked_lm", "no masked-LM head"});
  // a head missing a tensor; a decoder of its own (untied) read as it is
  weights = io::read_safetensors(kTinyBert / "model.safetensors").tensors;
  weights.erase("cls.predictions.transform.dense.bias");
  testing::write_safetensors(tensors / "model.safetensors", weights);
  expect_error<FileError>([&] { io::load_pretrained(tensors); }, {"missing tensor 'cls.predictions.transform.dense.bias'"});
  weights = io::read_safetensors(kTinyBert / "model.safetensors").tensors;
  Tensor doubled = weights.at("bert.embeddings.word_embeddings.weight");
  for (float& v : doubled.data) v *= 2;
  weights["cls.predictions.decoder.weight"] = doubled;
  testing::write_safetensors(tensors / "model.safetensors", weights);
  const io::Pretrained untied = io::load_pretrained(tensors);
  const Tensor tied_logits = original.encoder->masked_lm(cpu, ids), untied_logits = untied.encoder->masked_lm(cpu, ids);
  const Tensor& bias = original.encoder->weights().masked_lm->bias;
  const int64_t V = original.encoder->vocab_size();
  for (int64_t i = 0; i < tied_logits.size(); ++i) {  // (h · W + b) with W doubled: 2 · (logit - b) + b
    const float bias_v = bias.data[i % V];
    EXPECT_NEAR(untied_logits.data[i], 2 * (tied_logits.data[i] - bias_v) + bias_v, 1e-3f) << i;
  }
  EXPECT_EQ(untied.encoder->parameter_count(), original.encoder->parameter_count() + uint64_t(doubled.size()));
}

}  // namespace
}  // namespace vkattn
