#include "examples/simple_transformer.h"

#include <charconv>
#include <set>

#include "vkattn/errors.h"
#include "vkattn/io/state_dict.h"

namespace vkattn::examples {
namespace {

// The tensor `name`, which must exist as float32 with this shape.
Tensor take(const io::Safetensors& file, const std::string& source, const std::string& name, const Shape& shape) {
  auto it = file.tensors.find(name);
  if (it == file.tensors.end()) throw FileError(source + ": missing tensor '" + name + "', expected shape " + shape_string(shape));
  if (it->second.dtype != DType::float32 || it->second.shape != shape) {
    throw FileError(source + ": tensor '" + name + "' is " + dtype_name(it->second.dtype) + " " +
                    shape_string(it->second.shape) + ", expected float32 " + shape_string(shape));
  }
  return it->second;
}

}  // namespace

SimpleTransformer SimpleTransformer::from_state_dict(const io::Safetensors& file, int64_t num_heads,
                                                     const std::string& source) {
  auto dims_of = [&](const std::string& name, int64_t rank) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end() || it->second.rank() != rank) {
      throw FileError(source + ": missing tensor '" + name + "' of rank " + std::to_string(rank) +
                      " (is this the article's SimpleTransformer state_dict?)");
    }
    return it->second.shape;
  };
  SimpleTransformer model;
  const Shape embedding = dims_of("embedding.weight", 2);
  const int64_t V = embedding[0], E = embedding[1];
  model.embedding_ = take(file, source, "embedding.weight", {V, E});
  model.pos_encoding_ = take(file, source, "pos_encoding", {1, dims_of("pos_encoding", 3)[1], E});
  model.pos_encoding_.shape.erase(model.pos_encoding_.shape.begin());
  const int64_t C = dims_of("classifier.weight", 2)[0];
  model.classifier_weight_ = take(file, source, "classifier.weight", {C, E});
  model.classifier_bias_ = take(file, source, "classifier.bias", {C});

  std::set<int64_t> blocks;
  for (const auto& [name, tensor] : file.tensors) {
    if (!name.starts_with("blocks.")) continue;
    int64_t n = 0;
    auto [end, ec] = std::from_chars(name.data() + 7, name.data() + name.size(), n);
    if (ec == std::errc() && *end == '.') blocks.insert(n);
  }
  if (blocks.empty()) throw FileError(source + ": no blocks.N.… tensors: the model has no encoder blocks");

  TransformerEncoderLayerConfig config{.d_model = E, .nhead = io::num_heads(file, num_heads, source),
                                       .dim_feedforward = 4 * E, .activation = Activation::gelu};
  for (int64_t n = 0; n < static_cast<int64_t>(blocks.size()); ++n) {
    const std::string p = "blocks." + std::to_string(n) + ".";
    auto t = [&](const std::string& name, const Shape& shape) { return take(file, source, p + name, shape); };
    TransformerEncoderLayerWeights w;
    w.self_attn.q_proj_weight = t("attention.W_q.weight", {E, E});
    w.self_attn.k_proj_weight = t("attention.W_k.weight", {E, E});
    w.self_attn.v_proj_weight = t("attention.W_v.weight", {E, E});
    w.self_attn.out_proj_weight = t("attention.W_o.weight", {E, E});
    w.self_attn.q_proj_bias = t("attention.W_q.bias", {E});
    w.self_attn.k_proj_bias = t("attention.W_k.bias", {E});
    w.self_attn.v_proj_bias = t("attention.W_v.bias", {E});
    w.self_attn.out_proj_bias = t("attention.W_o.bias", {E});
    w.linear1_weight = t("ff.0.weight", {4 * E, E});
    w.linear1_bias = t("ff.0.bias", {4 * E});
    w.linear2_weight = t("ff.3.weight", {E, 4 * E});
    w.linear2_bias = t("ff.3.bias", {E});
    w.norm1 = {t("norm1.weight", {E}), t("norm1.bias", {E})};
    w.norm2 = {t("norm2.weight", {E}), t("norm2.bias", {E})};
    model.blocks_.emplace_back(config, std::move(w));
  }
  if (*blocks.rbegin() != static_cast<int64_t>(blocks.size()) - 1) {
    throw FileError(source + ": the blocks are not numbered 0 … " + std::to_string(blocks.size() - 1));
  }
  return model;
}

SimpleTransformer SimpleTransformer::load(const std::filesystem::path& path, int64_t num_heads) {
  return from_state_dict(io::read_safetensors(path), num_heads, path.string());
}

Tensor SimpleTransformer::forward(Backend& backend, const Tensor& tokens) const {
  const std::string who = "SimpleTransformer.forward";
  if (tokens.dtype != DType::int64 || tokens.rank() != 2) {
    throw ShapeError(who + ": tokens are " + dtype_name(tokens.dtype) + " " + shape_string(tokens.shape) +
                     "; int64 token ids (B, T) are expected");
  }
  const int64_t T = tokens.dim(1), V = vocab_size(), P = pos_encoding_.dim(0);
  if (T > P) throw ShapeError(who + ": " + std::to_string(T) + " tokens per sequence, more than the " + std::to_string(P) + " positions of pos_encoding");
  for (int64_t i = 0; i < tokens.size(); ++i) {
    float id = tokens.data[static_cast<size_t>(i)];
    if (id < 0 || id >= static_cast<float>(V)) {
      throw ShapeError(who + ": token " + std::to_string(static_cast<int64_t>(id)) + " at " +
                       shape_string(unravel_index(tokens.shape, i)) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }

  backend.begin_pass("simple_transformer");
  try {
    auto recipe = [&](Backend& on) {
      Value ids = on.upload("tokens", tokens);  // (B, T)
      Value x = on.embedding("embedding", ids, on.upload("embedding.weight", embedding_));  // (B, T, E)
      x = on.positional_encoding("pos_encoding", x, on.upload("pos_encoding", pos_encoding_));  // (B, T, E)
      ForwardOptions attention;
      attention.need_weights = false;
      for (size_t n = 0; n < blocks_.size(); ++n) {
        StepScope scope(on, "blocks." + std::to_string(n));
        x = blocks_[n].steps(on, x, attention);  // (B, T, E)
      }
      Value pooled = on.mean_pool("mean_pool", x);  // (B, E)
      Value w = on.upload("classifier.weight", classifier_weight_);
      Value b = on.upload("classifier.bias", classifier_bias_);
      return on.linear("classifier", pooled, w, &b);  // (B, C)
    };
    backend.preflight("simple_transformer", [&](Backend& on) { recipe(on); });
    Tensor logits = backend.download(recipe(backend));
    backend.end_pass();
    return logits;
  } catch (const std::exception& e) {
    backend.end_pass(e.what());
    throw;
  }
}

}  // namespace vkattn::examples
