#pragma once
// Reproducible random parameters for the modules' ::random(config, seed) weights.
#include <cmath>
#include <cstdint>
#include <random>

#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tensor.h"

namespace vkattn {

// Every value from U(low, high)
inline Tensor uniform(Shape shape, float low, float high, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(low, high);
  Tensor t(std::move(shape));
  for (float& v : t.data) v = dist(rng);
  return t;
}

// torch.nn.Linear's weight (out, in) or bias (out,): U(-1/√in, 1/√in), in = fan_in
inline Tensor linear_parameter(Shape shape, int64_t fan_in, std::mt19937& rng) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  return uniform(std::move(shape), -bound, bound, rng);
}

// A LayerNorm's weight 1 ± 0.25 and bias ± 0.25: far enough from torch's 1 and 0 that tests see them
inline LayerNormWeights random_norm(int64_t E, std::mt19937& rng) {
  return {uniform({E}, 0.75f, 1.25f, rng), uniform({E}, -0.25f, 0.25f, rng)};
}

}  // namespace vkattn
