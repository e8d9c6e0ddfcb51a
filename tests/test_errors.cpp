// Bad input: a typed exception whose one-line message names the step (or tensor), the shapes
// received and the rule broken. Checked on both backends where a backend runs.
#include <gtest/gtest.h>

#include "engine/errors.h"
#include "engine/multi_head_attention.h"
#include "engine/vulkan/context.h"
#include "tests/support/expect_error.h"
#include "tests/support/gpu.h"

namespace vkattn {
namespace {

using testing::expect_error;
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
    Value q4 = b->upload("q", random_tensor({1, 2, 3, 4}, 11));
    Value k4 = b->upload("k", random_tensor({1, 2, 3, 5}, 12));
    expect_error<ShapeError>([&] { b->attention_scores("attention_scores", q4, k4); },
                             {"attention_scores:", "q (1, 2, 3, 4)", "k (1, 2, 3, 5)", "B, H and d"});
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

}  // namespace
}  // namespace vkattn
