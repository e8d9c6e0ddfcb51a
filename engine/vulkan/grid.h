#pragma once
// Folding a 1-D grid of workgroups into up to three dimensions, so that a step that needs more
// than maxComputeWorkGroupCount[0] workgroups (65535 on many GPUs) still launches all of them.
// shaders/common.glsl undoes the fold (flat_workgroup_id).
#include <cstdint>

#include <glm/vec3.hpp>

namespace vkattn::vulkan {

// How many blocks of b cover a (b > 0): workgroups over elements, tiles over rows.
constexpr uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The smallest-x-first grid (x, y, z) with x·y·z >= groups and each dim within `limits`.
// Throws DeviceError when even the full grid cannot hold `groups`.
glm::uvec3 fold_grid(uint64_t groups, glm::uvec3 limits);

}  // namespace vkattn::vulkan
