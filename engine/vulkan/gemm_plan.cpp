#include "engine/vulkan/gemm_plan.h"

#include <algorithm>

#include "engine/errors.h"

namespace vkattn::vulkan {
namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The broadcast variant keeps a tile_m × tile_n accumulator per lane: fine for the 4 or 8 lanes
// of a CPU's vector unit, far too many registers for a GPU's 32 or 64.
bool broadcast_fits(const DeviceReport& d) {
  return d.subgroup_shuffle && d.subgroup_size >= 4 && d.subgroup_size <= 16;
}

}  // namespace

GemmPlan GemmPlan::fitted(uint64_t cols) const {
  GemmPlan plan = *this;
  if (variant == GemmVariant::broadcast) {
    while (plan.tile_n % 8 == 0 && uint64_t(plan.lanes) * plan.tile_n / 2 >= cols) plan.tile_n /= 2;
  }
  return plan;
}

uint64_t GemmPlan::groups(uint64_t batch, uint64_t rows, uint64_t cols) const {
  if (variant == GemmVariant::broadcast) {
    uint64_t units = batch * ceil_div(rows, tile_m) * ceil_div(cols, uint64_t(lanes) * tile_n);
    return ceil_div(units, workgroup_size / lanes);  // one unit per subgroup
  }
  const uint64_t block = 4ull * side;
  return batch * ceil_div(rows, block) * ceil_div(cols, block);
}

std::vector<uint32_t> GemmPlan::specialization(bool vec4, bool has_bias) const {
  return {variant == GemmVariant::broadcast ? 0u : 1u, vec4 ? 1u : 0u, has_bias ? 1u : 0u, tile_m, tile_n, side, lanes};
}

std::string GemmPlan::describe() const {
  const std::string inputs = texel_inputs ? ", texel inputs" : "";
  if (variant == GemmVariant::broadcast) {
    return "broadcast: " + std::to_string(tile_m) + "×" + std::to_string(lanes * tile_n) + " per subgroup, workgroup " +
           std::to_string(workgroup_size) + inputs;
  }
  return "shared: " + std::to_string(4 * side) + "×" + std::to_string(4 * side) + " per workgroup of " +
         std::to_string(workgroup_size) + inputs;
}

GemmPlan plan_gemm(const DeviceReport& device, GemmVariant requested) {
  GemmVariant variant = requested;
  if (variant == GemmVariant::automatic) {
    variant = device.type == vk::PhysicalDeviceType::eCpu && broadcast_fits(device) ? GemmVariant::broadcast
                                                                                      : GemmVariant::shared;
  }
  GemmPlan plan;
  plan.variant = variant;
  plan.texel_inputs = device.type == vk::PhysicalDeviceType::eCpu && device.texel_rgba32f;
  if (variant == GemmVariant::broadcast) {
    if (!broadcast_fits(device)) {
      throw DeviceError("the broadcast GEMM needs subgroup shuffles on 4 to 16 lanes; '" + device.name + "' has " +
                        std::to_string(device.subgroup_size) + " lanes" +
                        (device.subgroup_shuffle ? "" : " and no shuffle in compute shaders"));
    }
    // (3200, 512) · (512, 512)ᵀ on lavapipe with texel inputs (bench_gemm): 8 rows × 8 columns a
    // lane 38–40 GFLOP/s, × 16 columns 46–55, 16 rows × 16 columns 50–66; 32 rows no better
    plan.lanes = device.subgroup_size;
    plan.tile_m = 2 * device.subgroup_size;
    plan.tile_n = 16;
    plan.workgroup_size = std::min(8 * device.subgroup_size, device.max_workgroup_invocations);
  } else {
    // 16 × 16 invocations where the device allows 256, else 8 × 8 (every device allows 64)
    plan.side = device.max_workgroup_invocations >= 256 && device.max_workgroup_size_x >= 256 ? 16 : 8;
    plan.workgroup_size = plan.side * plan.side;
  }
  return plan;
}

void check_gemm_plan(const GemmPlan& plan, const DeviceReport& device) {
  auto fail = [&](const std::string& what) { throw DeviceError("GEMM plan '" + plan.describe() + "': " + what); };
  if (plan.workgroup_size > device.max_workgroup_invocations || plan.workgroup_size > device.max_workgroup_size_x) {
    fail("workgroup exceeds the " + std::to_string(device.max_workgroup_invocations) + " invocations '" + device.name +
         "' allows");
  }
  if (plan.variant == GemmVariant::broadcast) {
    if (!broadcast_fits(device) || plan.lanes != device.subgroup_size || plan.tile_m == 0 ||
        plan.tile_m % plan.lanes != 0) {
      fail("needs subgroup shuffles, lanes equal to the subgroup size (" + std::to_string(device.subgroup_size) +
           ") and tile_m a multiple of it");
    }
    if (plan.tile_n == 0 || plan.tile_n % 4 != 0) fail("tile_n must be a positive multiple of 4");
    if (plan.workgroup_size == 0 || plan.workgroup_size % plan.lanes != 0) fail("workgroup must be whole subgroups");
  } else if (plan.variant == GemmVariant::shared) {
    if (plan.side == 0 || plan.workgroup_size != plan.side * plan.side) fail("workgroup must be side × side");
  } else {
    fail("is not a variant (automatic is resolved by plan_gemm)");
  }
  if (plan.texel_inputs && !device.texel_rgba32f) fail("texel inputs need RGBA32F uniform texel buffers");
}

}  // namespace vkattn::vulkan
