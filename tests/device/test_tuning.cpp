// Plans chosen by measurement (engine/backends/tuner.h) and remembered on disk
// (engine/vulkan/plan_cache.h): every plan tuning can choose, forced, matches the reference over
// shapes that break kernels; the cache is written once and reused, keyed by device, driver and
// build; a corrupt, truncated, foreign, edited or unwritable cache is a warning and a fallback,
// never a crash or a wrong result; processes and threads tuning at once leave one valid file.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "engine/backends/tuner.h"
#include "engine/vulkan/faults.h"
#include "engine/vulkan/plan_cache.h"
#include "reference/reference.h"
#include "tests/support/gemm_tilings.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/errors.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {
namespace {

namespace fs = std::filesystem;
using testing::all_close;
using testing::random_tensor;
using Step = std::function<Value(Backend&, const std::vector<Value>&)>;

::testing::AssertionResult matches_reference(Backend& gpu, const std::vector<Tensor>& inputs, const Step& step) {
  ReferenceBackend cpu;
  auto run = [&](Backend& backend) {
    std::vector<Value> values;
    for (size_t i = 0; i < inputs.size(); ++i) values.push_back(backend.upload("in" + std::to_string(i), inputs[i]));
    return backend.download(step(backend, values));
  };
  return all_close(run(gpu), run(cpu), {});
}

// ---- every plan tuning can choose, forced ----------------------------------------------------------
// (a candidate test_ops's Plans/GemmTiling runs is not run again: the same products, the same
// pipelines; on lavapipe at 8 lanes 3 of the 7 are left to run here)
TEST(TunedPlans, EveryGemmCandidateMatchesTheReference) {
  const auto& device = testing::shared_context()->device_report();
  const auto candidates = tuning::gemm_candidates(device);
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates.front().describe(), vulkan::plan_gemm(device).describe()) << "the rule comes first";
  for (const auto& plan : candidates) {
    if (testing::among_gemm_tilings(plan, device)) continue;
    VulkanBackend gpu(testing::shared_context(), {.gemm = std::make_shared<const vulkan::GemmPlan>(plan)});
    ReferenceBackend cpu;
    EXPECT_TRUE(testing::gemm_products_match(gpu, cpu)) << plan.describe();
  }
}

TEST(TunedPlans, EveryFlashCandidateMatchesTheReference) {
  const auto& device = testing::shared_context()->device_report();
  const auto candidates = tuning::flash_candidates(device, 64);
  ASSERT_GE(candidates.size(), 2u) << "at least the rule's and a row per invocation";
  // (the rule: a GPU's is tiled, a CPU device's the subgroup plan)
  EXPECT_EQ(candidates.front().describe(), vulkan::flash_rule(device, 64, 64).describe()) << "the rule comes first";
  for (const auto& plan : candidates) {
    SCOPED_TRACE(plan.describe());
    VulkanBackend gpu(testing::shared_context(), {.flash = std::make_shared<const vulkan::FlashPlan>(plan)});
    EXPECT_EQ(gpu.flash_plan().describe(), plan.describe());
    for (auto [B, H, L, S, d] : {std::tuple{1, 1, 1, 1, 1}, {2, 3, 17, 17, 5}, {1, 2, 17, 113, 8}, {2, 1, 113, 3, 64}}) {
      for (bool causal : {false, true}) {
        // key padding: the last sequence fully masked (its rows must come out zero)
        Tensor padding({B, S});
        for (int64_t j = 0; j < S; ++j) padding.data[size_t((B - 1) * S + j)] = 1.0f;
        std::vector<Tensor> in{random_tensor({B, H, L, d}, 1), random_tensor({B, H, S, d}, 2), random_tensor({B, H, S, d}, 3), padding};
        EXPECT_TRUE(matches_reference(gpu, in, [causal](Backend& b, const std::vector<Value>& v) {
          return b.flash_attention("flash_attention", v[0], v[1], v[2], nullptr, &v[3], causal);
        })) << B << "×" << H << " heads, L " << L << ", S " << S << ", d " << d << (causal ? ", causal" : "");
      }
    }
  }
}

// A flash plan's keys a lane: remembered and read back, a file without them read as no plan, and
// counts the kernel cannot take refused, whatever a cache file says.
TEST(TunedPlans, AFlashPlanKeepsItsKeysAndImpossibleCountsAreRefused) {
  const auto& device = testing::shared_context()->device_report();
  vulkan::FlashPlan plan = vulkan::plan_flash(device, 64);
  if (plan.lanes) plan.keys = 4;
  const vulkan::FlashPlan back = tuning::flash_plan_from_json(tuning::to_json(plan));
  EXPECT_EQ(back.keys, plan.keys);
  EXPECT_EQ(back.describe(), plan.describe());
  nlohmann::json without = tuning::to_json(plan);
  without.erase("keys");
  EXPECT_THROW(tuning::flash_plan_from_json(without), ConfigError);
  for (uint32_t keys : {0u, 9u}) {
    vulkan::FlashPlan bad = plan;
    bad.keys = keys;
    if (!bad.lanes) bad.rows = 1;
    try {
      vulkan::check_flash_plan(bad, device);
      ADD_FAILURE() << keys << " keys a lane accepted";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("keys"), std::string::npos) << e.what();
    }
  }
}

// An H100 as its tiled flash plans see it: a GPU with NVIDIA's 48 KiB of shared memory for Vulkan
// (no subgroups reported)
vulkan::DeviceReport h100() {
  vulkan::DeviceReport nvidia;
  nvidia.name = "NVIDIA H100";
  nvidia.type = vk::PhysicalDeviceType::eDiscreteGpu;
  nvidia.max_workgroup_invocations = nvidia.max_workgroup_size_x = 1024;
  nvidia.max_shared_memory_bytes = 48 * 1024;
  return nvidia;
}

// On a GPU, tuning also measures flash_attention in FlashAttention-2's order (flash_attention_tiled),
// in blocks and tiles whose shared memory fits at the problem's d: NVIDIA's 48 KiB holds 64 rows
// over 32 keys at d 64 but not at d 128; a CPU device gets none. A tiled plan is remembered as
// such, one remembered before tiled plans existed reads as not tiled, and impossible tiles are
// refused whatever a cache file says.
TEST(TunedPlans, TiledFlashPlansAreAGpusCandidatesWithinItsSharedMemory) {
  vulkan::DeviceReport nvidia = h100();
  auto tiled = [&](uint32_t d) {
    std::set<std::pair<uint32_t, uint32_t>> blocks;
    for (const auto& plan : tuning::flash_candidates(nvidia, 64, d)) {
      if (!plan.tiled) continue;
      blocks.insert({plan.rows, plan.keys});
      EXPECT_LE(plan.shared_bytes(d), nvidia.max_shared_memory_bytes) << plan.describe();
    }
    return blocks;
  };
  EXPECT_TRUE(tiled(64).contains({64, 32}));
  EXPECT_TRUE(tiled(64).contains({32, 16}));
  EXPECT_FALSE(tiled(128).contains({64, 32}));
  EXPECT_TRUE(tiled(128).contains({32, 16}));
  EXPECT_EQ(vulkan::tiled_flash(64, 32).shared_bytes(64), 43'520u);  // 2,144 vec4s of q, k, v; 64 × 36 floats
  vulkan::DeviceReport cpu = nvidia;
  cpu.type = vk::PhysicalDeviceType::eCpu;
  EXPECT_TRUE(std::ranges::none_of(tuning::flash_candidates(cpu, 64, 64), &vulkan::FlashPlan::tiled));

  const vulkan::FlashPlan plan = vulkan::tiled_flash(32, 16);
  const vulkan::FlashPlan back = tuning::flash_plan_from_json(tuning::to_json(plan));
  EXPECT_TRUE(back.tiled);
  EXPECT_EQ(back.describe(), plan.describe());
  EXPECT_EQ(back.shader(false), "flash_attention_tiled");
  nlohmann::json old = tuning::to_json(vulkan::plan_flash(testing::shared_context()->device_report(), 64));
  old.erase("tiled");
  EXPECT_FALSE(tuning::flash_plan_from_json(old).tiled);
  for (auto [rows, keys, what] : {std::tuple{48u, 16u, "rows per workgroup"}, {32u, 24u, "keys a tile"}}) {
    try {
      vulkan::check_flash_plan(vulkan::tiled_flash(rows, keys), nvidia);
      ADD_FAILURE() << rows << " rows over " << keys << " keys accepted";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

// Where a GPU guarantees its subgroups (NVIDIA: 32 lanes, required with full subgroups), every
// tiled block is a candidate twice: with the workgroup's softmax and with the softmax across
// lanes (flash_attention_subgroup_tiled), which keeps no row's max and sum in shared memory. A
// plan across fewer than 8 lanes, or more than the device guarantees, is refused.
TEST(TunedPlans, TiledFlashPlansWithTheirSoftmaxAcrossLanesWhereTheDeviceGuaranteesThem) {
  vulkan::DeviceReport nvidia = h100();
  nvidia.subgroup_size = nvidia.min_subgroup_size = nvidia.max_subgroup_size = 32;
  nvidia.subgroup_arithmetic = nvidia.subgroup_shuffle = nvidia.size_control = nvidia.full_subgroups = true;
  std::map<uint32_t, std::set<std::pair<uint32_t, uint32_t>>> blocks;  // lanes: (rows, keys)
  for (const auto& plan : tuning::flash_candidates(nvidia, 64, 64)) {
    if (plan.tiled) blocks[plan.lanes].insert({plan.rows, plan.keys});
  }
  EXPECT_EQ(blocks[0].size(), 5u);
  EXPECT_EQ(blocks[32], blocks[0]);
  EXPECT_EQ(blocks.size(), 2u);
  const vulkan::FlashPlan across = vulkan::tiled_flash(64, 32, 32);
  EXPECT_EQ(across.shader(false), "flash_attention_subgroup_tiled");
  EXPECT_EQ(across.shared_bytes(64), 43'520u - 64 * 3 * 4);  // no row's m, l and rescale
  EXPECT_EQ(across.groups(8, 4096), 8u * 64);                // a workgroup a block of 64 rows
  EXPECT_EQ(across.units_per_group(), 1u);
  // causal blocks longest first: every head's last block (rows 4032 …), then its last but one
  EXPECT_EQ(across.first_row(0, 8, 4096, true), 4032u);
  EXPECT_EQ(across.first_row(7, 8, 4096, true), 4032u);
  EXPECT_EQ(across.first_row(8, 8, 4096, true), 3968u);
  EXPECT_EQ(across.first_row(511, 8, 4096, true), 0u);
  EXPECT_EQ(across.first_row(65, 8, 4096, false), 64u);                  // head 1's second block
  const vulkan::FlashPlan subgroup = vulkan::plan_flash(nvidia, 64, 4);  // 4 rows a subgroup, 8 subgroups
  EXPECT_EQ(subgroup.first_row(3, 8, 100, true), 96u);  // units 24 …: head 0's rows 96 … 99, then head 1's
  EXPECT_EQ(subgroup.first_row(4, 8, 100, true), 28u);  // unit 32: head 1's rows 28 … 31
  const vulkan::FlashPlan back = tuning::flash_plan_from_json(tuning::to_json(across));
  EXPECT_EQ(back.shader(false), "flash_attention_subgroup_tiled");
  EXPECT_EQ(back.describe(), across.describe());
  EXPECT_NO_THROW(vulkan::check_flash_plan(across, nvidia));
  for (uint32_t lanes : {4u, 16u}) {
    try {
      vulkan::check_flash_plan(vulkan::tiled_flash(64, 32, lanes), nvidia);
      ADD_FAILURE() << lanes << " lanes accepted";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("8 or more guaranteed lanes"), std::string::npos) << e.what();
    }
  }
}

TEST(TunedPlans, EveryRowCandidateMatchesTheReference) {
  const auto& device = testing::shared_context()->device_report();
  const auto candidates = tuning::row_candidates(device, 64);
  EXPECT_EQ(candidates.front().describe(), vulkan::plan_rows(device, 64).describe()) << "the rule comes first";
  EXPECT_EQ(candidates.back().lanes, 0u) << "a row per workgroup runs everywhere";
  for (const auto& plan : candidates) {
    SCOPED_TRACE(plan.describe());
    VulkanBackend gpu(testing::shared_context(), {.rows = std::make_shared<const vulkan::RowPlan>(plan)});
    EXPECT_EQ(gpu.row_plan().describe(), plan.describe());
    for (auto [R, S] : {std::pair{1, 1}, {3, 17}, {17, 63}, {113, 65}, {5, 1000}}) {
      Tensor x = random_tensor({R, S}, 1);
      for (int j = 0; j < S; ++j) x.data[size_t(j)] = -std::numeric_limits<float>::infinity();  // a fully masked row
      EXPECT_TRUE(matches_reference(gpu, {x}, [](Backend& b, const std::vector<Value>& v) { return b.softmax("softmax", v[0]); }))
          << "softmax " << R << " × " << S;
      EXPECT_TRUE(matches_reference(gpu, {random_tensor({R, S}, 2), random_tensor({S}, 3), random_tensor({S}, 4)},
                                    [](Backend& b, const std::vector<Value>& v) {
                                      return b.layer_norm("layer_norm", v[0], v[1], v[2], 1e-5f);
                                    }))
          << "layer_norm " << R << " × " << S;
    }
  }
}

// Every split tuning may measure, an invocation a part and, where the device guarantees lanes,
// lanes a part (flash_decoding_subgroup: 4, 8 or 16 at d 64 on lavapipe, 4 at d 17 and 8, 1 at d 1).
TEST(TunedPlans, EveryDecodingSplitMatchesTheReference) {
  ReferenceBackend cpu;
  VulkanBackend gpu(testing::shared_context(), {.tune = false});
  const auto& device = testing::shared_context()->device_report();
  // 1, 3, 8 and 17 query rows; the shortest and longest lengths of classes; d 1, 17, 64, 8
  for (auto [B, H, Hkv, L, S, d] : {std::tuple{1, 1, 1, 1, 129, 1}, {1, 3, 3, 1, 256, 17}, {2, 2, 1, 2, 513, 64},
                                   {1, 17, 17, 1, 1000, 8}}) {
    const tuning::DecodingProblem problem{uint64_t(B * H * L), uint64_t(S), uint64_t(d)};
    const vulkan::DecodingPlan rule{gpu.decoding_parts(B * H * L, S, d), gpu.decoding_part_lanes(B * H * L, S, d)};
    const vulkan::Lanes lanes = vulkan::decoding_part_lanes(device, uint32_t(d));
    std::vector<uint32_t> lane_counts{0};
    if (lanes) lane_counts.push_back(lanes.count);
    const auto plans = tuning::decoding_candidates(rule, problem, lane_counts);
    ASSERT_GE(plans.size(), 4u * lane_counts.size());
    EXPECT_EQ(plans.front().describe(), rule.describe()) << "the rule comes first";
    std::set<std::string> described;
    for (const auto& plan : plans) described.insert(plan.describe());
    EXPECT_EQ(described.size(), plans.size()) << "each plan once";
    for (size_t i = 1; i < plans.size(); ++i) EXPECT_LE(plans[i].parts * 8, S) << "a part holds 8 keys or more";
    // the last sequence's keys all padding (its rows come out zero); causal where there are 2 rows;
    // caches longer than the length attended to
    Tensor padding({B, S});
    if (B > 1) std::fill_n(padding.data.begin() + (B - 1) * S, S, -INFINITY);
    const std::vector<Tensor> in{random_tensor({B, H, L, d}, 1), random_tensor({B, Hkv, S + 3, d}, 2),
                                 random_tensor({B, Hkv, S + 3, d}, 3), padding};
    for (const auto& plan : plans) {
      VulkanBackend planned(testing::shared_context(), {.tune = false, .flash_decoding_subgroups = plan.lanes > 0});
      EXPECT_EQ(planned.decoding_part_lanes(B * H * L, S, d), plan.lanes);
      auto run = [&, S = S, L = L](Backend& b) {
        std::vector<Value> v;
        for (size_t i = 0; i < in.size(); ++i) v.push_back(b.upload("in" + std::to_string(i), in[i]));
        return b.download(b.attention_combine(
            "attention_combine", b.flash_decoding("flash_decoding", v[0], v[1], v[2], S, &v[3], L > 1, 0, plan.parts)));
      };
      EXPECT_TRUE(all_close(run(planned), run(cpu), {})) << B << "×" << H << " heads over " << Hkv << ", L " << L
                                                         << ", S " << S << ", d " << d << ", " << plan.describe();
    }
  }
}

TEST(TunedPlans, APlanTheDeviceRefusesIsLeftOutAndNoneLeftIsSaid) {
  const auto& device = testing::shared_context()->device_report();
  const vulkan::GemmPlan rule = vulkan::plan_gemm(device);
  vulkan::GemmPlan bad = rule;
  bad.workgroup_size = 1u << 20;  // more invocations than any device allows
  const tuning::GemmProblem problem{"linear", 1, 300, 256, 256};
  const tuning::Outcome outcome = tuning::tune_gemm(testing::shared_context(), {}, problem, {bad, rule}, nullptr);
  ASSERT_EQ(outcome.candidates.size(), 2u);
  EXPECT_EQ(outcome.candidates[0].ms, 0.0);
  EXPECT_NE(outcome.candidates[0].left_out.find("workgroup exceeds"), std::string::npos) << outcome.candidates[0].left_out;
  EXPECT_GT(outcome.candidates[1].ms, 0.0);
  EXPECT_EQ(outcome.chosen, rule.fitted(256).describe());
  EXPECT_EQ(outcome.plan, tuning::to_json(rule.fitted(256)));
  EXPECT_TRUE(outcome.none_ran.empty()) << outcome.none_ran;
  // none left: the outcome says why, and holds the first candidate, unmeasured
  const tuning::Outcome none = tuning::tune_gemm(testing::shared_context(), {}, problem, {bad}, nullptr);
  EXPECT_NE(none.none_ran.find("no candidate could run (" + bad.fitted(256).describe() + ": "), std::string::npos)
      << none.none_ran;
  EXPECT_NE(none.none_ran.find("workgroup exceeds"), std::string::npos) << none.none_ran;
  EXPECT_EQ(none.plan, tuning::to_json(bad.fitted(256)));
  EXPECT_EQ(none.candidates.size(), 1u);
}

// ---- tuning and the cache --------------------------------------------------------------------------
// A fresh cache directory per test.
class Tuning : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("vkattn_tuning_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  VulkanBackendOptions options() const { return {.tune = true, .plan_cache_directory = dir_.string()}; }
  std::unique_ptr<VulkanBackend> backend() const {
    return std::make_unique<VulkanBackend>(testing::shared_context(), options());
  }
  // The cache file of the shared context's device (the one plan_cache() names).
  fs::path file() const {
    return vulkan::PlanCache(vulkan::PlanCacheKey::of(testing::shared_context()->device_report()), dir_).file();
  }
  nlohmann::json read() const {
    std::ifstream in(file());
    return nlohmann::json::parse(in);
  }
  void write(const std::string& text) const {
    fs::create_directories(file().parent_path());
    std::ofstream(file(), std::ios::trunc) << text;
  }
  std::string text() const {
    std::ifstream in(file());
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // One linear big enough to be tuned, on `gpu`, checked against the reference; returns how many
  // progress reports said tuning.
  int linear(VulkanBackend& gpu, int64_t rows = 200, int64_t features = 256) {
    int tuning_reports = 0;
    gpu.on_progress([&](const Backend::Progress& p) { tuning_reports += p.step.rfind("tuning ", 0) == 0; });
    EXPECT_TRUE(matches_reference(gpu, {random_tensor({rows, features}, 1), random_tensor({features, features}, 2)},
                                  [](Backend& b, const std::vector<Value>& v) { return b.linear("q_proj", v[0], v[1], nullptr); }));
    gpu.on_progress(nullptr);
    return tuning_reports;
  }
  static std::string linear_class(int64_t rows = 200, int64_t features = 256) {
    return tuning::shape_class(tuning::GemmProblem{"linear", 1, uint64_t(rows), uint64_t(features), uint64_t(features)});
  }

  fs::path dir_;
};

TEST_F(Tuning, AShapeClassIsMeasuredOnceAndRemembered) {
  std::string written;
  {
    auto gpu = backend();
    EXPECT_GT(linear(*gpu), 0) << "the first problem of the class is tuned";
    ASSERT_TRUE(fs::exists(file()));
    const nlohmann::json doc = read();
    const auto key = vulkan::PlanCacheKey::of(testing::shared_context()->device_report());
    EXPECT_EQ(doc["device"].get<std::string>(), key.device);
    EXPECT_EQ(doc["uuid"].get<std::string>(), key.uuid);
    EXPECT_EQ(doc["driver"].get<std::string>(), key.driver);
    EXPECT_EQ(doc["build"].get<std::string>(), key.build);
    ASSERT_TRUE(doc["plans"].contains(linear_class())) << doc.dump(2);
    const auto& entry = doc["plans"][linear_class()];
    // the chosen plan is the fastest one measured, and every candidate was measured or said why not
    double fastest = 1e300;
    for (const auto& [plan, ms] : entry["measured_ms"].items()) {
      if (ms.is_number()) fastest = std::min(fastest, ms.get<double>());
    }
    EXPECT_EQ(entry["measured_ms"][entry["describe"].get<std::string>()].get<double>(), fastest);
    EXPECT_EQ(entry["measured_ms"].size(), tuning::gemm_candidates(testing::shared_context()->device_report()).size());
    ASSERT_EQ(gpu->tuned_plans().size(), 1u);
    EXPECT_EQ(gpu->tuned_plans()[0].first, linear_class());
    EXPECT_EQ(gpu->tuned_plans()[0].second, entry["describe"].get<std::string>());
    // the same class again, another shape of it: no tuning
    EXPECT_EQ(linear(*gpu, 250), 0);
    written = text();
  }
  // a new backend (the process's cache object is gone with the last backend: read from disk)
  auto again = backend();
  EXPECT_EQ(linear(*again), 0) << "a remembered class is not measured again";
  EXPECT_EQ(text(), written) << "nor written again";
  EXPECT_EQ(again->tuned_plans().size(), 1u);
  // another class is
  EXPECT_GT(linear(*again, 1000), 0);
  EXPECT_EQ(read()["plans"].size(), 2u);
}

TEST_F(Tuning, SmallProblemsAndForcedPlansKeepTheRule) {
  auto gpu = backend();
  EXPECT_EQ(linear(*gpu, 3, 17), 0);
  EXPECT_FALSE(fs::exists(file()));
  VulkanBackendOptions forced = options();
  forced.gemm = std::make_shared<const vulkan::GemmPlan>(gpu->gemm_plan());
  VulkanBackend pinned(testing::shared_context(), forced);
  EXPECT_EQ(linear(pinned), 0);
  VulkanBackendOptions off = options();
  off.tune = false;
  VulkanBackend untuned(testing::shared_context(), off);
  EXPECT_EQ(linear(untuned), 0);
  EXPECT_FALSE(fs::exists(file())) << "nothing tuned, nothing written";
}

TEST_F(Tuning, AnotherDriverOrBuildIsMeasuredAgain) {
  for (const char* field : {"driver", "build", "uuid"}) {
    SCOPED_TRACE(field);
    {
      auto gpu = backend();
      linear(*gpu);
    }
    nlohmann::json doc = read();
    doc[field] = "something else";
    write(doc.dump());
    // the backend's cache is this one (one a file in a process, while it is held)
    auto cache = vulkan::plan_cache(testing::shared_context()->device_report(), dir_);
    auto gpu = backend();
    EXPECT_GT(linear(*gpu), 0) << "another " << field << "'s plans are not trusted";
    EXPECT_EQ(read()[field], nlohmann::json(vulkan::PlanCacheKey::of(testing::shared_context()->device_report()).to_json()[field]));
    // said once, when the file was read, not again when it was replaced
    ASSERT_EQ(cache->warnings().size(), 1u) << ::testing::PrintToString(cache->warnings());
    EXPECT_NE(cache->warnings()[0].find(std::string("was tuned for another ") + field + " (something else, this is "),
              std::string::npos)
        << cache->warnings()[0];
  }
}

TEST_F(Tuning, ACorruptOrTruncatedFileIsAWarningAndMeasuredAgain) {
  std::string valid;
  {
    auto gpu = backend();
    linear(*gpu);
    valid = text();
  }
  for (const std::string& bad : {valid.substr(0, valid.size() / 2), std::string("\x7f" "ELF garbage"), std::string(""),
                                 std::string("[1, 2, 3]"), std::string("{\"format\": 99, \"plans\": {}}")}) {
    SCOPED_TRACE(bad.substr(0, 40));
    write(bad);
    auto cache = vulkan::plan_cache(testing::shared_context()->device_report(), dir_);
    EXPECT_FALSE(cache->find(linear_class()).has_value());
    ASSERT_EQ(cache->warnings().size(), 1u);
    EXPECT_NE(cache->warnings()[0].find(file().string()), std::string::npos) << cache->warnings()[0];
    EXPECT_NE(cache->warnings()[0].find("ignored"), std::string::npos) << cache->warnings()[0];
    auto gpu = backend();
    EXPECT_GT(linear(*gpu), 0);
    EXPECT_TRUE(read()["plans"].contains(linear_class())) << "the file is whole again";
  }
}

TEST_F(Tuning, ARememberedPlanTheDeviceCannotRunIsRefused) {
  {
    auto gpu = backend();
    linear(*gpu);
  }
  // 3 lanes (the broadcast tiling's; a GPU's shared tiling has none) or 3 k a tile (the shared's)
  const bool broadcast = read()["plans"][linear_class()]["plan"]["variant"] == "broadcast";
  for (const auto& [field, value] : {std::pair{broadcast ? "lanes" : "depth", nlohmann::json(3)},
                                     {"workgroup_size", nlohmann::json(1u << 20)}, {"variant", nlohmann::json("sideways")},
                                     {"tile_m", nlohmann::json("many")}}) {
    SCOPED_TRACE(field);
    nlohmann::json doc = read();
    doc["plans"][linear_class()]["plan"][field] = value;
    write(doc.dump());
    auto gpu = backend();
    EXPECT_GT(linear(*gpu), 0) << "an edited plan is measured again, not run";
  }
}

TEST_F(Tuning, AnUnwritableDirectoryIsAWarningAndPlansStayInMemory) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "a_file") << "not a directory";
  VulkanBackendOptions o = options();
  o.plan_cache_directory = (dir_ / "a_file" / "vkattn").string();
  VulkanBackend gpu(testing::shared_context(), o);
  EXPECT_GT(linear(gpu), 0);
  EXPECT_EQ(gpu.tuned_plans().size(), 1u);
  EXPECT_EQ(linear(gpu), 0) << "kept in memory";
  auto cache = vulkan::plan_cache(testing::shared_context()->device_report(), o.plan_cache_directory);
  ASSERT_EQ(cache->warnings().size(), 1u);
  EXPECT_NE(cache->warnings()[0].find("cannot write"), std::string::npos) << cache->warnings()[0];
}

TEST_F(Tuning, FlashAttentionIsTunedPerClass) {
  auto gpu = backend();
  int reports = 0;
  gpu->on_progress([&](const Backend::Progress& p) { reports += p.step.rfind("tuning flash_attention", 0) == 0; });
  std::vector<Tensor> in{random_tensor({1, 4, 300, 32}, 1), random_tensor({1, 4, 300, 32}, 2), random_tensor({1, 4, 300, 32}, 3)};
  EXPECT_TRUE(matches_reference(*gpu, in, [](Backend& b, const std::vector<Value>& v) {
    return b.flash_attention("flash_attention", v[0], v[1], v[2], nullptr, nullptr, true);
  }));
  EXPECT_GT(reports, 0);
  const std::string shape_class = tuning::shape_class(tuning::FlashProblem{4, 300, 300, 32, true});
  EXPECT_EQ(shape_class, "flash_attention: d 32, L ≤ 512, S ≤ 512, causal");
  ASSERT_TRUE(read()["plans"].contains(shape_class));
  EXPECT_EQ(read()["plans"][shape_class]["measured_ms"].size(),
            tuning::flash_candidates(testing::shared_context()->device_report(), 64).size());
}

TEST_F(Tuning, SoftmaxAndLayerNormAreTunedPerClass) {
  auto gpu = backend();
  Tensor x = random_tensor({2048, 1000}, 1);
  EXPECT_TRUE(matches_reference(*gpu, {x}, [](Backend& b, const std::vector<Value>& v) { return b.softmax("softmax", v[0]); }));
  EXPECT_TRUE(matches_reference(*gpu, {x, random_tensor({1000}, 2), random_tensor({1000}, 3)},
                                [](Backend& b, const std::vector<Value>& v) {
                                  return b.layer_norm("layer_norm", v[0], v[1], v[2], 1e-5f);
                                }));
  const nlohmann::json plans = read()["plans"];
  const size_t candidates = tuning::row_candidates(testing::shared_context()->device_report(), 64).size();
  for (const char* step : {"softmax", "layer_norm"}) {
    const std::string shape_class = std::string(step) + ": rows ≤ 2048, n ≤ 1024";
    ASSERT_TRUE(plans.contains(shape_class)) << plans.dump(2);
    EXPECT_EQ(plans[shape_class]["measured_ms"].size(), candidates);
  }
}

// One decode step of `rows` query heads over `keys` cached keys of d = 64, on `gpu` (flash_decoding
// with the backend's own split, then attention_combine), checked against the reference; returns
// how many progress reports said it tuned the split.
int decode_step(VulkanBackend& gpu, int64_t rows, int64_t keys) {
  int reports = 0;
  gpu.on_progress([&](const Backend::Progress& p) { reports += p.step.rfind("tuning flash_decoding", 0) == 0; });
  EXPECT_TRUE(matches_reference(gpu, {random_tensor({1, rows, 1, 64}, 1), random_tensor({1, rows, keys, 64}, 2),
                                      random_tensor({1, rows, keys, 64}, 3)},
                                [keys](Backend& b, const std::vector<Value>& v) {
                                  return b.attention_combine("attention_combine",
                                                             b.flash_decoding("flash_decoding", v[0], v[1], v[2], keys,
                                                                              nullptr, false, 0));
                                }));
  gpu.on_progress(nullptr);
  return reports;
}

TEST_F(Tuning, TheDecodingSplitIsMeasuredPerClassAndRemembered) {
  const std::string shape_class = tuning::shape_class(tuning::DecodingProblem{8, 1000, 64});
  EXPECT_EQ(shape_class, "flash_decoding: d 64, rows ≤ 8, S ≤ 1024");
  VulkanBackendOptions off = options();
  off.tune = false;
  VulkanBackend untuned(testing::shared_context(), off);
  const int64_t rule = untuned.decoding_parts(8, 1000, 64);
  const uint32_t rule_lanes = untuned.decoding_part_lanes(8, 1000, 64);  // a GPU's: parts of lanes, measured with none
  std::vector<uint32_t> lane_counts{rule_lanes};
  if (rule_lanes) lane_counts.push_back(0);
  int64_t chosen = 0;
  {
    auto gpu = backend();
    EXPECT_EQ(decode_step(*gpu, 8, 100), 0) << "below 128 keys the rule splits";
    EXPECT_FALSE(fs::exists(file()));
    EXPECT_GT(decode_step(*gpu, 8, 1000), 0);
    const auto entry = read()["plans"][shape_class];
    EXPECT_EQ(entry["measured_ms"].size(),
              tuning::decoding_candidates({rule, rule_lanes}, {8, 1000, 64}, lane_counts).size())
        << entry.dump();
    double fastest = 1e300;
    for (const auto& [plan, ms] : entry["measured_ms"].items()) {
      if (ms.is_number()) fastest = std::min(fastest, ms.get<double>());
    }
    EXPECT_EQ(entry["measured_ms"][entry["describe"].get<std::string>()].get<double>(), fastest);
    chosen = entry["plan"]["parts"].get<int64_t>();
    const auto lanes = entry["plan"]["lanes"].get<uint32_t>();
    EXPECT_TRUE(lanes == 0 || lanes == rule_lanes) << entry.dump();
    EXPECT_EQ(entry["describe"].get<std::string>(), (vulkan::DecodingPlan{chosen, lanes}.describe()));
    ASSERT_EQ(gpu->tuned_plans().size(), 1u);
    EXPECT_EQ(gpu->tuned_plans()[0], std::pair(shape_class, entry["describe"].get<std::string>()));
    EXPECT_EQ(gpu->decoding_parts(8, 1000, 64), chosen);
    EXPECT_EQ(gpu->decoding_parts(5, 600, 64), chosen) << "the same class";
    EXPECT_EQ(decode_step(*gpu, 6, 777), 0);
    EXPECT_EQ(untuned.decoding_parts(8, 1000, 64), rule) << "where tuning is off, the rule";
  }
  // remembered: read back, and an edited count is the count used
  EXPECT_EQ(backend()->decoding_parts(8, 1000, 64), chosen);
  nlohmann::json doc = read();
  doc["plans"][shape_class]["plan"]["parts"] = 3;
  write(doc.dump());
  {
    auto gpu = backend();
    EXPECT_EQ(gpu->decoding_parts(8, 1000, 64), 3);
    EXPECT_EQ(decode_step(*gpu, 8, 1000), 0);
  }
  // edited lanes: those the device gives at d 64 (where it guarantees any), or none
  const vulkan::Lanes lanes = vulkan::decoding_part_lanes(testing::shared_context()->device_report(), 64);
  for (uint32_t edited : {lanes.count, 0u}) {
    doc["plans"][shape_class]["plan"]["lanes"] = edited;
    write(doc.dump());
    auto gpu = backend();
    EXPECT_EQ(gpu->decoding_part_lanes(8, 1000, 64), edited);
    EXPECT_EQ(gpu->tuned_plans()[0].second, (vulkan::DecodingPlan{3, edited}.describe()));
    EXPECT_EQ(decode_step(*gpu, 8, 1000), 0);
  }
  // a count that is none, or lanes the device does not give, are measured again
  for (auto [field, bad] : {std::pair{"parts", nlohmann::json(0)},
                            {"parts", nlohmann::json("many")},
                            {"parts", nlohmann::json(nullptr)},
                            {"lanes", nlohmann::json(3)},
                            {"lanes", nlohmann::json(1024)}}) {
    SCOPED_TRACE(std::string(field) + " " + bad.dump());
    doc["plans"][shape_class]["plan"]["parts"] = 3;
    doc["plans"][shape_class]["plan"]["lanes"] = 0;
    doc["plans"][shape_class]["plan"][field] = bad;
    write(doc.dump());
    auto gpu = backend();
    EXPECT_GT(decode_step(*gpu, 8, 1000), 0);
    EXPECT_GE(read()["plans"][shape_class]["plan"]["parts"].get<int64_t>(), 1);
  }
}

// A first decode of many new positions (a prompt's) over a shared cache: tuning times the step as
// the pass holds it, each head's queries over its own cache, not a cache for every query row (at
// 1 MiB a buffer, 64 rows' own caches of 1000 keys are 16 MiB; the pass's 2 heads, 0.5 MiB).
TEST_F(Tuning, TheDecodingSplitIsTimedOnNoMoreThanThePassHolds) {
  VulkanBackendOptions small = options();
  small.buffer_limit_bytes = 1 << 20;
  VulkanBackend gpu(testing::shared_context(), small);
  const int64_t H = 4, H_kv = 2, L = 16, S = 1000, d = 64;
  int reports = 0;
  gpu.on_progress([&](const Backend::Progress& p) { reports += p.step.rfind("tuning flash_decoding", 0) == 0; });
  EXPECT_TRUE(matches_reference(gpu, {random_tensor({1, H, L, d}, 1), random_tensor({1, H_kv, S, d}, 2),
                                      random_tensor({1, H_kv, S, d}, 3)},
                                [](Backend& b, const std::vector<Value>& v) {
                                  return b.attention_combine("attention_combine",
                                                             b.flash_decoding("flash_decoding", v[0], v[1], v[2], S,
                                                                              nullptr, true, 0));
                                }));
  gpu.on_progress(nullptr);
  EXPECT_GT(reports, 0);
  const auto entry = read()["plans"][tuning::shape_class(tuning::DecodingProblem{H * L, S, d})];
  EXPECT_FALSE(entry.contains("none_ran")) << entry.dump();
  EXPECT_EQ(entry["problem"].get<std::string>(), "64 rows, S 1000, d 64") << entry.dump();
}

// A prompt decoded whole is timed on part of its queries, as a GEMM on part of its rows: about
// 10⁸ multiply-adds on a CPU device, no fewer than 1,024 rows (4 heads × 1,024 queries over 512
// keys, 2.7·10⁸, is timed at 512 queries a head; lesson 09's 4 × 1,023 over 1,023 took 26.6 s whole).
// Two of the class's six candidates are timed: the cut is the problem's, the same for each, and
// all six took 65 s alone, 98 s in the suite (lavapipe without LLVM's optimizations, 2-core Xeon).
TEST_F(Tuning, APromptsDecodeIsTimedOnPartOfItsQueries) {
  const auto& device = testing::shared_context()->device_report();
  const tuning::DecodingProblem problem{.rows = 4 * 1024, .keys = 512, .d = 64, .queries = 1024};
  auto candidates = tuning::decoding_candidates({1, 0}, problem);
  ASSERT_GE(candidates.size(), 2u);
  candidates.resize(2);
  const tuning::Outcome outcome = tuning::tune_decoding(testing::shared_context(), options(), problem, candidates, nullptr);
  EXPECT_TRUE(outcome.none_ran.empty()) << outcome.none_ran;
  const bool cpu_device = device.type == vk::PhysicalDeviceType::eCpu;
  EXPECT_EQ(outcome.problem, cpu_device ? "2048 rows, S 512, d 64" : "4096 rows, S 512, d 64");
  EXPECT_EQ(outcome.candidates.size(), candidates.size());
}

// Where the device refuses every candidate (here: each timed problem's buffers exceed its limit),
// tuning ends without a plan measured: the rule's plan runs, the user is told once, and the cache
// remembers it, so that the next run neither measures nor says it again.
TEST_F(Tuning, WhenTheDeviceRefusesEveryCandidateTheRulesPlanRunsAndItIsSaidOnce) {
  const auto& device = testing::shared_context()->device_report();
  VulkanBackendOptions small = options();
  small.buffer_limit_bytes = 64 << 10;  // 64 KiB: B (256, 256) alone is 256 KiB
  const tuning::GemmProblem problem{"linear", 1, 400, 256, 256};
  const auto candidates = tuning::gemm_candidates(device);
  const tuning::Outcome outcome = tuning::tune_gemm(testing::shared_context(), small, problem, candidates, nullptr);
  EXPECT_NE(outcome.none_ran.find("no candidate could run"), std::string::npos) << outcome.none_ran;
  EXPECT_NE(outcome.none_ran.find("the buffer limit set for this backend"), std::string::npos) << outcome.none_ran;
  EXPECT_EQ(outcome.plan, tuning::to_json(candidates.front().fitted(256)));
  ASSERT_EQ(outcome.candidates.size(), candidates.size());
  for (const auto& c : outcome.candidates) EXPECT_FALSE(c.left_out.empty()) << c.plan;

  // Through a backend: every allocation of the tuner's "linear" fails (the pass's step is q_proj)
  std::ostringstream said;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(said);
  spdlog::default_logger()->sinks().push_back(sink);
  const std::string shape_class = linear_class(200, 256);
  for (int run = 0; run < 2; ++run) {
    vulkan::faults::inject({.site = vulkan::faults::Site::allocation, .during = "linear", .times = 1000000});
    auto gpu = backend();
    const int reports = linear(*gpu);
    EXPECT_EQ(reports > 0, run == 0) << "measured on the first run only";
    vulkan::faults::clear();
    ASSERT_EQ(gpu->tuned_plans().size(), 1u);
    EXPECT_EQ(gpu->tuned_plans()[0].second, gpu->gemm_plan().fitted(256).describe()) << "the rule's plan";
  }
  spdlog::default_logger()->sinks().pop_back();
  const std::string text = said.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(text.find("tuning " + shape_class + ": no candidate could run ("), std::string::npos) << text;
  EXPECT_NE(text.find("the fixed rule's plan runs"), std::string::npos) << text;
  EXPECT_TRUE(read()["plans"][shape_class].contains("none_ran"));
}

// Weights kept 16-bit (a bfloat16 checkpoint's) are read by other code than float32 weights, never
// packed, and fit a buffer twice as large: tuning measures them as they run, in a class of their
// own. Here the buffer limit holds B (384, 1024) in bfloat16 (768 KiB) but not in float32
// (1.5 MiB), as lavapipe's 128 MiB holds GPT-2's lm_head in bfloat16 and not in float32.
TEST_F(Tuning, SixteenBitWeightsAreMeasuredAsTheyRunInAClassOfTheirOwn) {
  const auto& device = testing::shared_context()->device_report();
  VulkanBackendOptions o = options();
  o.buffer_limit_bytes = 1 << 20;
  VulkanBackend gpu(testing::shared_context(), o);
  std::ostringstream said;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(said);
  spdlog::default_logger()->sinks().push_back(sink);
  Tensor w = random_tensor({384, 1024}, 2);
  for (float& v : w.data) v = reference::round_to(v, static_cast<int>(Narrow::bfloat16));
  w.narrow = Narrow::bfloat16;
  const Tensor x = random_tensor({200, 1024}, 1);
  auto run = [&](Backend& b) {
    return b.download(b.linear("lm_head", b.upload("x", x), b.upload_matrix("w", w), nullptr));
  };
  ReferenceBackend cpu;
  EXPECT_TRUE(all_close(run(gpu), run(cpu), {.atol = 3e-4f, .rtol = 1e-4f}));
  spdlog::default_logger()->sinks().pop_back();
  EXPECT_EQ(said.str(), "") << "every candidate ran";

  const std::string shape_class =
      tuning::shape_class(tuning::GemmProblem{"linear", 1, 200, 384, 1024, Narrow::bfloat16});
  EXPECT_EQ(shape_class, "linear: rows ≤ 256, n ≤ 512, k ≤ 1024, B bfloat16");
  ASSERT_EQ(gpu.tuned_plans().size(), 1u) << "the 16-bit class alone";
  EXPECT_EQ(gpu.tuned_plans()[0].first, shape_class);
  const nlohmann::json entry = read()["plans"][shape_class];
  EXPECT_EQ(entry["problem"], "(200, 1024) · (384, 1024)ᵀ, B bfloat16");
  const auto candidates = tuning::gemm_candidates(device, "linear", Narrow::bfloat16);
  EXPECT_EQ(entry["measured_ms"].size(), candidates.size()) << entry.dump(2);
  for (const auto& [plan, ms] : entry["measured_ms"].items()) {
    EXPECT_TRUE(ms.is_number()) << plan << ": " << ms;
    EXPECT_EQ(plan.find("B packed"), std::string::npos) << plan << ": a 16-bit B is never packed";
  }
  for (const auto& c : candidates) EXPECT_FALSE(c.packed_b) << c.describe();
}

// Which ops a forward ran: "fused" when flash_attention, "unfused" when softmax.
std::string path_taken(VulkanBackend& gpu, const MultiHeadAttention& mha, const Tensor& x, const ForwardOptions& o,
                       const AttentionResult& expected) {
  StepRecorder steps(false);
  gpu.add_tracer(steps);
  const AttentionResult got = mha.forward(gpu, x, x, x, o);
  gpu.remove_tracer(steps);
  EXPECT_TRUE(all_close(got.output, expected.output, {}));
  std::string path;
  for (const auto& step : steps.steps()) {
    if (step.event.op == "flash_attention") path += "fused";
    if (step.event.op == "softmax") path += "unfused";
  }
  return path;
}

TEST_F(Tuning, TheAttentionPathIsMeasuredWhereAForwardMayTakeEither) {
  MultiHeadAttentionConfig config{.embed_dim = 256, .num_heads = 4, .batch_first = true};
  const MultiHeadAttention mha(config, MultiHeadAttentionWeights::random(config, 1));
  const Tensor x = random_tensor({2, 128, 256}, 2);
  ReferenceBackend cpu;
  const AttentionResult expected = mha.forward(cpu, x, x, x, {.need_weights = false});
  const std::string shape_class = tuning::path_class(tuning::FlashProblem{8, 128, 128, 64, false});
  EXPECT_EQ(shape_class, "attention path: d 64, L ≤ 128, S ≤ 128");
  std::string chosen;
  {
    auto gpu = backend();
    chosen = path_taken(*gpu, mha, x, {.need_weights = false}, expected);
    ASSERT_TRUE(chosen == "fused" || chosen == "unfused") << chosen;
    const auto entry = read()["plans"][shape_class];
    EXPECT_EQ(entry["plan"]["path"].get<std::string>(), chosen);
    EXPECT_EQ(entry["measured_ms"].size(), 2u) << entry.dump();
    EXPECT_LE(entry["measured_ms"][chosen].get<double>(), entry["measured_ms"][chosen == "fused" ? "unfused" : "fused"].get<double>());
    // a path asked for is the path taken, and weights are only on the unfused path
    EXPECT_EQ(path_taken(*gpu, mha, x, {.need_weights = false, .attention = AttentionPath::fused}, expected), "fused");
    EXPECT_EQ(path_taken(*gpu, mha, x, {.need_weights = false, .attention = AttentionPath::unfused}, expected), "unfused");
  }
  // the remembered path is the path taken: each of them, written into the file
  for (const char* path : {"unfused", "fused"}) {
    nlohmann::json doc = read();
    doc["plans"][shape_class]["plan"]["path"] = path;
    write(doc.dump());
    auto gpu = backend();
    EXPECT_EQ(attention_path_name(mha.path(*gpu, x, x, {.need_weights = false})), std::string(path));
    EXPECT_EQ(path_taken(*gpu, mha, x, {.need_weights = false}, expected), path);
    // a reference asked the same question takes the fused path: side by side, both take the GPU's
    EXPECT_EQ(mha.path(cpu, x, x, {.need_weights = false}), AttentionPath::fused);
    EXPECT_EQ(mha.path(*gpu, x, x, {.need_weights = true}), AttentionPath::unfused);
  }
  // a path that is neither is measured again
  nlohmann::json doc = read();
  doc["plans"][shape_class]["plan"]["path"] = "sideways";
  write(doc.dump());
  auto gpu = backend();
  int reports = 0;
  gpu->on_progress([&](const Backend::Progress& p) { reports += p.step.rfind("tuning the attention path", 0) == 0; });
  path_taken(*gpu, mha, x, {.need_weights = false}, expected);
  EXPECT_GT(reports, 0);
  EXPECT_NE(read()["plans"][shape_class]["plan"]["path"].get<std::string>(), "sideways");
}

TEST_F(Tuning, ProcessesAndThreadsTuningAtOnceLeaveOneValidFile) {
  // Four processes, each tuning two classes (one shared by all): forked before this process
  // touches Vulkan, each child makes its own context
  std::vector<pid_t> children;
  for (int child = 0; child < 4; ++child) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 0;
      try {
        auto context = std::make_shared<vulkan::Context>();
        VulkanBackend gpu(context, options());
        for (int64_t rows : {int64_t(200), int64_t(1000 + 1000 * child)}) {
          Tensor x = random_tensor({rows, 256}, 1), w = random_tensor({256, 256}, 2);
          gpu.download(gpu.linear("q_proj", gpu.upload("x", x), gpu.upload("w", w), nullptr));
        }
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const nlohmann::json doc = read();  // parses: never half a file
  for (int child = 0; child < 4; ++child) EXPECT_TRUE(doc["plans"].contains(linear_class(1000 + 1000 * child)));
  EXPECT_TRUE(doc["plans"].contains(linear_class()));
  EXPECT_EQ(doc["plans"].size(), 4u) << "200 rows is one class; 1000, 2000 ≤ 2048, 3000, 4000 ≤ 4096: three more";
  // two threads of this process, each its own backend on one context, one shared cache object
  std::vector<std::thread> threads;
  for (int64_t rows : {int64_t(9000), int64_t(20000)}) {
    threads.emplace_back([&, rows] {
      auto gpu = backend();
      Tensor x = random_tensor({rows, 256}, 1), w = random_tensor({256, 256}, 2);
      gpu->download(gpu->linear("q_proj", gpu->upload("x", x), gpu->upload("w", w), nullptr));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(read()["plans"].size(), 6u);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << "left behind: " << entry.path();
  }
}

TEST(TuningEnvironment, VkattnTuneSaysOnOrOff) {
  const char* saved = std::getenv("VKATTN_TUNE");
  const std::string restore = saved ? saved : "";
  for (const char* on : {"on", "1", ""}) {
    ::setenv("VKATTN_TUNE", on, 1);
    EXPECT_TRUE(tuning::tune_from_environment()) << on;
  }
  ::setenv("VKATTN_TUNE", "off", 1);
  EXPECT_FALSE(tuning::tune_from_environment());
  ::setenv("VKATTN_TUNE", "sometimes", 1);
  EXPECT_THROW(tuning::tune_from_environment(), ConfigError);
  EXPECT_THROW(VulkanBackend(testing::shared_context()), ConfigError);
  if (saved) ::setenv("VKATTN_TUNE", restore.c_str(), 1); else ::unsetenv("VKATTN_TUNE");
}

}  // namespace
}  // namespace vkattn
