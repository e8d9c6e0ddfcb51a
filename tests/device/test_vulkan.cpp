// The Vulkan plumbing: validation is really on and really catches misuse, grids fold, one forward
// is one command buffer with only the barriers its dependencies need, and shape-only tracing adds
// no readback.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <span>
#include <sstream>

#include "engine/vulkan/grid.h"
#include "engine/vulkan/kernel.h"
#include "engine/vulkan/ops.h"
#include "engine/vulkan/recorder.h"
#include "engine/vulkan/shader_registry.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/errors.h"
#include "vkattn/modules/multi_head_attention.h"

namespace vkattn {
namespace {

using testing::random_tensor;

TEST(Validation, IsOnForEveryTest) { EXPECT_TRUE(testing::shared_context()->validation_enabled()); }

TEST(Validation, CountsAnInvalidCall) {
  testing::allow_validation_messages();  // on purpose: the tests' watch fails any other test for one
  vulkan::Context context({.validation = true});
  uint64_t before = context.validation_message_count();
  // usage 0 breaks VUID-VkBufferCreateInfo-usage-requiredbitmask; harmless to the driver.
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = 16;
  info.usage = 0;
  VkBuffer buffer = VK_NULL_HANDLE;
  const auto& device = context.device();
  device.getDispatcher()->vkCreateBuffer(*device, &info, nullptr, &buffer);
  if (buffer) device.getDispatcher()->vkDestroyBuffer(*device, buffer, nullptr);
  EXPECT_GT(context.validation_message_count(), before);
  EXPECT_NE(context.last_validation_message().find("usage"), std::string::npos) << context.last_validation_message();
}

TEST(Grid, FoldsPastTheLimitAndCoversEveryWorkgroup) {
  glm::uvec3 limits{65535, 65535, 65535};
  EXPECT_EQ(vulkan::fold_grid(1, limits), glm::uvec3(1, 1, 1));
  EXPECT_EQ(vulkan::fold_grid(65535, limits), glm::uvec3(65535, 1, 1));
  EXPECT_EQ(vulkan::fold_grid(65536, limits), glm::uvec3(65535, 2, 1));
  glm::uvec3 small{5, 5, 5};
  EXPECT_EQ(vulkan::fold_grid(26, small), glm::uvec3(5, 5, 2));
  EXPECT_EQ(vulkan::fold_grid(125, small), glm::uvec3(5, 5, 5));
  for (uint64_t groups = 1; groups <= 125; ++groups) {
    glm::uvec3 g = vulkan::fold_grid(groups, small);
    uint64_t total = uint64_t(g.x) * g.y * g.z;
    EXPECT_GE(total, groups);
    EXPECT_LT(total - groups, uint64_t(g.x) * g.y) << "more than one spare layer for " << groups;
  }
  EXPECT_THROW(vulkan::fold_grid(126, small), DeviceError);
}

// The descriptor bindings a SPIR-V module declares: one more than the largest Binding decoration.
uint32_t declared_bindings(std::span<const uint32_t> spirv) {
  constexpr uint32_t kOpDecorate = 71, kBinding = 33;
  uint32_t count = 0;
  for (size_t at = 5; at < spirv.size();) {  // after the header's five words
    const uint32_t words = spirv[at] >> 16, opcode = spirv[at] & 0xffffu;
    if (words == 0) break;
    if (opcode == kOpDecorate && words >= 4 && spirv[at + 2] == kBinding) count = std::max(count, spirv[at + 3] + 1);
    at += words;
  }
  return count;
}

// The table of ops (engine/vulkan/ops.def) is what the backend and the build read: each row's shader
// is built, with the bindings the row says (a wrong count would bind the wrong buffers), and each
// build embedded is one of a row's.
TEST(OpsTable, EveryRowHasItsShaderWithItsBindingsAndEveryShaderARow) {
  for (const vulkan::OpInfo& op : vulkan::kOps) {
    SCOPED_TRACE(std::string(op.name));
    EXPECT_EQ(declared_bindings(vulkan::shader_spirv(op.name)), op.bindings);
    EXPECT_EQ(vulkan::op_named(op.name), static_cast<vulkan::Op>(&op - vulkan::kOps));
  }
  for (std::string_view build : vulkan::shader_builds()) {
    std::string_view base = build;
    for (std::string_view suffix : {"_gemv", "_khr", "_coopmat", "_tiled", "_unrolled", "_texel", "_texel16", "_subgroup"}) {
      if (base.ends_with(suffix)) base.remove_suffix(suffix.size());
    }
    EXPECT_NO_THROW((void)vulkan::op_named(base)) << build << " is built but no row of ops.def names " << base;
    // every build binds its row's buffers
    EXPECT_EQ(declared_bindings(vulkan::shader_spirv(build)), vulkan::op_info(vulkan::op_named(base)).bindings) << build;
  }
  EXPECT_THROW((void)vulkan::op_named("no_such_op"), std::logic_error);
}

// Every build the device can run makes a shader module without a validation message: the layer
// checks the SPIR-V against the features the context enabled. A device with cooperative matrices
// runs every shader under the Vulkan memory model, which refuses a barrier of the device's scope
// unless that scope is enabled too (flash_decoding's was refused so on an H200). Cooperative
// matrices' builds where the device has their extension, subgroup builds where it has the ops.
TEST(Kernels, EveryBuildTheDeviceRunsMakesAModuleTheValidationLayerAccepts) {
  const auto context = testing::shared_context();
  const vulkan::DeviceReport& device = context->device_report();
  const std::string_view products = device.float16_products ? device.float16_products.extension : "";
  const uint64_t before = context->validation_message_count();
  int made = 0;
  for (std::string_view build : vulkan::shader_builds()) {
    if (build.ends_with("_coopmat") && products != VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) continue;
    if (build.ends_with("_coopmat_khr") && products != "VK_KHR_cooperative_matrix") continue;
    if (build.find("_subgroup") != std::string_view::npos && !(device.subgroup_arithmetic && device.subgroup_shuffle)) {
      continue;
    }
    const std::span<const uint32_t> spirv = vulkan::shader_spirv(build);
    const vk::raii::ShaderModule module(context->device(),
                                        vk::ShaderModuleCreateInfo({}, spirv.size_bytes(), spirv.data()));
    ++made;
    ASSERT_EQ(context->validation_message_count(), before) << build << ": " << context->last_validation_message();
  }
  EXPECT_GE(made, 40);
}

// Backends on one context share its pipelines (vulkan::Kernels): a second backend running the
// same forward compiles nothing new and gives the same bits; a kernel differing in anything that
// shapes it (here its workgroup) is one of its own.
TEST(Kernels, BackendsOnOneContextCompileEachPipelineOnce) {
  auto context = std::make_shared<vulkan::Context>();  // from the environment: validation on, as every test
  MultiHeadAttentionConfig c{.embed_dim = 16, .num_heads = 4, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 1));
  Tensor x = random_tensor({2, 5, 16}, 2);
  Tensor first;
  {
    VulkanBackend gpu(context);
    first = mha.forward(gpu, x).output;
  }
  const size_t made = context->kernels().size();
  EXPECT_GE(made, 5u) << "the projections, attention and out_proj";
  {
    VulkanBackend gpu(context);
    EXPECT_EQ(mha.forward(gpu, x).output.data, first.data);
  }
  EXPECT_EQ(context->kernels().size(), made) << "the second backend compiled its own pipelines";

  // a backend whose other kernels run workgroups of 128: kernels of their own (and the GEMMs,
  // whose workgroup the plan sets, shared)
  {
    VulkanBackend gpu(context, {.workgroup_size = 128});
    EXPECT_EQ(mha.forward(gpu, x).output.data, first.data);
  }
  const size_t with_128 = context->kernels().size();
  EXPECT_GT(with_128, made);
  EXPECT_LT(with_128, 2 * made) << "the GEMMs' kernels are shared";
  EXPECT_EQ(context->validation_message_count(), 0u) << context->last_validation_message();
}

// The roofline's peak: the multiply-add kernel ran as written (measure_peak checks each
// invocation's sum against the closed form, else throws), both rates are rates a device can
// have, and the buffers it took are given back.
TEST(DevicePeak, IsMeasuredAndLeavesNothingHeld) {
  VulkanBackend gpu(testing::shared_context());
  const uint64_t before = gpu.context().allocated_bytes();
  const DevicePeak peak = gpu.measure_peak();
  EXPECT_GT(peak.flops, 1e8) << "0.1 GFLOP/s: slower than any device, lavapipe on one core included";
  EXPECT_LT(peak.flops, 1e16);
  EXPECT_GT(peak.bytes, 1e8);
  EXPECT_LT(peak.bytes, 1e14);
  EXPECT_TRUE(
      std::regex_search(peak.how, std::regex(R"(\(peak_flops\.comp, \d+ invocations; peak_bytes\.comp, 64 MiB\)$)")))
      << peak.how;
  EXPECT_LE(gpu.context().allocated_bytes(), before);
}

class Recording : public testing::GpuTest {};

TEST_F(Recording, OneForwardWaitsOnlyForItsReadbackWithBarriersOnlyBetweenDependentSteps) {
  MultiHeadAttentionConfig c{.embed_dim = 16, .num_heads = 4, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 1));
  Tensor x = random_tensor({2, 5, 16}, 2);
  ForwardOptions no_weights;
  no_weights.need_weights = false;
  no_weights.attention = AttentionPath::unfused;  // the steps below
  const auto& rec = gpu().recorder();
  uint64_t submissions = rec.submissions(), barriers = rec.barriers();
  const uint64_t sent = rec.early_submissions();
  mha.forward(gpu(), x, no_weights);
  EXPECT_EQ(rec.submissions() - submissions, 1u) << "the forward's readback alone waits";
  // on a GPU, its first 4 dispatches sent before the rest was recorded; on a CPU device, none
  const bool cpu = gpu().context().device_report().type == vk::PhysicalDeviceType::eCpu;
  EXPECT_EQ(rec.early_submissions() - sent, cpu ? 0u : 1u);
  // The dependency levels: {q,k,v}_proj (storing the heads: split_heads folded) |
  // attention_scores | softmax | attention_values | out_proj (reading the heads: merge_heads
  // folded) | the readback: 6 barriers for 7 dispatches.
  EXPECT_EQ(rec.barriers() - barriers, 6u);
  submissions = rec.submissions();
  mha.forward(gpu(), x);  // the weights are a second readback
  EXPECT_EQ(rec.submissions() - submissions, 2u);
}

// Three resident forwards chained, 21 dispatches, one readback: sent in segments of 4, 4 and 8
// dispatches (early_dispatches 4), or 1, 1, 2, 4 and 8 (1), the rest with the readback, or all
// at the readback (0) — the same barriers (a segment's hazards are tracked into the next) and
// the same bits.
TEST_F(Recording, APassIsSentToTheDeviceAsItIsRecordedWithTheSameBarriersAndBits) {
  MultiHeadAttentionConfig c{.embed_dim = 16, .num_heads = 4, .batch_first = true};
  const MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 7));
  const Tensor x = random_tensor({2, 9, 16}, 8);
  const ForwardOptions o{.need_weights = false, .attention = AttentionPath::unfused};
  struct Run {
    Tensor y;
    uint64_t sent, waited, barriers;
  };
  auto run = [&](uint32_t early) {
    VulkanBackend gpu(testing::shared_context(), {.early_dispatches = early});
    const auto& rec = gpu.recorder();
    Value y = gpu.upload("x", x);
    gpu.synchronize();
    const uint64_t sent = rec.early_submissions(), waited = rec.submissions(), barriers = rec.barriers();
    for (int i = 0; i < 3; ++i) y = mha.forward(gpu, y, y, y, o).output;
    Tensor out = gpu.download(y);
    return Run{out, rec.early_submissions() - sent, rec.submissions() - waited, rec.barriers() - barriers};
  };
  const Run whole = run(0), fours = run(4), ones = run(1);
  EXPECT_EQ(whole.sent, 0u);
  EXPECT_EQ(fours.sent, 3u);
  EXPECT_EQ(ones.sent, 5u);
  for (const Run* r : {&whole, &fours, &ones}) {
    EXPECT_EQ(r->waited, 1u) << "the readback alone waits";
    EXPECT_EQ(r->barriers, whole.barriers);
    EXPECT_EQ(r->y.data, whole.y.data);
  }
  ReferenceBackend cpu;
  Tensor want = x;
  for (int i = 0; i < 3; ++i) want = mha.forward(cpu, want, o).output;
  EXPECT_TRUE(testing::all_close(whole.y, want));
}

TEST_F(Recording, ShapeTracingAddsNoReadbackValueTracingReadsEveryStep) {
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 3));
  Tensor x = random_tensor({1, 3, 8}, 4);
  std::ostringstream log;
  ConsoleTracer console(log);
  gpu().add_tracer(console);
  const auto& rec = gpu().recorder();
  uint64_t before = rec.submissions();
  mha.forward(gpu(), x);
  EXPECT_EQ(rec.submissions() - before, 2u) << "shape-only tracing must not read back";
  EXPECT_TRUE(std::regex_search(log.str(), std::regex(R"(\n6 +attention_scores +\(1, 2, 3, 4\) \(1, 2, 3, 4\) -> \(1, 2, 3, 3\) )")))
      << log.str();
  gpu().remove_tracer(console);

  StepRecorder values(true);
  gpu().add_tracer(values);
  before = rec.submissions();
  mha.forward(gpu(), x);
  EXPECT_EQ(values.steps().size(), 12u);
  EXPECT_EQ(rec.submissions() - before, 12u + 2u) << "one readback per step, then the results";
}

TEST_F(Recording, EveryStepIsReportedWithItsNameOpAndShapes) {
  MultiHeadAttentionConfig c{.embed_dim = 12, .num_heads = 3, .add_bias_kv = true, .add_zero_attn = true, .kdim = 5,
                             .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 5));
  StepRecorder steps(false);
  cpu().add_tracer(steps);
  ForwardOptions o;
  o.is_causal = true;
  mha.forward(cpu(), random_tensor({2, 4, 12}, 6), random_tensor({2, 6, 5}, 7), random_tensor({2, 6, 12}, 8), o);
  std::vector<std::tuple<std::string, std::string, Shape>> want = {
      {"q_proj", "linear", {2, 4, 12}},          {"split_heads_q", "split_heads", {2, 3, 4, 4}},
      {"k_proj", "linear", {2, 6, 12}},          {"add_bias_k", "append_row", {2, 7, 12}},
      {"split_heads_k", "split_heads", {2, 3, 7, 4}}, {"v_proj", "linear", {2, 6, 12}},
      {"add_bias_v", "append_row", {2, 7, 12}},  {"split_heads_v", "split_heads", {2, 3, 7, 4}},
      {"add_zero_attn_k", "append_row", {2, 3, 8, 4}}, {"add_zero_attn_v", "append_row", {2, 3, 8, 4}},
      {"attention_scores", "attention_scores", {2, 3, 4, 8}}, {"attention_mask", "attention_mask", {2, 3, 4, 8}},
      {"softmax", "softmax", {2, 3, 4, 8}},      {"attention_values", "attention_values", {2, 3, 4, 4}},
      {"merge_heads", "merge_heads", {2, 4, 12}}, {"out_proj", "linear", {2, 4, 12}},
      {"average_heads", "average_heads", {2, 4, 8}}};
  ASSERT_EQ(steps.steps().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const StepEvent& e = steps.steps()[i].event;
    EXPECT_EQ(e.index, static_cast<int>(i));
    EXPECT_EQ(e.name, std::get<0>(want[i]));
    EXPECT_EQ(e.op, std::get<1>(want[i]));
    EXPECT_EQ(e.output.shape, std::get<2>(want[i])) << e.name;
  }
  EXPECT_EQ(steps.steps()[0].event.inputs[0].name, "query");
  EXPECT_EQ(steps.steps()[2].event.inputs[1].shape, (Shape{12, 5}));  // k_proj_weight (E, kdim)
}

}  // namespace
}  // namespace vkattn
