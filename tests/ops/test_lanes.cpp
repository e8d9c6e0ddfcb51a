// Which variant each kernel family gets, and on how many lanes, given what a device reports: no
// kernel that counts lanes runs where the device does not guarantee them (a required subgroup
// size with full subgroups). Device reports are written by hand here, after the drivers that
// lanes.h names; no GPU is needed. Also the driver quirks table and its environment overrides.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "engine/vulkan/gemm_plan.h"
#include "engine/vulkan/lanes.h"
#include "engine/vulkan/quirks.h"
#include "engine/vulkan/step_plans.h"
#include "vkattn/errors.h"

namespace vkattn::vulkan {
namespace {

// `text` contains `part`; the failure shows both.
::testing::AssertionResult has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// Lavapipe with LP_NATIVE_VECTOR_WIDTH = 32 · lanes: subgroups of `lanes`, size control min = max.
DeviceReport lavapipe(uint32_t lanes) {
  DeviceReport d;
  d.name = "llvmpipe";
  d.type = vk::PhysicalDeviceType::eCpu;
  d.max_workgroup_invocations = d.max_workgroup_size_x = 1024;
  d.subgroup_size = d.min_subgroup_size = d.max_subgroup_size = lanes;
  d.max_workgroup_subgroups = 1024 / lanes;
  d.subgroup_arithmetic = d.subgroup_shuffle = true;
  d.size_control = d.full_subgroups = true;
  d.texel_rgba32f = true;
  return d;
}

// A GPU that reports `reported` lanes, and may require min..max of them (no size control: 0, 0).
DeviceReport gpu(uint32_t reported, uint32_t min, uint32_t max) {
  DeviceReport d;
  d.name = "gpu";
  d.type = vk::PhysicalDeviceType::eDiscreteGpu;
  d.max_workgroup_invocations = d.max_workgroup_size_x = 1024;
  d.subgroup_size = reported;
  d.subgroup_arithmetic = d.subgroup_shuffle = true;
  d.size_control = d.full_subgroups = max > 0;
  d.min_subgroup_size = min;
  d.max_subgroup_size = max;
  d.max_workgroup_subgroups = max ? 1024 / min : 0;
  d.texel_rgba32f = true;
  return d;
}

TEST(Lanes, LavapipeGetsItsLanesPinnedAtEveryWidth) {
  for (uint32_t lanes : {4u, 8u, 16u}) {
    const DeviceReport d = lavapipe(lanes);
    const GemmPlan gemm = plan_gemm(d);
    EXPECT_EQ(gemm.variant, GemmVariant::broadcast) << lanes;
    EXPECT_EQ(gemm.required_lanes(), lanes);
    EXPECT_EQ(gemm.tile_m, std::min(2 * lanes, 16u));
    EXPECT_EQ(gemm.workgroup_size, 8 * lanes);
    // the tile unrolled up to 8 lanes; at 16 as Mesa's NIR leaves it (compile time: gemm.glsl)
    EXPECT_EQ(gemm.shader("linear", true), lanes <= 8 ? "linear_subgroup_texel_unrolled" : "linear_subgroup_texel");
    EXPECT_EQ(gemm.shader("attention_values", false),
              lanes <= 8 ? "attention_values_subgroup_unrolled" : "attention_values_subgroup");
    EXPECT_TRUE(gemm.texel_inputs);
    const RowPlan rows = plan_rows(d, 64);
    EXPECT_EQ(rows.lanes, lanes);
    EXPECT_EQ(rows.shader("softmax"), "softmax_subgroup");
    EXPECT_EQ(rows.groups(113, 64), (113 + 64 / lanes - 1) / (64 / lanes));  // a row per subgroup
    const FlashPlan flash = plan_flash(d, 64);
    EXPECT_EQ(flash.lanes, lanes);
    EXPECT_EQ(flash.rows, 2 * lanes);  // two rows a lane on a CPU device
    EXPECT_EQ(flash.workgroup_size, 8 * lanes);
    EXPECT_EQ(flash.keys, 16 / lanes);  // blocks of 16 keys
    // unrolled up to 8 lanes, as the GEMM's tile
    EXPECT_EQ(flash.shader(false), lanes <= 8 ? "flash_attention_subgroup_unrolled" : "flash_attention_subgroup");
    EXPECT_EQ(flash.shader(true),
              lanes <= 8 ? "flash_attention_subgroup_texel_unrolled" : "flash_attention_subgroup_texel");
    EXPECT_NO_THROW(check_gemm_plan(gemm, d));
  }
}

TEST(Lanes, AReportedSizeWithoutSizeControlGetsNoLaneDependentVariant) {
  // Intel's ANV reports 32 and may compile SIMD8 or 16: without size control nothing counts lanes
  const DeviceReport d = gpu(32, 0, 0);
  EXPECT_FALSE(guaranteed_lanes(d, SubgroupOps::arithmetic));
  EXPECT_TRUE(has(guaranteed_lanes(d, SubgroupOps::arithmetic).why, "the reported 32 lanes are not guaranteed"));
  EXPECT_EQ(plan_gemm(d).variant, GemmVariant::shared);
  EXPECT_EQ(plan_gemm(d).required_lanes(), 0u);
  EXPECT_EQ(plan_gemm(d).shader("attention_scores", false), "attention_scores");
  const RowPlan rows = plan_rows(d, 64);
  EXPECT_EQ(rows.lanes, 0u);
  EXPECT_EQ(rows.shader("layer_norm"), "layer_norm");
  EXPECT_EQ(rows.groups(113, 64), 113u);  // a row per workgroup
  const FlashPlan flash = plan_flash(d, 64);
  EXPECT_EQ(flash.lanes, 0u);
  EXPECT_EQ(flash.shader(true), "flash_attention_texel");
  EXPECT_EQ(flash.groups(6, 100), 6u * 2u);  // a row per invocation, a head's rows per workgroup
  // the same CPU device without size control: no broadcast GEMM either
  DeviceReport cpu = lavapipe(8);
  cpu.size_control = false;
  EXPECT_EQ(plan_gemm(cpu).variant, GemmVariant::shared);
  EXPECT_TRUE(has(plan_gemm(cpu).why, "needs guaranteed lanes"));
  EXPECT_THROW(plan_gemm(cpu, GemmVariant::broadcast), DeviceError);
}

TEST(Lanes, SizeControlWithoutFullSubgroupsIsNotEnough) {
  DeviceReport d = gpu(32, 8, 32);
  d.full_subgroups = false;
  EXPECT_FALSE(guaranteed_lanes(d, SubgroupOps::shuffle));
  EXPECT_TRUE(has(guaranteed_lanes(d, SubgroupOps::shuffle).why, "computeFullSubgroups"));
  EXPECT_EQ(plan_flash(d, 64).lanes, 0u);
}

TEST(Lanes, GpusGetTheirReportedSizeWithinTheRequiredRange) {
  // RADV on RDNA: reports 64, may run 32 or 64
  const DeviceReport radv = gpu(64, 32, 64);
  EXPECT_EQ(plan_rows(radv, 64).lanes, 64u);
  EXPECT_EQ(plan_flash(radv, 64).lanes, 64u);
  EXPECT_EQ(plan_flash(radv, 64).rows, 8u);  // at most 8 rows on a GPU
  EXPECT_EQ(plan_flash(radv, 64).keys, 1u);  // a key a lane
  EXPECT_EQ(plan_flash(radv, 64).shader(true), "flash_attention_subgroup_texel");
  EXPECT_EQ(plan_gemm(radv).variant, GemmVariant::shared);  // a GPU's registers: no broadcast tiling
  // Turnip reports 128: a workgroup of 64 is no whole 128-lane subgroup, so 64 lanes are required
  const DeviceReport turnip = gpu(128, 64, 128);
  EXPECT_EQ(plan_rows(turnip, 64).lanes, 64u);
  EXPECT_EQ(plan_rows(turnip, 48).lanes, 0u);  // 48 is whole subgroups of no size in 64..128
  EXPECT_TRUE(has(plan_rows(turnip, 48).why, "divides the workgroup of 48"));
  // NVIDIA: 32 and only 32
  const DeviceReport nvidia = gpu(32, 32, 32);
  EXPECT_EQ(plan_flash(nvidia, 64).lanes, 32u);
  EXPECT_EQ(plan_flash(nvidia, 64).workgroup_size, 256u);
  // where tuning is off, a GPU's flash_attention is FlashAttention-2's order, in the largest block
  // of rows whose tiles fit its shared memory at d; beyond, the subgroup plan
  DeviceReport h100 = nvidia;
  h100.max_shared_memory_bytes = 48 * 1024;
  EXPECT_EQ(flash_rule(h100, 64, 64).describe(), tiled_flash(64, 16).describe());
  EXPECT_EQ(flash_rule(h100, 64, 128).describe(), tiled_flash(32, 16).describe());
  EXPECT_EQ(flash_rule(h100, 64, 1024).describe(), plan_flash(h100, 64).describe());
  EXPECT_TRUE(has(flash_rule(h100, 64, 64).why, "FlashAttention-2"));
  EXPECT_EQ(flash_rule(lavapipe(8), 64, 64).describe(), plan_flash(lavapipe(8), 64).describe());
  // a workgroup may hold at most maxComputeWorkgroupSubgroups subgroups
  DeviceReport few = gpu(32, 32, 32);
  few.max_workgroup_subgroups = 2;
  EXPECT_EQ(plan_rows(few, 256).lanes, 0u);
  EXPECT_EQ(plan_flash(few, 64).workgroup_size, 64u);
}

TEST(Lanes, AGpuRunsAFewRowsLinearAsAGemvAndACpuDeviceNever) {
  EXPECT_EQ(gemv_rule(gpu(32, 32, 32)), kGemvRows);
  EXPECT_EQ(gemv_rule(lavapipe(8)), 0u);
  const auto listed = [](const DeviceReport& d) {
    return std::ranges::any_of(step_plans(d), [](const StepPlan& p) { return has(p.steps, "linear of at most 8 rows"); });
  };
  EXPECT_TRUE(listed(gpu(32, 32, 32)));
  EXPECT_FALSE(listed(lavapipe(8)));
  // workgroups of 128 invocations, or none
  DeviceReport small = gpu(32, 32, 32);
  small.max_workgroup_invocations = 64;
  EXPECT_EQ(gemv_rule(small), 0u);
  EXPECT_FALSE(listed(small));
  EXPECT_THROW(check_gemv_rows(kGemvRows, small), DeviceError);
  EXPECT_NO_THROW(check_gemv_rows(0, small));
  EXPECT_NO_THROW(check_gemv_rows(kGemvRows, lavapipe(8)));  // asked for: any device with the workgroup
}

// flash_decoding's parts get a power of two of lanes, at most d's vec4s and the guaranteed lanes;
// `vkattn devices` lists them for a GPU, and an invocation a part for a CPU device
TEST(Lanes, FlashDecodingPartsGetAsManyLanesAsARowHasVec4s) {
  const DeviceReport nvidia = gpu(32, 32, 32);
  EXPECT_EQ(decoding_part_lanes(nvidia, 64).count, 16u);
  EXPECT_EQ(decoding_part_lanes(nvidia, 128).count, 32u);
  EXPECT_EQ(decoding_part_lanes(nvidia, 256).count, 32u);
  EXPECT_EQ(decoding_part_lanes(nvidia, 17).count, 4u);  // 5 vec4s
  EXPECT_EQ(decoding_part_lanes(nvidia, 1).count, 1u);
  EXPECT_EQ(decoding_part_lanes(lavapipe(8), 64).count, 8u);
  EXPECT_EQ(decoding_part_lanes(lavapipe(4), 64).count, 4u);
  EXPECT_FALSE(decoding_part_lanes(gpu(32, 0, 0), 64)) << "no size control: no lanes to count on";
  const auto listed = [](const DeviceReport& d) {
    for (const StepPlan& p : step_plans(d)) {
      if (p.steps == "flash_decoding") return p.variant;
    }
    return std::string("none");
  };
  EXPECT_EQ(listed(nvidia), "a part of the keys per 16 lanes at d 64");
  EXPECT_EQ(listed(lavapipe(8)), "a part of the keys per invocation");
}

// The float16 products' tiles, their rows padded, fit the 48 KiB of shared memory NVIDIA gives a
// Vulkan workgroup at 16 × 16 × 16, in a workgroup of 8 subgroups; the sizes the tiling refuses
TEST(Lanes, TheFloat16ProductsTilesFitFortyEightKibibytes) {
  const MatrixProducts nvidia{"VK_NV_cooperative_matrix", 16, 16, 16, 32};
  EXPECT_EQ(nvidia.block_m(), 128u);
  EXPECT_EQ(nvidia.block_n(), 128u);
  EXPECT_EQ(nvidia.invocations(), 256u);
  EXPECT_EQ(nvidia.shared_bytes(), 2u * (128 * 40 + 128 * 40) * 2);
  EXPECT_LE(nvidia.shared_bytes(), 48u << 10);
  EXPECT_TRUE(nvidia.shapes_fit());
  const MatrixProducts lavapipe_khr{"VK_KHR_cooperative_matrix", 8, 8, 8, 8};
  EXPECT_EQ(lavapipe_khr.block_m(), 64u);
  EXPECT_EQ(lavapipe_khr.invocations(), 64u);
  EXPECT_EQ(lavapipe_khr.shared_bytes(), 2u * (64 * 40 + 64 * 40) * 2);
  EXPECT_TRUE(lavapipe_khr.shapes_fit());
  EXPECT_TRUE((MatrixProducts{"VK_KHR_cooperative_matrix", 16, 8, 16, 32}.shapes_fit()));
  // k not a multiple of 8 (a uvec4 of float16); an accumulator larger than the A tiles can pass out
  EXPECT_FALSE((MatrixProducts{"VK_KHR_cooperative_matrix", 16, 16, 12, 32}.shapes_fit()));
  EXPECT_FALSE((MatrixProducts{"VK_KHR_cooperative_matrix", 16, 64, 16, 32}.shapes_fit()));
}

// flash_attention on the float16 products: four subgroups of 16 rows where d's tiles fit NVIDIA's
// 48 KiB, two at d 128, none past that (the float32 kernels run); lavapipe's 8 × 8 on 8 lanes
TEST(Lanes, TheFloat16FlashBlockTakesTheRowsItsTilesFit) {
  const MatrixProducts nvidia{"VK_NV_cooperative_matrix", 16, 16, 16, 32};
  EXPECT_EQ(nvidia.flash_keys(), 32u);
  EXPECT_EQ(nvidia.flash_padded(17), 32u);
  EXPECT_EQ(nvidia.flash_rows(64, 48 << 10), 64u);
  EXPECT_EQ(nvidia.flash_rows(17, 48 << 10), 64u);
  EXPECT_EQ(nvidia.flash_rows(128, 48 << 10), 32u);
  EXPECT_EQ(nvidia.flash_rows(256, 48 << 10), 0u);
  EXPECT_EQ(nvidia.flash_shared_bytes(64, 64), 2u * 32 * 72 * 2 + 64 * 40 * 4 + 64 * 40 * 2 + 64 * 72 * 4);
  const MatrixProducts lavapipe_khr{"VK_KHR_cooperative_matrix", 8, 8, 8, 8};
  EXPECT_EQ(lavapipe_khr.flash_keys(), 16u);
  EXPECT_EQ(lavapipe_khr.flash_rows(128, 32 << 10), 32u);
  // 64 lanes to rows of 16: four lanes a row, a quad of the 16 padded dims each
  EXPECT_EQ((MatrixProducts{"VK_KHR_cooperative_matrix", 16, 16, 16, 64}.flash_rows(64, 64 << 10)), 64u);
  EXPECT_EQ(MatrixProducts{}.flash_rows(64, 64 << 10), 0u);  // no matrices
  // 16 × 8 × 8: tiles of 16 keys, whose rows hold q's 32 rows at most (two subgroups)
  EXPECT_EQ((MatrixProducts{"VK_KHR_cooperative_matrix", 16, 8, 8, 32}.flash_rows(64, 64 << 10)), 32u);
}

TEST(Lanes, MissingOperationsAndTheSwitchTurnSubgroupsOff) {
  DeviceReport d = lavapipe(8);
  d.subgroup_shuffle = false;
  EXPECT_EQ(plan_gemm(d).variant, GemmVariant::shared);
  EXPECT_EQ(plan_flash(d, 64).lanes, 0u);
  EXPECT_EQ(plan_rows(d, 64).lanes, 8u);  // arithmetic is enough for a row
  d = lavapipe(8);
  d.switches.subgroups = false;
  d.switches.subgroups_why = "VKATTN_SUBGROUPS=off";
  for (const StepPlan& plan : step_plans(d)) {
    EXPECT_EQ(plan.lanes, 0u) << plan.steps;
    EXPECT_TRUE(has(plan.why, "VKATTN_SUBGROUPS=off")) << plan.steps;
  }
}

TEST(Lanes, AHandMadePlanOnLanesTheDeviceDoesNotGuaranteeIsRefused) {
  GemmPlan plan = plan_gemm(lavapipe(8));
  EXPECT_THROW(check_gemm_plan(plan, lavapipe(4)), DeviceError);   // 8 lanes where 4 are pinned
  EXPECT_THROW(check_gemm_plan(plan, gpu(8, 0, 0)), DeviceError);  // 8 reported, none guaranteed
  try {
    check_gemm_plan(plan, gpu(8, 0, 0));
  } catch (const DeviceError& e) {
    EXPECT_TRUE(has(e.what(), "needs its 8 lanes guaranteed with subgroup shuffles"));
  }
}

TEST(Lanes, TexelInputsFollowTheirSwitch) {
  DeviceReport d = lavapipe(8);
  d.switches.texel_inputs = false;
  EXPECT_FALSE(plan_gemm(d).texel_inputs);
  EXPECT_FALSE(plan_gemm(d).packed_b) << "B is packed for texel reads only";
}

TEST(Lanes, TheRulePacksBWhereItServesSixteenRowBlocks) {
  for (uint32_t lanes : {4u, 8u, 16u}) {
    const GemmPlan rule = plan_gemm(lavapipe(lanes));
    EXPECT_TRUE(rule.packed_b);
    EXPECT_FALSE(rule.for_rows(16 * rule.tile_m - 1).packed_b) << lanes << " lanes";
    EXPECT_TRUE(rule.for_rows(16 * rule.tile_m).packed_b) << lanes << " lanes";
  }
  EXPECT_FALSE(plan_gemm(gpu(32, 32, 32)).packed_b) << "the shared tiling reads B where it lies";
  GemmPlan storage = plan_gemm(lavapipe(8));
  storage.texel_inputs = false;
  try {
    check_gemm_plan(storage, lavapipe(8));
    FAIL() << "B packed for storage reads was accepted";
  } catch (const DeviceError& e) {
    EXPECT_TRUE(has(e.what(), "packs B only for the broadcast tiling with texel inputs"));
  }
}

// ---- the driver quirks table ---------------------------------------------------------------------
EnvReader environment(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  };
}

TEST(Quirks, ARowSwitchesOffItsFamilyForItsDriverVersionsOnly) {
  const Quirk table[] = {{0x8086, vk::DriverId::eIntelOpenSourceMESA, 100, 199, Switch::subgroups, "wrong sums"}};
  DeviceReport d = gpu(32, 8, 32);
  d.vendor_id = 0x8086;
  d.driver_id = vk::DriverId::eIntelOpenSourceMESA;
  d.driver_name = "Intel open-source Mesa driver";
  d.driver_version = 150;
  Switches s = choose_switches(d, table, environment({}));
  EXPECT_FALSE(s.subgroups);
  EXPECT_TRUE(has(s.subgroups_why, "driver quirk (Intel open-source Mesa driver"));
  EXPECT_TRUE(has(s.subgroups_why, "wrong sums"));
  EXPECT_TRUE(s.texel_inputs);
  d.driver_version = 200;  // a later driver: the row no longer applies
  EXPECT_TRUE(choose_switches(d, table, environment({})).subgroups);
  d.driver_version = 150;
  d.driver_id = vk::DriverId::eMesaRadv;  // another driver
  EXPECT_TRUE(choose_switches(d, table, environment({})).subgroups);
}

TEST(Quirks, TheEnvironmentOverridesEitherWay) {
  const Quirk table[] = {{0, vk::DriverId::eMesaLlvmpipe, 0, UINT32_MAX, Switch::texel_inputs, "slow"}};
  DeviceReport d = lavapipe(8);
  d.driver_id = vk::DriverId::eMesaLlvmpipe;
  EXPECT_FALSE(choose_switches(d, table, environment({})).texel_inputs);
  EXPECT_TRUE(choose_switches(d, table, environment({{"VKATTN_TEXEL_INPUTS", "on"}})).texel_inputs);
  Switches off = choose_switches(d, {}, environment({{"VKATTN_SUBGROUPS", "off"}}));
  EXPECT_FALSE(off.subgroups);
  EXPECT_EQ(off.subgroups_why, "VKATTN_SUBGROUPS=off");
  EXPECT_TRUE(choose_switches(d, {}, environment({{"VKATTN_SUBGROUPS", "1"}})).subgroups);
  try {
    choose_switches(d, {}, environment({{"VKATTN_SUBGROUPS", "maybe"}}));
    FAIL() << "VKATTN_SUBGROUPS=maybe was accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "VKATTN_SUBGROUPS='maybe': expected on or off");
  }
}

}  // namespace
}  // namespace vkattn::vulkan
