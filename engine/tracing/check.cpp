#include "vkattn/tracing/check.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include "engine/tracing/grouped_query_diagnosis.h"
#include "engine/tracing/mistakes.h"
#include "engine/tracing/numbers.h"
#include "vkattn/errors.h"
#include "vkattn/io/pretrained.h"

namespace vkattn {

namespace {

using diagnosis::Finding;
using diagnosis::said;
using diagnosis::worded;

constexpr float kInf = std::numeric_limits<float>::infinity();
// A score at or below this is a blocked one, whatever the code filled it with (-1e9, -1e30, -inf).
constexpr float kBlockedScore = -1e8f;

std::string axes_string(const std::vector<std::string>& names) {
  std::string s = "(";
  for (size_t k = 0; k < names.size(); ++k) s += (k ? ", " : "") + names[k];
  return s + ")";
}

// "(b=2, h=8, i=10, j=10)": a shape with its axis names.
std::string named_shape(const Shape& shape, const std::vector<std::string>& dims) {
  std::string s = "(";
  for (size_t k = 0; k < shape.size(); ++k) {
    s += (k ? ", " : "") + (k < dims.size() ? dims[k] + "=" : "") + std::to_string(shape[k]);
  }
  return s + ")";
}

// An axis as attention code writes it: -1 for the last, -2 for the one before, others counted
// from the front (the softmax's dim=-1, .transpose(1, 2), .transpose(-2, -1)).
std::string dim_arg(size_t axis, size_t rank) {
  auto a = static_cast<int64_t>(axis);
  return std::to_string(axis + 2 >= rank && rank > 2 ? a - static_cast<int64_t>(rank) : a);
}

// Whether `yours` is `theirs` with adjacent axes merged and axes of size 1 dropped or added:
// (B·H, L, d) for (B, H, L, d), (L, E) for (1, L, E).
bool merged_from(const Shape& yours, const Shape& theirs) {
  Shape a, b;
  std::copy_if(yours.begin(), yours.end(), std::back_inserter(a), [](int64_t n) { return n != 1; });
  std::copy_if(theirs.begin(), theirs.end(), std::back_inserter(b), [](int64_t n) { return n != 1; });
  size_t j = 0;
  for (int64_t n : a) {
    int64_t product = 1;
    while (j < b.size() && product < n) product *= b[j++];
    if (product != n) return false;
  }
  return j == b.size();
}

// A step's axes at their finest: the feature axis f of E = H·c as (h, c) when the recipe's head
// count divides it (q_proj's (b, t, f) is (b, t, h, c)), so that merging heads in the wrong
// order shows as axes in another order.
struct FineAxes {
  Shape sizes;
  std::vector<std::string> names;
};

FineAxes fine_axes(const Shape& shape, const std::vector<std::string>& dims, int64_t heads) {
  FineAxes f;
  for (size_t k = 0; k < shape.size(); ++k) {
    std::string name = k < dims.size() ? dims[k] : "d" + std::to_string(k);
    if (name == "f" && heads > 1 && shape[k] % heads == 0) {
      f.sizes.insert(f.sizes.end(), {heads, shape[k] / heads});
      f.names.insert(f.names.end(), {"h", "c"});
    } else {
      f.sizes.push_back(shape[k]);
      f.names.push_back(name);
    }
  }
  return f;
}

// `data` (C order over `sizes`) with its axes in the order `order`: torch's .permute(order).
std::vector<float> permuted(const std::vector<float>& data, const Shape& sizes, const std::vector<size_t>& order) {
  const size_t rank = sizes.size();
  Shape strides(rank, 1);
  for (size_t k = rank - 1; k-- > 0;) strides[k] = strides[k + 1] * sizes[k + 1];
  std::vector<float> out(data.size());
  Shape index(rank, 0);  // over the permuted axes
  int64_t source = 0;
  for (float& value : out) {
    value = data[static_cast<size_t>(source)];
    for (size_t k = rank; k-- > 0;) {
      const size_t axis = order[k];
      source += strides[axis];
      if (++index[k] < sizes[axis]) break;
      source -= strides[axis] * sizes[axis];
      index[k] = 0;
    }
  }
  return out;
}

// The call that would bring a tensor whose axes are `yours` to `theirs` (both orders of the same
// names): ".transpose(1, 2)" where two axes are swapped, ".permute(0, 2, 1, 3)" else.
std::string fix_for(const std::vector<std::string>& yours, const std::vector<std::string>& theirs) {
  std::vector<size_t> differ;
  for (size_t k = 0; k < yours.size(); ++k)
    if (yours[k] != theirs[k]) differ.push_back(k);
  if (differ.size() == 2) {
    const size_t rank = yours.size();
    const bool last_two = differ[0] + 2 == rank;  // .transpose(-2, -1), as Q @ K.transpose(-2, -1)
    return ".transpose(" + (last_two ? "-2, -1" : std::to_string(differ[0]) + ", " + std::to_string(differ[1])) + ")";
  }
  std::string s = ".permute(";
  for (size_t k = 0; k < theirs.size(); ++k) {
    auto at = std::find(yours.begin(), yours.end(), theirs[k]) - yours.begin();
    s += (k ? ", " : "") + std::to_string(at);
  }
  return s + ")";
}

Tensor as_shape(const Tensor& t, const Shape& shape) { return Tensor(shape, t.data, t.dtype); }

bool blocked_score(float v) { return std::isnan(v) || v <= kBlockedScore; }
bool blocked_weight(float v) { return std::isnan(v) || v == 0.0f; }

// Yours with every blocked score (-1e9 and below) as -inf, vkattn's fill; `changed` says whether any was.
Tensor with_inf_fill(const Tensor& yours, const Tensor& theirs, bool& changed) {
  Tensor t = yours;
  changed = false;
  for (size_t k = 0; k < t.data.size(); ++k) {
    if (theirs.data[k] == -kInf && std::isfinite(t.data[k]) && t.data[k] <= kBlockedScore) {
      t.data[k] = -kInf;
      changed = true;
    }
  }
  return t;
}

// Different blocked positions: which side blocks what the other keeps. Empty when both block the same.
Finding mask_diagnosis(const Tensor& yours, const Tensor& theirs, const std::vector<std::string>& dims, bool scores) {
  auto blocked = scores ? blocked_score : blocked_weight;
  size_t only_yours = 0, only_theirs = 0;
  int64_t first_yours = -1, first_theirs = -1;
  for (size_t k = 0; k < theirs.data.size(); ++k) {
    bool y = blocked(yours.data[k]), t = blocked(theirs.data[k]);
    if (y && !t && only_yours++ == 0) first_yours = static_cast<int64_t>(k);
    if (t && !y && only_theirs++ == 0) first_theirs = static_cast<int64_t>(k);
  }
  if (only_yours + only_theirs == 0) return {};
  const std::string what = scores ? "blocked (-inf)" : "given weight 0";
  std::ostringstream s;
  const size_t n = theirs.data.size();
  if (only_yours + only_theirs >= n * 9 / 10 && only_yours && only_theirs) {
    s << "yours is " << what << " where vkattn's is not, and the other way round, at "
      << only_yours + only_theirs << " of " << n << " positions (first "
      << index_string(theirs.shape, first_yours, dims)
      << "): a mask of the wrong polarity? In PyTorch a bool mask's True blocks a position "
         "(masked_fill(mask, -inf)); masked_fill(mask == 0, …) is for a mask whose 1 keeps one";
    return worded("mask_polarity", s.str());
  }
  s << "yours is " << what << " at " << only_yours << " positions vkattn's keeps";
  if (first_yours >= 0) s << " (first " << index_string(theirs.shape, first_yours, dims) << ")";
  s << " and keeps " << only_theirs << " that vkattn's blocks";
  if (first_theirs >= 0) s << " (first " << index_string(theirs.shape, first_theirs, dims) << ")";
  return said(s.str(), {"mask_other"});
}

// Softmax along another axis: yours sums to 1 along some axis, not along the last.
Finding softmax_axis_diagnosis(const Tensor& yours, const std::vector<std::string>& dims) {
  const size_t rank = yours.shape.size();
  if (rank < 2) return {};
  auto sums_to_one = [&](size_t axis) {
    int64_t inner = 1;
    for (size_t k = axis + 1; k < rank; ++k) inner *= yours.shape[k];
    const int64_t n = yours.shape[axis], outer = element_count(yours.shape) / (n * inner);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        double sum = 0;
        bool nan = false;
        for (int64_t k = 0; k < n; ++k) {
          float v = yours.data[static_cast<size_t>((o * n + k) * inner + i)];
          nan |= std::isnan(v);
          sum += v;
        }
        if (!nan && sum != 0 && std::fabs(sum - 1) > 1e-3) return false;  // a row of zeros is a masked one
      }
    }
    return true;
  };
  if (sums_to_one(rank - 1)) return {};
  for (size_t axis = 0; axis + 1 < rank; ++axis) {
    if (yours.shape[axis] > 1 && sums_to_one(axis)) {
      const std::string& last = dims.size() == rank ? dims[rank - 1] : "the last axis";
      const std::string& name = dims.size() == rank ? dims[axis] : "d" + std::to_string(axis);
      return worded("softmax_axis", "yours sums to 1 along " + name + " (dim=" + dim_arg(axis, rank) +
                                        "), vkattn's along " + last + " (dim=-1): softmax over dim=" +
                                        dim_arg(axis, rank) + " instead of dim=-1?");
    }
  }
  return {};
}

// Yours holds vkattn's numbers with its axes in another order (a permutation of the fine axes).
Finding order_diagnosis(const Tensor& yours, const Tensor& theirs, const StepCheck& step, const FineAxes& fine,
                        double atol, double rtol) {
  const size_t rank = fine.sizes.size();
  if (rank < 2 || rank > 6) return {};
  std::vector<std::vector<size_t>> orders;
  std::vector<size_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  while (std::next_permutation(order.begin(), order.end())) orders.push_back(order);
  auto moved = [](const std::vector<size_t>& o) {
    size_t n = 0;
    for (size_t k = 0; k < o.size(); ++k) n += o[k] != k;
    return n;
  };
  std::stable_sort(orders.begin(), orders.end(), [&](const auto& a, const auto& b) { return moved(a) < moved(b); });
  const Tensor flat_yours({static_cast<int64_t>(yours.data.size())}, yours.data);
  for (const auto& o : orders) {
    Shape sizes;
    std::vector<std::string> names;
    for (size_t axis : o) sizes.push_back(fine.sizes[axis]), names.push_back(fine.names[axis]);
    Tensor candidate({static_cast<int64_t>(theirs.data.size())}, permuted(theirs.data, fine.sizes, o));
    if (compare_values(flat_yours, candidate, atol, rtol).mismatches) continue;
    const std::string fix = fix_for(names, fine.names);
    if (yours.shape == sizes) {
      return worded("axes_order", "yours " + shape_string(yours.shape) + " is " + axes_string(names) + "; vkattn's " +
                                      step.name + " is " + axes_string(fine.names) + ": a missing " + fix + "?");
    }
    return worded("axes_order", "yours " + shape_string(yours.shape) + " holds vkattn's numbers in the order " +
                                    axes_string(names) + ", vkattn's " + step.name + " in the order " +
                                    axes_string(fine.names) + ": a missing " + fix + " before a .view or .reshape?");
  }
  return {};
}

// Whether yours has vkattn's shape, or that shape with axes merged: the values compare in place.
bool shaped_alike(const Shape& yours, const Shape& theirs) { return yours == theirs || merged_from(yours, theirs); }

// The diagnoses of a grouped-query attention's steps (grouped_query_diagnosis.h).
Finding since_2017_diagnosis(const diagnosis::Around& at, const Tensor& yours) {
  const CheckOptions& o = at.options;
  const std::string& op = at.event.op;
  if (op == "rotary_embedding" && o.rotary && at.input(0)) {
    if (Finding f = diagnosis::rotary(yours, *at.input(0), *o.rotary, o.atol, o.rtol)) return f;
    // after q_norm or k_norm (rms_norm): whether yours skipped it
    auto norm = at.produced.find(at.event.inputs.empty() ? "" : at.event.inputs[0].name);
    if (norm == at.produced.end() || norm->second->event.op != "rms_norm" || norm->second->event.inputs.empty()) {
      return {};
    }
    auto split = at.produced.find(norm->second->event.inputs[0].name);
    if (split == at.produced.end() || !split->second->values) return {};
    return diagnosis::unnormalised(yours, *split->second->values, *o.rotary, o.atol, o.rtol);
  }
  if ((op == "attention_scores" || op == "attention_values") && at.input(0) && at.input(1)) {
    return diagnosis::repeat_order(op, yours, *at.input(0), *at.input(1), o.kv_group, o.atol, o.rtol);
  }
  return {};
}

// The first diagnosis that fits yours (in the step's shape), most specific first: numbers of 16
// bits, those that recompute the step as one mistake would have it, then the axes' order, the
// mask, the softmax's axis, a constant factor and what is left of a softmax.
Finding diagnose(const diagnosis::Around& at, const Tensor& yours, const Tensor& recorded, const StepCheck& step,
                 bool alike) {
  using namespace diagnosis;
  const CheckOptions& o = at.options;
  const std::string& op = at.event.op;
  for (auto* detect :
       {sixteen_bit, since_2017_diagnosis, projection, bias, heads, scale, mask_place, mask_shifted, dropout,
        embedding_unscaled}) {
    if (Finding f = detect(at, yours)) return f;
  }
  const FineAxes fine = fine_axes(step.shape, step.dims, o.heads);
  if (Finding f = order_diagnosis(recorded, at.theirs, step, fine, o.atol, o.rtol)) return f;
  if (!alike) {
    return Finding{{}, "yours " + shape_string(recorded.shape) + " holds as many numbers as vkattn's " +
                           named_shape(step.shape, step.dims) + ", but no order of vkattn's axes gives yours"};
  }
  if (op == "attention_mask" || op == "softmax") {
    if (Finding f = mask_diagnosis(yours, at.theirs, step.dims, op == "attention_mask")) return f;
  }
  if (op == "softmax") {
    if (Finding f = softmax_axis_diagnosis(yours, step.dims)) return f;
  }
  if (auto c = common_factor(yours, at.theirs, o.atol, o.rtol)) {
    return said("yours is " + number_text(*c) + " × vkattn's everywhere", {"constant_factor"});
  }
  if (Finding f = rows_not_normalised(at, yours)) return f;
  if (op == "softmax") {
    for (size_t k = 0; k < yours.data.size(); ++k) {
      if (std::isnan(yours.data[k]) && !std::isnan(at.theirs.data[k])) {
        return said("yours is NaN at " + index_string(step.shape, static_cast<int64_t>(k), step.dims) +
                        ", vkattn's " + number_text(at.theirs.data[k]),
                    {"masked_row_nan"});
      }
    }
  }
  return {};
}

void check_one(StepCheck& step, const diagnosis::Around& at, const Tensor& recorded) {
  const CheckOptions& o = at.options;
  const Tensor& theirs = at.theirs;
  const int64_t n = element_count(step.shape);
  if (element_count(recorded.shape) != n) {
    step.verdict = StepVerdict::differs;
    diagnosis::Finding f = diagnosis::repeated_heads(recorded, theirs, o.kv_group, o.atol, o.rtol);
    step.diagnoses = f.ids;
    step.diagnosis = f ? f.text
                       : "yours " + shape_string(recorded.shape) + " holds " + std::to_string(recorded.data.size()) +
                             " numbers; vkattn's " + step.name + " " + named_shape(step.shape, step.dims) + " holds " +
                             std::to_string(n);
    return;
  }
  const bool alike = shaped_alike(recorded.shape, step.shape);
  Tensor yours = as_shape(recorded, step.shape);
  bool filled = false;
  if (at.event.op == "attention_mask") yours = with_inf_fill(yours, theirs, filled);
  step.diff = compare_values(yours, theirs, o.atol, o.rtol);
  if (step.diff->mismatches == 0 && alike) {
    step.verdict = StepVerdict::agrees;
    if (recorded.shape != step.shape) {
      step.diagnosis = "yours " + shape_string(recorded.shape) + " is vkattn's " + shape_string(step.shape) +
                       " with axes merged";
    }
    if (filled) step.diagnosis = "yours fills blocked scores with a large negative number, vkattn's with -inf: "
                                 "the same weights after softmax";
    // 16-bit numbers within the tolerances here may be what a later step's difference comes from
    if (diagnosis::Finding f = diagnosis::sixteen_bit(at, yours)) {
      step.diagnosis = "yours agrees within the tolerances, but " + f.text;
    }
    return;
  }
  step.verdict = StepVerdict::differs;
  if (step.diff->mismatches) {
    step.where = index_string(step.shape, static_cast<int64_t>(step.diff->first_mismatch), step.dims);
  }
  for (size_t k = 0; k < yours.data.size() && !step.infinite_error; ++k) {
    const float u = yours.data[k], v = theirs.data[k];
    step.infinite_error = std::isfinite(u) != std::isfinite(v) || (std::isinf(u) && u != v);
  }
  if (step.diff->mismatches == 0) {
    step.diagnosis = "yours " + shape_string(recorded.shape) + " holds vkattn's numbers in vkattn's order, viewed as "
                     "another shape than " + named_shape(step.shape, step.dims);
    return;
  }
  diagnosis::Finding why = diagnose(at, yours, recorded, step, alike);
  step.diagnosis = why.text;
  step.diagnoses = why.ids;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0]++;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The step a name most likely means: one that contains it or is contained in it, or is a few
// letters away.
std::string likely_step(const std::string& name, const std::vector<StepCheck>& steps) {
  std::string best;
  size_t best_distance = 4;
  for (const auto& s : steps) {
    if (s.name.find(name) != std::string::npos || name.find(s.name) != std::string::npos) return s.name;
    size_t d = edit_distance(name, s.name);
    if (d < best_distance) best = s.name, best_distance = d;
  }
  return best;
}

// `text` wrapped at `width` columns after `indent`, the lines after the first indented two more.
std::string wrap(const std::string& text, size_t width, const std::string& indent) {
  std::istringstream words(text);
  std::string word, out, line = indent;
  while (words >> word) {
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent + "  ";
    }
    line += (line.empty() || line.back() == ' ' ? "" : " ") + word;  // empty: a note's first word
  }
  return out + line;
}

}  // namespace

CheckReport check_steps(const std::vector<std::pair<std::string, Tensor>>& recorded, const StepRecorder& recipe,
                        const CheckOptions& options) {
  CheckReport report;
  report.backend = recipe.backend();
  report.device = recipe.device();
  report.atol = options.atol;
  report.rtol = options.rtol;
  std::map<std::string, const Tensor*> yours;
  std::map<std::string, const StepRecorder::Step*> produced;  // the recipe's steps by their outputs' names
  for (const auto& [name, tensor] : recorded) yours[name] = &tensor;
  for (const auto& s : recipe.steps()) {
    if (!s.values) throw ShapeError("check: vkattn's pass was recorded without values");
    diagnosis::Around at{s.event, *s.values, {}, produced, recipe.inputs(), options};
    for (const auto& input : s.event.inputs) {
      auto step = produced.find(input.name);
      auto given = recipe.inputs().find(input.name);
      at.inputs.push_back(step != produced.end()          ? &*step->second->values
                          : given != recipe.inputs().end() ? &given->second
                                                           : nullptr);
    }
    StepCheck step;
    step.index = s.event.index;
    step.name = s.event.name;
    step.op = s.event.op;
    step.shape = s.event.output.shape;
    step.dims = s.event.output.dims;
    if (auto it = yours.find(step.name); it != yours.end()) {
      step.yours = it->second->shape;
      at.yours_shape = it->second->shape;
      check_one(step, at, *it->second);
      yours.erase(it);
      if (step.verdict == StepVerdict::differs && !report.first_divergent) {
        report.first_divergent = report.steps.size();
      }
    }
    report.steps.push_back(std::move(step));
    produced[s.event.output.name] = &s;
  }
  for (const auto& [name, tensor] : recorded) {
    if (yours.count(name)) report.unknown.emplace_back(name, likely_step(name, report.steps));
  }
  return report;
}

CheckReport check_pass(const std::vector<std::pair<std::string, Tensor>>& recorded, Backend& backend,
                       const std::function<void(Backend&)>& forward, const CheckOptions& options) {
  StepRecorder recipe(true, true);
  {
    AttachedTracer attached(backend, recipe);
    forward(backend);
  }
  return check_steps(recorded, recipe, options);
}

AttentionPath recorded_path(const std::vector<std::pair<std::string, Tensor>>& recorded) {
  const bool fused = std::any_of(recorded.begin(), recorded.end(), [](const auto& r) {
    return r.first == "flash_attention" || r.first.ends_with(".flash_attention");
  });
  return fused ? AttentionPath::fused : AttentionPath::unfused;
}

CheckReport check_attention(const std::vector<std::pair<std::string, Tensor>>& recorded,
                            const MultiHeadAttention& module, Backend& backend, const Tensor& query,
                            const Tensor& key, const Tensor& value, ForwardOptions forward, CheckOptions options) {
  forward.attention = recorded_path(recorded);
  forward.need_weights = forward.attention == AttentionPath::unfused;
  options.heads = module.config().num_heads;
  return check_pass(recorded, backend, [&](Backend& b) { module.forward(b, query, key, value, forward); }, options);
}

CheckReport check_encoder(const std::vector<std::pair<std::string, Tensor>>& recorded,
                          const TransformerEncoderLayer& module, Backend& backend, const Tensor& src,
                          EncoderOptions forward, CheckOptions options) {
  forward.attention = recorded_path(recorded);
  options.heads = module.config().nhead;
  return check_pass(recorded, backend, [&](Backend& b) { module.forward(b, src, forward); }, options);
}

CheckReport check_encoder(const std::vector<std::pair<std::string, Tensor>>& recorded, const TransformerEncoder& module,
                          Backend& backend, const Tensor& src, EncoderOptions forward, CheckOptions options) {
  forward.attention = recorded_path(recorded);
  options.heads = module.config().layer.nhead;
  return check_pass(recorded, backend, [&](Backend& b) { module.forward(b, src, forward); }, options);
}

CheckReport check_decoder(const std::vector<std::pair<std::string, Tensor>>& recorded,
                          const TransformerDecoderLayer& module, Backend& backend, const Tensor& tgt,
                          const Tensor& memory, DecoderOptions forward, CheckOptions options) {
  forward.attention = recorded_path(recorded);
  options.heads = module.config().nhead;
  return check_pass(recorded, backend, [&](Backend& b) { module.forward(b, tgt, memory, forward); }, options);
}

CheckReport check_decoder(const std::vector<std::pair<std::string, Tensor>>& recorded, const TransformerDecoder& module,
                          Backend& backend, const Tensor& tgt, const Tensor& memory, DecoderOptions forward,
                          CheckOptions options) {
  forward.attention = recorded_path(recorded);
  options.heads = module.config().layer.nhead;
  return check_pass(recorded, backend, [&](Backend& b) { module.forward(b, tgt, memory, forward); }, options);
}

CheckReport check_grouped_query(const std::vector<std::pair<std::string, Tensor>>& recorded,
                                const GroupedQueryAttention& module, Backend& backend, const Tensor& x,
                                GroupedQueryOptions forward, CheckOptions options) {
  forward.attention = recorded_path(recorded);
  forward.need_weights = forward.attention == AttentionPath::unfused;
  forward.average_attn_weights = false;
  const auto& c = module.config();
  options.heads = c.num_heads;
  options.kv_group = c.num_heads / c.kv_heads();
  options.rotary = RotaryCheck{c.rope_theta, c.rope, c.rotary_dims, forward.position};
  return check_pass(recorded, backend, [&](Backend& b) { module.forward(b, x, forward); }, options);
}

CheckReport check_pretrained(const std::vector<std::pair<std::string, Tensor>>& recorded, const io::Pretrained& model,
                             Backend& backend, const Tensor& ids, const std::optional<Tensor>& token_type_ids,
                             CheckOptions options) {
  const AttentionPath path = recorded_path(recorded);
  const nlohmann::json& c = model.config;
  options.heads = c.value("n_head", c.value("num_attention_heads", int64_t{0}));
  if (options.heads > 0 && c.contains("num_key_value_heads")) {
    options.kv_group = options.heads / std::max<int64_t>(1, c["num_key_value_heads"].get<int64_t>());
  }
  if (model.model && (c.contains("rope_theta") || c.value("model_type", "") == "llama")) {
    options.rotary = RotaryCheck{c.value("rope_theta", 10000.0f), RotaryConvention::half, 0, 0};
  }
  auto recorded_any = [&](auto&& of_head) {
    return std::any_of(recorded.begin(), recorded.end(), [&](const auto& r) { return of_head(r.first); });
  };
  const bool classifier = model.encoder && model.encoder->config().num_labels > 0 &&
                          recorded_any([](const std::string& name) {
                            return name == "qa_outputs" || name == "classifier" || name.starts_with("classifier.");
                          });
  const bool masked_lm = model.encoder && model.encoder->config().masked_lm &&
                         recorded_any([](const std::string& name) { return name.starts_with("cls."); });
  return check_pass(recorded, backend, [&](Backend& b) {
    if (classifier) {
      model.encoder->classify(b, ids, token_type_ids, {}, path);
    } else if (masked_lm) {
      model.encoder->masked_lm(b, ids, token_type_ids, {}, path);
    } else if (model.encoder) {
      model.encoder->forward(b, ids, token_type_ids, {}, path);
    } else {
      model.model->forward(b, ids, {}, path);
    }
  }, options);
}

bool CheckReport::ok() const {
  bool any = std::any_of(steps.begin(), steps.end(), [](const StepCheck& s) { return s.yours.has_value(); });
  return any && !first_divergent && unknown.empty();
}

std::string CheckReport::text() const {
  std::ostringstream out;
  // Columns: the step's index and name (at most 30 wide), vkattn's shape, yours, the largest
  // error. A name wider than its column has a line of its own, the row's cells below it in their
  // columns; another cell wider than its column pushes the rest right, and a row that would pass
  // 100 columns goes on below its name.
  size_t width = 6;
  for (const auto& s : steps) width = std::min<size_t>(std::max(width, s.name.size() + 2), 30);
  auto cell = [](const std::string& text, size_t w) {
    return text + std::string(w > text.size() ? w - text.size() : 1, ' ');
  };
  out << "your steps against vkattn's recipe on " << backend << " (" << device << ")\n"
      << "agreeing means |yours - vkattn's| <= atol " << atol << " + rtol " << rtol << " * |vkattn's|\n\n"
      << cell("#", 4) << cell("step", width) << cell("vkattn's shape", 26) << cell("yours", 18) << "max error\n";
  size_t recorded = 0;
  for (const auto& s : steps) {
    const std::string head = cell(std::to_string(s.index), 4) + cell(s.name, width);
    std::string rest = cell(named_shape(s.shape, s.dims), 26);
    if (!s.yours) {
      rest += "not recorded";
    } else {
      ++recorded;
      // The error means something only between tensors of one shape.
      std::string error = !s.diff || !shaped_alike(*s.yours, s.shape) ? "-"
                          : s.infinite_error                            ? "inf"
                                                                        : number_text(s.diff->max_abs_error, 3);
      rest += cell(shape_string(*s.yours), 18) + cell(error, 11) +
              (s.verdict == StepVerdict::agrees ? "agrees" : "DIFFERS");
    }
    const std::string below = std::string(4 + width, ' ') + rest;
    if (s.name.size() + 1 < width && head.size() + rest.size() <= 100) {
      out << head << rest << "\n";
    } else if (below.size() <= 100) {
      out << cell(std::to_string(s.index), 4) << s.name << "\n" << below << "\n";
    } else {
      out << head << "\n" << wrap(rest, 98, "      ") << "\n";
    }
  }
  for (const auto& s : steps) {
    if (s.verdict == StepVerdict::agrees && !s.diagnosis.empty()) {
      out << wrap("note, " + s.name + ": " + s.diagnosis, 98, "") << "\n";
    }
  }
  for (const auto& [name, guess] : unknown) {
    out << name << ": not a step of vkattn's recipe" << (guess.empty() ? "" : " (" + guess + "?)") << "\n";
  }
  if (first_divergent) {
    const StepCheck& s = steps[*first_divergent];
    out << "\nfirst divergent step: " << s.index << " " << s.name << " (" << s.op << ")\n";
    if (s.diff && s.diff->mismatches && shaped_alike(*s.yours, s.shape)) {
      // wrapped: the index and the values' widths vary (up to 14 characters a value)
      out << wrap(std::to_string(s.diff->mismatches) + " of " + std::to_string(element_count(s.shape)) +
                      " elements differ, first at " + s.where + ": yours " + number_text(s.diff->a_value, 7) +
                      ", vkattn's " + number_text(s.diff->b_value, 7),
                  98, "  ")
          << "\n";
    }
    if (!s.diagnosis.empty()) out << wrap(s.diagnosis, 98, "  ") << "\n";
    bool agreed_before = std::any_of(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(*first_divergent),
                                     [](const StepCheck& c) { return c.yours.has_value(); });
    if (agreed_before) out << "  every recorded step before it agrees: the difference starts here\n";
  } else if (recorded == 0) {
    out << "\nnothing to compare: no recorded name is a step of vkattn's recipe\n";
  } else if (unknown.empty()) {
    out << "\nall " << recorded << " recorded steps agree\n";
  } else {
    out << "\nthe " << recorded << " recorded steps agree; " << unknown.size()
        << " recorded name(s) are no step of vkattn's recipe\n";
  }
  return out.str();
}

}  // namespace vkattn
