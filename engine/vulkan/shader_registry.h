#pragma once
// SPIR-V of every shaders/<name>.comp, compiled at build time and embedded in the binary.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace vkattn::vulkan {

// The SPIR-V words of shaders/<name>.comp; throws std::logic_error for an unknown name.
std::span<const uint32_t> shader_spirv(std::string_view name);

// The name of every build embedded: "linear", "linear_subgroup_texel_unrolled", …
std::vector<std::string_view> shader_builds();

// A hash of every shader's name and SPIR-V: changes whenever any kernel does (the plan cache's key).
uint64_t shaders_fingerprint();

}  // namespace vkattn::vulkan
