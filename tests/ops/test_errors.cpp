// Bad input: a typed exception whose one-line message names the step (or tensor), the shapes
// received and the rule broken. Checked on both backends where a backend runs.
#include <gtest/gtest.h>

#include "engine/backends/sizing_backend.h"
#include "engine/vulkan/context.h"
#include "engine/vulkan/gemm_plan.h"
#include "tests/support/expect_error.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/backends/make_backend.h"
#include "vkattn/errors.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/modules/causal_lm.h"
#include "vkattn/modules/grouped_query_attention.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/modules/transformer_encoder.h"

namespace vkattn {
namespace {

using testing::expect_error;
using testing::all_close;
using testing::random_tensor;

TEST(ConfigErrors, EmbedDimNotDivisibleByHeads) {
  expect_error<ConfigError>([] { MultiHeadAttention({.embed_dim = 10, .num_heads = 3}); },
                            {"embed_dim=10", "num_heads=3", "not divisible"});
  expect_error<ConfigError>([] { MultiHeadAttention({.embed_dim = 8, .num_heads = 0}); }, {"num_heads=0", ">= 1"});
}

TEST(ConfigErrors, WeightOfTheWrongShapeIsNamed) {
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .kdim = 5};
  auto w = MultiHeadAttentionWeights::random(c, 1);
  w.k_proj_weight = Tensor({8, 8});
  expect_error<ShapeError>([&] { MultiHeadAttention(c, w); }, {"k_proj_weight", "(8, 8)", "(8, 5)"});
  w = MultiHeadAttentionWeights::random(c, 1);
  w.bias_k = Tensor({8});
  expect_error<ShapeError>([&] { MultiHeadAttention(c, w); }, {"bias_k", "add_bias_kv"});
}

class ForwardErrors : public testing::GpuTest {
 protected:
  void expect_shape_error(const MultiHeadAttention& module, const Tensor& query, const Tensor& key, const Tensor& value,
                          const ForwardOptions& o, std::initializer_list<std::string> fragments) {
    for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
      expect_error<ShapeError>([&] { module.forward(*backend, query, key, value, o); }, fragments);
    }
  }
  MultiHeadAttentionConfig config{.embed_dim = 16, .num_heads = 4, .batch_first = true};
  MultiHeadAttention mha{config};
  Tensor q = random_tensor({2, 5, 16}, 1), kv = random_tensor({2, 7, 16}, 2);
};

TEST_F(ForwardErrors, QueryWithTheWrongEmbedDim) {
  Tensor bad = random_tensor({2, 5, 12}, 3);
  expect_shape_error(mha, bad, kv, kv, {}, {"query (2, 5, 12)", "12 features", "embed_dim=16"});
}

TEST_F(ForwardErrors, KeyAndValueOfDifferentLengths) {
  expect_shape_error(mha, q, kv, random_tensor({2, 6, 16}, 4), {}, {"key (2, 7, 16)", "value (2, 6, 16)", "positions S"});
}

TEST_F(ForwardErrors, BatchSizesDisagree) {
  Tensor k3 = random_tensor({3, 7, 16}, 5);
  expect_shape_error(mha, q, k3, k3, {}, {"query (2, 5, 16)", "key (3, 7, 16)", "batch size"});
}

TEST_F(ForwardErrors, RankMismatch) {
  expect_shape_error(mha, q, random_tensor({7, 16}, 6), random_tensor({7, 16}, 7), {}, {"all be batched"});
  expect_shape_error(mha, random_tensor({16}, 8), random_tensor({16}, 8), random_tensor({16}, 8), {}, {"query (16,)", "(B, L, E)"});
}

TEST_F(ForwardErrors, AttnMaskOfTheWrongShape) {
  ForwardOptions o;
  o.attn_mask = Tensor({4, 4}, DType::boolean);
  expect_shape_error(mha, q, kv, kv, o, {"attn_mask (4, 4)", "(L, S) = (5, 7)", "(B·H, L, S) = (8, 5, 7)"});
}

TEST_F(ForwardErrors, KeyPaddingMaskOfTheWrongShape) {
  ForwardOptions o;
  o.key_padding_mask = Tensor({2, 5});
  expect_shape_error(mha, q, kv, kv, o, {"key_padding_mask (2, 5)", "(B, S) = (2, 7)"});
}

TEST_F(ForwardErrors, InputOfTheWrongDtype) {
  Tensor bool_query({2, 5, 16}, DType::boolean);
  expect_shape_error(mha, bool_query, kv, kv, {}, {"query is bool", "float32"});
}

TEST_F(ForwardErrors, StepsNameThemselvesInErrors) {
  for (Backend* b : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    Value x = b->upload("merged", random_tensor({2, 5, 60}, 9));
    Value w = b->upload("out_proj.weight", random_tensor({64, 64}, 10));
    expect_error<ShapeError>([&] { b->linear("out_proj", x, w, nullptr); },
                             {"out_proj:", "merged (2, 5, 60)", "60 features", "out_proj.weight (64, 64)", "expects 64"});
    expect_error<ShapeError>([&] { b->split_heads("split_heads_q", x, 7); }, {"split_heads_q:", "E=60", "7 heads"});
    expect_error<ShapeError>([&] { b->split_heads("split_heads_k", x, 2, 7, 1); },
                             {"split_heads_k:", "merged (2, 5, 60)", "60 features", "7 equal chunks"});
    expect_error<ShapeError>([&] { b->split_heads("split_heads_v", x, 2, 3, 3); }, {"split_heads_v:", "chunk 3 of 3"});
    Value q4 = b->upload("q", random_tensor({1, 2, 3, 4}, 11));
    Value k4 = b->upload("k", random_tensor({1, 2, 3, 5}, 12));
    expect_error<ShapeError>([&] { b->attention_scores("attention_scores", q4, k4); },
                             {"attention_scores:", "q (1, 2, 3, 4)", "k (1, 2, 3, 5)", "must agree on d"});
    Value mask = b->upload("attn_mask", random_tensor({3, 4}, 13));
    Value scores = b->upload("scores", random_tensor({1, 2, 3, 3}, 14));
    expect_error<ShapeError>([&] { b->attention_mask("attention_mask", scores, &mask, nullptr, false); },
                             {"attention_mask:", "attn_mask (3, 4)", "(L, S) = (3, 3)"});
  }
}

TEST(UploadErrors, EmptyTensorIsRefused) {
  ReferenceBackend cpu;
  expect_error<ShapeError>([&] { cpu.upload("query", Tensor({2, 0, 4})); }, {"query", "(2, 0, 4)", "empty"});
}

// ---- device limits: checked for the whole pass before anything is allocated ---------------------------
class DeviceLimits : public testing::GpuTest {
 protected:
  // Runs `f`, which must throw a DeviceError with every fragment, and checks that no device
  // memory was allocated on the way.
  void expect_refused_before_allocating(const std::function<void()>& f, std::initializer_list<std::string> fragments) {
    const auto& context = *testing::shared_context();
    const uint64_t before = context.allocated_bytes();
    context.reset_peak();
    expect_error<DeviceError>(f, fragments);
    EXPECT_EQ(context.peak_allocated_bytes(), before) << "device memory was allocated before the refusal";
  }
};

TEST_F(DeviceLimits, ScoresBeyondMaxStorageBufferRangeAreRefusedByName) {
  // (1, 1, 32768, 32768) scores: 4 GiB, past any 32-bit buffer range, from a 1 MiB query
  MultiHeadAttention mha(MultiHeadAttentionConfig{.embed_dim = 8, .num_heads = 1, .batch_first = true});
  Tensor x = random_tensor({1, 32768, 8}, 1);
  ForwardOptions unfused{.attention = AttentionPath::unfused};
  expect_refused_before_allocating([&] { mha.forward(gpu(), x, unfused); },
                                   {"attention_scores needs 4096.0 MiB (4294967296 bytes) in one buffer",
                                    "over maxStorageBufferRange", gpu().device_name()});
}

TEST_F(DeviceLimits, APassOverTheMemoryLimitIsRefusedWithItsTotalAndLargestTensor) {
  VulkanBackend::Options options;
  options.memory_limit_bytes = 1 << 20;
  VulkanBackend capped(testing::shared_context(), options);
  MultiHeadAttention mha(MultiHeadAttentionConfig{.embed_dim = 64, .num_heads = 4, .batch_first = true});
  Tensor x = random_tensor({4, 128, 64}, 2);
  ForwardOptions unfused{.attention = AttentionPath::unfused};
  expect_refused_before_allocating([&] { mha.forward(capped, x, unfused); },
                                   {"multi_head_attention needs ", "MiB of device memory at once",
                                    "over the memory limit set for this backend (1.0 MiB)",
                                    "its largest tensor is attention_scores (1.0 MiB)"});
  // the encoder's pass is checked as a whole too, its tensors named in their layers
  TransformerEncoderConfig config;
  config.layer = {.d_model = 64, .nhead = 4, .dim_feedforward = 256};
  config.num_layers = 2;
  TransformerEncoder encoder(config, TransformerEncoderWeights::random(config, 5));
  expect_refused_before_allocating([&] { encoder.forward(capped, x); },
                                   {"transformer_encoder needs ", "over the memory limit set for this backend"});
  // the same pass under a limit it fits in runs, and matches the reference
  options.memory_limit_bytes = 64 << 20;
  VulkanBackend roomy(testing::shared_context(), options);
  Tensor ours = mha.forward(roomy, x, unfused).output;
  Tensor expected = mha.forward(cpu(), x, unfused).output;
  ASSERT_EQ(ours.shape, expected.shape);
  for (size_t i = 0; i < ours.data.size(); ++i) ASSERT_NEAR(ours.data[i], expected.data[i], 1e-4) << i;
}

TEST_F(DeviceLimits, ThePreflightSizesEveryTensorThePassMakes) {
  // A whole forward on the SizingBackend lists every tensor the real pass makes. Their sum bounds
  // the pass's device memory from above (the pass reuses the buffers of tensors it has finished
  // with); the staging buffers of the uploads and of the download are no larger.
  MultiHeadAttention mha(MultiHeadAttentionConfig{.embed_dim = 16, .num_heads = 2, .batch_first = true});
  Tensor x = random_tensor({2, 9, 16}, 3);
  ForwardOptions unfused{.attention = AttentionPath::unfused};
  SizingBackend sizing;
  mha.forward(sizing, x, unfused);
  uint64_t predicted = 0;
  for (const auto& t : sizing.tensors()) predicted += static_cast<uint64_t>(t.count) * sizeof(float);
  // the query, uploaded once for self-attention; 4 weights, 4 biases; q, k, v; 3 split heads;
  // scores, mask-free softmax, values; merged; output; averaged weights
  EXPECT_EQ(predicted, sizeof(float) * (288 + 4 * 256 + 4 * 16 + 3 * 288 + 3 * 288 + 2 * 324 + 288 + 288 + 288 + 162));
  const auto& context = *testing::shared_context();
  gpu().empty_cache();
  const uint64_t before = context.allocated_bytes();
  context.reset_peak();
  mha.forward(gpu(), x, unfused);
  const uint64_t used = context.peak_allocated_bytes() - before;
  EXPECT_GT(used, predicted / 4);
  EXPECT_LE(used, 2 * predicted);
}

TEST_F(DeviceLimits, ThePreflightCountsTheBuffersAPassReusesOnce) {
  // When every tensor may take a finished tensor's buffer (reuse_in_flight_bytes = 0), the
  // SizingBackend's pool is the VulkanBackend's: it predicts the device bytes the pass makes
  // exactly. A 4-layer encoder makes about one layer's tensors, not four.
  TransformerEncoderConfig config;
  config.layer = {.d_model = 32, .nhead = 4, .dim_feedforward = 64};
  config.num_layers = 4;
  TransformerEncoder encoder(config, TransformerEncoderWeights::random(config, 5));
  Tensor x = random_tensor({2, 33, 32}, 6);
  // The rule's GEMM plan asked for as it is: B packed for every x·Wᵀ and Q·Kᵀ where the device
  // reads texels (the rule alone packs from 16 row blocks, more than these 66 rows), the packed
  // copies buffers too, counted as the backend tells preflight.
  auto plan = std::make_shared<const vulkan::GemmPlan>(vulkan::plan_gemm(testing::shared_context()->device_report()));
  VulkanBackend gpu(testing::shared_context(), {.gemm = plan, .reuse_in_flight_bytes = 0});
  SizingBackend every_tensor, pooled(0, gpu.memory_limits()->gemm_scratch_floats, false, gpu.folds_into_store());
  encoder.forward(every_tensor, x);
  encoder.forward(pooled, x);
  EXPECT_LT(pooled.pass_bytes(), every_tensor.pass_bytes() / 2);
  const auto& context = gpu.context();
  gpu.empty_cache();
  const uint64_t before = context.device_bytes_created();
  Tensor ours = encoder.forward(gpu, x);
  EXPECT_EQ(context.device_bytes_created() - before, pooled.pass_bytes());
  EXPECT_TRUE(all_close(ours, encoder.forward(cpu(), x), {1e-4f, 1e-4f}, {"b", "l", "e"}));
  // a memory limit between the two: refused when counted tensor by tensor, run when pooled
  const uint64_t limit = (pooled.pass_bytes() + every_tensor.pass_bytes()) / 2;
  VulkanBackend capped(testing::shared_context(), {.memory_limit_bytes = limit, .reuse_in_flight_bytes = 0});
  EXPECT_TRUE(all_close(encoder.forward(capped, x), ours, {0.0f, 0.0f}, {"b", "l", "e"}));
  VulkanBackend capped_no_reuse(testing::shared_context(),
                                {.memory_limit_bytes = limit, .reuse_in_flight_bytes = uint64_t(1) << 40});
  expect_refused_before_allocating([&] { encoder.forward(capped_no_reuse, x); },
                                   {"transformer_encoder needs ", "over the memory limit set for this backend"});
}

// ---- Vulkan errors by their VkResult names ---------------------------------------------------------------
TEST(VulkanErrors, AreNamedByTheirVkResultWithWhatTheyMean) {
  EXPECT_EQ(vk_result_name("ErrorOutOfDeviceMemory"), "VK_ERROR_OUT_OF_DEVICE_MEMORY");
  EXPECT_EQ(vk_result_name("ErrorOutOfDateKHR"), "VK_ERROR_OUT_OF_DATE_KHR");
  EXPECT_EQ(vk_result_name("Success"), "VK_SUCCESS");
  std::string oom = device_error("q_proj", vk::OutOfDeviceMemoryError("vk::Device::allocateMemory")).what();
  EXPECT_EQ(oom.rfind("q_proj: vk::Device::allocateMemory failed with VK_ERROR_OUT_OF_DEVICE_MEMORY; the device ran "
                      "out of memory",
                      0),
            0u)
      << oom;
  std::string lost = device_error("softmax", vk::DeviceLostError("vk::Queue::submit")).what();
  EXPECT_NE(lost.find("softmax: vk::Queue::submit failed with VK_ERROR_DEVICE_LOST; the driver lost the device"),
            std::string::npos)
      << lost;
  // anything else keeps its message
  EXPECT_STREQ(device_error("out_proj", std::runtime_error("odd")).what(), "out_proj: odd");
}

TEST(VulkanErrors, AStepMeetingOneReportsItAsADeviceErrorNamingTheStep) {
  ReferenceBackend cpu;
  Value x = cpu.upload("x", random_tensor({2, 3}, 4));
  expect_error<DeviceError>(
      [&] {
        cpu.host_step("my_step", "custom", {&x}, {}, [](const std::vector<Tensor>&) -> Tensor {
          throw vk::OutOfDeviceMemoryError("vk::Device::allocateMemory");
        });
      },
      {"my_step: vk::Device::allocateMemory failed with VK_ERROR_OUT_OF_DEVICE_MEMORY"});
}

TEST(ErrorMessages, AreOneLineWhateverTheyQuote) {
  FileError e(std::string("w.safetensors: tensor 'a\nb\x01' is odd"));
  EXPECT_STREQ(e.what(), "w.safetensors: tensor 'a\\nb\\x01' is odd");
}

// ---- device selection ---------------------------------------------------------------------------------
std::vector<vulkan::DeviceReport> fake_devices() {
  auto device = [](uint32_t index, std::string name, vk::PhysicalDeviceType type, std::string rejection) {
    vulkan::DeviceReport r;
    r.index = index;
    r.name = std::move(name);
    r.type = type;
    r.suitable = rejection.empty();
    r.rejection = std::move(rejection);
    return r;
  };
  using T = vk::PhysicalDeviceType;
  return {device(0, "llvmpipe (LLVM 15)", T::eCpu, ""), device(1, "Intel UHD 630", T::eIntegratedGpu, ""),
          device(2, "Old GPU", T::eDiscreteGpu, "supports Vulkan 1.0.0; vkattn needs 1.1"),
          device(3, "NVIDIA H200", T::eDiscreteGpu, "")};
}

TEST(DeviceSelection, PrefersDiscreteThenIntegratedThenCpu) {
  auto devices = fake_devices();
  EXPECT_EQ(vulkan::select_device(devices, ""), 3u);
  devices.pop_back();
  EXPECT_EQ(vulkan::select_device(devices, ""), 1u);  // the unusable discrete GPU is skipped
  devices.erase(devices.begin() + 1);
  EXPECT_EQ(vulkan::select_device(devices, ""), 0u);  // lavapipe is a valid device
}

// SwiftShader, listed wherever chromium is installed, in whatever order the loader gives: lavapipe
// stays the default CPU device, and SwiftShader is taken when named.
TEST(DeviceSelection, LavapipeBeforeSwiftShaderUnlessItIsNamed) {
  vulkan::DeviceReport swiftshader, lavapipe;
  swiftshader.name = "SwiftShader Device (Subzero)";
  swiftshader.driver_id = vk::DriverId::eGoogleSwiftshader;
  lavapipe.name = "llvmpipe (LLVM 15)";
  lavapipe.driver_id = vk::DriverId::eMesaLlvmpipe;
  for (auto* r : {&swiftshader, &lavapipe}) r->type = vk::PhysicalDeviceType::eCpu, r->suitable = true;
  swiftshader.index = 0, lavapipe.index = 1;
  EXPECT_EQ(vulkan::select_device({swiftshader, lavapipe}, ""), 1u);
  EXPECT_EQ(vulkan::select_device({swiftshader, lavapipe}, "swiftshader"), 0u);
  swiftshader.index = 1, lavapipe.index = 0;
  EXPECT_EQ(vulkan::select_device({lavapipe, swiftshader}, ""), 0u);
  EXPECT_EQ(vulkan::select_device({lavapipe, swiftshader}, "SwiftShader"), 1u);
}

TEST(DeviceSelection, ByIndexOrCaseInsensitiveName) {
  auto devices = fake_devices();
  EXPECT_EQ(vulkan::select_device(devices, "0"), 0u);
  EXPECT_EQ(vulkan::select_device(devices, "LLVMpipe"), 0u);
  EXPECT_EQ(vulkan::select_device(devices, "h200"), 3u);
}

TEST(DeviceSelection, ExplainsWhyNothingFits) {
  auto devices = fake_devices();
  expect_error<DeviceError>([&] { vulkan::select_device(devices, "2"); }, {"'Old GPU'", "Vulkan 1.0.0", "needs 1.1"});
  expect_error<DeviceError>([&] { vulkan::select_device(devices, "old"); }, {"'Old GPU'", "needs 1.1"});
  expect_error<DeviceError>([&] { vulkan::select_device(devices, "9"); }, {"VKATTN_DEVICE=9", "4 devices"});
  expect_error<DeviceError>([&] { vulkan::select_device(devices, "radeon"); }, {"'radeon'", "matches no device", "llvmpipe"});
  expect_error<DeviceError>([&] { vulkan::select_device({}, ""); }, {"no Vulkan device", "mesa-vulkan-drivers"});
}

// The choice the CLI, the examples and the Python package share (vkattn/backends/make_backend.h).
TEST(MakeBackend, ChoosesByName) {
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  auto gpu = make_backend("gpu", "0");
  EXPECT_EQ(gpu->name(), "gpu");
  EXPECT_EQ(gpu->device_name(), vulkan::list_devices()[0].name);
}

TEST(MakeBackend, NamesWhatIsWrong) {
  expect_error<ConfigError>([] { make_backend("tpu"); }, {"'tpu'", "neither gpu nor cpu"});
  expect_error<ConfigError>([] { make_backend("cpu", "0"); }, {"('0')", "does not apply to the cpu backend"});
  expect_error<ConfigError>([] { make_backend("gpu", "nosuchgpu"); }, {"'nosuchgpu'", "matches no device", "devices: 0 '"});
}


// The modules share their checks (engine/modules/checks.h): one mistake, one message, whichever
// module is given it.
TEST(ModuleChecks, EveryModuleNamesAnInt64OrMisshapenPaddingMaskAlike) {
  ReferenceBackend cpu;
  const Tensor x = random_tensor({2, 3, 8}, 1);
  const Tensor int64_mask({2, 3}, DType::int64), short_mask({2, 2}, DType::boolean);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2, .batch_first = true});
  TransformerEncoderLayer layer({.d_model = 8, .nhead = 2, .dim_feedforward = 16});
  GroupedQueryAttention gqa({.hidden_size = 8, .num_heads = 2, .num_kv_heads = 1});
  CausalLMConfig lm_config{.vocab_size = 5, .max_positions = 4, .layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 16}};
  CausalLM lm(lm_config, CausalLMWeights::random(lm_config, 1));
  const Tensor ids({2, 3}, DType::int64);
  auto both = [&](const std::function<void(const Tensor&)>& run, const std::string& who, const std::string& name,
                  const std::string& shape_rule) {
    expect_error<ShapeError>([&] { run(int64_mask); }, {who + ": " + name + " is int64 but must be bool or float32"});
    expect_error<ShapeError>([&] { run(short_mask); }, {who + ": " + name + " (2, 2) must be " + shape_rule});
  };
  both([&](const Tensor& m) { mha.forward(cpu, x, x, x, {.key_padding_mask = m}); }, "MultiHeadAttention.forward",
       "key_padding_mask", "(B, S) = (2, 3)");
  both([&](const Tensor& m) { layer.forward(cpu, x, {.src_key_padding_mask = m}); }, "TransformerEncoderLayer.forward",
       "src_key_padding_mask", "(B, L) = (2, 3) for src (2, 3, 8)");
  both([&](const Tensor& m) { gqa.forward(cpu, x, {.key_padding_mask = m}); }, "GroupedQueryAttention.forward",
       "key_padding_mask", "(B, T) = (2, 3)");
  both([&](const Tensor& m) { lm.forward(cpu, ids, m); }, "CausalLM.forward", "key_padding_mask", "(B, T) = (2, 3)");
}

TEST(ModuleChecks, EveryModuleNamesAWeightItsConfigDoesNotWantAlike) {
  MultiHeadAttentionConfig mha{.embed_dim = 8, .num_heads = 2, .bias = false};
  auto mha_weights = MultiHeadAttentionWeights::random(mha, 1);
  mha_weights.q_proj_bias = Tensor({8});
  expect_error<ShapeError>([&] { MultiHeadAttention(mha, mha_weights); },
                           {"MultiHeadAttention: weight q_proj_bias is given but bias is off"});
  mha_weights = MultiHeadAttentionWeights::random(mha, 1);
  mha_weights.out_proj_weight = Tensor({8, 4});
  expect_error<ShapeError>([&] { MultiHeadAttention(mha, mha_weights); },
                           {"MultiHeadAttention: weight out_proj.weight is float32 (8, 4) but the config needs "
                            "float32 (E, E) = (8, 8)"});

  GroupedQueryAttentionConfig gqa{.hidden_size = 8, .num_heads = 2, .attention_bias = true};
  auto gqa_weights = GroupedQueryAttentionWeights::random(gqa, 1);
  gqa_weights.k_proj_bias.reset();
  expect_error<ShapeError>([&] { GroupedQueryAttention(gqa, gqa_weights); },
                           {"GroupedQueryAttention: weight k_proj.bias is missing but attention_bias is on"});

  CausalLMConfig lm{.vocab_size = 5, .max_positions = 4, .layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 16},
                    .lm_head_bias = false};
  auto lm_weights = CausalLMWeights::random(lm, 1);
  lm_weights.lm_head_bias = Tensor({5});
  expect_error<ShapeError>([&] { CausalLM(lm, lm_weights); },
                           {"CausalLM: weight lm_head.bias is given but lm_head_bias is off"});
}

}  // namespace
}  // namespace vkattn
