#pragma once
// Checking the user's own attention: the intermediate tensors of their code (PyTorch's, usually),
// recorded under vkattn's step names, against the same steps of vkattn's recipe run on the same
// weights and inputs. Every recorded step is compared in the recipe's order; the first that
// differs is named with its decoded index and both values, and with a diagnosis where the
// difference is one of the mistakes of vkattn/tracing/diagnoses.h (a scale by √E, the mask
// applied after the softmax, dropout left on, a weight transposed, …): each is recognised from
// the numbers, most by recomputing the step as the mistake would have it. Where several fit the
// numbers alike, all are said.
// Yours may be shaped with vkattn's axes merged ((B·H, L, d) for (B, H, L, d)) or without a batch
// axis of 1. A blocked score filled with -1e9 (or less) counts as vkattn's -inf.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/grouped_query_attention.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/modules/transformer_decoder.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tensor.h"
#include "vkattn/tracing/compare.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {

namespace io {
struct Pretrained;
}

// The recipe's RoPE, for telling another convention or θ from other differences.
struct RotaryCheck {
  float theta = 10000.0f;
  RotaryConvention convention = RotaryConvention::half;
  int64_t rotary_dims = 0;  // 0: d
  int64_t offset = 0;       // the first row's position
};

struct CheckOptions {
  double atol = 1e-4, rtol = 1e-4;  // |yours - vkattn's| <= atol + rtol·|vkattn's|
  // The recipe's head count: a feature axis f of E = H·c is seen as (h, c) when looking for axes
  // in another order (merge_heads without its transpose). 0 leaves f whole.
  int64_t heads = 0;
  int64_t kv_group = 1;               // query heads per key/value head (grouped-query attention)
  std::optional<RotaryCheck> rotary;  // the recipe's rotary_embedding steps' parameters
};

enum class StepVerdict { not_recorded, agrees, differs };

struct StepCheck {
  int index = 0;                  // the step's position in vkattn's recipe
  std::string name, op;           // vkattn's step
  Shape shape;                    // vkattn's tensor
  std::vector<std::string> dims;  // its axis names
  std::optional<Shape> yours;     // the recorded tensor's shape, when the step was recorded
  StepVerdict verdict = StepVerdict::not_recorded;
  std::optional<ValueDiff> diff;  // yours against vkattn's, when they hold as many elements
  bool infinite_error = false;    // an element infinite or NaN on one side only (a mask's difference)
  std::string where;              // the first element beyond tolerance, decoded: "(b=0, h=1, i=2, j=0)"
  std::string diagnosis;          // what the difference is, in words; a note where both agree
  std::vector<std::string> diagnoses;  // the catalogue's names of what fits (diagnoses.h): several
                                       // when the numbers cannot tell them apart
};

struct CheckReport {
  std::string backend, device;  // where vkattn's recipe ran
  double atol = 0, rtol = 0;
  std::vector<StepCheck> steps;                          // vkattn's recipe, in order
  std::vector<std::pair<std::string, std::string>> unknown;  // (recorded name, a likely step or "")
  std::optional<size_t> first_divergent;                 // into steps

  // At least one step recorded, every recorded step agrees, and every recorded name is a step.
  bool ok() const;
  // The report as the command line prints it: a table of the recipe's steps, then the first
  // divergent step and its diagnosis (lines within 100 columns).
  std::string text() const;
};

// `recorded`: (step name, tensor) in any order; `recipe`: vkattn's pass, recorded with values
// (and with its inputs, for the diagnoses that recompute a step from them). ShapeError when
// `recipe` holds no values.
CheckReport check_steps(const std::vector<std::pair<std::string, Tensor>>& recorded, const StepRecorder& recipe,
                        const CheckOptions& options = {});

// `forward` (one pass of a module) run on `backend` and recorded with its values and inputs, then
// check_steps against it. The module checks below are this with their own forward and options.
CheckReport check_pass(const std::vector<std::pair<std::string, Tensor>>& recorded, Backend& backend,
                       const std::function<void(Backend&)>& forward, const CheckOptions& options = {});

// Whether the user recorded a fused step (a name ending in flash_attention): the recipe is run
// fused then, else unfused, so that it has the steps the user recorded.
AttentionPath recorded_path(const std::vector<std::pair<std::string, Tensor>>& recorded);

// `vkattn check` and Python's vkattn.check: `module`'s recipe run on `backend` with the inputs
// and masks of `forward` (need_weights is forced on, and the unfused path unless the user
// recorded a flash_attention step), then check_steps against it with the module's head count.
CheckReport check_attention(const std::vector<std::pair<std::string, Tensor>>& recorded,
                            const MultiHeadAttention& module, Backend& backend, const Tensor& query,
                            const Tensor& key, const Tensor& value, ForwardOptions forward,
                            CheckOptions options = {});
// An encoder layer or a stack of them on src, its steps under their module paths (self_attn.q_proj,
// layers.1.norm2, …), and a decoder's on tgt and memory: run fused or unfused as recorded.
CheckReport check_encoder(const std::vector<std::pair<std::string, Tensor>>& recorded,
                          const TransformerEncoderLayer& module, Backend& backend, const Tensor& src,
                          EncoderOptions forward, CheckOptions options = {});
CheckReport check_encoder(const std::vector<std::pair<std::string, Tensor>>& recorded,
                          const TransformerEncoder& module, Backend& backend, const Tensor& src,
                          EncoderOptions forward, CheckOptions options = {});
CheckReport check_decoder(const std::vector<std::pair<std::string, Tensor>>& recorded,
                          const TransformerDecoderLayer& module, Backend& backend, const Tensor& tgt,
                          const Tensor& memory, DecoderOptions forward, CheckOptions options = {});
CheckReport check_decoder(const std::vector<std::pair<std::string, Tensor>>& recorded,
                          const TransformerDecoder& module, Backend& backend, const Tensor& tgt,
                          const Tensor& memory, DecoderOptions forward, CheckOptions options = {});
// A hub checkpoint (io::load_pretrained: GPT-2, Llama-family, BERT) on token ids (B, T), its
// steps named as its trace names them; its heads, key/value groups and RoPE from config.json.
// An encoder takes token_type_ids (B, T) (a pair's; zeros where none), and runs the pass whose
// steps were recorded: its classifier's (Bert::classify: `classifier…`, `qa_outputs`), its
// masked-LM head's (`cls.…`), or its forward.
CheckReport check_pretrained(const std::vector<std::pair<std::string, Tensor>>& recorded, const io::Pretrained& model,
                             Backend& backend, const Tensor& ids, const std::optional<Tensor>& token_type_ids,
                             CheckOptions options = {});
// The same for a grouped-query attention (Llama's) on x: its recipe with weights (unfused) unless
// flash_attention was recorded, checked with its heads, key/value group and RoPE.
CheckReport check_grouped_query(const std::vector<std::pair<std::string, Tensor>>& recorded,
                                const GroupedQueryAttention& module, Backend& backend, const Tensor& x,
                                GroupedQueryOptions forward, CheckOptions options = {});

}  // namespace vkattn
