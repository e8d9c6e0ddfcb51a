#include "engine/vulkan/lanes.h"

namespace vkattn::vulkan {

Lanes guaranteed_lanes(const DeviceReport& device, SubgroupOps ops, uint32_t wanted, uint32_t workgroup_size) {
  auto none = [](std::string why) { return Lanes{0, std::move(why)}; };
  if (!device.switches.subgroups) return none("subgroups are off: " + device.switches.subgroups_why);
  const bool arithmetic = ops != SubgroupOps::shuffle, shuffle = ops != SubgroupOps::arithmetic;
  if (arithmetic && !device.subgroup_arithmetic) return none("no subgroup arithmetic in compute shaders");
  if (shuffle && !device.subgroup_shuffle) return none("no subgroup shuffle in compute shaders");
  const std::string reported = "the reported " + std::to_string(device.subgroup_size) + " lanes are not guaranteed";
  if (!device.size_control) {
    return none("no subgroup size control for compute (Vulkan 1.3 or VK_EXT_subgroup_size_control): " + reported);
  }
  if (!device.full_subgroups) return none("no computeFullSubgroups: " + reported + " to be all active");

  if (wanted == 0) wanted = device.subgroup_size;
  uint32_t lanes = 1;  // the largest power of two <= min(wanted, max)
  while (lanes * 2 <= wanted && lanes * 2 <= device.max_subgroup_size) lanes *= 2;
  for (; lanes >= device.min_subgroup_size && lanes > 0; lanes /= 2) {
    if (workgroup_size == 0) break;
    const bool whole = workgroup_size % lanes == 0;
    const bool few_enough = device.max_workgroup_subgroups == 0 || workgroup_size / lanes <= device.max_workgroup_subgroups;
    if (whole && few_enough) break;
  }
  if (lanes == 0 || lanes < device.min_subgroup_size) {
    return none("no subgroup size in " + std::to_string(device.min_subgroup_size) + ".." +
                std::to_string(device.max_subgroup_size) + " up to " + std::to_string(wanted) +
                (workgroup_size ? " divides the workgroup of " + std::to_string(workgroup_size) : ""));
  }
  return {lanes, std::to_string(lanes) + " lanes, required with full subgroups (size control: " +
                     std::to_string(device.min_subgroup_size) + ".." + std::to_string(device.max_subgroup_size) + ")"};
}

}  // namespace vkattn::vulkan
