#pragma once
// Logits to probabilities as Hugging Face's pipelines read them (a classifier's labels, a masked
// LM's fills, a question answerer's starts and ends): in double, the largest logit subtracted
// first.
#include <cstddef>
#include <span>
#include <vector>

namespace vkattn::io {

// The softmax of the logits logits[0], logits[stride], logits[2 · stride], …; where `allowed` is
// given (a flag for each), those it leaves out take no part and get 0. At least one must be in.
std::vector<double> softmax(std::span<const float> logits, size_t stride = 1,
                            const std::vector<bool>* allowed = nullptr);

}  // namespace vkattn::io
