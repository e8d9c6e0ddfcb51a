#include "vkattn/io/probabilities.h"

#include <algorithm>
#include <cmath>

namespace vkattn::io {

std::vector<double> softmax(std::span<const float> logits, size_t stride, const std::vector<bool>* allowed) {
  const size_t n = allowed ? allowed->size() : (logits.size() + stride - 1) / stride;
  auto in = [&](size_t i) { return !allowed || (*allowed)[i]; };
  double top = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    if (in(i)) top = std::max(top, double(logits[i * stride]));
  }
  std::vector<double> p(n, 0.0);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (in(i)) sum += p[i] = std::exp(double(logits[i * stride]) - top);
  }
  for (double& v : p) v /= sum;
  return p;
}

}  // namespace vkattn::io
