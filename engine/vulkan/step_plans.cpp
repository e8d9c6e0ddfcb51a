#include "engine/vulkan/step_plans.h"

#include <algorithm>

#include "engine/vulkan/gemm_plan.h"
#include "engine/vulkan/grid.h"
#include "engine/vulkan/lanes.h"
#include "vkattn/errors.h"

namespace vkattn::vulkan {
namespace {

// flash_attention_subgroup's workgroup: this many subgroups, as the device allows
constexpr uint32_t kFlashSubgroups = 8;
// flash_attention_subgroup_tiled: a row's 8 invocations are lanes of one subgroup
constexpr uint32_t kTiledSoftmaxLanes = 8;
// flash_attention_subgroup's block of keys on a CPU device: each broadcast of a query's four dims
// then serves 16 / lanes keys a lane; larger blocks waste the keys past a short row's end
// (docs/lavapipe.md, "The measurements behind the plans").
constexpr uint32_t kFlashCpuBlock = 16;

}  // namespace

uint64_t RowPlan::groups(uint64_t rows, uint32_t workgroup_size) const {
  return lanes ? ceil_div(rows, workgroup_size / lanes) : rows;  // a row per subgroup, or per workgroup
}

std::string RowPlan::describe() const {
  return lanes ? "a row per subgroup of " + std::to_string(lanes) + " lanes"
               : std::string("a row per workgroup, reduced through shared memory");
}

void check_row_plan(const RowPlan& plan, const DeviceReport& device, uint32_t workgroup_size) {
  if (!plan.lanes) return;  // every device runs a row per workgroup
  const Lanes lanes = guaranteed_lanes(device, SubgroupOps::arithmetic, plan.lanes, workgroup_size);
  if (lanes.count != plan.lanes) {
    throw DeviceError("row plan '" + plan.describe() + "': '" + device.name + "' guarantees " +
                      (lanes ? std::to_string(lanes.count) + " lanes" : "none: " + lanes.why));
  }
}

RowPlan plan_rows(const DeviceReport& device, uint32_t workgroup_size) {
  Lanes lanes = guaranteed_lanes(device, SubgroupOps::arithmetic, 0, workgroup_size);
  return {lanes.count, lanes.why};
}

uint64_t FlashPlan::groups(uint64_t heads, uint64_t length) const {
  if (!lanes || tiled) return heads * ceil_div(length, rows_per_unit());  // one head per workgroup
  return ceil_div(heads * ceil_div(length, rows), workgroup_size / lanes);
}

uint64_t FlashPlan::first_row(uint64_t group, uint64_t heads, uint64_t length, bool causal) const {
  const uint64_t row_groups = ceil_div(length, rows_per_unit());
  const uint64_t unit = group * units_per_group();
  if (tiled && causal) return (row_groups - 1 - unit / heads) * rows_per_unit();
  return unit % row_groups * rows_per_unit();
}

uint64_t FlashPlan::shared_bytes(uint32_t d) const {
  if (!tiled) return 0;
  const uint64_t d4 = ceil_div(ceil_div(d, 4), 8) * 8;  // vec4s a row, padded to the kernel's 8 columns
  const uint64_t vec4s = (rows + keys) * (d4 + 1) + keys * d4;
  return vec4s * 16 + (uint64_t(rows) * (keys + 1) + (lanes ? 0ull : 3ull * rows)) * sizeof(float);
}

FlashPlan tiled_flash(uint32_t rows, uint32_t keys, uint32_t lanes) {
  FlashPlan plan;
  plan.tiled = true;
  plan.lanes = lanes;
  plan.rows = rows;
  plan.keys = keys;
  plan.workgroup_size = FlashPlan::kTiledWorkgroup;
  return plan;
}

std::vector<FlashPlan> tiled_flash_plans(const DeviceReport& device, uint32_t d) {
  std::vector<FlashPlan> plans;
  const Lanes lanes = guaranteed_lanes(device, SubgroupOps::shuffle, 0, FlashPlan::kTiledWorkgroup);
  std::vector<uint32_t> lane_counts{0};  // the workgroup's softmax, then across lanes where it can be
  if (lanes.count >= kTiledSoftmaxLanes) lane_counts.push_back(lanes.count);
  for (uint32_t with_lanes : lane_counts) {
    for (auto [rows, keys] : {std::pair{64u, 32u}, {64u, 16u}, {32u, 32u}, {32u, 16u}, {16u, 16u}}) {
      FlashPlan plan = tiled_flash(rows, keys, with_lanes);
      if (plan.shared_bytes(d) <= device.max_shared_memory_bytes) plans.push_back(plan);
    }
  }
  return plans;
}

FlashPlan flash_rule(const DeviceReport& device, uint32_t workgroup_size, uint32_t d) {
  if (device.type != vk::PhysicalDeviceType::eCpu) {
    for (uint32_t rows : {64u, 32u, 16u}) {
      FlashPlan plan = tiled_flash(rows, 16);
      if (plan.shared_bytes(d) > device.max_shared_memory_bytes) continue;
      plan.why = "FlashAttention-2's order on a GPU, " + std::to_string(plan.shared_bytes(d)) +
                 " bytes of shared memory at d " + std::to_string(d);
      return plan;
    }
  }
  return plan_flash(device, workgroup_size);
}

std::string FlashPlan::shader(bool texels) const {
  if (tiled) return lanes ? "flash_attention_subgroup_tiled" : "flash_attention_tiled";
  // (appended in place: GCC 14 warns, falsely, of a copy out of bounds in the one-line sum)
  std::string name = lanes ? "flash_attention_subgroup" : "flash_attention";
  if (texels) name += "_texel";
  if (lanes && lanes <= GemmPlan::kMostUnrolledLanes) name += "_unrolled";
  return name;
}

std::string FlashPlan::describe() const {
  const std::string inputs = texel_inputs ? ", texels" : "";
  if (tiled) {
    return std::to_string(rows) + " rows per workgroup of " + std::to_string(workgroup_size) +
           ", K and V in tiles of " + std::to_string(keys) + " keys" + (lanes ? ", softmax across lanes" : "");
  }
  if (!lanes) return "a row per invocation, workgroup " + std::to_string(workgroup_size) + inputs;
  // (the lanes, as the GEMM's plan, are the device's: `vkattn devices` prints them beside the plan)
  return std::to_string(rows) + (rows == 1 ? " row × " : " rows × ") + std::to_string(lanes * keys) +
         " keys per subgroup, workgroup " + std::to_string(workgroup_size) + inputs;
}

FlashPlan plan_flash(const DeviceReport& device, uint32_t workgroup_size, uint32_t rows) {
  FlashPlan plan;
  plan.texel_inputs = plan_gemm(device).texel_inputs;
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
  // Rows per subgroup: two per lane on a CPU device (the fastest on lavapipe: docs/lavapipe.md, "The measurements behind the plans"),
  // at most 8 on a GPU
  const bool cpu = device.type == vk::PhysicalDeviceType::eCpu;
  plan.rows = rows > 0 ? rows : cpu ? 2 * lanes.count : std::min(lanes.count, 8u);
  plan.keys = cpu ? std::max(kFlashCpuBlock / lanes.count, 1u) : 1u;
  plan.why = lanes.why + (rows > 0 ? "; rows as asked" : cpu ? "; two rows a lane on a CPU device" : "; at most 8 rows on a GPU");
  plan.why += cpu ? ", blocks of " + std::to_string(plan.lanes * plan.keys) + " keys" : ", a key a lane";
  return plan;
}

void check_flash_plan(const FlashPlan& plan, const DeviceReport& device) {
  auto fail = [&](const std::string& what) { throw DeviceError("flash plan '" + plan.describe() + "': " + what); };
  if (plan.workgroup_size == 0 || plan.workgroup_size > device.max_workgroup_invocations ||
      plan.workgroup_size > device.max_workgroup_size_x) {
    fail("workgroup outside 1.." + std::to_string(device.max_workgroup_invocations) + " invocations");
  }
  if (plan.tiled) {
    if (plan.lanes) {
      const Lanes lanes = guaranteed_lanes(device, SubgroupOps::shuffle, plan.lanes, FlashPlan::kTiledWorkgroup);
      if (plan.lanes < kTiledSoftmaxLanes || lanes.count != plan.lanes) {
        fail("its softmax across lanes needs 8 or more guaranteed lanes; asks " + std::to_string(plan.lanes) + ", '" +
             device.name + "' guarantees " + (lanes ? std::to_string(lanes.count) : "none: " + lanes.why));
      }
    }
    if (plan.workgroup_size != FlashPlan::kTiledWorkgroup) fail("a tiled plan's workgroup is 128");
    if (plan.rows != 16 && plan.rows != 32 && plan.rows != 64) fail("rows per workgroup must be 16, 32 or 64");
    if (plan.keys != 8 && plan.keys != 16 && plan.keys != 32 && plan.keys != 64) fail("keys a tile must be 8, 16, 32 or 64");
    if (plan.texel_inputs) fail("a tiled plan reads storage buffers");
  } else if (plan.lanes) {
    const Lanes lanes = guaranteed_lanes(device, SubgroupOps::shuffle_and_arithmetic, plan.lanes);
    if (lanes.count != plan.lanes) {
      fail("needs " + std::to_string(plan.lanes) + " guaranteed lanes; '" + device.name + "' guarantees " +
           (lanes ? std::to_string(lanes.count) : "none: " + lanes.why));
    }
    if (plan.rows == 0 || plan.rows > 64) fail("rows per subgroup must be 1 to 64");
    if (plan.keys == 0 || plan.keys > 8) fail("keys a lane must be 1 to 8");
    if (plan.workgroup_size % plan.lanes != 0) fail("workgroup must be whole subgroups");
  } else if (plan.rows != 1 || plan.keys != 1) {
    fail("a row per invocation has rows 1 and keys 1");
  }
  if (plan.texel_inputs && !device.texel_rgba32f) fail("texel inputs need RGBA32F uniform texel buffers");
}

std::string DecodingPlan::describe() const {
  const std::string split = std::to_string(parts) + (parts == 1 ? " part" : " parts");
  return lanes ? split + " of " + std::to_string(lanes) + (lanes == 1 ? " lane" : " lanes") : split;
}

uint32_t decoding_part_lanes(uint32_t lanes, uint32_t d) {
  if (lanes == 0) return 0;
  const auto vec4s = uint32_t(std::max<uint64_t>(ceil_div(d, 4), 1));
  uint32_t part_lanes = 1;
  while (part_lanes * 2 <= std::min(vec4s, lanes)) part_lanes *= 2;
  return part_lanes;
}

Lanes decoding_part_lanes(const DeviceReport& device, uint32_t d) {
  Lanes lanes = guaranteed_lanes(device, SubgroupOps::shuffle, 0, kDecodingLanesWorkgroup);
  return lanes ? Lanes{decoding_part_lanes(lanes.count, d), lanes.why} : lanes;
}

std::vector<StepPlan> step_plans(const DeviceReport& device, uint32_t workgroup_size) {
  std::vector<StepPlan> plans;
  const GemmPlan gemm = plan_gemm(device);
  plans.push_back({"linear, attention_scores, attention_values", gemm.describe(), gemm.required_lanes(), gemm.why});
  if (const uint32_t rows = gemv_rule(device); rows > 0) {
    plans.push_back({"linear of at most " + std::to_string(rows) + " rows",
                     "a GEMV: " + std::to_string(kGemvLanesPerColumn) + " invocations a column, workgroup " +
                         std::to_string(kGemvWorkgroup),
                     0, "a decode step's projections: the tiling above would give a row a handful of workgroups"});
  }
  const RowPlan rows = plan_rows(device, workgroup_size);
  plans.push_back({"softmax, layer_norm", rows.describe(), rows.lanes, rows.why});
  const FlashPlan flash = flash_rule(device, workgroup_size, 64);
  plans.push_back({"flash_attention", flash.describe(), flash.lanes, flash.why});
  const Lanes lanes = decoding_part_lanes(device, 64);
  if (lanes && device.type != vk::PhysicalDeviceType::eCpu) {
    plans.push_back({"flash_decoding", "a part of the keys per " + std::to_string(lanes.count) + " lanes at d 64",
                     guaranteed_lanes(device, SubgroupOps::shuffle, 0, kDecodingLanesWorkgroup).count,
                     "a key's row read by neighbouring lanes at once, and more invocations than parts"});
  } else {
    plans.push_back({"flash_decoding", "a part of the keys per invocation", 0,
                     lanes ? "a CPU device: its few lanes each walk a part alone" : lanes.why});
  }
  return plans;
}

}  // namespace vkattn::vulkan
