#include "engine/tracing/mistakes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "engine/tracing/numbers.h"
#include "reference/reference.h"
#include "vkattn/tracing/compare.h"
#include "vkattn/tracing/diagnoses.h"

namespace vkattn::diagnosis {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool near(double a, double b) { return std::fabs(a - b) <= 1e-3 * std::fabs(b); }

// "0.125, -0.5, 0.25, …": a vector's first three values.
std::string preview(const std::vector<double>& v) {
  std::string s;
  for (size_t k = 0; k < std::min<size_t>(v.size(), 3); ++k) s += (k ? ", " : "") + number_text(v[k], 3);
  return s + (v.size() > 3 ? ", …" : "");
}

// Yours with each NaN as 0: PyTorch's softmax of a row with every key blocked, where the recipe
// (and a recomputation) gives zeros.
std::vector<float> nan_as_zero(const Tensor& yours) {
  std::vector<float> v = yours.data;
  for (float& x : v) x = std::isnan(x) ? 0.0f : x;
  return v;
}

// y = x · Wᵀ + b over x's rows; empty when the shapes do not fit.
std::vector<float> linear(const Tensor& x, const Tensor& w, const Tensor* b) {
  const int64_t K = w.dim(1), M = w.dim(0);
  if (x.rank() < 1 || x.shape.back() != K || (b && element_count(b->shape) != M)) return {};
  const int64_t N = element_count(x.shape) / K;
  std::vector<float> y(static_cast<size_t>(N * M));
  reference::linear(x.data.data(), w.data.data(), b ? b->data.data() : nullptr, y.data(), N, K, M);
  return y;
}

// W (M, K) as (K, M)
Tensor transposed(const Tensor& w) {
  const int64_t M = w.dim(0), K = w.dim(1);
  Tensor t({K, M});
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < K; ++c) t.data[static_cast<size_t>(c * M + r)] = w.data[static_cast<size_t>(r * K + c)];
  return t;
}

// A rank-3 tensor's first two axes swapped: (B, T, C) -> (T, B, C).
// Softmax over the last axis of `scores` · c (c > 0), as the recipe takes it.
std::vector<float> softmax_of(const Tensor& scores, double c = 1) {
  const int64_t S = scores.shape.back(), R = element_count(scores.shape) / S;
  std::vector<float> x = scores.data, y(x.size());
  if (c != 1) std::transform(x.begin(), x.end(), x.begin(), [&](float v) { return static_cast<float>(v * c); });
  reference::softmax(x.data(), y.data(), R, S);
  return y;
}

// The attention step's head size d and head count H from the attention_scores step's query input
// (B, H, L, d); 0, 0 when unknown.
std::pair<int64_t, int64_t> head_size_and_count(const StepEvent& scores) {
  if (scores.inputs.empty() || scores.inputs[0].shape.size() != 4) return {0, 0};
  return {scores.inputs[0].shape[3], scores.inputs[0].shape[1]};
}

// The classic wrong scales of Q·Kᵀ for head size d and H heads: each factor (against the right
// 1/√d) with the diagnoses it fits.
std::vector<std::pair<double, std::vector<std::string_view>>> wrong_scales(int64_t d, int64_t H) {
  const double root = std::sqrt(static_cast<double>(d));
  std::vector<std::pair<double, std::vector<std::string_view>>> scales = {{1 / root, {"scale_d", "scale_twice"}},
                                                                           {root, {"scale_none"}}};
  if (H > 1) {
    const double width = 1 / std::sqrt(static_cast<double>(H));  // √d/√E with E = H·d
    auto same = std::find_if(scales.begin(), scales.end(), [&](const auto& s) { return near(s.first, width); });
    if (same != scales.end()) same->second.push_back("scale_width");  // E = H²: d = H
    else scales.push_back({width, {"scale_width"}});
  }
  return scales;
}

std::string shapes(int64_t d, int64_t H) {
  return "(d = " + std::to_string(d) + ", E = H·d = " + std::to_string(H * d) + ")";
}

// Whether two weights are one MLP's gate_proj and up_proj (a Llama's, a Phi-3's gate_up_proj cut)
bool gate_and_up(const std::string& a, const std::string& b) {
  const std::string gate = "mlp.gate_proj.weight", up = "mlp.up_proj.weight";
  auto prefix = [](const std::string& name, const std::string& end) {
    return name.ends_with(end) ? std::optional(name.substr(0, name.size() - end.size())) : std::nullopt;
  };
  const auto a_gate = prefix(a, gate), a_up = prefix(a, up), b_gate = prefix(b, gate), b_up = prefix(b, up);
  return (a_gate && b_up && *a_gate == *b_up) || (a_up && b_gate && *a_up == *b_gate);
}

}  // namespace

bool same_values(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol) {
  if (a.size() != b.size() || a.empty()) return false;
  const auto n = static_cast<int64_t>(a.size());
  return compare_values(Tensor({n}, a), Tensor({n}, b), atol, rtol).mismatches == 0;
}

std::optional<double> common_factor(const Tensor& yours, const Tensor& theirs, double atol, double rtol) {
  double uv = 0, vv = 0;
  for (size_t k = 0; k < theirs.data.size(); ++k) {
    float u = yours.data[k], v = theirs.data[k];
    if (std::isfinite(u) && std::isfinite(v)) uv += double(u) * v, vv += double(v) * v;
    else if (!(u == v)) return std::nullopt;  // infinities and NaN in other places: no scale explains that
  }
  if (vv == 0) return std::nullopt;
  const double c = uv / vv;
  if (std::fabs(c - 1) < 1e-3) return std::nullopt;
  for (size_t k = 0; k < theirs.data.size(); ++k) {
    double u = yours.data[k], v = c * theirs.data[k];
    if (std::isfinite(u) && std::fabs(u - v) > atol + rtol * std::fabs(v)) return std::nullopt;
  }
  return c;
}

Finding said(const std::string& evidence, const std::vector<std::string_view>& named) {
  std::vector<std::string_view> ids;
  for (auto id : named)
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  Finding f;
  for (auto id : ids) f.ids.emplace_back(id);
  if (ids.size() == 1) {
    const Diagnosis& d = diagnosis_named(ids[0]);
    f.text = evidence + ": " + std::string(d.mistake) + "? Usually " + std::string(d.culprit) + "; instead: " +
             std::string(d.fix) + " [" + std::string(d.id) + "]";
    return f;
  }
  f.text = evidence + "; " + std::to_string(ids.size()) + " mistakes give these numbers alike:";
  for (size_t k = 0; k < ids.size(); ++k) {
    const Diagnosis& d = diagnosis_named(ids[k]);
    f.text += std::string(k ? " or" : "") + " " + std::string(d.mistake) + "? (usually " + std::string(d.culprit) +
              "; instead: " + std::string(d.fix) + ") [" + std::string(d.id) + "]";
  }
  return f;
}

Finding worded(std::string_view id, const std::string& text) {
  return Finding{{std::string(diagnosis_named(id).id)}, text + " [" + std::string(id) + "]"};
}

const StepRecorder::Step* Around::upstream(const std::string& op) const {
  const StepEvent* e = &event;
  for (size_t guard = 0; guard <= produced.size() && !e->inputs.empty(); ++guard) {
    auto it = produced.find(e->inputs[0].name);
    if (it == produced.end()) return nullptr;
    if (it->second->event.op == op) return it->second;
    e = &it->second->event;
  }
  return nullptr;
}

Finding projection(const Around& at, const Tensor& yours) {
  const Tensor *x = at.input(0), *w = at.input(1);
  if (at.event.op != "linear" || !x || !w || w->rank() != 2) return {};
  const Tensor* b = at.input(2);
  const std::string& step = at.event.name;
  const std::string& x_name = at.event.inputs[0].name;
  const std::string& w_name = at.event.inputs[1].name;
  const Tensor& theirs = at.theirs;
  // yours is vkattn's with batch and time swapped: the input given to check, or the model
  if (!at.produced.count(x_name) && theirs.rank() == 3 && theirs.dim(0) > 1 && theirs.dim(1) > 1 &&
      same_values(yours.data, swap_first_axes(theirs).data, at.options.atol, at.options.rtol)) {
    return said("yours " + shape_string(at.yours_shape) + " is vkattn's " + step + " " + shape_string(theirs.shape) +
                    " with its first two axes swapped: (t, b) for (b, t)",
                {"input_layout", "axes_order"});
  }
  std::vector<std::string> evidence;
  std::vector<std::string_view> ids;
  auto is_yours = [&](const std::vector<float>& candidate) {
    return !candidate.empty() && same_values(yours.data, candidate, at.options.atol, at.options.rtol) &&
           !same_values(candidate, theirs.data, at.options.atol, at.options.rtol);
  };
  if (w->dim(0) == w->dim(1) && is_yours(linear(*x, transposed(*w), b))) {
    evidence.push_back("yours is " + x_name + " · " + w_name + ", vkattn's " + x_name + " · " + w_name + "ᵀ");
    ids.push_back("weight_transposed");
  }
  for (const auto& [name, other] : at.given) {
    const bool weight = name.size() > 6 && name.ends_with("weight");
    if (!weight || name == w_name || other.shape != w->shape) continue;
    // with its own bias (the whole other layer), or with this step's (a weight copied to it)
    auto found = at.given.find(name.substr(0, name.size() - 6) + "bias");
    const Tensor* its_bias = found == at.given.end() ? nullptr : &found->second;
    if (is_yours(linear(*x, other, its_bias)) || (its_bias != b && is_yours(linear(*x, other, b)))) {
      evidence.push_back("yours is " + step + " with " + name + " for " + w_name);
      ids.push_back(gate_and_up(name, w_name) ? "gate_up_swapped" : "weight_swapped");
    }
  }
  std::vector<const Tensor*> tried = {x};  // self-attention's one tensor, cross-attention's memory, tried once
  for (const auto& [name, other] : at.given) {
    const bool input = !name.ends_with("weight") && !name.ends_with("bias");
    if (!input || other.shape != x->shape ||
        std::any_of(tried.begin(), tried.end(), [&](const Tensor* t) { return t->data == other.data; })) {
      continue;
    }
    tried.push_back(&other);
    if (is_yours(linear(other, *w, b))) {
      evidence.push_back("yours projects " + name + " where vkattn's " + step + " projects " + x_name);
      ids.push_back("input_swapped");
    }
  }
  if (ids.empty()) return {};
  std::string words = evidence[0];
  for (size_t k = 1; k < evidence.size(); ++k) words += ", or " + evidence[k];
  return said(words, ids);
}

Finding bias(const Around& at, const Tensor& yours) {
  const Tensor& theirs = at.theirs;
  if (at.event.op != "linear" || theirs.rank() < 2) return {};
  const int64_t M = theirs.shape.back(), N = element_count(theirs.shape) / M;
  if (N < 2) return {};
  std::vector<double> v(static_cast<size_t>(M));
  for (size_t m = 0; m < v.size(); ++m) v[m] = double(yours.data[m]) - theirs.data[m];  // the first position's
  const double atol = at.options.atol, rtol = at.options.rtol;
  for (int64_t k = 0; k < N * M; ++k) {
    const double u = yours.data[static_cast<size_t>(k)], t = theirs.data[static_cast<size_t>(k)];
    if (!(std::fabs(u - t - v[static_cast<size_t>(k % M)]) <= atol + rtol * std::fabs(t))) return {};
  }
  if (std::all_of(v.begin(), v.end(), [&](double x) { return std::fabs(x) <= atol; })) return {};
  const std::string evidence = "yours − vkattn's is one vector (" + preview(v) + ") at all " + std::to_string(N) +
                               " positions";
  const Tensor* b = at.input(2);
  if (at.event.inputs.size() < 3) {
    return said(evidence + "; vkattn's " + at.event.name + " has no bias", {"bias_extra"});
  }
  if (!b) return said(evidence, {"bias_missing", "bias_extra"});
  auto is = [&](double sign) {
    for (int64_t m = 0; m < M; ++m) {
      const double want = sign * b->data[static_cast<size_t>(m)];
      if (std::fabs(v[static_cast<size_t>(m)] - want) > atol + rtol * std::fabs(want)) return false;
    }
    return true;
  };
  const std::string& name = at.event.inputs[2].name;
  if (is(-1)) return said(evidence + ": −" + name, {"bias_missing"});
  if (is(1)) return said(evidence + ": " + name + " once more", {"bias_extra"});
  return said(evidence + ", not ±" + name, {"bias_missing", "bias_extra"});
}

Finding heads(const Around& at, const Tensor& yours) {
  const Tensor* x = at.input(0);
  const Tensor& theirs = at.theirs;
  if (at.event.op != "split_heads" || !x || x->rank() != 3 || theirs.rank() != 4) return {};
  const int64_t B = theirs.dim(0), H = theirs.dim(1), T = theirs.dim(2), d = theirs.dim(3);
  if (x->dim(2) != H * d || H < 2) return {};
  const double atol = at.options.atol, rtol = at.options.rtol;
  const std::string& x_name = at.event.inputs[0].name;
  if (at.yours_shape == theirs.shape && same_values(yours.data, x->data, atol, rtol)) {
    return said("yours " + shape_string(at.yours_shape) + " holds " + x_name +
                    "'s numbers in their own order (b, t, h, c), viewed as (b, h, t, c)",
                {"heads_view"});
  }
  std::vector<float> every_h(theirs.data.size());  // [b, h, t, c] = x[b, t, c·H + h]
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < d; ++c)
          every_h[static_cast<size_t>(((b * H + h) * T + t) * d + c)] =
              x->data[static_cast<size_t>((b * T + t) * H * d + c * H + h)];
  if (same_values(yours.data, every_h, atol, rtol)) {
    return said("yours takes head h's channel c from feature c·H + h of " + x_name + ", vkattn's from h·d + c",
                {"heads_order"});
  }
  return {};
}

Finding scale(const Around& at, const Tensor& yours) {
  const double atol = at.options.atol, rtol = at.options.rtol;
  if (at.event.op == "attention_scores") {
    auto c = common_factor(yours, at.theirs, atol, rtol);
    if (!c) return {};
    const std::string evidence = "yours is " + number_text(*c) + " × vkattn's everywhere";
    auto [d, H] = head_size_and_count(at.event);
    for (const auto& [factor, ids] : wrong_scales(d, H)) {
      if (d > 0 && near(*c, factor)) return said(evidence + " " + shapes(d, H), ids);
    }
    return said(evidence, {"constant_factor"});
  }
  const Tensor* scores = at.input(0);
  const StepRecorder::Step* product = at.upstream("attention_scores");
  if (at.event.op != "softmax" || !scores || !product) return {};
  auto [d, H] = head_size_and_count(product->event);
  if (d == 0) return {};
  const std::vector<float> mine = nan_as_zero(yours);
  for (const auto& [factor, ids] : wrong_scales(d, H)) {
    if (same_values(mine, softmax_of(*scores, factor), atol, rtol)) {
      return said("yours is the softmax of vkattn's scores × " + number_text(factor) + " " + shapes(d, H), ids);
    }
  }
  return {};
}

Finding mask_place(const Around& at, const Tensor& yours) {
  const double atol = at.options.atol, rtol = at.options.rtol;
  if (at.event.op == "attention_mask" && at.input(0) && same_values(yours.data, at.input(0)->data, atol, rtol)) {
    return said("yours is vkattn's scores unmasked (" + at.event.inputs[0].name + ")", {"mask_skipped"});
  }
  if (at.event.op != "softmax" && at.event.op != "attention_values") return {};
  const StepRecorder::Step* mask = at.upstream("attention_mask");
  const StepRecorder::Step* product = at.upstream("attention_scores");
  if (!mask || !product || !mask->values || !product->values) return {};
  std::vector<float> skipped = softmax_of(*product->values), after = skipped;
  size_t blocked = 0;
  for (size_t k = 0; k < after.size(); ++k) {
    if (mask->values->data[k] == -kInf) after[k] = 0, ++blocked;
  }
  if (blocked == 0) return {};
  std::string what = "yours is ";
  if (at.event.op == "attention_values") {  // P · V with each P
    const Tensor* v = at.input(1);
    const Tensor& s = *product->values;
    if (!v || v->rank() != 4 || s.rank() != 4) return {};
    const int64_t L = s.dim(2), S = s.dim(3), d = v->dim(3), BH = s.dim(0) * s.dim(1);
    for (auto* p : {&skipped, &after}) {
      std::vector<float> out(static_cast<size_t>(BH * L * d));
      reference::attention_values(p->data(), v->data.data(), out.data(), BH, L, S, d, at.options.kv_group);
      *p = std::move(out);
    }
    what += "P · V with P ";
  }
  const std::vector<float>& mine = yours.data;  // NaN: a row of -inf met the softmax, so masked before it
  if (same_values(mine, skipped, atol, rtol)) {
    return said(what + "the softmax of vkattn's scores before its mask (" + mask->event.name + ")", {"mask_skipped"});
  }
  if (same_values(mine, after, atol, rtol)) {
    return said(what + "the softmax of vkattn's scores before its mask, with the " + std::to_string(blocked) +
                    " blocked weights then set to 0",
                {"mask_after_softmax"});
  }
  return {};
}

Finding mask_shifted(const Around& at, const Tensor& yours) {
  const Tensor& theirs = at.theirs;
  const bool scores = at.event.op == "attention_mask";
  if ((!scores && at.event.op != "softmax") || theirs.rank() < 2) return {};
  auto blocked = [&](float v) { return std::isnan(v) || (scores ? v <= -1e8f : v == 0.0f); };
  const int64_t S = theirs.shape.back(), rows = element_count(theirs.shape) / S;
  auto yours_at = [&](int64_t r, int64_t j) { return blocked(yours.data[static_cast<size_t>(r * S + j)]); };
  auto theirs_at = [&](int64_t r, int64_t j) { return blocked(theirs.data[static_cast<size_t>(r * S + j)]); };
  bool any_theirs = false, any_yours = false;
  for (int64_t k = 0; k < rows * S; ++k) any_theirs |= theirs_at(0, k), any_yours |= yours_at(0, k);
  if (!any_theirs || !any_yours) return {};
  for (int64_t shift : {1, -1}) {
    bool fits = true, differs = false;
    for (int64_t r = 0; r < rows && fits; ++r)
      for (int64_t j = 0; j < S && fits; ++j) {
        differs |= yours_at(r, j) != theirs_at(r, j);
        if (j + shift >= 0 && j + shift < S) fits = yours_at(r, j) == theirs_at(r, j + shift);
      }
    if (fits && differs) {
      const std::string plus = shift > 0 ? "j + 1" : "j - 1";
      return said("yours blocks key j of a row wherever vkattn's blocks key " + plus + ": " +
                      (shift > 0 ? "one key more a row (the diagonal, under a causal mask)" : "one key fewer a row"),
                  {"mask_shifted"});
    }
  }
  return {};
}

Finding rows_not_normalised(const Around& at, const Tensor& yours) {
  if (at.event.op != "softmax" || yours.data.empty()) return {};
  const int64_t S = at.theirs.shape.back(), rows = element_count(at.theirs.shape) / S;
  double low = 1, high = 1;
  int64_t first = -1;
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < S; ++j) sum += yours.data[static_cast<size_t>(r * S + j)];
    if (std::isnan(sum) || sum == 0) continue;  // a row with every key blocked
    if (std::fabs(sum - 1) > 1e-3 && first < 0) first = r;
    low = std::min(low, sum), high = std::max(high, sum);
  }
  if (first < 0) return {};
  const std::string j = at.event.output.dims.empty() ? "the last axis" : at.event.output.dims.back();
  return said("your rows sum to " + number_text(low) + " … " + number_text(high) + " along " + j +
                  " (dim=-1), the first off 1 at " + index_string(at.theirs.shape, first * S, at.event.output.dims),
              {"rows_not_normalised"});
}

Finding dropout(const Around& at, const Tensor& yours) {
  const Tensor& theirs = at.theirs;
  size_t kept = 0, dropped = 0;
  double uv = 0, vv = 0;
  for (size_t k = 0; k < theirs.data.size(); ++k) {
    const float u = yours.data[k], v = theirs.data[k];
    if (!std::isfinite(v) || v == 0) {
      if (!(u == v || (std::isnan(u) && std::isnan(v)))) return {};
      continue;
    }
    if (u == 0) {
      ++dropped;
    } else {
      ++kept;
      uv += double(u) * v, vv += double(v) * v;
    }
  }
  if (dropped == 0 || kept < 4 || vv == 0) return {};
  const double c = uv / vv;
  if (c <= 1.001) return {};
  for (size_t k = 0; k < theirs.data.size(); ++k) {
    const double u = yours.data[k], v = c * theirs.data[k];
    if (u != 0 && std::isfinite(v) && std::fabs(u - v) > at.options.atol + at.options.rtol * std::fabs(v)) return {};
  }
  const double n = static_cast<double>(kept + dropped), seen = static_cast<double>(dropped) / n, p = 1 - 1 / c;
  if (std::fabs(seen - p) > std::max(0.1, 4 * std::sqrt(p * (1 - p) / n))) return {};
  return said("yours is 0 at " + std::to_string(dropped) + " of the " + std::to_string(kept + dropped) +
                  " elements where vkattn's is not (" + number_text(100 * seen, 2) + " %), and " + number_text(c) +
                  " × vkattn's at the rest: p = " + number_text(p, 2) + " gives 1/(1 - p) = " + number_text(c),
              {"dropout"});
}

Finding embedding_unscaled(const Around& at, const Tensor& yours) {
  if (at.event.op != "embedding" || yours.shape.empty()) return {};
  const auto c = common_factor(yours, at.theirs, at.options.atol, at.options.rtol);
  const double root = std::sqrt(static_cast<double>(yours.shape.back()));
  if (!c || !near(*c * root, 1.0)) return {};
  return said("yours is vkattn's ÷ √E = " + number_text(root) + " (E = " + std::to_string(yours.shape.back()) + ")",
              {"embedding_unscaled"});
}

Finding sixteen_bit(const Around& at, const Tensor& yours) {
  // bfloat16 first: its numbers within float16's range are float16 numbers too
  for (const auto& [format, name, bits] : {std::tuple{2, "bfloat16", "its low 16 bits zero"},
                                           std::tuple{1, "float16", "11 significant bits at most"}}) {
    size_t nonzero = 0, theirs_too = 0;
    bool all = true;
    for (size_t k = 0; k < yours.data.size() && all; ++k) {
      const float u = yours.data[k], v = at.theirs.data[k];
      if (!std::isfinite(u) || u == 0) continue;
      ++nonzero;
      all = reference::round_to(u, format) == u;
      theirs_too += std::isfinite(v) && reference::round_to(v, format) == v;
    }
    if (!all || nonzero < 16 || 2 * theirs_too >= nonzero) continue;
    return said("every one of your " + std::to_string(nonzero) + " nonzero values is a " + name + " (a float32 with " +
                    bits + "), where " + std::to_string(theirs_too) + " of vkattn's are",
                {"sixteen_bit"});
  }
  return {};
}

}  // namespace vkattn::diagnosis
