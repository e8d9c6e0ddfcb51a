// Bounded work per submission: flash_attention split into submissions of a few workgroups gives
// the same bits as one dispatch (rows are independent), over the shapes that break kernels and on
// every variant; progress is reported between submissions and an Interrupted thrown from it
// stops the pass cleanly; the split step is still one step with one time in the trace.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "engine/vulkan/context.h"
#include "engine/vulkan/recorder.h"
#include "engine/vulkan/step_plans.h"
#include "tests/support/expect_error.h"
#include "tests/support/flash_plans.h"
#include "tests/support/gpu.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/errors.h"
#include "vkattn/modules/multi_head_attention.h"

namespace vkattn {
namespace {

using testing::expect_error;
using testing::shared_context;

struct Shape4 {
  int64_t B, H, L, S, d, H_kv;
  bool causal;
  int64_t window;
  bool padding;
};

void PrintTo(const Shape4& s, std::ostream* os) {
  *os << "B " << s.B << ", H " << s.H << ", L " << s.L << ", S " << s.S << ", d " << s.d << ", H_kv " << s.H_kv
      << (s.causal ? ", causal" : "") << (s.window ? ", window " + std::to_string(s.window) : "")
      << (s.padding ? ", padding" : "");
}

Tensor flash(VulkanBackend& b, const Shape4& s) {
  Value q = b.upload("q", random_tensor({s.B, s.H, s.L, s.d}, 1));
  Value k = b.upload("k", random_tensor({s.B, s.H_kv, s.S, s.d}, 2));
  Value v = b.upload("v", random_tensor({s.B, s.H_kv, s.S, s.d}, 3));
  Tensor padding({s.B, s.S});  // additive, as the modules pass it: the last sequence's first keys blocked
  for (int64_t j = 0; j < std::min<int64_t>(s.S, 5); ++j) padding.at({s.B - 1, j}) = -INFINITY;
  Value m = b.upload("key_padding_mask", padding);
  return b.download(b.flash_attention("flash_attention", q, k, v, nullptr, s.padding ? &m : nullptr, s.causal, s.window));
}

class SplitFlash : public ::testing::TestWithParam<std::tuple<Shape4, bool>> {};

TEST_P(SplitFlash, EqualsOneDispatchBitForBit) {
  const auto& [shape, subgroups] = GetParam();
  VulkanBackend whole(shared_context(), {.subgroups = subgroups, .max_submission_seconds = 0});
  VulkanBackend split(shared_context(), {.subgroups = subgroups, .max_groups_per_submission = 3});
  const uint64_t before = split.recorder().submissions();
  const Tensor expected = flash(whole, shape), got = flash(split, shape);
  EXPECT_EQ(got.data, expected.data);  // bit for bit
  if (split.flash_plan().groups(uint64_t(shape.B * shape.H), uint64_t(shape.L)) > 3) {  // (at 16 lanes, few do)
    EXPECT_GT(split.recorder().submissions() - before, 1u) << "not split";
  }
}

const auto kSplitShapes = ::testing::Values(Shape4{1, 1, 1, 1, 1, 1, false, 0, false},      // one row, one key
                                            Shape4{2, 3, 17, 17, 5, 3, true, 0, true},      // causal, padded
                                            Shape4{1, 4, 113, 40, 16, 2, false, 0, true},   // L ≠ S, shared heads
                                            Shape4{2, 2, 113, 113, 8, 1, true, 17, false},  // a window
                                            Shape4{1, 2, 300, 300, 64, 2, true, 0, false});

INSTANTIATE_TEST_SUITE_P(Shapes, SplitFlash, ::testing::Combine(kSplitShapes, ::testing::Bool()), [](const auto& p) {
  const Shape4& s = std::get<0>(p.param);
  return "L" + std::to_string(s.L) + "_S" + std::to_string(s.S) + "_d" + std::to_string(s.d) +
         (s.causal ? "_causal" : "") + (std::get<1>(p.param) ? "_subgroups" : "_per_invocation");
});

// A budget of a nanosecond splits a step by the device's measured speed alone: one workgroup a
// submission after the probe; progress rises to the end, and an Interrupted from the callback
// leaves the pass failed and the backend ready for the next.
// The tiled plans (FlashAttention-2's order) too, whose causal blocks run longest first: a
// split of that order is as good as any (testing::tiled_flash_variants: with and without the
// softmax across lanes, where the device has them).
class SplitTiledFlash : public ::testing::TestWithParam<Shape4> {};

TEST_P(SplitTiledFlash, EqualsOneDispatchBitForBit) {
  const Shape4& shape = GetParam();
  const auto& device = shared_context()->device_report();
  for (const vulkan::FlashPlan& tiled : testing::tiled_flash_variants(device)) {
    if (tiled.shared_bytes(uint32_t(shape.d)) > device.max_shared_memory_bytes) continue;
    SCOPED_TRACE(tiled.describe());
    const auto plan = std::make_shared<const vulkan::FlashPlan>(tiled);
    VulkanBackend whole(shared_context(), {.flash = plan, .max_submission_seconds = 0});
    VulkanBackend split(shared_context(), {.flash = plan, .max_groups_per_submission = 3});
    const uint64_t before = split.recorder().submissions();
    EXPECT_EQ(flash(split, shape).data, flash(whole, shape).data);  // bit for bit
    if (tiled.groups(uint64_t(shape.B * shape.H), uint64_t(shape.L)) > 3) {
      EXPECT_GT(split.recorder().submissions() - before, 1u) << "not split";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SplitTiledFlash, kSplitShapes, [](const auto& p) {
  const Shape4& s = p.param;
  return "L" + std::to_string(s.L) + "_S" + std::to_string(s.S) + "_d" + std::to_string(s.d) +
         (s.causal ? "_causal" : "");
});

TEST(SplitByTime, ProgressRisesAndAnInterruptStopsThePassCleanly) {
  VulkanBackend gpu(shared_context(), {.max_submission_seconds = 1e-9});
  MultiHeadAttentionConfig config{.embed_dim = 32, .num_heads = 2, .batch_first = true};
  MultiHeadAttention module{config, MultiHeadAttentionWeights::random(config, 1)};
  const Tensor x = random_tensor({1, 1000, 32}, 2);  // 16 or more workgroups at any lane count
  const ForwardOptions fused{.need_weights = false, .attention = AttentionPath::fused};
  std::vector<double> done;
  gpu.on_progress([&](const Backend::Progress& p) {
    EXPECT_EQ(p.step, "flash_attention");
    done.push_back(p.done);
  });
  const Tensor first = module.forward(gpu, x, x, x, fused).output;
  ASSERT_GT(done.size(), 2u);
  for (size_t i = 1; i < done.size(); ++i) EXPECT_GT(done[i], done[i - 1]);
  EXPECT_LT(done.back(), 1.0);  // reported between submissions, not after the last

  gpu.on_progress([&](const Backend::Progress& p) {
    if (p.done > 0.3) throw Interrupted("interrupted at " + p.step);
  });
  const uint64_t allocated = gpu.context().allocated_bytes();
  expect_error<Interrupted>([&] { module.forward(gpu, x, x, x, fused); }, {"interrupted at flash_attention"});
  EXPECT_LE(gpu.context().allocated_bytes(), allocated);
  gpu.on_progress(nullptr);
  EXPECT_EQ(module.forward(gpu, x, x, x, fused).output.data, first.data);
}

TEST(SplitByTime, TheSplitStepIsOneStepWithOneTime) {
  VulkanBackend gpu(shared_context(), {.max_groups_per_submission = 2});
  MultiHeadAttentionConfig config{.embed_dim = 16, .num_heads = 2, .batch_first = true};
  MultiHeadAttention module{config, MultiHeadAttentionWeights::random(config, 1)};
  StepRecorder steps(false);
  gpu.add_tracer(steps);
  module.forward(gpu, random_tensor({1, 150, 16}, 2), random_tensor({1, 150, 16}, 2), random_tensor({1, 150, 16}, 2),
                 {.need_weights = false, .attention = AttentionPath::fused});
  gpu.remove_tracer(steps);
  size_t flash_steps = 0;
  for (const auto& s : steps.steps()) flash_steps += s.event.name == "flash_attention";
  EXPECT_EQ(flash_steps, 1u);
  if (gpu.context().device_report().timestamps) {
    EXPECT_EQ(steps.pass_end().clock, "gpu");  // one (start, end) per step: the device's times still apply
    ASSERT_EQ(steps.pass_end().step_times.size(), steps.steps().size());
  }
}

}  // namespace
}  // namespace vkattn
