#pragma once
// The check's diagnoses that recompute a step as a mistake would have it (check.h, diagnoses.h):
// from the recipe's own values around the step — its inputs, the steps before it, the tensors
// given to the recipe — each builds what the step holds after one classic mistake, and names the
// mistake when that is yours. Each returns an empty Finding when yours is not that mistake.
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vkattn/tensor.h"
#include "vkattn/tracing/check.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn::diagnosis {

// What the check says of one differing step: the diagnoses that fit (diagnoses.h's ids; several
// when the numbers cannot tell them apart) and the words.
struct Finding {
  std::vector<std::string> ids;
  std::string text;
  explicit operator bool() const { return !text.empty(); }
};

// "<evidence>: <mistake>? Usually <culprit>; write <fix> [id]" from the catalogue, or, for several
// ids, each mistake as one of the possibilities.
Finding said(const std::string& evidence, const std::vector<std::string_view>& ids);

// Whether a and b, as long as each other and not empty, agree within atol + rtol·|b|.
bool same_values(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol);

// The c with yours = c · vkattn's over every finite element (infinities and NaN in the same
// places), c ≠ 1; nullopt when there is none.
std::optional<double> common_factor(const Tensor& yours, const Tensor& theirs, double atol, double rtol);

// A diagnosis that writes its own words (their evidence and mistake in one sentence): the text
// with the catalogue's name after it.
Finding worded(std::string_view id, const std::string& text);

// The recipe around one step.
struct Around {
  const StepEvent& event;
  const Tensor& theirs;                                 // the step's output
  std::vector<const Tensor*> inputs;                    // its inputs' values; null where unknown
  const std::map<std::string, const StepRecorder::Step*>& produced;  // earlier steps by output name
  const std::map<std::string, Tensor>& given;  // the pass's inputs and weights (StepRecorder::inputs)
  const CheckOptions& options;
  Shape yours_shape = {};  // the shape yours was recorded in (diagnoses see it in the step's)

  const Tensor* input(size_t k) const { return k < inputs.size() ? inputs[k] : nullptr; }
  // The nearest earlier step up the chain of first inputs whose op is `op`, or null.
  const StepRecorder::Step* upstream(const std::string& op) const;
};

// q_proj, k_proj, v_proj, out_proj (linear): the input given to check in another layout, another
// input or weight, the weight transposed.
Finding projection(const Around& at, const Tensor& yours);
// linear: yours − vkattn's one vector at every position.
Finding bias(const Around& at, const Tensor& yours);
// split_heads: (B, T, E) viewed as (B, H, T, d), or a head's channels every H-th feature.
Finding heads(const Around& at, const Tensor& yours);
// attention_scores: yours = c · vkattn's with c one of the classic wrong scales; softmax: yours the
// softmax of c · vkattn's scores. Any other c at attention_scores: constant_factor.
Finding scale(const Around& at, const Tensor& yours);
// attention_mask, softmax, attention_values: the mask skipped (masked_fill's result dropped) or
// applied after the softmax.
Finding mask_place(const Around& at, const Tensor& yours);
// attention_mask, softmax: yours blocks (i, j) where vkattn's blocks (i, j ± 1).
Finding mask_shifted(const Around& at, const Tensor& yours);
// softmax: rows that do not sum to 1 (after the other diagnoses found nothing).
Finding rows_not_normalised(const Around& at, const Tensor& yours);
// Any step: zeros at random, the rest vkattn's × 1/(1 − p).
Finding dropout(const Around& at, const Tensor& yours);
// Any step: every value of yours a bfloat16 (or a float16) where vkattn's are not.
Finding sixteen_bit(const Around& at, const Tensor& yours);
// embedding (Gemma's embed_tokens, whose rows vkattn scales by √E): yours = vkattn's ÷ √E.
Finding embedding_unscaled(const Around& at, const Tensor& yours);

}  // namespace vkattn::diagnosis
