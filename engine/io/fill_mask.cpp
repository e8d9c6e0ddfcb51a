#include "vkattn/io/fill_mask.h"

#include <algorithm>
#include <numeric>

#include "vkattn/errors.h"
#include "vkattn/io/probabilities.h"

namespace vkattn::io {

std::string mask_token(const Pretrained& model) {
  for (const char* token : {"[MASK]", "<mask>"}) {
    if (model.tokenizer->token_id(token) >= 0) return token;
  }
  return "";
}

int64_t mask_token_id(const Pretrained& model) {
  const std::string token = mask_token(model);
  return token.empty() ? -1 : model.tokenizer->token_id(token);
}

std::vector<int64_t> mask_positions(const Pretrained& model, std::span<const int64_t> ids) {
  std::vector<int64_t> positions;
  const int64_t id = mask_token_id(model);
  if (id < 0) return positions;
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] == id) positions.push_back(static_cast<int64_t>(t));
  }
  return positions;
}

std::vector<std::vector<Fill>> mask_fills(const Pretrained& model, std::span<const int64_t> positions,
                                          const Tensor& logits, int64_t top_k) {
  if (top_k < 1) throw ConfigError("mask_fills: top_k=" + std::to_string(top_k) + " must be at least 1");
  if (logits.rank() != 3 || logits.shape[0] != 1) {
    throw ShapeError("mask_fills: logits must be (1, T, V), got " + shape_string(logits.shape));
  }
  const int64_t T = logits.shape[1], V = logits.shape[2];
  const auto kept = static_cast<size_t>(std::min(top_k, V));
  std::vector<std::vector<Fill>> fills;
  for (int64_t t : positions) {
    if (t < 0 || t >= T) {
      throw ShapeError("mask_fills: position " + std::to_string(t) + " is outside the logits' " + std::to_string(T) +
                       " positions");
    }
    const std::vector<double> p = softmax(std::span(logits.data).subspan(size_t(t * V), size_t(V)));
    std::vector<int64_t> order(p.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    auto likelier = [&](int64_t a, int64_t b) {
      return p[size_t(a)] > p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && a < b);
    };
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kept), order.end(), likelier);
    std::vector<Fill>& here = fills.emplace_back();
    for (size_t k = 0; k < kept; ++k) {
      const int64_t id = order[k];
      here.push_back({id, model.tokenizer->decode(std::span(&id, 1)), p[size_t(id)]});
    }
  }
  return fills;
}

}  // namespace vkattn::io
