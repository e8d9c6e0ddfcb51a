#pragma once
// GemmPlan: how shaders/gemm.glsl tiles linear, attention_scores and attention_values on one
// device, chosen from its properties (and overridable, so tests run both variants on lavapipe).
//
//   broadcast — for CPU devices (lavapipe): a subgroup owns rows in multiples of its lanes; lanes
//               share A by subgroupShuffle and each loads only its own columns of B. Speed there
//               follows multiply-adds per load, and shared memory only adds copies. It counts
//               lanes: it runs only where the device guarantees them (lanes.h), as the
//               <step>_subgroup shader with that required subgroup size.
//   shared    — for GPUs, and for any device without guaranteed lanes: a workgroup of side²
//               invocations owns a (side·tile_m) × (side·tile_n) block of the output, staged
//               through double-buffered shared tiles `depth` k at a time, each invocation a
//               tile_m × tile_n register tile (4 or 8 each). No subgroup instruction.
// Either reads its inputs from storage buffers or, on CPU devices, from texel buffers.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/vulkan/context.h"

namespace vkattn::vulkan {

enum class GemmVariant { automatic, broadcast, shared };

struct GemmPlan {
  GemmVariant variant = GemmVariant::shared;
  uint32_t workgroup_size = 256;
  uint32_t lanes = 8;    // broadcast: the required subgroup size
  // an invocation's outputs, tile_m rows × tile_n columns. broadcast: tile_m is its subgroup's
  // rows, a multiple of lanes; shared: 4 or 8 each
  uint32_t tile_m = 8;
  uint32_t tile_n = 16;
  uint32_t side = 16;    // shared: invocations per side of the workgroup's square
  uint32_t depth = 16;   // shared: k per shared tile, a multiple of 4
  // A and B read as RGBA32F uniform texel buffers (the <step>_texel shaders) where rows are
  // whole vec4s and both fit in maxTexelBufferElements: what lavapipe loads fastest
  bool texel_inputs = false;
  // broadcast with texel inputs: B stored (N, K) (x·Wᵀ, Q·Kᵀ) is first rewritten in the order the
  // lanes read it (shaders/gemm_pack.comp). The rule packs it where it serves kPackedRowBlocks row
  // blocks (for_rows), where the packing pass is repaid (docs/lavapipe.md, "The measurements behind the plans"); a plan tuning
  // chose, or one asked for, packs wherever it says so.
  bool packed_b = false;
  static constexpr uint64_t kPackedRowBlocks = 16;
  std::string why;  // why this variant on this device (plan_gemm)

  // This plan for an output of `cols` columns: broadcast halves tile_n (while it stays a
  // multiple of 4) where a subgroup's columns would be more than twice `cols`, and shared where a
  // workgroup's would, so that a narrow product (P·V's d columns) does not leave lanes idle.
  GemmPlan fitted(uint64_t cols) const;
  // Workgroups for a (batch, M, N) output.
  uint64_t groups(uint64_t batch, uint64_t rows, uint64_t cols) const;
  // The specialization constants 1… of gemm.glsl (constant 0, the workgroup size, is separate).
  std::vector<uint32_t> specialization(bool vec4, bool has_bias) const;
  // The shader that runs `step` (linear, attention_scores, attention_values) under this plan:
  // <step>, <step>_subgroup (broadcast), each with _texel when `texels` (_texel16 where B is kept
  // 16-bit, `b_words`: linear alone); broadcast at up to kMostUnrolledLanes lanes takes the build
  // with its tile unrolled, <step>_subgroup…_unrolled.
  std::string shader(const std::string& step, bool texels, bool b_words = false) const;
  static constexpr uint32_t kMostUnrolledLanes = 8;
  // The rule's plan for a product of `rows` rows: B packed only from kPackedRowBlocks row blocks.
  GemmPlan for_rows(uint64_t rows) const;
  // The subgroup size the pipeline must require: the lanes of broadcast, 0 for shared.
  uint32_t required_lanes() const { return variant == GemmVariant::broadcast ? lanes : 0; }
  // "broadcast: 8×64 per subgroup, workgroup 64", "shared: 128×128 per workgroup of 256, 8×8 each,
  // 16 k a tile"
  std::string describe() const;
  // Shared memory the shared tiling takes: two tiles of each input
  uint64_t shared_bytes() const { return 2ull * depth * side * (tile_m + tile_n) * sizeof(float); }
};

// linear for a product of at most kGemvRows rows, as shaders/gemv.glsl: workgroups of
// kGemvWorkgroup invocations, 32 a column of the output (a decode step's projections: the GEMM's
// tilings give a GPU's workgroup 128 × 128 outputs, of which one row is used, and a handful of
// workgroups walking all of K alone).
constexpr uint32_t kGemvRows = 8, kGemvWorkgroup = 128, kGemvLanesPerColumn = 32;
// The most rows the device runs linear for as the GEMV: kGemvRows on a GPU, 0 (never) on a CPU
// device, where lavapipe's broadcast tiling reads one row's W at its copy bandwidth already
// (vkattn bench --seq 1: 40–57 % of peak) and a workgroup's barriers cost more than on a GPU.
uint32_t gemv_rule(const DeviceReport& device);
// Throws DeviceError where `device` cannot run the GEMV for up to `rows` rows (more than
// kGemvRows, or workgroups of kGemvWorkgroup).
void check_gemv_rows(uint32_t rows, const DeviceReport& device);

// `requested` automatic picks broadcast on CPU devices that guarantee 4…16 lanes with subgroup
// shuffles (lanes.h), and shared elsewhere: on a GPU 8 × 8 an invocation over 128 × 128 blocks,
// on a CPU device 4 × 4 over 64 × 64; texel inputs on CPU devices that have RGBA32F texel
// buffers, unless the texel_inputs switch is off. Throws DeviceError when the device cannot run the
// requested variant.
GemmPlan plan_gemm(const DeviceReport& device, GemmVariant requested = GemmVariant::automatic);
// Throws DeviceError naming what `plan` asks of `device` that it lacks (a hand-made plan).
void check_gemm_plan(const GemmPlan& plan, const DeviceReport& device);

}  // namespace vkattn::vulkan
