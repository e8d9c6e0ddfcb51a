#pragma once
// How GoogleTest prints the engine's enums in parameterised tests' names and messages ("fused",
// "broadcast"), instead of their bytes ("4-byte object <02-00 00-00>"). Found by ADL: each
// PrintTo lives in its enum's namespace.
#include <ostream>

#include "engine/vulkan/gemm_plan.h"
#include "vkattn/modules/multi_head_attention.h"

namespace vkattn {

inline void PrintTo(AttentionPath path, std::ostream* out) { *out << attention_path_name(path); }
inline void PrintTo(Narrow narrow, std::ostream* out) { *out << narrow_name(narrow); }

}  // namespace vkattn

namespace vkattn::vulkan {

inline void PrintTo(GemmVariant variant, std::ostream* out) {
  *out << (variant == GemmVariant::broadcast ? "broadcast" : variant == GemmVariant::shared ? "shared" : "automatic");
}

}  // namespace vkattn::vulkan
