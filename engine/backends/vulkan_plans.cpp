// VulkanBackend's plans: which plan runs each step — the fixed rules, those tuning measured on
// this device, and those the plan cache remembers — and which path a forward takes.
#include <map>

#include <spdlog/spdlog.h>

#include "engine/backends/tuner.h"
#include "engine/backends/vulkan_backend_state.h"
#include "engine/vulkan/plan_cache.h"
#include "engine/vulkan/step_plans.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/errors.h"

namespace vkattn {

namespace {

// A remembered plan for `shape_class`, read and checked against the device; a warning and none
// when the entry is malformed or asks for what the device lacks (an edited or foreign file).
template <class Plan>
std::optional<Plan> remembered(vulkan::PlanCache& cache, const std::string& shape_class,
                               const vulkan::DeviceReport& device, Plan (*read)(const nlohmann::json&),
                               const std::function<void(const Plan&, const vulkan::DeviceReport&)>& check) {
  const auto entry = cache.find(shape_class);
  if (!entry) return std::nullopt;
  try {
    if (!entry->contains("plan")) throw ConfigError("the entry has no plan");
    Plan plan = read(entry->at("plan"));
    check(plan, device);
    return plan;
  } catch (const Error& e) {
    spdlog::warn("plan cache: the plan remembered for {} in {} is refused ({}): measuring again", shape_class,
                 cache.file().string(), e.what());
    cache.forget(shape_class);
    return std::nullopt;
  }
}

// Keeps what tuning `shape_class` measured. Where the device refused every candidate, the rule's
// plan runs and the user is told, once: the cache remembers it, so a later run measures nothing.
void remember(vulkan::PlanCache& cache, const std::string& shape_class, const tuning::Outcome& outcome) {
  if (!outcome.none_ran.empty()) {
    spdlog::warn("tuning {}: {}; the fixed rule's plan runs", shape_class, outcome.none_ran);
  }
  cache.remember(shape_class, outcome.to_json());
}

}  // namespace

vulkan::GemmPlan VulkanBackend::gemm_plan_for(const std::string& name, int64_t batch, int64_t M, int64_t N, int64_t K,
                                              Narrow b_format) {
  const tuning::GemmProblem problem{name, uint64_t(batch), uint64_t(M), uint64_t(N), uint64_t(K), b_format};
  if (s_->options.gemm) return s_->gemm;  // as asked
  if (!s_->cache || problem.multiply_adds() < tuning::kSmallestTuned) return s_->gemm.for_rows(uint64_t(M));
  const std::string shape_class = tuning::shape_class(problem) + s_->class_suffix;
  if (auto it = s_->gemm_plans.find(shape_class); it != s_->gemm_plans.end()) return it->second;
  if (auto plan = remembered<vulkan::GemmPlan>(*s_->cache, shape_class, s_->device, &tuning::gemm_plan_from_json,
                                               &vulkan::check_gemm_plan)) {
    return s_->gemm_plans[shape_class] = *plan;
  }
  const tuning::Outcome outcome =
      tuning::tune_gemm(s_->context, s_->options, problem, tuning::gemm_candidates(s_->device, name, b_format),
                        [this](const std::string& what, double done) { report_progress("tuning " + what, done); });
  remember(*s_->cache, shape_class, outcome);
  return s_->gemm_plans[shape_class] = tuning::gemm_plan_from_json(outcome.plan);
}

const vulkan::FlashPlan& VulkanBackend::flash_plan_for(int64_t heads, int64_t L, int64_t S, int64_t d, bool causal) {
  const tuning::FlashProblem problem{uint64_t(heads), uint64_t(L), uint64_t(S), uint64_t(d), causal};
  if (s_->options.flash || s_->options.flash_rows) return s_->flash;  // forced
  if (!s_->cache || problem.multiply_adds() < tuning::kSmallestTuned) {
    auto rule = s_->flash_rules.find(d);
    if (rule == s_->flash_rules.end()) {
      rule = s_->flash_rules.emplace(d, vulkan::flash_rule(s_->device, s_->options.workgroup_size, uint32_t(d))).first;
    }
    return rule->second;
  }
  const std::string shape_class = tuning::shape_class(problem) + s_->class_suffix;
  if (auto it = s_->flash_plans.find(shape_class); it != s_->flash_plans.end()) return it->second;
  if (auto plan = remembered<vulkan::FlashPlan>(*s_->cache, shape_class, s_->device, &tuning::flash_plan_from_json,
                                                &vulkan::check_flash_plan)) {
    return s_->flash_plans[shape_class] = *plan;
  }
  const tuning::Outcome outcome = tuning::tune_flash(
      s_->context, s_->options, problem, tuning::flash_candidates(s_->device, s_->options.workgroup_size, uint32_t(d)),
      [this](const std::string& what, double done) { report_progress("tuning " + what, done); });
  remember(*s_->cache, shape_class, outcome);
  return s_->flash_plans[shape_class] = tuning::flash_plan_from_json(outcome.plan);
}

const vulkan::RowPlan& VulkanBackend::row_plan_for(const std::string& step, int64_t rows, int64_t cols) {
  const tuning::RowProblem problem{step, uint64_t(rows), uint64_t(cols)};
  if (!s_->cache || s_->options.rows || problem.multiply_adds() < tuning::kSmallestTuned) return s_->rows;
  const std::string shape_class = tuning::shape_class(problem) + s_->class_suffix;
  if (auto it = s_->row_plans.find(shape_class); it != s_->row_plans.end()) return it->second;
  const uint32_t workgroup_size = s_->options.workgroup_size;
  if (auto plan = remembered<vulkan::RowPlan>(*s_->cache, shape_class, s_->device, &tuning::row_plan_from_json,
                                              [workgroup_size](const vulkan::RowPlan& p, const vulkan::DeviceReport& d) {
                                                vulkan::check_row_plan(p, d, workgroup_size);
                                              })) {
    return s_->row_plans[shape_class] = *plan;
  }
  const tuning::Outcome outcome = tuning::tune_rows(
      s_->context, s_->options, problem, tuning::row_candidates(s_->device, workgroup_size),
      [this](const std::string& what, double done) { report_progress("tuning " + what, done); });
  remember(*s_->cache, shape_class, outcome);
  return s_->row_plans[shape_class] = tuning::row_plan_from_json(outcome.plan);
}

uint32_t VulkanBackend::part_lanes_rule(int64_t d) const {
  const bool gpu = s_->device.type != vk::PhysicalDeviceType::eCpu;
  if (!s_->options.flash_decoding_subgroups.value_or(gpu)) return 0;
  return vulkan::decoding_part_lanes(s_->decoding_lanes.count, uint32_t(d));  // 0 where none: an ask was refused
}

vulkan::DecodingPlan VulkanBackend::decoding_plan(int64_t rows, int64_t length, int64_t d, int64_t queries,
                                                  int64_t key_rows) {
  const vulkan::DecodingPlan rule{Backend::decoding_parts(rows, length, d), part_lanes_rule(d)};
  const tuning::DecodingProblem problem{uint64_t(rows), uint64_t(length), uint64_t(d), uint64_t(queries),
                                        uint64_t(key_rows)};
  if (!s_->cache || problem.keys < tuning::kShortestTunedDecoding) return rule;
  const std::string shape_class = tuning::shape_class(problem) + s_->class_suffix;
  auto it = s_->decoding_plans.find(shape_class);
  if (it == s_->decoding_plans.end()) {
    // lanes the device no longer gives at this d (another build, other switches): measured again
    const uint32_t lanes = vulkan::decoding_part_lanes(s_->decoding_lanes.count, uint32_t(d));
    auto plan = remembered<vulkan::DecodingPlan>(
        *s_->cache, shape_class, s_->device, &tuning::decoding_plan_from_json,
        [lanes](const vulkan::DecodingPlan& read, const vulkan::DeviceReport&) {
          if (read.lanes != 0 && read.lanes != lanes) {
            throw DeviceError("parts of " + std::to_string(read.lanes) + " lanes, where the device gives " +
                              std::to_string(lanes));
          }
        });
    if (!plan) {
      // lanes and none, on a device whose rule shares parts; as asked, where asked
      std::vector<uint32_t> lane_counts{rule.lanes};
      if (rule.lanes && !s_->options.flash_decoding_subgroups) lane_counts.push_back(0);
      const tuning::Outcome outcome = tuning::tune_decoding(
          s_->context, s_->options, problem, tuning::decoding_candidates(rule, problem, lane_counts),
          [this](const std::string& what, double done) { report_progress("tuning " + what, done); });
      remember(*s_->cache, shape_class, outcome);
      plan = tuning::decoding_plan_from_json(outcome.plan);
    }
    it = s_->decoding_plans.emplace(shape_class, *plan).first;
  }
  vulkan::DecodingPlan plan = it->second;
  plan.parts = std::min(plan.parts, length);  // a measured count fits the class's lengths; an edited one may not
  if (s_->options.flash_decoding_subgroups) plan.lanes = rule.lanes;  // asked for: as asked
  return plan;
}

int64_t VulkanBackend::decoding_parts(int64_t rows, int64_t length, int64_t d, int64_t queries, int64_t key_rows) {
  return decoding_plan(rows, length, d, queries, key_rows).parts;
}

uint32_t VulkanBackend::decoding_part_lanes(int64_t rows, int64_t length, int64_t d, int64_t queries,
                                            int64_t key_rows) {
  return decoding_plan(rows, length, d, queries, key_rows).lanes;
}

bool VulkanBackend::folds_layout_steps() const { return s_->options.fold_layout_steps; }

void VulkanBackend::fold_layout_steps(bool fold) { s_->options.fold_layout_steps = fold; }

bool VulkanBackend::folds_into_store() const { return s_->options.fold_into_store; }

bool VulkanBackend::combines_parts(int64_t parts, uint32_t part_lanes) const {
  const bool rule = s_->device.type != vk::PhysicalDeviceType::eCpu;
  // a workgroup holds whole rows' parts: workgroup_size invocations a part, or
  // kDecodingLanesWorkgroup lanes, part_lanes a part
  const int64_t fits = part_lanes ? vulkan::kDecodingLanesWorkgroup / part_lanes : s_->options.workgroup_size;
  return s_->options.fold_into_store && s_->options.combine_in_flash_decoding.value_or(rule) && parts <= fits;
}

bool VulkanBackend::prefers_fused(const AttentionProblem& p) {
  if (!s_->cache) return true;
  const tuning::FlashProblem problem{uint64_t(p.batch * p.heads), uint64_t(p.L), uint64_t(p.S), uint64_t(p.d), p.causal};
  const uint64_t score_bytes = problem.heads * problem.L * problem.S * sizeof(float);
  if (score_bytes > s_->device.max_storage_buffer_range || score_bytes > s_->device.device_local_bytes / 8 ||
      problem.multiply_adds() < tuning::kSmallestTuned) {
    return true;
  }
  const std::string shape_class = tuning::path_class(problem) + s_->class_suffix;
  if (auto it = s_->fused_paths.find(shape_class); it != s_->fused_paths.end()) return it->second;
  if (auto entry = s_->cache->find(shape_class)) {
    const std::string path = entry->contains("plan") && entry->at("plan").is_object() ? entry->at("plan").value("path", "") : "";
    if (path == "fused" || path == "unfused") return s_->fused_paths[shape_class] = path == "fused";
    spdlog::warn("plan cache: the path remembered for {} in {} is neither fused nor unfused: measuring again",
                 shape_class, s_->cache->file().string());
    s_->cache->forget(shape_class);
  }
  const tuning::Outcome outcome = tuning::tune_path(
      s_->context, s_->options, problem,
      [this](VulkanBackend& candidate) {  // its steps' own tuning reports through this backend
        candidate.on_progress([this](const Progress& progress) { report_progress(progress.step, progress.done); });
      },
      [this](const std::string& what, double done) { report_progress("tuning " + what, done); });
  remember(*s_->cache, shape_class, outcome);
  return s_->fused_paths[shape_class] = outcome.plan.value("path", "") == "fused";
}

std::vector<std::pair<std::string, std::string>> VulkanBackend::tuned_plans() const {
  std::vector<std::pair<std::string, std::string>> plans;
  for (const auto& [shape_class, plan] : s_->gemm_plans) plans.emplace_back(shape_class, plan.describe());
  for (const auto& [shape_class, plan] : s_->flash_plans) plans.emplace_back(shape_class, plan.describe());
  for (const auto& [shape_class, plan] : s_->row_plans) plans.emplace_back(shape_class, plan.describe());
  for (const auto& [shape_class, fused] : s_->fused_paths) plans.emplace_back(shape_class, fused ? "fused" : "unfused");
  for (const auto& [shape_class, plan] : s_->decoding_plans) plans.emplace_back(shape_class, plan.describe());
  return plans;
}

VulkanBackend::~VulkanBackend() {
  s_->recorder.settle();  // before the kernels and buffers that unfinished work may still use go
}

}  // namespace vkattn
