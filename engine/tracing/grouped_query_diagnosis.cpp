#include "engine/tracing/grouped_query_diagnosis.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <numbers>
#include <sstream>
#include <vector>

#include "engine/tracing/numbers.h"
#include "reference/reference.h"
#include "vkattn/tracing/compare.h"

namespace vkattn::diagnosis {
namespace {

const char* convention_words(RotaryConvention c) {
  return c == RotaryConvention::half ? "halves (i, i + d/2: GPT-NeoX, Hugging Face's rotate_half)"
                                     : "neighbouring pairs (2i, 2i + 1: GPT-J, Meta's Llama code)";
}

// x (N, T, d) rotated as the recipe would with θ and `convention`
std::vector<float> rotated(const Tensor& x, const RotaryCheck& rope, float theta, RotaryConvention convention) {
  const int64_t T = x.dim(-2), d = x.dim(-1), N = element_count(x.shape) / (T * d);
  const int64_t r = rope.rotary_dims ? rope.rotary_dims : d;
  std::vector<float> inv_freq(static_cast<size_t>(r / 2)), y(x.data.size());
  for (int64_t i = 0; i < r / 2; ++i) inv_freq[static_cast<size_t>(i)] = reference::rotary_inverse_frequency(i, r, theta);
  reference::rotary_embedding(x.data.data(), inv_freq.data(), y.data(), N, T, d, rope.offset, r,
                              convention == RotaryConvention::pairs);
  return y;
}

// The angle pair 1 of `yours` turns by from one position to the next, read off the rotation of
// each row's pair against the input's (the median over rows); 0 when it cannot be read.
double pair1_step(const Tensor& yours, const Tensor& x, const RotaryCheck& rope) {
  const int64_t T = x.dim(-2), d = x.dim(-1), N = element_count(x.shape) / (T * d);
  const int64_t r = rope.rotary_dims ? rope.rotary_dims : d;
  if (T < 2 || r < 4) return 0;
  const bool pairs = rope.convention == RotaryConvention::pairs;
  const int64_t f1 = pairs ? 2 : 1, f2 = pairs ? 3 : 1 + r / 2;  // pair 1's two features
  std::vector<double> steps;
  for (int64_t n = 0; n < N; ++n) {
    double previous = 0;
    bool have_previous = false;
    for (int64_t t = 0; t < T; ++t) {
      const size_t row = static_cast<size_t>((n * T + t) * d);
      const double a = x.data[row + f1], b = x.data[row + f2], u = yours.data[row + f1], v = yours.data[row + f2];
      if (a * a + b * b < 1e-6) {
        have_previous = false;
        continue;
      }
      const double angle = std::atan2(a * v - b * u, a * u + b * v);  // from (a, b) to (u, v)
      if (have_previous) {
        double step = angle - previous;
        while (step <= -std::numbers::pi) step += 2 * std::numbers::pi;
        while (step > std::numbers::pi) step -= 2 * std::numbers::pi;
        steps.push_back(step);
      }
      previous = angle;
      have_previous = true;
    }
  }
  if (steps.empty()) return 0;
  std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2), steps.end());
  return steps[steps.size() / 2];
}

// `t` (B, H_kv, T, d) with each head copied `group` times: in a row (repeat_interleave) or
// cycling through the heads (repeat) -> (B, H_kv·group, T, d)
std::vector<float> copied_heads(const Tensor& t, int64_t group, bool interleave) {
  const int64_t B = t.dim(0), H_kv = t.dim(1), plane = t.dim(2) * t.dim(3), H = H_kv * group;
  std::vector<float> out(static_cast<size_t>(B * H * plane));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t source = b * H_kv + (interleave ? h / group : h % H_kv);
      std::copy_n(t.data.begin() + source * plane, plane, out.begin() + (b * H + h) * plane);
    }
  return out;
}

}  // namespace

Finding rotary(const Tensor& yours_in, const Tensor& input, const RotaryCheck& rope, double atol, double rtol) {
  if (input.rank() < 2 || yours_in.data.size() != input.data.size()) return {};
  const Tensor yours(input.shape, yours_in.data);
  if (same_values(yours.data, input.data, atol, rtol)) {
    return worded("rope_missing", "yours is its input unrotated: RoPE (rotary_embedding) was not applied to this tensor?");
  }
  const RotaryConvention other =
      rope.convention == RotaryConvention::half ? RotaryConvention::pairs : RotaryConvention::half;
  if (same_values(yours.data, rotated(input, rope, rope.theta, other), atol, rtol)) {
    std::ostringstream why;  // a stream: GCC 12 misreads this chain of std::string + as out of bounds
    why << "yours rotates " << convention_words(other) << "; the recipe rotates " << convention_words(rope.convention)
        << ". The checkpoint decides which: the other convention gives a model that runs and is wrong";
    return worded("rope_convention", why.str());
  }
  const double step = pair1_step(yours, input, rope);
  const int64_t r = rope.rotary_dims ? rope.rotary_dims : input.dim(-1);
  if (step <= 0) return {};
  // pair 1 turns by θ^(-2/r) a position: θ = step^(-r/2), read to 3 significant digits
  const double estimate = std::pow(step, -static_cast<double>(r) / 2);
  const double scale = std::pow(10.0, std::floor(std::log10(estimate)) - 2);
  const float theta = static_cast<float>(std::round(estimate / scale) * scale);
  if (!std::isfinite(theta) || std::fabs(theta - rope.theta) <= 1e-3 * rope.theta) return {};
  if (!same_values(yours.data, rotated(input, rope, theta, rope.convention), 10 * atol, 10 * rtol)) return {};
  const double recipe_step = std::pow(rope.theta, -2.0 / static_cast<double>(r));
  return worded("rope_theta", "yours turns pair 1 by " + number_text(step, 3) + " rad a position: θ = " +
                                  number_text(theta, 6) + "; the recipe's θ = " + number_text(rope.theta, 6) +
                                  " turns it by " + number_text(recipe_step, 3) +
                                  ". RoPE's base is the model's rope_theta (config.json)");
}

Finding unnormalised(const Tensor& yours, const Tensor& split, const RotaryCheck& rope, double atol, double rtol) {
  if (split.rank() < 2 || yours.data.size() != split.data.size()) return {};
  if (!same_values(yours.data, rotated(split, rope, rope.theta, rope.convention), atol, rtol)) return {};
  return worded("qk_norm_missing", "yours rotates the heads as they were split, not normalised: the RMSNorm of "
                                   "each head's q and k before RoPE (Qwen3's q_norm, k_norm) was left out?");
}

Finding repeated_heads(const Tensor& yours, const Tensor& theirs, int64_t group, double atol, double rtol) {
  if (group < 2 || theirs.rank() != 4 || theirs.dim(1) < 2 ||
      yours.data.size() != theirs.data.size() * static_cast<size_t>(group)) {
    return {};
  }
  const std::string g = std::to_string(group), H_kv = std::to_string(theirs.dim(1));
  if (same_values(yours.data, copied_heads(theirs, group, true), atol, rtol)) {
    return worded("kv_copied", "yours is the recipe's " + H_kv + " key/value heads each copied for its " + g +
           " query heads (repeat_interleave): the right order, and the copy the recipe skips by reading "
           "the shared head; record the tensor before the copy to compare it");
  }
  if (same_values(yours.data, copied_heads(theirs, group, false), atol, rtol)) {
    return worded("kv_repeat", "yours copies the " + H_kv + " key/value heads with .repeat: query head h gets key/value head h mod " + H_kv +
           "; grouped-query attention gives it head h / " + g + ": .repeat_interleave(" + g + ", dim=1)");
  }
  return {};
}

Finding repeat_order(const std::string& op, const Tensor& yours, const Tensor& a, const Tensor& b, int64_t group,
                         double atol, double rtol) {
  if (group < 2 || a.rank() != 4 || b.rank() != 4 || b.dim(1) < 2) return {};
  const std::vector<float> cycled = copied_heads(b, group, false);
  const int64_t BH = a.dim(0) * a.dim(1), L = a.dim(2);
  std::vector<float> out;
  if (op == "attention_scores") {
    const int64_t S = b.dim(2), d = b.dim(3);
    out.resize(static_cast<size_t>(BH * L * S));
    reference::attention_scores(a.data.data(), cycled.data(), out.data(), BH, L, S, d,
                                1.0f / std::sqrt(static_cast<float>(d)), 1);
  } else if (op == "attention_values") {
    const int64_t S = a.dim(3), d = b.dim(3);
    out.resize(static_cast<size_t>(BH * L * d));
    reference::attention_values(a.data.data(), cycled.data(), out.data(), BH, L, S, d, 1);
  } else {
    return {};
  }
  if (!same_values(yours.data, out, atol, rtol)) return {};
  const std::string g = std::to_string(group), H_kv = std::to_string(b.dim(1));
  return worded("kv_repeat", "yours pairs query head h with key/value head h mod " + H_kv + ": K and V copied with .repeat(1, " + g +
         ", 1, 1); grouped-query attention gives query heads 0 … " + std::to_string(group - 1) +
         " key/value head 0: .repeat_interleave(" + g + ", dim=1)");
}

}  // namespace vkattn::diagnosis
