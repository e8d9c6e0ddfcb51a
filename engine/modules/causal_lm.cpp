#include "vkattn/modules/causal_lm.h"

#include <cmath>
#include <random>
#include <sstream>

#include "engine/modules/checks.h"
#include "engine/modules/pass.h"
#include "engine/modules/random_weights.h"
#include "vkattn/errors.h"
#include "vkattn/modules/multi_head_attention.h"

namespace vkattn {
namespace {

const std::string kCausalLM = "CausalLM";

}  // namespace

CausalLMWeights CausalLMWeights::random(const CausalLMConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t E = c.layer.d_model, V = c.vocab_size;
  CausalLMWeights w;
  w.token_embedding = uniform({V, E}, -1.0f, 1.0f, rng);
  w.position_embedding = uniform({c.max_positions, E}, -1.0f, 1.0f, rng);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    w.layers.push_back(TransformerEncoderLayerWeights::random(c.layer, seed + 100 * static_cast<uint32_t>(i + 1)));
  }
  w.norm = random_norm(E, rng);
  const float bound = 1.0f / std::sqrt(static_cast<float>(E));
  if (!c.tie_word_embeddings) w.lm_head_weight = uniform({V, E}, -bound, bound, rng);
  if (c.lm_head_bias) w.lm_head_bias = uniform({V}, -bound, bound, rng);
  return w;
}

CausalLM::CausalLM(CausalLMConfig config, CausalLMWeights weights) : config_(config), weights_(std::move(weights)) {
  const auto& c = config_;
  for (auto [name, size] : {std::pair{"vocab_size", c.vocab_size}, {"max_positions", c.max_positions},
                            {"num_layers", c.num_layers}}) {
    if (size < 1) throw ConfigError("CausalLM: " + std::string(name) + "=" + std::to_string(size) + " must be >= 1");
  }
  const int64_t E = c.layer.d_model, V = c.vocab_size;
  const auto& w = weights_;
  checks::weight(kCausalLM, "token_embedding.weight", w.token_embedding, {V, E}, "(V, E)");
  checks::weight(kCausalLM, "position_embedding.weight", w.position_embedding, {c.max_positions, E}, "(P, E)");
  checks::weight(kCausalLM, "norm.weight", w.norm.weight, {E}, "(E,)");
  checks::weight(kCausalLM, "norm.bias", w.norm.bias, {E}, "(E,)");
  if (!c.tie_word_embeddings) {
    checks::weight(kCausalLM, "lm_head.weight", w.lm_head_weight, {V, E}, "(V, E)");
  } else if (w.lm_head_weight.size() != 0) {
    throw ShapeError("CausalLM: lm_head.weight is given but tie_word_embeddings is on (the head is token_embedding)");
  }
  checks::optional_weight(kCausalLM, "lm_head.bias", w.lm_head_bias, c.lm_head_bias, "lm_head_bias", {V}, "(V,)");
  if (static_cast<int64_t>(w.layers.size()) != c.num_layers) {
    throw ShapeError("CausalLM: " + std::to_string(w.layers.size()) + " layers of weights for num_layers=" +
                     std::to_string(c.num_layers));
  }
  for (const auto& layer : w.layers) layers_.emplace_back(c.layer, layer);
}

void CausalLM::check_ids(const std::string& who, const Tensor& ids, int64_t first_position) const {
  checks::token_ids(who, ids, config_.vocab_size, first_position, config_.max_positions, "rows of position_embedding");
}

Value CausalLM::embed(Backend& backend, const Value& ids, int64_t first_position) const {
  const int64_t T = ids.dim(1), E = config_.layer.d_model;
  Value table = backend.upload_matrix("token_embedding.weight", weights_.token_embedding);
  Value x = backend.embedding("token_embedding", ids, table);  // (B, T, E)
  // the rows of this step's positions: a cache's step starts past row 0 (not a weight to keep:
  // they change from step to step)
  const auto& p = weights_.position_embedding.data;
  Tensor rows({T, E}, std::vector<float>(p.begin() + first_position * E, p.begin() + (first_position + T) * E));
  Value positions = backend.upload("position_embedding.weight", rows);
  return backend.positional_encoding("position_embedding", x, positions);  // (B, T, E)
}

Value CausalLM::head(Backend& backend, const Value& x, int64_t logits_to_keep) const {
  Value weight = backend.upload_weight("norm.weight", weights_.norm.weight);
  Value bias = backend.upload_weight("norm.bias", weights_.norm.bias);
  Value kept = kept_positions(backend, x, logits_to_keep);                                 // (B, n, E)
  Value h = backend.layer_norm("norm", kept, weight, bias, config_.layer.layer_norm_eps);  // (B, n, E)
  // tied: the embedding's table, the same kept weight as embed()'s
  Value w = config_.tie_word_embeddings ? backend.upload_matrix("token_embedding.weight", weights_.token_embedding)
                                        : backend.upload_matrix("lm_head.weight", weights_.lm_head_weight);
  if (!weights_.lm_head_bias) return backend.linear("lm_head", h, w, nullptr);
  Value b = backend.upload_weight("lm_head.bias", *weights_.lm_head_bias);
  return backend.linear("lm_head", h, w, &b);  // (B, n, V)
}

LanguageModel::ForwardPass CausalLM::forward_pass(const std::string& who, const Tensor& ids,
                                                  const std::optional<Tensor>& key_padding_mask, AttentionPath path,
                                                  int64_t logits_to_keep) const {
  const std::string named = "CausalLM." + who;
  check_ids(named, ids, 0);
  check_logits_to_keep(named, logits_to_keep);
  ForwardOptions attention;
  attention.need_weights = false;
  attention.is_causal = true;
  attention.attention = path;
  if (key_padding_mask) {
    attention.key_padding_mask =
        checks::padding_mask(named, "key_padding_mask", *key_padding_mask, ids.shape, "(B, T)", ids.shape);
  }
  return {"causal_lm", [this, ids, attention, logits_to_keep](Backend& b) {
            Value x = embed(b, b.upload("ids", ids), 0);
            for (size_t i = 0; i < layers_.size(); ++i) {
              StepScope scope(b, "layers." + std::to_string(i));
              x = layers_[i].steps(b, x, attention);  // (B, T, E)
            }
            return head(b, x, logits_to_keep);
          }};
}

uint64_t CausalLM::parameter_count() const {
  auto count = [](const Tensor& t) { return static_cast<uint64_t>(t.size()); };
  const auto& w = weights_;
  uint64_t n = count(w.token_embedding) + count(w.position_embedding) + count(w.norm.weight) + count(w.norm.bias) +
               count(w.lm_head_weight) + (w.lm_head_bias ? count(*w.lm_head_bias) : 0);
  for (const auto& l : w.layers) n += l.parameter_count();
  return n;
}

std::string CausalLM::describe() const {
  const auto& c = config_;
  const auto& l = c.layer;
  std::ostringstream out;
  out << "vocab " << c.vocab_size << ", " << c.max_positions << " positions, " << c.num_layers
      << " × TransformerEncoderLayer(d_model=" << l.d_model << ", nhead=" << l.nhead << ",\n  dim_feedforward="
      << l.dim_feedforward << ", " << activation_name(l.activation) << (l.norm_first ? ", pre-norm" : ", post-norm") << ")"
      << (c.tie_word_embeddings ? ", lm_head tied to token_embedding" : "");
  return out.str();
}

KVCache CausalLM::make_cache(Backend& backend, int64_t batch, int64_t capacity, Narrow dtype) const {
  if (capacity > config_.max_positions) {
    throw ConfigError("CausalLM: a cache of capacity " + std::to_string(capacity) + " is longer than the " +
                      std::to_string(config_.max_positions) + " positions the model has rows for");
  }
  const auto& l = config_.layer;
  return KVCache(backend, config_.num_layers, batch, l.nhead, capacity, l.d_model / l.nhead, dtype);
}

Tensor CausalLM::decode(Backend& backend, const Tensor& ids, KVCache& cache, const DecodeOptions& options) const {
  const std::string who = "CausalLM.decode";
  const int64_t position = cache.length();
  if (ids.rank() == 2) cache.check_room(ids.dim(1));  // before the positions: the cache is what is full
  check_ids(who, ids, position);
  const int64_t B = ids.dim(0), T = ids.dim(1);
  if (cache.layers() != config_.num_layers || cache.batch() != B || cache.heads() != config_.layer.nhead) {
    throw ShapeError(who + ": the cache is for " + std::to_string(cache.layers()) + " layers of " +
                     std::to_string(cache.batch()) + " sequences and " + std::to_string(cache.heads()) +
                     " heads; the model has " + std::to_string(config_.num_layers) + " layers of " +
                     std::to_string(config_.layer.nhead) + " heads and the ids " + std::to_string(B) + " sequences");
  }
  const std::optional<Tensor> mask = options.padding_mask(who, B, position + T);
  check_logits_to_keep(who, options.logits_to_keep);
  KeepWeights keep(backend, cache.kept_weights(backend), weights_owner());  // the first step uploads them
  Tensor logits = run_pass(backend, "causal_lm_decode", [&](Backend& b) {
    std::optional<Value> padding;
    if (mask) padding = b.upload("key_padding_mask", *mask);
    Value x = embed(b, b.upload("ids", ids), position);
    for (size_t i = 0; i < layers_.size(); ++i) {
      StepScope scope(b, "layers." + std::to_string(i));
      const KVCache::Layer& layer = cache.layer(backend, static_cast<int64_t>(i));  // preflight's b sizes it only
      x = layers_[i].steps_cached(b, x, layer, position, padding ? &*padding : nullptr, options.parts);
    }
    return head(b, x, options.logits_to_keep);
  });
  cache.advance(T);
  return logits;
}

}  // namespace vkattn
