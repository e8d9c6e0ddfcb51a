#include "tests/support/flash_plans.h"

#include "engine/vulkan/lanes.h"

namespace vkattn::testing {

std::vector<vulkan::FlashPlan> tiled_flash_variants(const vulkan::DeviceReport& device) {
  const vulkan::Lanes lanes =
      vulkan::guaranteed_lanes(device, vulkan::SubgroupOps::shuffle, 0, vulkan::FlashPlan::kTiledWorkgroup);
  std::vector<vulkan::FlashPlan> plans;
  for (auto [rows, keys] : {std::pair{16u, 8u}, {64u, 16u}}) {
    plans.push_back(vulkan::tiled_flash(rows, keys));
    if (lanes.count >= 8) plans.push_back(vulkan::tiled_flash(rows, keys, lanes.count));
  }
  return plans;
}

}  // namespace vkattn::testing
