#pragma once
// Lanes a kernel can count on. A kernel whose result depends on how many invocations a subgroup has
// (it strides a row by the subgroup size, shuffles from lane t, sizes its arrays by it) runs only
// on a lane count the device guarantees: a required subgroup size (subgroup size control, Vulkan
// 1.3 or VK_EXT_subgroup_size_control) with full subgroups, so that every subgroup of the dispatch
// has exactly that many active lanes. The reported subgroupSize alone guarantees nothing: Intel's
// ANV compiles SIMD8, 16 or 32 while reporting 32, RADV reports 64 and may run 32, MoltenVK on AMD
// reports 64 with 32 lanes active, Turnip reports 128. Where no count can be guaranteed, the step's
// subgroup-free variant runs (the workgroup reduction, the shared-memory GEMM, the one-row-per-
// invocation flash attention), and its SPIR-V holds no subgroup instruction at all.
#include <cstdint>
#include <string>

#include "engine/vulkan/context.h"

namespace vkattn::vulkan {

// The subgroup operations a kernel uses.
enum class SubgroupOps { arithmetic, shuffle, shuffle_and_arithmetic };

struct Lanes {
  uint32_t count = 0;  // the required subgroup size, with full subgroups; 0 = the subgroup-free variant
  std::string why;     // why this count, or why none

  explicit operator bool() const { return count > 0; }
};

// The lane count `device` can guarantee a kernel that uses `ops`: the power of two in the device's
// min..max subgroup size nearest below `wanted` (the reported subgroupSize when 0), and, when
// `workgroup_size` > 0, one that the workgroup is whole subgroups of; none (count 0, with the
// reason) when the switches forbid subgroups, the device lacks `ops`, size control or full
// subgroups, or no size fits. With `workgroup_size` 0 the caller makes its workgroup a multiple of
// the count, at most max_workgroup_subgroups of them.
Lanes guaranteed_lanes(const DeviceReport& device, SubgroupOps ops, uint32_t wanted = 0, uint32_t workgroup_size = 0);

}  // namespace vkattn::vulkan
