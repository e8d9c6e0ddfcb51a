#include "engine/vulkan/ops.h"

#include <stdexcept>
#include <string>

namespace vkattn::vulkan {

Op op_named(std::string_view name) {
  for (size_t i = 0; i < std::size(kOps); ++i) {
    if (kOps[i].name == name) return static_cast<Op>(i);
  }
  throw std::logic_error("no op named '" + std::string(name) + "' in engine/vulkan/ops.def");
}

}  // namespace vkattn::vulkan
