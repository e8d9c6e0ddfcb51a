#pragma once
// Tuning: where a step has more than one plan on a device, VulkanBackend measures them the first
// time it meets a shape class, keeps the fastest plan whose output matches the CPU reference, and
// remembers it on disk (engine/vulkan/plan_cache.h), as FFTW's wisdom and Triton's autotuner do.
// The fixed rules (plan_gemm, plan_flash) stay: they are the plan where tuning is off
// (VKATTN_TUNE=off, VulkanBackendOptions::tune), for shapes too small to be worth measuring, and
// the first candidate of every tuning.
//
//   linear, attention_scores, attention_values — GemmPlan: broadcast tile rows 1 or 2 times the
//       lanes (4 times where that is at most 32 rows) × columns a lane 8 or 16, and the rule's
//       tile with storage inputs where the rule reads texels (CPU devices); shared 8² or
//       16² invocations (where broadcast cannot run, and on GPUs).
//   flash_attention — FlashPlan: query rows per subgroup (1, 2 or 4 per lane on a CPU device; 1 to
//       8 on a GPU), the rule's rows with half and twice its keys a lane (CPU devices) or with
//       storage inputs where it reads texels, or a row per invocation.
//   softmax, layer_norm — RowPlan: a row per subgroup of guaranteed lanes, or a row per workgroup
//       reduced through shared memory.
//   the attention path — fused (flash_attention) or unfused (attention_scores, attention_mask,
//       softmax, attention_values), where a forward without weights may take either.
//   flash_decoding — the parts its keys are split into (attention_combine merges them): the
//       rule's count and the powers of two up to a part of 8 keys.
//
// A shape class rounds the problem's sizes up to powers of two (rows of A, columns, the inner
// dimension; flash_attention's query and key lengths, exact head dim and causality): shapes of one
// class are fastest under the same plan, and a model meets few classes. Candidates are measured on
// the first problem of the class (its batch cut down to about 0.2 GFLOP), in turns, each checked
// first against the reference on a small problem of the class (odd sizes, edges included).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/vulkan/gemm_plan.h"
#include "engine/vulkan/step_plans.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/tensor.h"

namespace vkattn::tuning {

// C (batch, M, N) = A (batch, M, K) · B, as one of the GEMM steps runs it: B 16-bit where a
// backend keeps linear's weights so (Backend::upload_matrix), which reads them otherwise (never
// packed) and holds twice as many in a buffer.
struct GemmProblem {
  std::string step;  // linear, attention_scores, attention_values
  uint64_t batch = 1, M = 1, N = 1, K = 1;
  Narrow b_format = Narrow::none;
  double multiply_adds() const { return double(batch) * double(M) * double(N) * double(K); }
};
// Q (heads, L, d) against K and V (heads, S, d), causal or not.
struct FlashProblem {
  uint64_t heads = 1, L = 1, S = 1, d = 1;
  bool causal = false;
  double multiply_adds() const { return 2.0 * double(heads) * double(L) * double(S) * double(d) / (causal ? 2 : 1); }
};

// softmax or layer_norm over `rows` rows of `cols`.
struct RowProblem {
  std::string step;  // softmax, layer_norm
  uint64_t rows = 1, cols = 1;
  double multiply_adds() const { return 4.0 * double(rows) * double(cols); }  // about: a few passes a row
};

// A decode step: `rows` (B·H·L) query rows of d against `keys` cached keys and values, `queries`
// (L) rows a query head, over `key_rows` (B·H_kv, a divisor of the B·H query heads; 0: one a
// query head) heads of cached keys.
struct DecodingProblem {
  uint64_t rows = 1, keys = 1, d = 1, queries = 1, key_rows = 0;
  uint64_t query_heads() const { return std::max<uint64_t>(rows / std::max<uint64_t>(queries, 1), 1); }
  uint64_t key_heads() const { return key_rows ? key_rows : query_heads(); }
  double multiply_adds() const { return 2.0 * double(rows) * double(keys) * double(d); }
};

// "linear: rows ≤ 4096, n ≤ 512, k ≤ 512" (", B bfloat16" after it for a 16-bit B);
// "flash_attention: d 64, L ≤ 128, S ≤ 128, causal"; "softmax: rows ≤ 32768, n ≤ 128"
std::string shape_class(const GemmProblem& problem);
std::string shape_class(const FlashProblem& problem);
std::string shape_class(const RowProblem& problem);
std::string shape_class(const DecodingProblem& problem);  // "flash_decoding: d 64, rows ≤ 8, S ≤ 4096"

// Problems below this many multiply-adds keep the rule: measuring costs more than a plan saves.
constexpr double kSmallestTuned = 8e6;
// A decode step is small and runs once a token, layer and attention: its split is measured from
// this many keys, where there are at least two candidates of 32 keys a part.
constexpr uint64_t kShortestTunedDecoding = 128;

// The plans tuning chooses among on `device`, the rule's first; for attention_values, whose B is
// stored (K, N), and for a 16-bit B, none packs B.
std::vector<vulkan::GemmPlan> gemm_candidates(const vulkan::DeviceReport& device, const std::string& product = "linear",
                                              Narrow b_format = Narrow::none);
// Flash plans for head dim `d` (the tiled ones must fit its rows in shared memory).
std::vector<vulkan::FlashPlan> flash_candidates(const vulkan::DeviceReport& device, uint32_t workgroup_size,
                                                uint32_t d = 64);
std::vector<vulkan::RowPlan> row_candidates(const vulkan::DeviceReport& device, uint32_t workgroup_size);
// `rule` (Backend::decoding_parts' count and its lanes), then for each of `lane_counts` (the
// rule's alone when empty) 1, 2, 4, … parts while a part holds at least 8 keys of the class's
// shortest length (so that every count is valid for every length of the class).
std::vector<vulkan::DecodingPlan> decoding_candidates(const vulkan::DecodingPlan& rule, const DecodingProblem& problem,
                                                      const std::vector<uint32_t>& lane_counts = {});

// Plans as the cache keeps them. The readers throw ConfigError on a malformed entry.
nlohmann::json to_json(const vulkan::GemmPlan& plan);
nlohmann::json to_json(const vulkan::FlashPlan& plan);
nlohmann::json to_json(const vulkan::RowPlan& plan);
vulkan::GemmPlan gemm_plan_from_json(const nlohmann::json& plan);
vulkan::FlashPlan flash_plan_from_json(const nlohmann::json& plan);
vulkan::RowPlan row_plan_from_json(const nlohmann::json& plan);

// What tuning a class measured: each candidate's time (or why it was left out), the choice.
struct Candidate {
  std::string plan;  // describe()
  double ms = 0;     // the median of its turns; 0 when left out
  std::string left_out;  // why: "differs from the reference by 0.3", the device's error
};
struct Outcome {
  std::string problem;  // the problem measured: "(3200, 512) · (512, 512)ᵀ"
  nlohmann::json plan;  // the chosen plan (to_json)
  std::string chosen;   // its describe()
  std::string rule;     // the rule's plan's describe()
  std::vector<Candidate> candidates;
  double seconds = 0;  // tuning took
  // Why no candidate ran, each refused by the device (memory, its limits): `plan` is then the
  // first candidate's (the rule's), unmeasured. Empty when one was measured.
  std::string none_ran;
  nlohmann::json to_json() const;  // the cache's entry
};

// Reports `done` (0..1) of tuning `what`; may throw (Interrupted) to stop.
using Progress = std::function<void(const std::string& what, double done)>;

// Measures `candidates` on `problem`, each on its own backend on `context` made with `options`
// (tuning off, the candidate forced). Throws DeviceError when a candidate differs from the
// reference and none matches it; when the device refuses every one, the outcome says so
// (none_ran) and holds the first.
Outcome tune_gemm(const std::shared_ptr<vulkan::Context>& context, const VulkanBackendOptions& options,
                  const GemmProblem& problem, const std::vector<vulkan::GemmPlan>& candidates,
                  const Progress& progress);
Outcome tune_flash(const std::shared_ptr<vulkan::Context>& context, const VulkanBackendOptions& options,
                   const FlashProblem& problem, const std::vector<vulkan::FlashPlan>& candidates,
                   const Progress& progress);
Outcome tune_rows(const std::shared_ptr<vulkan::Context>& context, const VulkanBackendOptions& options,
                  const RowProblem& problem, const std::vector<vulkan::RowPlan>& candidates, const Progress& progress);
// flash_decoding then attention_combine, timed together under each plan. The plan is
// {"parts": P, "lanes": G}; decoding_plan_from_json reads it (ConfigError when P is not a count ≥ 1
// or G not a power of two or 0).
Outcome tune_decoding(const std::shared_ptr<vulkan::Context>& context, const VulkanBackendOptions& options,
                      const DecodingProblem& problem, const std::vector<vulkan::DecodingPlan>& candidates,
                      const Progress& progress);
vulkan::DecodingPlan decoding_plan_from_json(const nlohmann::json& plan);

// Fused against unfused, for a forward that may take either (Backend::prefers_fused): both
// paths' steps timed on `problem` (its heads cut where it is very large) on backends that tune
// their own steps, made with `options` and then `prepare` (progress, say). The plan is
// {"path": "fused"} or {"path": "unfused"}.
std::string path_class(const FlashProblem& problem);  // "attention path: d 64, L ≤ 128, S ≤ 128"
Outcome tune_path(const std::shared_ptr<vulkan::Context>& context, const VulkanBackendOptions& options,
                  const FlashProblem& problem, const std::function<void(VulkanBackend&)>& prepare,
                  const Progress& progress);

// VKATTN_TUNE: true unless it says off (0, false, no); ConfigError for another value.
bool tune_from_environment();

}  // namespace vkattn::tuning
