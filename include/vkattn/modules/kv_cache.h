#pragma once
// KVCache: the keys and values a decoder has computed so far, kept on the backend so that each
// new token projects only its own key and value and attends over all the earlier ones.
//
// Each layer holds a key cache and a value cache of (B, H, capacity, d) floats: position s of
// sequence b, head h is row s of plane (b, h). length() positions are filled; a decoding step
// appends T more (kv_cache_append, in place), attends over length() + T of them (flash_decoding
// and attention_combine), then advance(T) makes them part of the cache. The device memory is
// exactly bytes() = 2 · layers · B · H · capacity · d · 4, allocated once, when the cache is made.
// Beside them the cache keeps the weights of the module decoding with it (kept_weights()): its
// first step uploads them, the next ones read them where they are.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/tensor.h"

namespace vkattn {

class KVCache {
 public:
  struct Layer {
    Value keys;    // (B, H, capacity, d)
    Value values;  // (B, H, capacity, d)
  };

  // Zeros on `backend`, which every step that uses the cache must run on. ConfigError when a
  // size is below 1. `dtype`: the numbers the cache keeps — float32 (none), or float16 / bfloat16:
  // each key and value rounded to it as kv_cache_append writes it (ties to even) and stored 2 bytes
  // on a Vulkan device, which widens them as flash_decoding reads them (half the bytes a decoding
  // step reads from the cache; llama.cpp's and a float16 model's caches are so). Everything else
  // stays float32.
  KVCache(Backend& backend, int64_t layers, int64_t batch, int64_t heads, int64_t capacity, int64_t head_dim,
          Narrow dtype = Narrow::none);

  int64_t layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t batch() const { return batch_; }
  int64_t heads() const { return heads_; }
  int64_t capacity() const { return capacity_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t length() const { return length_; }  // positions filled
  Narrow dtype() const { return dtype_; }
  // 2 · layers · B · H · capacity · d · 4 (2 with a 16-bit dtype): the device memory the caches
  // hold on a Vulkan device (the CPU reference holds a 16-bit cache's numbers as float32).
  uint64_t bytes() const;

  // Layer i's caches, checked to belong to `backend` (ConfigError otherwise). The values are
  // the caches themselves: kv_cache_append writes into them.
  const Layer& layer(const Backend& backend, int64_t i) const;
  // ShapeError naming the capacity when `tokens` more positions would not fit.
  void check_room(int64_t tokens) const;
  // The `tokens` positions every layer has appended are now part of the cache.
  void advance(int64_t tokens);
  // The weights of the module decoding with this cache, kept on its backend from step to step
  // (KeepWeights); null for another backend. They hold the module's size in device memory beside
  // bytes(), until the cache goes or another module decodes with it.
  KeptWeights* kept_weights(const Backend& backend) { return &backend == backend_ ? &kept_weights_ : nullptr; }
  const KeptWeights* kept_weights(const Backend& backend) const {
    return &backend == backend_ ? &kept_weights_ : nullptr;
  }
  // Empty again (the rows stay allocated and are overwritten by the next appends; the kept
  // weights stay too).
  void clear() { length_ = 0; }
  // Keeps the first `length` positions and forgets the rest (Hugging Face's DynamicCache.crop):
  // to decode again from there, e.g. another continuation of one prompt. ShapeError when
  // `length` is negative or past length().
  void crop(int64_t length);

 private:
  const Backend* backend_;
  int64_t batch_, heads_, capacity_, head_dim_;
  Narrow dtype_;
  int64_t length_ = 0;
  std::vector<Layer> layers_;
  KeptWeights kept_weights_;
};

// What a module's decode() takes beside its input and cache (CausalLM, GroupedQueryAttention).
struct DecodeOptions {
  // (B, S) with S the cache's length after this step: True (or -inf) = a padding position no
  // query attends to. For batches of prompts of different lengths.
  std::optional<Tensor> key_padding_mask;
  int64_t parts = 0;  // flash_decoding's key split; 0 = the backend's choice
  // n > 0: the last n positions' logits only (LanguageModel::forward's); 0: every position's
  int64_t logits_to_keep = 0;

  // key_padding_mask checked to be bool or float (batch, keys) and made additive (True -> -inf);
  // nothing when there is none. ShapeError "<who>: key_padding_mask … must be …" otherwise.
  std::optional<Tensor> padding_mask(const std::string& who, int64_t batch, int64_t keys) const;
};

}  // namespace vkattn
