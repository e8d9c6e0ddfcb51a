#pragma once
// The ops as one table (ops.def): each op's name, its descriptor bindings and its push
// constants, for the backend's kernels, the tests and the build (shaders/CMakeLists.txt and
// reference/CMakeLists.txt read ops.def for the names).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/vulkan/push_constants.h"

namespace vkattn::vulkan {

enum class Op : uint8_t {
#define VKATTN_OP(name, bindings, Params) name,
#define VKATTN_HELPER(name, bindings, Params) name,
#include "engine/vulkan/ops.def"
#undef VKATTN_OP
#undef VKATTN_HELPER
};

struct OpInfo {
  std::string_view name;  // shaders/<name>.comp; for an op also reference/<name>.cpp and the trace's "op"
  uint32_t bindings;      // descriptor bindings 0 … bindings - 1
  uint32_t push_bytes;    // sizeof its push constants
};

inline constexpr OpInfo kOps[] = {
#define VKATTN_OP(name, bindings, Params) {#name, bindings, sizeof(Params)},
#define VKATTN_HELPER(name, bindings, Params) {#name, bindings, sizeof(Params)},
#include "engine/vulkan/ops.def"
#undef VKATTN_OP
#undef VKATTN_HELPER
};

constexpr const OpInfo& op_info(Op op) { return kOps[static_cast<size_t>(op)]; }

// The op named `name` ("linear"); throws std::logic_error for none.
Op op_named(std::string_view name);

}  // namespace vkattn::vulkan
