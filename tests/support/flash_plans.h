#pragma once
// The tiled flash plans (FlashAttention-2's order, flash_attention.comp's TILED builds) the suite
// holds to the reference on any device: blocks of 16 query rows over tiles of 8 keys (a row and a
// key an invocation) and of 64 over 16 (the GPU rule's: 4 rows and 2 keys an invocation), each
// also with its softmax across lanes where `device` guarantees 8 or more to a workgroup of 128
// (flash_attention_subgroup_tiled; lavapipe at 8 and 16 lanes). A caller skips those whose tiles
// outgrow the device's shared memory at its d (FlashPlan::shared_bytes).
#include <vector>

#include "engine/vulkan/step_plans.h"

namespace vkattn::testing {

std::vector<vulkan::FlashPlan> tiled_flash_variants(const vulkan::DeviceReport& device);

}  // namespace vkattn::testing
