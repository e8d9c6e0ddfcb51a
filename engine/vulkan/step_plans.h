#pragma once
// How the steps that may use subgroups run on one device, beside the GEMM's plan (gemm_plan.h):
//   softmax, layer_norm — a row per subgroup of guaranteed lanes (<step>_subgroup), or a row per
//                         workgroup reduced through shared memory (<step>);
//   flash_attention     — ROWS query rows against KEYS keys a lane per subgroup of guaranteed lanes
//                         (flash_attention_subgroup), ROWS query rows per workgroup against tiles of
//                         KEYS keys in shared memory (flash_attention_tiled, for GPUs: tuning's
//                         candidates; flash_attention_subgroup_tiled, its softmax across lanes), or
//                         a query row per invocation (flash_attention);
//   flash_decoding      — a (query row, part of the keys) per group of a subgroup's guaranteed
//                         lanes (flash_decoding_subgroup, a GPU's), or per invocation.
// Each plan says why; `vkattn devices` prints them all (step_plans()).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/vulkan/context.h"
#include "engine/vulkan/lanes.h"

namespace vkattn::vulkan {

struct RowPlan {
  uint32_t lanes = 0;  // the required subgroup size of <step>_subgroup; 0 = a row per workgroup
  std::string why;
  std::string shader(const std::string& step) const { return lanes ? step + "_subgroup" : step; }
  // Workgroups of `workgroup_size` for `rows` rows.
  uint64_t groups(uint64_t rows, uint32_t workgroup_size) const;
  std::string describe() const;  // "a row per subgroup of 8 lanes", "a row per workgroup, …"
};

// Rows for workgroups of `workgroup_size` invocations.
RowPlan plan_rows(const DeviceReport& device, uint32_t workgroup_size);
// Throws DeviceError naming what `plan` asks of `device` that it lacks (a forced or remembered plan).
void check_row_plan(const RowPlan& plan, const DeviceReport& device, uint32_t workgroup_size);

struct FlashPlan {
  static constexpr uint32_t kTiledWorkgroup = 128;  // flash_attention_tiled's 16 × 8 invocations
  // the required subgroup size of flash_attention_subgroup[_tiled]; 0 = a row per invocation, or
  // flash_attention_tiled
  uint32_t lanes = 0;
  uint32_t rows = 1;            // query rows per subgroup (per invocation: 1; tiled: per workgroup)
  uint32_t keys = 1;            // keys each lane scores a block: the block is lanes · keys keys (tiled: a tile's)
  uint32_t workgroup_size = 64;
  // flash_attention_[subgroup_]tiled: `rows` query rows per workgroup of kTiledWorkgroup, K and V
  // in shared tiles of `keys` keys (no texels); with lanes (8 or more), a row's softmax in its
  // invocations' registers, reduced across 8 lanes of a subgroup
  bool tiled = false;
  // K and V read as RGBA32F texel buffers (where d is a multiple of 4 and they fit): on CPU
  // devices that have them, as the GEMMs' inputs (gemm_plan.h)
  bool texel_inputs = false;
  std::string why;
  // flash_attention_subgroup[_texel], unrolled at GemmPlan::kMostUnrolledLanes lanes or fewer
  // (flash_attention.comp says why), flash_attention_[subgroup_]tiled, or flash_attention[_texel]
  std::string shader(bool texels) const;
  // Shared memory the tiled kernel takes at head dim `d` (0 for the others): its q, K and V
  // tiles, the scores' tile and, without lanes, three floats a row
  uint64_t shared_bytes(uint32_t d) const;
  // Query rows a unit of work owns: a subgroup's, a tiled workgroup's, an invocation's workgroup's
  uint32_t rows_per_unit() const { return lanes || tiled ? rows : workgroup_size; }
  // Units of work a workgroup holds: its subgroups (flash_attention_subgroup), else one
  uint32_t units_per_group() const { return lanes && !tiled ? workgroup_size / lanes : 1; }
  // Specialization constants 1… of flash_attention.comp for head dim `d`, `masked` where an
  // attn_mask or key_padding_mask is given (without, the pipeline reads neither).
  std::vector<uint32_t> specialization(uint32_t d, bool masked) const {
    return {d, lanes ? lanes : 1u, rows, keys, masked ? 1u : 0u};
  }
  // Workgroups for `heads` (B·H) heads of `length` (L) query rows.
  uint64_t groups(uint64_t heads, uint64_t length) const;
  // The first query row of workgroup `group`'s first unit, in flash_attention.comp's order: a
  // head's units side by side, except a tiled plan's causal blocks, which come longest first
  // (every head's last block, then every head's last but one, …).
  uint64_t first_row(uint64_t group, uint64_t heads, uint64_t length, bool causal) const;
  std::string describe() const;  // "16 rows × 16 keys per subgroup, workgroup 64, texels"
};

// `rows` > 0 asks for that many query rows per subgroup (tests); 0 lets the device decide: two a
// lane on a CPU device, at most 8 on a GPU. Keys: blocks of 16 on a CPU device (a key a lane at
// 16 lanes, two at 8, four at 4), a key a lane on a GPU. `workgroup_size` is the subgroup-free
// kernel's. Texel inputs as the GEMM's rule has them.
FlashPlan plan_flash(const DeviceReport& device, uint32_t workgroup_size, uint32_t rows = 0);

// A tiled plan of `rows` query rows per workgroup and tiles of `keys` keys; with `lanes`, its
// softmax across subgroups of that many lanes (flash_attention_subgroup_tiled).
FlashPlan tiled_flash(uint32_t rows, uint32_t keys, uint32_t lanes = 0);
// The plan where tuning is off, for head dim `d`: on a GPU FlashAttention-2's order, blocks of 64
// query rows over tiles of 16 keys (32 or 16 rows where d's tiles would outgrow shared memory:
// 1.1–2.3× the subgroup plan's speed on an H200, docs/gpu.md); on a CPU device, or where no block
// fits, plan_flash's.
FlashPlan flash_rule(const DeviceReport& device, uint32_t workgroup_size, uint32_t d);
// The tiled plans worth measuring at head dim `d`: blocks of 16 to 64 query rows over tiles of 16
// or 32 keys, those whose shared memory `device` has; each also with its softmax across lanes
// where the device guarantees 8 or more to a workgroup of 128.
std::vector<FlashPlan> tiled_flash_plans(const DeviceReport& device, uint32_t d);

// Throws DeviceError naming what `plan` asks of `device` that it lacks (a forced or remembered plan).
void check_flash_plan(const FlashPlan& plan, const DeviceReport& device);

// flash_decoding's plan: the parts its keys are split into (Backend::decoding_parts), and the
// lanes that walk each part together (its _subgroup build; 0: an invocation a part).
struct DecodingPlan {
  int64_t parts = 1;
  uint32_t lanes = 0;
  std::string describe() const;  // "16 parts", "128 parts of 16 lanes"
};
// flash_decoding_subgroup's workgroup: 128 invocations, what every Vulkan device allows
constexpr uint32_t kDecodingLanesWorkgroup = 128;
// The lanes a part gets at head dim `d` on `device`: a power of two at most d's vec4s and at most
// the lanes the device guarantees its workgroup (a lane a vec4 of a key's row, d 64 on 32 lanes:
// 16); 0 where it guarantees none (the switches, no shuffles or subgroup size control), with why.
Lanes decoding_part_lanes(const DeviceReport& device, uint32_t d);
// The same where `lanes` are guaranteed that workgroup (0: none), with no device to ask: the
// backend's, on a decode step's path, from the count it keeps
uint32_t decoding_part_lanes(uint32_t lanes, uint32_t d);

// One line of `vkattn devices`: the steps, the variant that runs them, its lanes and why.
struct StepPlan {
  std::string steps;    // "linear, attention_scores, attention_values"
  std::string variant;  // "broadcast: 16×128 per subgroup, workgroup 64, texels, B packed"
  uint32_t lanes = 0;   // the required subgroup size; 0 = none
  std::string why;
};

// What every step that has more than one variant runs on `device`, for workgroups of
// `workgroup_size` (the backend's default, 64).
std::vector<StepPlan> step_plans(const DeviceReport& device, uint32_t workgroup_size = 64);

}  // namespace vkattn::vulkan
