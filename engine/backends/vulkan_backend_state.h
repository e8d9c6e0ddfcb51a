#pragma once
// VulkanBackend's state, shared by its two files: vulkan_backend.cpp (memory, the pass, the
// run_<op> dispatches) and vulkan_plans.cpp (which plan runs each step: the rules, the tuned and
// the remembered ones).
#include <map>
#include <memory>
#include <string>

#include "engine/vulkan/buffer_pool.h"
#include "engine/vulkan/context.h"
#include "engine/vulkan/gemm_plan.h"
#include "engine/vulkan/plan_cache.h"
#include "engine/vulkan/recorder.h"
#include "engine/vulkan/step_plans.h"
#include "vkattn/backends/vulkan_backend.h"

namespace vkattn {

// The device as the backend sees it: the context's, with what its options switch off.
inline vulkan::DeviceReport with_options(vulkan::DeviceReport device, const VulkanBackendOptions& options) {
  if (!options.subgroups && device.switches.subgroups) {
    device.switches.subgroups = false;
    device.switches.subgroups_why = "VulkanBackendOptions::subgroups is false";
  }
  return device;
}

struct VulkanBackend::State {
  State(std::shared_ptr<vulkan::Context> context_in, const Options& options_in)
      : context(std::move(context_in)),
        options(options_in),
        device(with_options(context->device_report(), options)),
        recorder(context, options.max_groups_per_dim,
                 options.early_dispatches.value_or(vulkan::early_dispatch_rule(context->device_report()))),
        buffers(std::make_shared<vulkan::BufferPool>(context)) {}

  std::shared_ptr<vulkan::Context> context;
  Options options;
  vulkan::DeviceReport device;  // the context's, with the subgroups switch off when options say so
  vulkan::GemmPlan gemm;
  uint32_t gemv_rows = 0;  // linear for at most this many rows as the GEMV
  // flash_decoding_subgroup's required lanes (vulkan::kDecodingLanesWorkgroup; count 0: none),
  // asked of the device once, not on each decode step
  vulkan::Lanes decoding_lanes;
  vulkan::RowPlan rows;
  vulkan::FlashPlan flash;
  vulkan::FlashPlan fallback_flash;  // the subgroup plan: where a tiled plan's tiles outgrow shared memory
  std::map<int64_t, vulkan::FlashPlan> flash_rules;  // by head dim, where no plan is forced
  // Tuning (tuner.h): the device's remembered plans, null when tuning is off; the plans this
  // backend uses, by shape class (with the switches that shaped its candidates)
  std::shared_ptr<vulkan::PlanCache> cache;
  std::string class_suffix;
  std::map<std::string, vulkan::GemmPlan> gemm_plans;
  std::map<std::string, vulkan::FlashPlan> flash_plans;
  std::map<std::string, vulkan::RowPlan> row_plans;
  std::map<std::string, bool> fused_paths;  // by path_class: whether fused is the faster
  std::map<std::string, vulkan::DecodingPlan> decoding_plans;  // flash_decoding's split and lanes
  vulkan::Recorder recorder;
  std::shared_ptr<vulkan::BufferPool> buffers;  // tensors' buffers; Storage holds it weakly
  // flash_attention's measured speed, multiply-adds a second (0: not measured yet)
  double flash_rate = 0;
};

}  // namespace vkattn
