#include "engine/vulkan/step_plans.h"

#include <algorithm>

#include "engine/vulkan/gemm_plan.h"
#include "engine/vulkan/lanes.h"

namespace vkattn::vulkan {
namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// flash_attention_subgroup's workgroup: this many subgroups, as the device allows
constexpr uint32_t kFlashSubgroups = 8;

}  // namespace

uint64_t RowPlan::groups(uint64_t rows, uint32_t workgroup_size) const {
  return lanes ? ceil_div(rows, workgroup_size / lanes) : rows;  // a row per subgroup, or per workgroup
}

RowPlan plan_rows(const DeviceReport& device, uint32_t workgroup_size) {
  Lanes lanes = guaranteed_lanes(device, SubgroupOps::arithmetic, 0, workgroup_size);
  return {lanes.count, lanes.why};
}

uint64_t FlashPlan::groups(uint64_t heads, uint64_t length) const {
  if (!lanes) return heads * ceil_div(length, workgroup_size);  // a row per invocation, one head per workgroup
  return ceil_div(heads * ceil_div(length, rows), workgroup_size / lanes);
}

FlashPlan plan_flash(const DeviceReport& device, uint32_t workgroup_size, uint32_t rows) {
  FlashPlan plan;
  Lanes lanes = guaranteed_lanes(device, SubgroupOps::shuffle_and_arithmetic);
  if (!lanes) {
    plan.workgroup_size = workgroup_size;
    plan.why = lanes.why;
    return plan;
  }
  plan.lanes = lanes.count;
  const uint32_t subgroups = std::min({kFlashSubgroups, device.max_workgroup_invocations / lanes.count,
                                       device.max_workgroup_subgroups ? device.max_workgroup_subgroups : kFlashSubgroups});
  plan.workgroup_size = lanes.count * std::max(subgroups, 1u);
  // Rows per subgroup: two per lane on a CPU device (S3's flash_attention on lavapipe: 8 rows
  // 32.9 ms, 16 rows 26.6, 24 rows 27.0), at most 8 on a GPU
  const bool cpu = device.type == vk::PhysicalDeviceType::eCpu;
  plan.rows = rows > 0 ? rows : cpu ? 2 * lanes.count : std::min(lanes.count, 8u);
  plan.why = lanes.why + (rows > 0 ? "; rows as asked" : cpu ? "; two rows a lane on a CPU device" : "; at most 8 rows on a GPU");
  return plan;
}

std::vector<StepPlan> step_plans(const DeviceReport& device, uint32_t workgroup_size) {
  std::vector<StepPlan> plans;
  const GemmPlan gemm = plan_gemm(device);
  plans.push_back({"linear, attention_scores, attention_values", gemm.describe(), gemm.required_lanes(), gemm.why});
  const RowPlan rows = plan_rows(device, workgroup_size);
  plans.push_back({"softmax, layer_norm",
                   rows.lanes ? "a row per subgroup" : "a row per workgroup, reduced through shared memory", rows.lanes,
                   rows.why});
  const FlashPlan flash = plan_flash(device, workgroup_size);
  plans.push_back({"flash_attention",
                   flash.lanes ? std::to_string(flash.rows) + " rows per subgroup, workgroup " + std::to_string(flash.workgroup_size)
                               : "a row per invocation, workgroup " + std::to_string(flash.workgroup_size),
                   flash.lanes, flash.why});
  return plans;
}

}  // namespace vkattn::vulkan
