#include "engine/vulkan/grid.h"

#include <algorithm>
#include <string>

#include "vkattn/errors.h"

namespace vkattn::vulkan {

glm::uvec3 fold_grid(uint64_t groups, glm::uvec3 limits) {
  uint64_t capacity = uint64_t(limits.x) * limits.y * limits.z;
  if (groups == 0) groups = 1;
  if (groups > capacity) {
    throw DeviceError("a dispatch needs " + std::to_string(groups) + " workgroups but the device allows at most " +
                      std::to_string(limits.x) + "×" + std::to_string(limits.y) + "×" + std::to_string(limits.z));
  }
  uint64_t x = std::min<uint64_t>(groups, limits.x);
  uint64_t rest = ceil_div(groups, x);  // rows of x workgroups still needed
  uint64_t y = std::min<uint64_t>(rest, limits.y);
  uint64_t z = ceil_div(rest, y);
  return {static_cast<uint32_t>(x), static_cast<uint32_t>(y), static_cast<uint32_t>(z)};
}

}  // namespace vkattn::vulkan
