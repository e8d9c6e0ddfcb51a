#include "engine/vulkan/gemm_plan.h"

#include <algorithm>

#include "engine/vulkan/grid.h"
#include "engine/vulkan/lanes.h"
#include "vkattn/errors.h"

namespace vkattn::vulkan {
namespace {

// The broadcast variant keeps a tile_m × tile_n accumulator per lane: fine for the 4 to 16 lanes
// of a CPU's vector unit, far too many registers for a GPU's 32 or 64. Its lanes must be
// guaranteed (lanes.h); the workgroup is 8 subgroups.
constexpr uint32_t kMinBroadcastLanes = 4, kMaxBroadcastLanes = 16, kBroadcastSubgroups = 8;

Lanes broadcast_lanes(const DeviceReport& d, uint32_t wanted = 0) {
  Lanes lanes = guaranteed_lanes(d, SubgroupOps::shuffle, wanted ? wanted : std::min(d.subgroup_size, kMaxBroadcastLanes));
  if (lanes && lanes.count < kMinBroadcastLanes) {
    return {0, std::to_string(lanes.count) + " lanes are too few for the broadcast tiling (4 to 16)"};
  }
  return lanes;
}

// Whether `device` runs the GEMV's workgroups of kGemvWorkgroup invocations
bool runs_gemv_workgroups(const DeviceReport& device) {
  return kGemvWorkgroup <= device.max_workgroup_invocations && kGemvWorkgroup <= device.max_workgroup_size_x;
}

}  // namespace

uint32_t gemv_rule(const DeviceReport& device) {
  return device.type != vk::PhysicalDeviceType::eCpu && runs_gemv_workgroups(device) ? kGemvRows : 0;
}

void check_gemv_rows(uint32_t rows, const DeviceReport& device) {
  if (rows > kGemvRows) {
    throw DeviceError("linear as a GEMV for up to " + std::to_string(rows) + " rows: it holds at most " +
                      std::to_string(kGemvRows));
  }
  if (rows > 0 && !runs_gemv_workgroups(device)) {
    throw DeviceError("linear as a GEMV: device '" + device.name + "' runs no workgroup of " +
                      std::to_string(kGemvWorkgroup) + " invocations");
  }
}

GemmPlan GemmPlan::fitted(uint64_t cols) const {
  GemmPlan plan = *this;
  if (variant == GemmVariant::broadcast) {
    while (plan.tile_n % 8 == 0 && uint64_t(plan.lanes) * plan.tile_n / 2 >= cols) plan.tile_n /= 2;
  } else if (variant == GemmVariant::shared) {
    if (plan.tile_n == 8 && uint64_t(plan.side) * plan.tile_n / 2 >= cols) plan.tile_n = 4;
  }
  return plan;
}

GemmPlan GemmPlan::for_rows(uint64_t rows) const {
  GemmPlan plan = *this;
  plan.packed_b = packed_b && rows >= kPackedRowBlocks * tile_m;
  return plan;
}

uint64_t GemmPlan::groups(uint64_t batch, uint64_t rows, uint64_t cols) const {
  if (variant == GemmVariant::broadcast) {
    uint64_t units = batch * ceil_div(rows, tile_m) * ceil_div(cols, uint64_t(lanes) * tile_n);
    return ceil_div(units, workgroup_size / lanes);  // one unit per subgroup
  }
  return batch * ceil_div(rows, uint64_t(side) * tile_m) * ceil_div(cols, uint64_t(side) * tile_n);
}

std::vector<uint32_t> GemmPlan::specialization(bool vec4, bool has_bias) const {
  return {vec4 ? 1u : 0u, has_bias ? 1u : 0u, tile_m, tile_n, side, lanes};
}

std::string GemmPlan::shader(const std::string& step, bool texels, bool b_words) const {
  const std::string inputs = texels ? (b_words ? "_texel16" : "_texel") : "";
  if (variant != GemmVariant::broadcast) return step + inputs;
  // the tile unrolled where it compiles in about a second (shaders/gemm.glsl, UNROLL_TILES)
  return step + "_subgroup" + inputs + (lanes <= kMostUnrolledLanes ? "_unrolled" : "");
}

std::string GemmPlan::describe() const {
  const std::string inputs = std::string(texel_inputs ? ", texels" : "") + (packed_b ? ", B packed" : "");
  if (variant == GemmVariant::broadcast) {
    return "broadcast: " + std::to_string(tile_m) + "×" + std::to_string(lanes * tile_n) + " per subgroup, workgroup " +
           std::to_string(workgroup_size) + inputs;
  }
  return "shared: " + std::to_string(side * tile_m) + "×" + std::to_string(side * tile_n) + " per workgroup of " +
         std::to_string(workgroup_size) + ", " + std::to_string(tile_m) + "×" + std::to_string(tile_n) +
         " each, " + std::to_string(depth) + " k a tile" + inputs;
}

GemmPlan plan_gemm(const DeviceReport& device, GemmVariant requested) {
  const bool cpu = device.type == vk::PhysicalDeviceType::eCpu;
  const Lanes lanes = broadcast_lanes(device);
  GemmPlan plan;
  plan.variant = requested;
  if (requested == GemmVariant::automatic) {
    plan.variant = cpu && lanes ? GemmVariant::broadcast : GemmVariant::shared;
    plan.why = !cpu   ? "shared-memory tiles suit a GPU"
               : lanes ? "broadcast suits a CPU device: " + lanes.why
                       : "broadcast would suit a CPU device, but needs guaranteed lanes: " + lanes.why;
  } else {
    plan.why = "asked for";
  }
  plan.texel_inputs = cpu && device.texel_rgba32f && device.switches.texel_inputs;
  if (plan.variant == GemmVariant::broadcast) {
    if (!lanes) {
      throw DeviceError("the broadcast GEMM needs 4 to 16 guaranteed lanes with subgroup shuffles; '" + device.name +
                        "' has none: " + lanes.why);
    }
    // 16 rows × 16 columns a lane, or the lanes' rows if more: the fastest tile on lavapipe that
    // compiles in seconds at every width (docs/lavapipe.md, "The measurements behind the plans")
    plan.lanes = lanes.count;
    plan.tile_m = std::max(lanes.count, std::min(2 * lanes.count, 16u));
    plan.tile_n = 16;
    plan.workgroup_size = lanes.count * std::min(kBroadcastSubgroups, device.max_workgroup_invocations / lanes.count);
    // B packed where it is read as texels: faster, the packing pass included (docs/lavapipe.md, "The measurements behind the plans")
    plan.packed_b = plan.texel_inputs;
  } else {
    // 16 × 16 invocations where the device allows 256, else 8 × 8 (every device allows 64); on a
    // GPU 8 × 8 outputs an invocation, as today's fp32 GEMMs hold, 8 k a tile (an H200's fastest
    // at 4096²: docs/gpu.md); a CPU device keeps 4 × 4, 16 k a tile (its registers are a vector
    // unit's)
    plan.side = device.max_workgroup_invocations >= 256 && device.max_workgroup_size_x >= 256 ? 16 : 8;
    plan.workgroup_size = plan.side * plan.side;
    plan.tile_m = plan.tile_n = cpu ? 4 : 8;
    plan.depth = cpu ? 16 : 8;
    if (plan.shared_bytes() > device.max_shared_memory_bytes) plan.tile_m = plan.tile_n = 4;
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
    const Lanes lanes = broadcast_lanes(device, plan.lanes);
    if (lanes.count != plan.lanes) {
      fail("needs its " + std::to_string(plan.lanes) + " lanes guaranteed with subgroup shuffles; '" + device.name +
           "' guarantees " + (lanes ? std::to_string(lanes.count) + " lanes" : "none: " + lanes.why));
    }
    if (plan.tile_m == 0 || plan.tile_m % plan.lanes != 0) fail("tile_m must be a multiple of the lanes");
    if (plan.tile_n == 0 || plan.tile_n % 4 != 0) fail("tile_n must be a positive multiple of 4");
    if (plan.workgroup_size == 0 || plan.workgroup_size % plan.lanes != 0 ||
        (device.max_workgroup_subgroups && plan.workgroup_size / plan.lanes > device.max_workgroup_subgroups)) {
      fail("workgroup must be whole subgroups, at most " + std::to_string(device.max_workgroup_subgroups));
    }
  } else if (plan.variant == GemmVariant::shared) {
    if (plan.side == 0 || plan.workgroup_size != plan.side * plan.side) fail("workgroup must be side × side");
    for (uint32_t tile : {plan.tile_m, plan.tile_n}) {
      if (tile != 4 && tile != 8) fail("tile_m and tile_n must be 4 or 8");
    }
    if (plan.depth == 0 || plan.depth % 4 != 0 || plan.depth > 64) fail("depth must be a multiple of 4, at most 64");
    if (plan.shared_bytes() > device.max_shared_memory_bytes) {
      fail("needs " + std::to_string(plan.shared_bytes()) + " bytes of shared memory; '" + device.name + "' has " +
           std::to_string(device.max_shared_memory_bytes));
    }
  } else {
    fail("is not a variant (automatic is resolved by plan_gemm)");
  }
  if (plan.texel_inputs && !device.texel_rgba32f) fail("texel inputs need RGBA32F uniform texel buffers");
  if (plan.packed_b && (plan.variant != GemmVariant::broadcast || !plan.texel_inputs)) {
    fail("packs B only for the broadcast tiling with texel inputs");
  }
}

}  // namespace vkattn::vulkan
