#include "vkattn/modules/kv_cache.h"

#include <string>

#include "engine/modules/checks.h"
#include "vkattn/errors.h"
#include "vkattn/modules/multi_head_attention.h"

namespace vkattn {

KVCache::KVCache(Backend& backend, int64_t layers, int64_t batch, int64_t heads, int64_t capacity, int64_t head_dim,
                 Narrow dtype)
    : backend_(&backend), batch_(batch), heads_(heads), capacity_(capacity), head_dim_(head_dim), dtype_(dtype) {
  for (auto [name, size] : {std::pair{"layers", layers}, {"batch", batch}, {"heads", heads}, {"capacity", capacity},
                            {"head_dim", head_dim}}) {
    if (size < 1) throw ConfigError("KVCache: " + std::string(name) + "=" + std::to_string(size) + " must be >= 1");
  }
  const Tensor zeros({batch, heads, capacity, head_dim});
  for (int64_t i = 0; i < layers; ++i) {
    const std::string prefix = "kv_cache.layers." + std::to_string(i);
    layers_.push_back(
        {backend.upload_cache(prefix + ".keys", zeros, dtype), backend.upload_cache(prefix + ".values", zeros, dtype)});
  }
}

uint64_t KVCache::bytes() const {
  return 2 * static_cast<uint64_t>(layers()) *
         static_cast<uint64_t>(stored_words(batch_ * heads_ * capacity_ * head_dim_, dtype_)) * sizeof(float);
}

const KVCache::Layer& KVCache::layer(const Backend& backend, int64_t i) const {
  if (&backend != backend_) {
    throw ConfigError("KVCache: the cache was made on another backend; make one on '" + backend.name() + "'");
  }
  return layers_.at(static_cast<size_t>(i));
}

void KVCache::check_room(int64_t tokens) const {
  if (length_ + tokens > capacity_) {
    throw ShapeError("KVCache: the cache holds at most " + std::to_string(capacity_) + " positions (its capacity); " +
                     std::to_string(length_) + " are filled and " + std::to_string(tokens) +
                     " more would make " + std::to_string(length_ + tokens));
  }
}

void KVCache::crop(int64_t length) {
  if (length < 0 || length > length_) {
    throw ShapeError("KVCache: cannot crop to " + std::to_string(length) + " positions; " + std::to_string(length_) +
                     " are filled");
  }
  length_ = length;
}

void KVCache::advance(int64_t tokens) {
  check_room(tokens);
  length_ += tokens;
}

std::optional<Tensor> DecodeOptions::padding_mask(const std::string& who, int64_t batch, int64_t keys) const {
  if (!key_padding_mask) return std::nullopt;
  return checks::padding_mask(who, "key_padding_mask", *key_padding_mask, {batch, keys}, "(B, S)", {batch, keys},
                              ", S the cache's length after");
}

}  // namespace vkattn
