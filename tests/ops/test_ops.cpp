// Every step: the GPU shader against the CPU reference, through the Backend API, over shapes
// that break kernels — 1, 3, 17, 113, non-multiples of the workgroup size (63, 65), L ≠ S,
// H = 1 and H = E (d = 1), fully masked rows — and over workgroup sizes and folded grids. The
// fused flash_attention is also held to the unfused steps it replaces.
#include <gtest/gtest.h>
#include <glm/gtc/packing.hpp>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>

#include "engine/vulkan/gemm_plan.h"
#include "engine/vulkan/step_plans.h"
#include "tests/support/expect_error.h"
#include "tests/support/flash_plans.h"
#include "tests/support/gemm_tilings.h"
#include "tests/support/gpu.h"
#include "tests/support/printers.h"
#include "tests/support/sixteen_bit.h"
#include "tests/support/tolerance.h"

namespace vkattn {
namespace {

using ::testing::Bool;
using ::testing::Combine;
using ::testing::Values;
using testing::all_close;
using testing::random_tensor;
using Step = std::function<Value(Backend&, const std::vector<Value>&)>;
constexpr float kInf = std::numeric_limits<float>::infinity();

// `step` on `b` from `inputs`, read back
Tensor run_step(Backend& b, const std::vector<Tensor>& inputs, const Step& step) {
  std::vector<Value> values;
  for (size_t i = 0; i < inputs.size(); ++i) values.push_back(b.upload("in" + std::to_string(i), inputs[i]));
  return b.download(step(b, values));
}

// Runs `step` on both backends with the same inputs; the GPU result must match the reference.
::testing::AssertionResult gpu_matches_reference(Backend& gpu, Backend& cpu, const std::vector<Tensor>& inputs,
                                                 const Step& step, std::vector<std::string> dims) {
  Tensor expected = run_step(cpu, inputs, step);
  Tensor actual = run_step(gpu, inputs, step);
  return all_close(actual, expected, {}, std::move(dims));
}

class Ops : public testing::GpuTest {
 protected:
  ::testing::AssertionResult check(const std::vector<Tensor>& inputs, const Step& step, std::vector<std::string> dims) {
    return gpu_matches_reference(gpu(), cpu(), inputs, step, std::move(dims));
  }
};

// ---- linear: (N, K) · (M, K)ᵀ + (M) ---------------------------------------------------------------
class Linear : public Ops, public ::testing::WithParamInterface<std::tuple<int, int, int, bool>> {};
TEST_P(Linear, MatchesReference) {
  auto [N, K, M, bias] = GetParam();
  std::vector<Tensor> in{random_tensor({N, K}, 1), random_tensor({M, K}, 2), random_tensor({M}, 3)};
  EXPECT_TRUE(check(in, [&](Backend& b, const std::vector<Value>& v) { return b.linear("q_proj", v[0], v[1], bias ? &v[2] : nullptr); },
                    {"n", "m"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, Linear, Combine(Values(1, 3, 17, 113), Values(1, 3, 17, 113), Values(1, 3, 65, 113), Bool()));

// ---- linear as a GEMV (shaders/gemv.glsl): a decode step's few rows, asked for on any device ----
// K past one column's 32 invocations and not (1, 17, 113: no vec4), M not a multiple of the 4
// columns a workgroup; with and without bias, W kept 16-bit; 9 rows: past the GEMV, the GEMM's,
// with W float32 only (the GEMM's 16-bit B is Plans/GemmTiling's and the float16/bfloat16 golden
// modules': here its pipelines were 19 of the sweep's 31, 77 of its 88 s under Mesa 25)
class Gemv : public ::testing::TestWithParam<std::tuple<int, int, int>> {};
TEST_P(Gemv, MatchesReference) {
  auto [N, K, M] = GetParam();
  const uint64_t before = testing::shared_context()->validation_message_count();
  VulkanBackend gpu(testing::shared_context(), {.gemv_rows = vulkan::kGemvRows});
  ReferenceBackend cpu;
  const Tensor x = random_tensor({N, K}, 1), bias = random_tensor({M}, 3);
  for (Narrow narrow : {Narrow::none, Narrow::float16, Narrow::bfloat16}) {
    if (narrow != Narrow::none && N > int(vulkan::kGemvRows)) break;
    const Tensor w = narrow == Narrow::none ? random_tensor({M, K}, 2) : testing::rounded_to(random_tensor({M, K}, 2), narrow);
    for (bool with_bias : {false, true}) {
      auto run = [&](Backend& b) {
        Value kept = b.upload_matrix("q_proj.weight", w), on = b.upload("bias", bias);
        return b.download(b.linear("q_proj", b.upload("x", x), kept, with_bias ? &on : nullptr));
      };
      EXPECT_TRUE(all_close(run(gpu), run(cpu))) << "W " << narrow_name(narrow) << (with_bias ? ", bias" : "");
    }
  }
  EXPECT_EQ(testing::shared_context()->validation_message_count(), before);
}
INSTANTIATE_TEST_SUITE_P(Sweep, Gemv, Combine(Values(1, 3, 8, 9), Values(1, 17, 64, 113, 512), Values(1, 3, 17, 130)));

// ---- linear with the step after it folded into the store ----------------------------------------
// An activation (Backend::linear_activation) or a residual_add (Backend::linear's residual) done by
// linear's store (the GEMM's tiling, and the GEMV for a few rows): the reference's two steps'
// numbers, and the device's own two steps' (fold_into_store off: the same function of the same
// sums, shaders/activations.glsl): bit for bit on lavapipe and SwiftShader, 3e-7 relative allowed
// for a compiler that contracts the store's arithmetic differently. A trace without values says the
// second step was folded; it ran on no dispatch of its own. The cooperative-matrix tiling's fold:
// test Float16Products, where a device has them.
//
// The check of one fold: `steps` on `folded` and `unfolded` against the reference, and the trace:
// linear1, then the step `op` with the words `note`.
::testing::AssertionResult folds_as_the_two_steps(VulkanBackend& folded, VulkanBackend& unfolded,
                                                  const std::function<Value(Backend&)>& steps, const std::string& op,
                                                  const std::string& note, const std::string& what) {
  ReferenceBackend cpu;
  StepRecorder recorded(false);
  auto run = [&](Backend& b, StepRecorder* recorder) {
    std::optional<AttachedTracer> attached;
    if (recorder) attached.emplace(b, *recorder);
    return b.download(steps(b));
  };
  const Tensor got = run(folded, &recorded), expected = run(cpu, nullptr), apart = run(unfolded, nullptr);
  if (auto close = all_close(got, expected, {}, {"n", "m"}); !close) return close << " (" << what << ": the reference)";
  if (auto close = all_close(got, apart, {.atol = 0.0f, .rtol = 3e-7f}, {"n", "m"}); !close) {
    return close << " (" << what << ": the two steps on the device)";
  }
  const auto& rows = recorded.steps();
  if (rows.size() != 2 || rows[1].event.op != op || rows[1].event.folded != note || !rows[0].event.folded.empty()) {
    return ::testing::AssertionFailure() << what << ": the trace does not say linear1 ran and " << op << " was folded";
  }
  return ::testing::AssertionSuccess();
}

// x (N, K) · W (M, K)ᵀ (+ bias), the activation applied by the store
::testing::AssertionResult folds_as_the_two_steps(VulkanBackend& folded, VulkanBackend& unfolded, int64_t N, int64_t K,
                                                  int64_t M, ActivationStep activation, bool with_bias) {
  Tensor x = random_tensor({N, K}, 1);
  for (float& v : x.data) v *= 4.0f;  // wide enough to meet gelu's and silu's tails and tanh's saturation
  const Tensor w = random_tensor({M, K}, 2), bias = random_tensor({M}, 3);
  auto steps = [&](Backend& b) {
    Value on = b.upload("bias", bias);
    return b.linear_activation("linear1", op_name(activation), activation, b.upload("x", x),
                               b.upload_matrix("linear1.weight", w), with_bias ? &on : nullptr);
  };
  return folds_as_the_two_steps(folded, unfolded, steps, op_name(activation),
                                "folded into linear1's store, which applied it to each product as it wrote it",
                                std::string(op_name(activation)) + (with_bias ? ", bias" : ""));
}

// r (N, M) + x (N, K) · W (M, K)ᵀ + bias, the residual_add done by the store
::testing::AssertionResult adds_as_the_two_steps(VulkanBackend& folded, VulkanBackend& unfolded, int64_t N, int64_t K,
                                                 int64_t M) {
  const Tensor x = random_tensor({N, K}, 1), w = random_tensor({M, K}, 2), bias = random_tensor({M}, 3);
  const Tensor r = random_tensor({N, M}, 4);
  auto steps = [&](Backend& b) {
    Value residual = b.upload("r", r), on = b.upload("bias", bias);
    const Backend::ResidualAfter add = b.residual_after("residual_add", residual);
    return b.linear("linear1", b.upload("x", x), b.upload_matrix("linear1.weight", w), &on, &add);
  };
  return folds_as_the_two_steps(
      folded, unfolded, steps, "residual_add",
      "folded into linear1's store, which added the residual to each product as it wrote it",
      "residual_add after " + std::to_string(N) + " × " + std::to_string(K) + " · (" + std::to_string(M) + ", K)ᵀ");
}

// With the GEMV for up to 8 rows (a GPU's rule, asked for on any device): 1 and 3 rows take it,
// 17 and 113 the GEMM. Bias as the models have it: silu without (Llama's gate_proj), the others
// with (each pipeline compiles for a second or more on lavapipe).
using LinearActivationCase = std::tuple<int, std::tuple<int, int>, ActivationStep>;
std::string linear_activation_name(const ::testing::TestParamInfo<LinearActivationCase>& info) {
  const auto& [N, KM, activation] = info.param;
  return std::to_string(N) + "_rows_K" + std::to_string(std::get<0>(KM)) + "_M" + std::to_string(std::get<1>(KM)) +
         "_" + op_name(activation);
}
class LinearActivation : public ::testing::TestWithParam<LinearActivationCase> {};
TEST_P(LinearActivation, IsTheTwoStepsNumbers) {
  const auto [N, KM, activation] = GetParam();
  const auto [K, M] = KM;
  const uint64_t before = testing::shared_context()->validation_message_count();
  VulkanBackend folded(testing::shared_context(), {.gemv_rows = vulkan::kGemvRows});
  VulkanBackend unfolded(testing::shared_context(), {.gemv_rows = vulkan::kGemvRows, .fold_into_store = false});
  EXPECT_TRUE(folds_as_the_two_steps(folded, unfolded, N, K, M, activation, activation != ActivationStep::silu));
  EXPECT_EQ(testing::shared_context()->validation_message_count(), before);
}
INSTANTIATE_TEST_SUITE_P(Sweep, LinearActivation,
                         Combine(Values(1, 3, 17, 113), Values(std::tuple{1, 1}, std::tuple{17, 5}),
                                 Values(ActivationStep::relu, ActivationStep::gelu, ActivationStep::gelu_tanh,
                                        ActivationStep::silu, ActivationStep::tanh)),
                         linear_activation_name);

// Every tiling stores through one function (gemm.glsl's store_c), the activation's too: vec4 loads
// and M past a block, under the device's plan and the shared tiling, one activation (each of its
// pipelines compiles for seconds on lavapipe; the sweep above meets every activation).
TEST(LinearActivationTiling, TheRulesPlanAndTheSharedTilingFoldIt) {
  const auto& device = testing::shared_context()->device_report();
  const uint64_t before = testing::shared_context()->validation_message_count();
  for (std::shared_ptr<const vulkan::GemmPlan> plan :
       {std::shared_ptr<const vulkan::GemmPlan>{},
        std::make_shared<const vulkan::GemmPlan>(vulkan::plan_gemm(device, vulkan::GemmVariant::shared))}) {
    VulkanBackend folded(testing::shared_context(), {.gemm = plan, .gemv_rows = 0u});
    VulkanBackend unfolded(testing::shared_context(), {.gemm = plan, .gemv_rows = 0u, .fold_into_store = false});
    for (int N : {3, 113}) {
      EXPECT_TRUE(folds_as_the_two_steps(folded, unfolded, N, 64, 130, ActivationStep::gelu, true))
          << (plan ? "the shared tiling" : "the rule's plan") << ", " << N << " rows";
    }
  }
  EXPECT_EQ(testing::shared_context()->validation_message_count(), before);
}

// The residual_add after linear (out_proj, linear2, down_proj), added by the store: rows for the
// GEMV (1, 3) and the GEMM (17, 113), M off the vec4s and past a block, under the device's plan and
// the shared tiling.
using LinearResidualCase = std::tuple<int, std::tuple<int, int>>;
class LinearResidual : public ::testing::TestWithParam<LinearResidualCase> {};
TEST_P(LinearResidual, IsTheTwoStepsNumbers) {
  const auto [N, KM] = GetParam();
  const auto [K, M] = KM;
  const auto& device = testing::shared_context()->device_report();
  const uint64_t before = testing::shared_context()->validation_message_count();
  for (std::shared_ptr<const vulkan::GemmPlan> plan :
       {std::shared_ptr<const vulkan::GemmPlan>{},
        std::make_shared<const vulkan::GemmPlan>(vulkan::plan_gemm(device, vulkan::GemmVariant::shared))}) {
    VulkanBackend folded(testing::shared_context(), {.gemm = plan, .gemv_rows = vulkan::kGemvRows});
    VulkanBackend unfolded(testing::shared_context(),
                           {.gemm = plan, .gemv_rows = vulkan::kGemvRows, .fold_into_store = false});
    EXPECT_TRUE(adds_as_the_two_steps(folded, unfolded, N, K, M)) << (plan ? "the shared tiling" : "the rule's plan");
    if (N <= int(vulkan::kGemvRows)) break;  // the GEMV: no plan
  }
  EXPECT_EQ(testing::shared_context()->validation_message_count(), before);
}
std::string linear_residual_name(const ::testing::TestParamInfo<LinearResidualCase>& info) {
  const auto& [N, KM] = info.param;
  return std::to_string(N) + "_rows_K" + std::to_string(std::get<0>(KM)) + "_M" + std::to_string(std::get<1>(KM));
}
INSTANTIATE_TEST_SUITE_P(Sweep, LinearResidual,
                         Combine(Values(1, 3, 17, 113),
                                 Values(std::tuple{1, 1}, std::tuple{17, 5}, std::tuple{64, 130})),
                         linear_residual_name);

// The residual's shape is residual_add's to check, folded or not: one ShapeError naming the step.
TEST(LinearResidualShape, AResidualOfAnotherShapeIsNamed) {
  for (bool fold : {true, false}) {
    VulkanBackend gpu(testing::shared_context(), {.fold_into_store = fold});
    testing::expect_error<ShapeError>(
        [&] {
          Value r = gpu.upload("r", random_tensor({3, 4}, 1));
          const Backend::ResidualAfter add = gpu.residual_after("residual_add2", r);
          gpu.linear("linear2", gpu.upload("x", random_tensor({3, 2}, 2)),
                     gpu.upload_matrix("linear2.weight", random_tensor({5, 2}, 3)), nullptr, &add);
        },
        {"residual_add2", "r (3, 4)", "(3, 5)", "must have the same shape"});
  }
}

TEST(GemvRows, MoreRowsThanTheGemvHoldsAreRefused) {
  testing::expect_error<DeviceError>([] { VulkanBackend(testing::shared_context(), {.gemv_rows = vulkan::kGemvRows + 1}); },
                                     {"linear as a GEMV for up to 9 rows: it holds at most 8"});
}

// ---- the GEMMs' float16 products on cooperative matrices (gemm.glsl's COOPMAT tiling) -------------
// Where the device has them (DeviceReport::float16_products: VK_KHR_cooperative_matrix, as
// lavapipe from Mesa 25.1 on, or NVIDIA's VK_NV_cooperative_matrix), the inputs are rounded to
// float16 and their products, exact in float32, summed there: the result is the reference's on
// the rounded inputs, to float32's 1e-4: linear's rows past the GEMV's, K and M off the matrices'
// sizes and the blocks, W float32 or kept float16, with bias and without, the heads, an activation
// or a residual folded into the store; and the batched Q·Kᵀ and P·V of grouped-query heads.
// Elsewhere (lavapipe of Debian 12's and 13's Mesa, SwiftShader) the backend refuses the option
// and says what the device lacks. CI runs it on lavapipe of trixie-backports' Mesa
// (scripts/cooperative-matrices), which has them.
// Where the device has no float16 cooperative matrices, the backend refuses float16_products and
// says what the device lacks: true there, where a test of the products has nothing else to check.
bool float16_products_refused() {
  const auto& device = testing::shared_context()->device_report();
  if (device.float16_products) return false;
  testing::expect_error<DeviceError>([] { VulkanBackend(testing::shared_context(), {.float16_products = true}); },
                                     {"float16_products: '" + device.name + "' has no float16 cooperative matrices"});
  return true;
}

TEST(Float16Products, MatchTheReferenceOnRoundedInputsOrAreRefused) {
  if (float16_products_refused()) return;
  const uint64_t before = testing::shared_context()->validation_message_count();
  VulkanBackend gpu(testing::shared_context(), {.float16_products = true});
  ReferenceBackend cpu;
  auto float16 = [](const Tensor& t) {  // the values torch's half() gives, as a plain float32 tensor
    Tensor rounded = testing::rounded_to(t, Narrow::float16);
    rounded.narrow = Narrow::none;
    return rounded;
  };
  // Whole vec4 rows or not (K % 4), W float32 or float16, bias or none: each a constant of the
  // pipeline, which lavapipe compiles for seconds. Four pipelines rather than eight meet all
  // four combinations of every two of the three: whole rows take W float32 without bias and
  // float16 with it, the others float32 with bias and float16 without.
  for (auto [N, K, M] : {std::tuple{9, 64, 17}, {113, 3, 130}, {300, 200, 65}, {17, 65, 256}}) {
    const Tensor x = random_tensor({N, K}, 1), bias = random_tensor({M}, 3);
    for (Narrow narrow : {Narrow::none, Narrow::float16}) {
      const Tensor w =
          narrow == Narrow::none ? random_tensor({M, K}, 2) : testing::rounded_to(random_tensor({M, K}, 2), narrow);
      const bool with_bias = (narrow == Narrow::float16) == (K % 4 == 0);
      Value on_gpu = gpu.upload("bias", bias), on_cpu = cpu.upload("bias", bias);
      const Tensor got = gpu.download(gpu.linear("q_proj", gpu.upload("x", x), gpu.upload_matrix("q_proj.weight", w),
                                                 with_bias ? &on_gpu : nullptr));
      const Tensor expected = cpu.download(cpu.linear("q_proj", cpu.upload("x", float16(x)),
                                                      cpu.upload("w", float16(w)), with_bias ? &on_cpu : nullptr));
      EXPECT_TRUE(all_close(got, expected, {}, {"n", "m"}))
          << N << " × " << K << " · (" << M << " × " << K << ")ᵀ, W " << narrow_name(narrow)
          << (with_bias ? ", bias" : "");
    }
  }
  // q_proj with split_heads folded into its store: (B, T, E) -> (B, H, T, d)
  const Tensor x = random_tensor({2, 50, 64}, 4), w = random_tensor({64, 64}, 5);
  const Tensor got = gpu.download(
      gpu.linear_split_heads("q_proj", "split_heads_q", gpu.upload("x", x), gpu.upload_matrix("w", w), nullptr, 4));
  const Tensor expected = cpu.download(cpu.linear_split_heads("q_proj", "split_heads_q", cpu.upload("x", float16(x)),
                                                              cpu.upload("w", float16(w)), nullptr, 4));
  EXPECT_TRUE(all_close(got, expected, {}, {"b", "h", "t", "c"})) << "heads folded into the store";
  // linear1 with gelu folded into its store (Backend::linear_activation)
  const Tensor w1 = random_tensor({130, 64}, 6);
  const Tensor activated = gpu.download(gpu.linear_activation("linear1", "gelu", ActivationStep::gelu,
                                                              gpu.upload("x", x), gpu.upload_matrix("w", w1), nullptr));
  const Tensor reference = cpu.download(cpu.linear_activation(
      "linear1", "gelu", ActivationStep::gelu, cpu.upload("x", float16(x)), cpu.upload("w", float16(w1)), nullptr));
  EXPECT_TRUE(all_close(activated, reference, {}, {"b", "t", "f"})) << "gelu folded into the store";
  // linear2 with the residual_add after it folded into its store (Backend::linear's residual)
  const Tensor r = random_tensor({2, 50, 130}, 7);
  Value r_gpu = gpu.upload("r", r), r_cpu = cpu.upload("r", r);
  const Backend::ResidualAfter add_gpu = gpu.residual_after("residual_add", r_gpu);
  const Backend::ResidualAfter add_cpu = cpu.residual_after("residual_add", r_cpu);
  const Tensor sum =
      gpu.download(gpu.linear("linear2", gpu.upload("x", x), gpu.upload_matrix("w", w1), nullptr, &add_gpu));
  const Tensor expected_sum =
      cpu.download(cpu.linear("linear2", cpu.upload("x", float16(x)), cpu.upload("w", float16(w1)), nullptr, &add_cpu));
  EXPECT_TRUE(all_close(sum, expected_sum, {}, {"b", "t", "f"})) << "the residual added by the store";
  // a step of two inputs on the GPU, and on the reference with them rounded
  auto agree = [&](auto step, const Tensor& a, const Tensor& b, const std::vector<std::string>& dims) {
    const Tensor on_gpu = gpu.download(step(gpu, gpu.upload("a", a), gpu.upload("b", b)));
    const Tensor on_cpu = cpu.download(step(cpu, cpu.upload("a", float16(a)), cpu.upload("b", float16(b))));
    return all_close(on_gpu, on_cpu, {}, dims);
  };
  const auto scores = [](Backend& be, const Value& q, const Value& k) {
    return be.attention_scores("attention_scores", q, k);
  };
  const auto values = [](Backend& be, const Value& p, const Value& v) {
    return be.attention_values("attention_values", p, v);
  };
  // attention_scores Q (B, H, L, d) · K (B, H_kv, S, d)ᵀ / √d and attention_values P (B, H, L, S) ·
  // V (B, H_kv, S, d): L ≠ S, d and S on and off the 4s, two query heads a key/value head
  for (auto [L, S, d] : {std::tuple{17, 113, 8}, {70, 3, 5}, {40, 64, 16}}) {
    const Tensor q = random_tensor({2, 4, L, d}, 8), k = random_tensor({2, 2, S, d}, 9);
    const Tensor p = random_tensor({2, 4, L, S}, 10), v = random_tensor({2, 2, S, d}, 11);
    EXPECT_TRUE(agree(scores, q, k, {"b", "h", "i", "j"})) << "scores, L " << L << ", S " << S << ", d " << d;
    EXPECT_TRUE(agree(values, p, v, {"b", "h", "i", "c"})) << "values, L " << L << ", S " << S << ", d " << d;
  }
  EXPECT_EQ(testing::shared_context()->validation_message_count(), before);
}

TEST_F(Ops, LinearKeepsLeadingDims) {
  std::vector<Tensor> in{random_tensor({2, 3, 5}, 1), random_tensor({7, 5}, 2), random_tensor({7}, 3)};
  Value y = gpu().linear("k_proj", gpu().upload("x", in[0]), gpu().upload("w", in[1]), nullptr);
  EXPECT_EQ(y.shape, (Shape{2, 3, 7}));
  EXPECT_TRUE(check(in, [](Backend& b, const std::vector<Value>& v) { return b.linear("k_proj", v[0], v[1], &v[2]); },
                    {"b", "t", "m"}));
}

// ---- split_heads / merge_heads: (B, T, E) <-> (B, H, T, d) -----------------------------------------
class Heads : public Ops, public ::testing::WithParamInterface<std::tuple<int, int, int, int>> {};
TEST_P(Heads, SplitAndMergeMatchReference) {
  auto [B, T, H, d] = GetParam();
  Tensor x = random_tensor({B, T, H * d}, 4);
  EXPECT_TRUE(check({x}, [&](Backend& b, const std::vector<Value>& v) { return b.split_heads("split_heads_q", v[0], H); },
                    {"b", "h", "t", "c"}));
  Tensor heads = random_tensor({B, H, T, d}, 5);
  EXPECT_TRUE(check({heads}, [](Backend& b, const std::vector<Value>& v) { return b.merge_heads("merge_heads", v[0]); },
                    {"b", "t", "e"}));
  // merge_heads undoes split_heads exactly
  Value roundtrip = gpu().merge_heads("merge_heads", gpu().split_heads("split_heads_q", gpu().upload("x", x), H));
  EXPECT_EQ(gpu().download(roundtrip).data, x.data);
  // each chunk of a packed (B, T, 3E) projection
  Tensor packed = random_tensor({B, T, 3 * H * d}, 6);
  for (int chunk = 0; chunk < 3; ++chunk) {
    EXPECT_TRUE(check({packed}, [&](Backend& b, const std::vector<Value>& v) { return b.split_heads("split_heads_k", v[0], H, 3, chunk); },
                      {"b", "h", "t", "c"}))
        << "chunk " << chunk;
  }
}
INSTANTIATE_TEST_SUITE_P(Sweep, Heads, Combine(Values(1, 3), Values(1, 17, 113), Values(1, 3, 8), Values(1, 3, 4, 17)));

// ---- append_row: (N, T, C) + (C) -> (N, T+1, C) --------------------------------------------------
class AppendRow : public Ops, public ::testing::WithParamInterface<std::tuple<int, int, int, bool>> {};
TEST_P(AppendRow, MatchesReference) {
  auto [N, T, C, row] = GetParam();
  std::vector<Tensor> in{random_tensor({N, T, C}, 6), random_tensor({C}, 7)};
  EXPECT_TRUE(check(in, [&](Backend& b, const std::vector<Value>& v) { return b.append_row(row ? "add_bias_k" : "add_zero_attn_k", v[0], row ? &v[1] : nullptr); },
                    {"n", "t", "c"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, AppendRow, Combine(Values(1, 3, 17), Values(1, 17, 113), Values(1, 3, 65), Bool()));

// ---- attention_scores and attention_values: (B, H, L, S, d) ----------------------------------------
using Attn = std::tuple<int, int, int, int, int>;
const auto kAttentionShapes = Values(Attn{1, 1, 1, 1, 1}, Attn{1, 1, 3, 3, 3}, Attn{2, 3, 17, 17, 5}, Attn{1, 2, 17, 113, 8},
                                     Attn{3, 1, 113, 17, 3}, Attn{1, 4, 113, 113, 16}, Attn{2, 8, 5, 7, 1},
                                     Attn{1, 1, 65, 63, 65}, Attn{2, 2, 1, 113, 17}, Attn{1, 3, 113, 1, 17});
// "B2_H3_L17_S17_d5": a case's name says its shape (ctest's lanes runs filter on d)
std::string attention_name(const Attn& shape) {
  auto [B, H, L, S, d] = shape;
  return "B" + std::to_string(B) + "_H" + std::to_string(H) + "_L" + std::to_string(L) + "_S" + std::to_string(S) + "_d" +
         std::to_string(d);
}
std::string attention_case_name(const ::testing::TestParamInfo<Attn>& info) { return attention_name(info.param); }

class Scores : public Ops, public ::testing::WithParamInterface<Attn> {};
TEST_P(Scores, MatchesReference) {
  auto [B, H, L, S, d] = GetParam();
  std::vector<Tensor> in{random_tensor({B, H, L, d}, 8), random_tensor({B, H, S, d}, 9)};
  EXPECT_TRUE(check(in, [](Backend& b, const std::vector<Value>& v) { return b.attention_scores("attention_scores", v[0], v[1]); },
                    {"b", "h", "i", "j"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, Scores, kAttentionShapes, attention_case_name);

class AttentionValues : public Ops, public ::testing::WithParamInterface<Attn> {};
TEST_P(AttentionValues, MatchesReference) {
  auto [B, H, L, S, d] = GetParam();
  std::vector<Tensor> in{random_tensor({B, H, L, S}, 10), random_tensor({B, H, S, d}, 11)};
  EXPECT_TRUE(check(in, [](Backend& b, const std::vector<Value>& v) { return b.attention_values("attention_values", v[0], v[1]); },
                    {"b", "h", "i", "c"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, AttentionValues, kAttentionShapes, attention_case_name);

class AverageHeads : public Ops, public ::testing::WithParamInterface<Attn> {};
TEST_P(AverageHeads, MatchesReference) {
  auto [B, H, L, S, d] = GetParam();
  (void)d;
  EXPECT_TRUE(check({random_tensor({B, H, L, S}, 12)},
                    [](Backend& b, const std::vector<Value>& v) { return b.average_heads("average_heads", v[0]); }, {"b", "i", "j"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, AverageHeads, kAttentionShapes, attention_case_name);

// ---- attention_mask: every kind and combination ----------------------------------------------------
// An additive float mask with some -inf (blocked) entries, as a canonicalised bool mask has.
Tensor additive_mask(Shape shape, uint32_t seed) {
  Tensor m = random_tensor(std::move(shape), seed);
  for (size_t i = 0; i < m.data.size(); i += 3) m.data[i] = -kInf;
  return m;
}

class Mask : public Ops, public ::testing::WithParamInterface<std::tuple<Attn, int, bool, bool>> {};
TEST_P(Mask, MatchesReference) {
  auto [shape, attn_rank, padding, causal] = GetParam();
  auto [B, H, L, S, d] = shape;
  (void)d;
  Shape attn_shape = attn_rank == 3 ? Shape{B * H, L, S} : Shape{L, S};
  std::vector<Tensor> in{random_tensor({B, H, L, S}, 13), additive_mask(attn_shape, 14), additive_mask({B, S}, 15)};
  bool use_attn = attn_rank != 0, use_causal = causal, use_padding = padding;
  EXPECT_TRUE(check(in, [&](Backend& b, const std::vector<Value>& v) {
    return b.attention_mask("attention_mask", v[0], use_attn ? &v[1] : nullptr, use_padding ? &v[2] : nullptr, use_causal);
  }, {"b", "h", "i", "j"}));
}
// S = 1100: a row spans three workgroups of 8 · 64 scores, the last one partly
INSTANTIATE_TEST_SUITE_P(Sweep, Mask, Combine(Values(Attn{1, 1, 1, 1, 0}, Attn{2, 3, 17, 5, 0}, Attn{1, 2, 5, 113, 0}, Attn{3, 1, 65, 65, 0},
                                                     Attn{2, 2, 3, 1100, 0}),
                                              Values(0, 2, 3), Bool(), Bool()));

// ---- flash_attention: the fused step, against its reference and against the unfused steps ---------
// masks: attn_mask rank (0, 2, 3), key padding, causal
using Masks = std::tuple<int, bool, bool>;
const auto kMaskKinds = Values(Masks{0, false, false}, Masks{2, true, false}, Masks{3, false, true}, Masks{2, true, true},
                               Masks{0, true, true});
// "B1_H2_L17_S113_d8_attn2_padding_causal"
std::string flash_case_name(const ::testing::TestParamInfo<std::tuple<Attn, Masks>>& info) {
  auto [shape, masks] = info.param;
  auto [attn_rank, padding, causal] = masks;
  return attention_name(shape) + (attn_rank ? "_attn" + std::to_string(attn_rank) : "") + (padding ? "_padding" : "") +
         (causal ? "_causal" : "");
}

// q, k, v (B, H, ·, d), then attn_mask and key_padding_mask with some -inf; key padding blocks
// every key of the last batch item, so its rows are fully masked.
std::vector<Tensor> flash_inputs(const Attn& shape, int attn_rank) {
  auto [B, H, L, S, d] = shape;
  Tensor padding = additive_mask({B, S}, 24);
  for (int64_t j = 0; j < S; ++j) padding.at({B - 1, j}) = -kInf;
  return {random_tensor({B, H, L, d}, 21), random_tensor({B, H, S, d}, 22), random_tensor({B, H, S, d}, 23),
          additive_mask(attn_rank == 3 ? Shape{B * H, L, S} : Shape{L, S}, 25), padding};
}

Step flash_step(int attn_rank, bool padding, bool causal) {
  return [=](Backend& b, const std::vector<Value>& v) {
    return b.flash_attention("flash_attention", v[0], v[1], v[2], attn_rank ? &v[3] : nullptr, padding ? &v[4] : nullptr, causal);
  };
}

Step unfused_step(int attn_rank, bool padding, bool causal) {
  return [=](Backend& b, const std::vector<Value>& v) {
    Value scores = b.attention_scores("attention_scores", v[0], v[1]);
    scores = b.attention_mask("attention_mask", scores, attn_rank ? &v[3] : nullptr, padding ? &v[4] : nullptr, causal);
    return b.attention_values("attention_values", b.softmax("softmax", scores), v[2]);
  };
}

// flash_attention on the float16 products (flash_attention_coopmat, where the device has them):
// q, K and V rounded to float16 and so are the weights exp(s - m), the sums float32. Against the
// reference on the rounded inputs, an output of weights summing to 1 is off by at most a weight's
// rounding (2⁻¹¹) times the largest |v| (1 here): 4.9e-4. Over L ≠ S, one row and one key, d off
// the matrices' sizes (1, 17) and wide (128: fewer subgroups a block on NVIDIA), two query heads
// a key/value head, causal rows with and without a window, and attn_mask and key_padding_mask
// with a fully masked batch item (flash_inputs); a head dim repeats where a case needs no other
// (each is a pipeline lavapipe compiles for seconds). Elsewhere the option is refused (the test above).
TEST(Float16Products, FlashAttentionMatchesTheReferenceOnRoundedInputs) {
  if (float16_products_refused()) return;
  const uint64_t before = testing::shared_context()->validation_message_count();
  VulkanBackend gpu(testing::shared_context(), {.float16_products = true});
  ReferenceBackend cpu;
  struct Case {
    Attn shape;
    int64_t group;  // query heads a key/value head
    bool causal;
    int64_t window;
    bool masks;  // attn_mask (L, S) and key_padding_mask
  };
  for (const Case& c : {Case{{1, 1, 1, 1, 1}, 1, false, 0, false}, Case{{2, 4, 17, 113, 17}, 2, false, 0, false},
                        Case{{1, 2, 113, 40, 64}, 2, false, 0, false}, Case{{1, 2, 70, 70, 64}, 1, true, 0, false},
                        Case{{1, 2, 100, 100, 64}, 1, true, 7, false}, Case{{2, 2, 33, 20, 16}, 1, false, 0, true},
                        Case{{1, 2, 19, 50, 128}, 1, false, 0, false}}) {
    auto [B, H, L, S, d] = c.shape;
    std::vector<Tensor> in = flash_inputs(c.shape, 2);
    for (Tensor* t : {&in[0], &in[1], &in[2]}) t->data = testing::rounded_to(*t, Narrow::float16).data;
    for (int i : {1, 2}) {  // H / group key/value heads
      Tensor kv({B, H / c.group, S, d});
      std::copy_n(in[i].data.begin(), kv.data.size(), kv.data.begin());
      in[i] = kv;
    }
    auto run = [&](Backend& be) {
      std::vector<Value> v;
      for (const Tensor& t : in) v.push_back(be.upload("in", t));
      return be.download(be.flash_attention("flash_attention", v[0], v[1], v[2], c.masks ? &v[3] : nullptr,
                                            c.masks ? &v[4] : nullptr, c.causal, c.window));
    };
    EXPECT_TRUE(all_close(run(gpu), run(cpu), {std::ldexp(1.0f, -11) + 1e-5f, 0}, {"b", "h", "i", "c"}))
        << "B " << B << ", H " << H << " on " << H / c.group << ", L " << L << ", S " << S << ", d " << d
        << (c.causal ? ", causal" : "") << (c.window ? ", window " + std::to_string(c.window) : "")
        << (c.masks ? ", masks" : "");
  }
  EXPECT_EQ(testing::shared_context()->validation_message_count(), before);
}

class FlashAttention : public Ops, public ::testing::WithParamInterface<std::tuple<Attn, Masks>> {};
TEST_P(FlashAttention, MatchesReferenceAndTheUnfusedSteps) {
  auto [shape, masks] = GetParam();
  auto [attn_rank, padding, causal] = masks;
  auto in = flash_inputs(shape, attn_rank);
  EXPECT_TRUE(check(in, flash_step(attn_rank, padding, causal), {"b", "h", "i", "c"}));
  // the fused step computes what the four unfused steps compute, on either backend
  auto run = [&](Backend& b, const Step& step) { return run_step(b, in, step); };
  Tensor unfused = run(cpu(), unfused_step(attn_rank, padding, causal));
  EXPECT_TRUE(all_close(run(cpu(), flash_step(attn_rank, padding, causal)), unfused, {}, {"b", "h", "i", "c"}));
  EXPECT_TRUE(all_close(run(gpu(), flash_step(attn_rank, padding, causal)), unfused, {}, {"b", "h", "i", "c"}));
  // K and V from storage buffers, 4 rows a subgroup (fewer than the lanes, as on a GPU), and,
  // where the device has them, from texel buffers, the device's rows (on lavapipe two a lane),
  // whichever the device would choose
  const auto& device = testing::shared_context()->device_report();
  for (bool texel_inputs : {false, true}) {
    if (texel_inputs && !device.texel_rgba32f) continue;
    vulkan::GemmPlan plan = vulkan::plan_gemm(device);
    plan.texel_inputs = texel_inputs;
    plan.packed_b = plan.packed_b && texel_inputs;
    VulkanBackend inputs(testing::shared_context(), {.gemm = std::make_shared<const vulkan::GemmPlan>(plan), .flash_rows = texel_inputs ? 0u : 4u});
    EXPECT_TRUE(all_close(run(inputs, flash_step(attn_rank, padding, causal)), unfused, {}, {"b", "h", "i", "c"}))
        << (texel_inputs ? "texel inputs" : "storage inputs, 4 rows");
  }
  // and the subgroup-free kernel, a query row per invocation (what runs without guaranteed lanes)
  VulkanBackend rows(testing::shared_context(), {.subgroups = false});
  EXPECT_EQ(rows.flash_plan().lanes, 0u);
  EXPECT_TRUE(all_close(run(rows, flash_step(attn_rank, padding, causal)), unfused, {}, {"b", "h", "i", "c"}))
      << "a query row per invocation";
  // (FlashAttention-2's order, the tiled plans: TiledFlashAttention below)
  if (padding) {
    auto [B, H, L, S, d] = shape;
    Tensor out = run(gpu(), flash_step(attn_rank, padding, causal));
    for (int64_t k = (B - 1) * H * L * d; k < B * H * L * d; ++k) ASSERT_EQ(out.data[static_cast<size_t>(k)], 0.0f) << "fully masked row";
  }
}
INSTANTIATE_TEST_SUITE_P(Sweep, FlashAttention, Combine(kAttentionShapes, kMaskKinds), flash_case_name);
// d = 64 over 600 keys, L ≠ S: the first kernel (one invocation per row, a d-float accumulator
// each) returned garbage on lavapipe from about 500 keys on; this shape stays in the sweep.
const auto kLongRows = Values(Attn{2, 2, 67, 600, 64}, Attn{1, 1, 600, 9, 64});
INSTANTIATE_TEST_SUITE_P(LongRows, FlashAttention, Combine(kLongRows, kMaskKinds), flash_case_name);

// ---- flash_attention in FlashAttention-2's order (a GPU's rule): the tiled plans ----------------
// The same shapes and masks, against the unfused steps, in tiles within lavapipe's 32 KiB of
// shared memory: blocks of 16 rows over tiles of 8 keys (a row and a key an invocation), and of 64
// over 16 (the rule's: 4 rows and 2 keys an invocation). Each plan's softmax either goes through
// shared memory (no subgroup code) or across 8 lanes of a subgroup, where the device guarantees 8
// or more (lavapipe at 8 and 16); the two are two tests so that ctest's width runs
// (tests/CMakeLists.txt) take only the second, the one that counts lanes.
class TiledFlashAttention : public Ops, public ::testing::WithParamInterface<std::tuple<Attn, Masks>> {
 protected:
  void expect_plans_match(bool across_lanes) {
    auto [shape, masks] = GetParam();
    auto [attn_rank, padding, causal] = masks;
    const uint32_t d = uint32_t(std::get<4>(shape));
    const std::vector<Tensor> in = flash_inputs(shape, attn_rank);
    const Tensor unfused = run_step(cpu(), in, unfused_step(attn_rank, padding, causal));
    const auto& device = testing::shared_context()->device_report();
    int ran = 0;
    for (const vulkan::FlashPlan& tiled_plan : testing::tiled_flash_variants(device)) {
      if ((tiled_plan.lanes != 0) != across_lanes || tiled_plan.shared_bytes(d) > device.max_shared_memory_bytes)
        continue;
      VulkanBackend tiled(testing::shared_context(), {.flash = std::make_shared<const vulkan::FlashPlan>(tiled_plan)});
      EXPECT_TRUE(
          all_close(run_step(tiled, in, flash_step(attn_rank, padding, causal)), unfused, {}, {"b", "h", "i", "c"}))
          << tiled_plan.describe();
      ++ran;
    }
    if (!across_lanes) {
      EXPECT_GT(ran, 0) << "no tiled plan fits in shared memory at d " << d;
      return;
    }
    if (ran > 0) return;
    // fewer than 8 lanes guaranteed (4 lanes, SwiftShader, subgroups off): the plan is refused
    testing::expect_error<DeviceError>(
        [] {
          VulkanBackend(testing::shared_context(),
                        {.flash = std::make_shared<const vulkan::FlashPlan>(vulkan::tiled_flash(16, 8, 8))});
        },
        {"its softmax across lanes needs 8 or more guaranteed lanes"});
  }
};
TEST_P(TiledFlashAttention, SoftmaxInSharedMemoryMatchesTheUnfusedSteps) { expect_plans_match(false); }
TEST_P(TiledFlashAttention, SoftmaxAcrossLanesMatchesTheUnfusedSteps) { expect_plans_match(true); }
INSTANTIATE_TEST_SUITE_P(Sweep, TiledFlashAttention, Combine(kAttentionShapes, kMaskKinds), flash_case_name);
INSTANTIATE_TEST_SUITE_P(LongRows, TiledFlashAttention, Combine(kLongRows, kMaskKinds), flash_case_name);

TEST_F(Ops, FlashAttentionRefusesMismatchedShapes) {
  Value q = gpu().upload("q", random_tensor({1, 2, 3, 4}, 1)), k = gpu().upload("k", random_tensor({1, 2, 5, 4}, 2));
  Value v = gpu().upload("v", random_tensor({1, 2, 6, 4}, 3)), mask = gpu().upload("m", random_tensor({3, 6}, 4));
  EXPECT_THROW(gpu().flash_attention("flash_attention", q, k, v, nullptr, nullptr, false), ShapeError);
  EXPECT_THROW(gpu().flash_attention("flash_attention", q, k, k, &mask, nullptr, false), ShapeError);
}

// ---- softmax: (R, S), with fully masked and partly masked rows ------------------------------------
// Both reductions (row_reduce.glsl): a row per subgroup where the device guarantees the lanes, and
// the shared-memory reduction (forced by subgroups = false).
class Softmax : public Ops, public ::testing::WithParamInterface<std::tuple<int, int, bool>> {};
TEST_P(Softmax, MatchesReferenceAndZeroesFullyMaskedRows) {
  auto [R, S, subgroups] = GetParam();
  VulkanBackend gpu(testing::shared_context(), {.subgroups = subgroups});
  Tensor x = random_tensor({R, S}, 16);
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < S; ++j) x.data[r * S + j] *= 20.0f;                      // saturating scores
    if (r % 3 == 1) for (int j = 0; j < S; ++j) x.data[r * S + j] = -kInf;      // fully masked row
    if (r % 3 == 2) for (int j = 0; j < S; j += 2) x.data[r * S + j] = -kInf;   // partly masked row
  }
  EXPECT_TRUE(gpu_matches_reference(gpu, cpu(), {x}, [](Backend& b, const std::vector<Value>& v) { return b.softmax("softmax", v[0]); },
                                    {"r", "j"}));
  Tensor y = gpu.download(gpu.softmax("softmax", gpu.upload("x", x)));
  for (int r = 0; r < R; ++r) {
    float sum = 0;
    for (int j = 0; j < S; ++j) sum += y.data[r * S + j];
    bool fully_masked = r % 3 == 1 || (r % 3 == 2 && S == 1);  // masking every other key of one key masks it all
    EXPECT_NEAR(sum, fully_masked ? 0.0f : 1.0f, 1e-5f) << "row " << r;
  }
}
INSTANTIATE_TEST_SUITE_P(Sweep, Softmax, Combine(Values(1, 3, 17, 113), Values(1, 3, 17, 63, 64, 65, 113, 1000), Bool()));

// ---- the encoder block's steps ------------------------------------------------------------------------
// layer_norm over (N, E): rows far from zero mean (a one-pass variance would cancel), constant rows
// (variance 0: eps alone), E = 1 (every output is the bias).
class LayerNorm : public Ops, public ::testing::WithParamInterface<std::tuple<int, int, bool>> {};
TEST_P(LayerNorm, MatchesReference) {
  auto [N, E, subgroups] = GetParam();
  VulkanBackend gpu(testing::shared_context(), {.subgroups = subgroups});
  Tensor x = random_tensor({N, E}, 19);
  for (int n = 0; n < N; ++n) {
    for (int e = 0; e < E; ++e) {
      float& v = x.data[n * E + e];
      if (n % 3 == 1) v = v * 3.0f + 100.0f;  // large mean
      if (n % 3 == 2) v = 0.5f;               // constant row
    }
  }
  std::vector<Tensor> in{x, random_tensor({E}, 20), random_tensor({E}, 21)};
  EXPECT_TRUE(gpu_matches_reference(gpu, cpu(), in,
                                    [](Backend& b, const std::vector<Value>& v) { return b.layer_norm("norm1", v[0], v[1], v[2], 1e-5f); },
                                    {"n", "e"}));
  // RMSNorm on the same rows (its plan is layer_norm's)
  EXPECT_TRUE(gpu_matches_reference(gpu, cpu(), {x, in[1]},
                                    [](Backend& b, const std::vector<Value>& v) { return b.rms_norm("input_layernorm", v[0], v[1], 1e-6f); },
                                    {"n", "e"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, LayerNorm, Combine(Values(1, 3, 17, 113), Values(1, 3, 17, 63, 64, 65, 113, 1000), Bool()));

TEST_F(Ops, LayerNormNormalisesEachRow) {
  // with weight 1 and bias 0 every row has mean 0 and variance 1 - eps/(var + eps) ≈ 1
  Tensor x = random_tensor({5, 48}, 22);
  Value ones = gpu().upload("w", Tensor({48}, std::vector<float>(48, 1.0f)));
  Value zeros = gpu().upload("b", Tensor({48}));
  Tensor y = gpu().download(gpu().layer_norm("norm", gpu().upload("x", x), ones, zeros, 1e-5f));
  for (int n = 0; n < 5; ++n) {
    double mean = 0, var = 0;
    for (int e = 0; e < 48; ++e) mean += y.data[n * 48 + e] / 48.0;
    for (int e = 0; e < 48; ++e) var += (y.data[n * 48 + e] - mean) * (y.data[n * 48 + e] - mean) / 48.0;
    EXPECT_NEAR(mean, 0.0, 1e-6) << "row " << n;
    EXPECT_NEAR(var, 1.0, 1e-3) << "row " << n;
  }
}

// gelu / gelu_tanh / relu / silu / tanh / residual_add / multiply over lengths that are not multiples of the workgroup size, with
// values out to ±8 (gelu's tails) and exact zeros.
class Elementwise : public Ops, public ::testing::WithParamInterface<int> {};
TEST_P(Elementwise, MatchesReference) {
  int n = GetParam();
  Tensor x = random_tensor({n}, 23);
  for (int i = 0; i < n; ++i) x.data[i] = i % 7 == 0 ? 0.0f : x.data[i] * 8.0f;
  EXPECT_TRUE(check({x}, [](Backend& b, const std::vector<Value>& v) { return b.gelu("gelu", v[0]); }, {"i"}));
  EXPECT_TRUE(check({x}, [](Backend& b, const std::vector<Value>& v) { return b.gelu_tanh("gelu_tanh", v[0]); }, {"i"}));
  EXPECT_TRUE(check({x}, [](Backend& b, const std::vector<Value>& v) { return b.relu("relu", v[0]); }, {"i"}));
  EXPECT_TRUE(check({x}, [](Backend& b, const std::vector<Value>& v) { return b.silu("silu", v[0]); }, {"i"}));
  Tensor wide = x;  // tanh far into its tails, where (e^2x - 1) / (e^2x + 1) is inf / inf
  for (int i = 0; i < n; ++i) wide.data[i] *= i % 3 == 1 ? 1e4f : 1.0f;
  EXPECT_TRUE(check({wide}, [](Backend& b, const std::vector<Value>& v) { return b.tanh("tanh", v[0]); }, {"i"}));
  EXPECT_TRUE(check({x, random_tensor({n}, 24)},
                    [](Backend& b, const std::vector<Value>& v) { return b.residual_add("residual_add1", v[0], v[1]); }, {"i"}));
  EXPECT_TRUE(check({x, random_tensor({n}, 25)},
                    [](Backend& b, const std::vector<Value>& v) { return b.multiply("multiply", v[0], v[1]); }, {"i"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, Elementwise, Values(1, 3, 17, 63, 64, 65, 113, 1000));

TEST_F(Ops, ResidualAddRefusesDifferentShapes) {
  Value a = gpu().upload("a", random_tensor({2, 3, 4}, 1)), b = gpu().upload("b", random_tensor({2, 4, 3}, 2));
  EXPECT_THROW(gpu().residual_add("residual_add1", a, b), ShapeError);
}

// embedding: ids (B, T) into a (V, E) table, with an id out of range and one not an integer;
// unscaled, and scaled by √E as Gemma's.
class Embedding : public Ops, public ::testing::WithParamInterface<std::tuple<int, int, int, int>> {};
TEST_P(Embedding, MatchesReference) {
  auto [B, T, V, E] = GetParam();
  Tensor ids({B, T}, DType::int64);
  for (int i = 0; i < B * T; ++i) ids.data[i] = static_cast<float>((i * 7) % V);
  for (float scale : {1.0f, std::sqrt(static_cast<float>(E))}) {
    EXPECT_TRUE(check({ids, random_tensor({V, E}, 25)},
                      [scale](Backend& b, const std::vector<Value>& v) {
                        return b.embedding("embedding", v[0], v[1], scale);
                      }, {"b", "t", "f"})) << "scale " << scale;
  }
}
INSTANTIATE_TEST_SUITE_P(Sweep, Embedding, Combine(Values(1, 3), Values(1, 17, 113), Values(1, 5, 1000), Values(1, 17, 65)));

// A table kept 16-bit (upload_matrix): each of the 65,536 bit patterns of float16 and of bfloat16
// widened by the shader to the float the host widens it to, bit for bit (NaNs as NaNs), through
// an odd number of elements a row, so that half the rows start in a word's high half.
TEST_F(Ops, EmbeddingWidensEverySixteenBitValueAsTheHostDoes) {
  constexpr int64_t V = 65536 / 4, E = 5;  // 81,920 elements: every pattern, and a few twice
  for (Narrow narrow : {Narrow::float16, Narrow::bfloat16}) {
    Tensor table({V, E});
    for (int64_t i = 0; i < V * E; ++i) {
      const auto bits = static_cast<uint16_t>(i % 65536);
      table.data[i] = narrow == Narrow::float16 ? glm::unpackHalf1x16(bits) : std::bit_cast<float>(uint32_t{bits} << 16);
    }
    table.narrow = narrow;
    Tensor ids({1, V}, DType::int64);
    for (int64_t v = 0; v < V; ++v) ids.data[v] = static_cast<float>(v);
    Value kept = gpu().upload_matrix("embed_tokens.weight", table);
    ASSERT_EQ(kept.narrow, narrow);
    EXPECT_EQ(Backend::stored_bytes(kept), uint64_t(V * E) * 2);
    EXPECT_EQ(gpu().download(kept).data.size(), table.data.size());
    const Tensor y = gpu().download(gpu().embedding("embed_tokens", gpu().upload("ids", ids), kept));
    int64_t differing = 0;
    for (int64_t i = 0; i < V * E; ++i) {
      const float want = table.data[i], got = y.data[i];
      if (std::isnan(want) ? !std::isnan(got) : std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want)) {
        if (differing++ < 5) ADD_FAILURE() << narrow_name(narrow) << " element " << i << ": " << got << ", not " << want;
      }
    }
    EXPECT_EQ(differing, 0) << narrow_name(narrow);
  }
}

// Only linear's weight, embedding's table and a key/value cache (test_decoding) read 16-bit: any
// other step is told so by name.
TEST_F(Ops, AStepThatReadsFloat32AloneRefusesASixteenBitTensor) {
  Value kept = gpu().upload_matrix("w", testing::rounded_to(random_tensor({4, 8}, 1), Narrow::bfloat16));
  testing::expect_error<ShapeError>([&] { gpu().softmax("softmax", kept); },
                                    {"softmax: w (4, 8) is kept bfloat16, which only linear's weight, embedding's "
                                     "table and a key/value cache are read as"});
  testing::expect_error<ShapeError>([&] { gpu().linear("q_proj", kept, kept, nullptr); }, {"q_proj: w (4, 8)", "kept bfloat16"});
}

TEST_F(Ops, EmbeddingGivesNaNForAnIdOutsideTheTable) {
  Tensor ids({1, 4}, {0, 3, -1, 1.5f}, DType::int64);  // 3 is past a 3-row table; -1 and 1.5 are no ids
  for (Backend* b : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    Tensor y = b->download(b->embedding("embedding", b->upload("ids", ids), b->upload("table", random_tensor({3, 2}, 26))));
    EXPECT_FALSE(std::isnan(y.data[0])) << b->name();
    for (int i = 2; i < 8; ++i) EXPECT_TRUE(std::isnan(y.data[i])) << b->name() << " element " << i;
  }
}

TEST_F(Ops, EmbeddingWantsInt64IdsAndAFiniteScale) {
  Value ids = gpu().upload("ids", random_tensor({1, 4}, 1)), table = gpu().upload("table", random_tensor({3, 2}, 2));
  EXPECT_THROW(gpu().embedding("embedding", ids, table), ShapeError);
  Value int_ids = gpu().upload("ids", Tensor({1, 2}, {0, 1}, DType::int64));
  testing::expect_error<ShapeError>([&] { gpu().embedding("embedding", int_ids, table, std::nanf("")); },
                           {"embedding: scale nan must be a finite number"});
}

class PositionalEncoding : public Ops, public ::testing::WithParamInterface<std::tuple<int, int, int, int>> {};
TEST_P(PositionalEncoding, MatchesReference) {
  auto [B, T, E, extra] = GetParam();
  EXPECT_TRUE(check({random_tensor({B, T, E}, 27), random_tensor({T + extra, E}, 28)},
                    [](Backend& b, const std::vector<Value>& v) { return b.positional_encoding("positional_encoding", v[0], v[1]); },
                    {"b", "t", "f"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, PositionalEncoding, Combine(Values(1, 3), Values(1, 17, 113), Values(1, 3, 65), Values(0, 5)));

TEST_F(Ops, PositionalEncodingRefusesATableShorterThanTheSequence) {
  Value x = gpu().upload("x", random_tensor({2, 6, 4}, 1)), table = gpu().upload("table", random_tensor({5, 4}, 2));
  EXPECT_THROW(gpu().positional_encoding("positional_encoding", x, table), ShapeError);
}

// mean_pool and first_token: (B, T, E) -> (B, E)
class MeanPool : public Ops, public ::testing::WithParamInterface<std::tuple<int, int, int>> {};
TEST_P(MeanPool, MatchesReference) {
  auto [B, T, E] = GetParam();
  EXPECT_TRUE(check({random_tensor({B, T, E}, 29)}, [](Backend& b, const std::vector<Value>& v) { return b.mean_pool("mean_pool", v[0]); },
                    {"b", "f"}));
  EXPECT_TRUE(check({random_tensor({B, T, E}, 30)},
                    [](Backend& b, const std::vector<Value>& v) { return b.first_token("first_token", v[0]); }, {"b", "f"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, MeanPool, Combine(Values(1, 3, 17), Values(1, 17, 113), Values(1, 3, 65, 113)));

// last_tokens: (B, T, E) -> (B, n, E), the last n positions (a language model's logits_to_keep)
class LastTokens : public Ops, public ::testing::WithParamInterface<std::tuple<int, int, int>> {};
TEST_P(LastTokens, MatchesReference) {
  auto [B, T, E] = GetParam();
  for (int64_t n : {1, 3, 17, T}) {
    if (n > T) continue;
    SCOPED_TRACE("n = " + std::to_string(n));
    EXPECT_TRUE(check({random_tensor({B, T, E}, 31)},
                      [n](Backend& b, const std::vector<Value>& v) { return b.last_tokens("last_tokens", v[0], n); },
                      {"b", "t", "f"}));
  }
}
INSTANTIATE_TEST_SUITE_P(Sweep, LastTokens, Combine(Values(1, 3), Values(1, 17, 113), Values(1, 65)));

TEST_F(Ops, LastTokensRefusesNoPositionsAndMoreThanTheSequenceHas) {
  Value x = gpu().upload("x", random_tensor({2, 5, 4}, 1));
  for (int64_t n : {0, 6, -1}) {
    testing::expect_error<ShapeError>(
        [&] { gpu().last_tokens("last_tokens", x, n); },
        {"last_tokens: keeps the last n = " + std::to_string(n) + " positions of x (2, 5, 4): n must be 1 … T = 5"});
  }
}

// ---- workgroup sizes: 1, a non-power of two, the default, a large one -------------------------------
// (linear, attention_scores and attention_values keep their GEMM plan's workgroup: GemmTiling below)
class Workgroup : public ::testing::TestWithParam<uint32_t> {};
TEST_P(Workgroup, EveryStepMatchesReference) {
  uint64_t before = testing::shared_context()->validation_message_count();
  VulkanBackend gpu(testing::shared_context(), {.workgroup_size = GetParam()});
  ReferenceBackend cpu;
  auto step = [&](std::vector<Tensor> in, const Step& s, std::vector<std::string> dims) {
    EXPECT_TRUE(gpu_matches_reference(gpu, cpu, in, s, dims));
  };
  step({random_tensor({17, 33}, 1), random_tensor({19, 33}, 2), random_tensor({19}, 3)},
       [](Backend& b, const std::vector<Value>& v) { return b.linear("q_proj", v[0], v[1], &v[2]); }, {"n", "m"});
  step({random_tensor({2, 3, 17, 113}, 4)}, [](Backend& b, const std::vector<Value>& v) { return b.softmax("softmax", v[0]); }, {"b", "h", "i", "j"});
  step({random_tensor({5, 1000}, 4)}, [](Backend& b, const std::vector<Value>& v) { return b.softmax("softmax", v[0]); }, {"r", "j"});
  step({random_tensor({2, 3, 17, 5}, 5), random_tensor({2, 3, 13, 5}, 6)},
       [](Backend& b, const std::vector<Value>& v) { return b.attention_scores("attention_scores", v[0], v[1]); }, {"b", "h", "i", "j"});
  step({random_tensor({2, 3, 17, 13}, 7), random_tensor({2, 3, 13, 5}, 8)},
       [](Backend& b, const std::vector<Value>& v) { return b.attention_values("attention_values", v[0], v[1]); }, {"b", "h", "i", "c"});
  step({random_tensor({17, 113}, 9), random_tensor({113}, 10), random_tensor({113}, 11)},
       [](Backend& b, const std::vector<Value>& v) { return b.layer_norm("norm1", v[0], v[1], v[2], 1e-5f); }, {"n", "e"});
  step({random_tensor({3, 17, 5}, 12)}, [](Backend& b, const std::vector<Value>& v) { return b.gelu("gelu", v[0]); }, {"b", "t", "f"});
  step({random_tensor({3, 17, 5}, 13)}, [](Backend& b, const std::vector<Value>& v) { return b.mean_pool("mean_pool", v[0]); }, {"b", "f"});
  EXPECT_EQ(testing::shared_context()->validation_message_count(), before);
}
INSTANTIATE_TEST_SUITE_P(Sizes, Workgroup, Values(1u, 48u, 64u, 256u));

// ---- GEMM tilings: linear, attention_scores and attention_values under every plan ---------------------
// Whatever the device would pick, each tiling of gemm.glsl with each kind of input its cases give
// (tests/support/gemm_tilings.h) must give the reference's numbers, some with W kept 16-bit too;
// a tiling the device cannot run is refused.
class GemmTiling : public ::testing::TestWithParam<testing::GemmCase> {};
TEST_P(GemmTiling, MatchesReference) {
  const auto& [tiling, inputs, with_16bit_b] = GetParam();
  const auto& device = testing::shared_context()->device_report();
  const std::optional<vulkan::GemmPlan> plan = testing::tiling_plan(tiling, inputs, device);
  if (!plan) {
    // no 4 to 16 lanes guaranteed for broadcast (subgroups off, no size control, a GPU's 32 or
    // 64), no texel buffers, or B packed for the shared tiling
    EXPECT_THROW(
        {
          vulkan::GemmPlan asked = vulkan::plan_gemm(device, tiling.variant);
          asked.texel_inputs = inputs != testing::GemmInputs::storage;
          asked.packed_b = inputs == testing::GemmInputs::texel_packed;
          VulkanBackend(testing::shared_context(), {.gemm = std::make_shared<const vulkan::GemmPlan>(asked)});
        },
        DeviceError);
    return;
  }
  uint64_t before = testing::shared_context()->validation_message_count();
  VulkanBackend gpu(testing::shared_context(), {.gemm = std::make_shared<const vulkan::GemmPlan>(*plan)});
  ReferenceBackend cpu;
  EXPECT_TRUE(testing::gemm_products_match(gpu, cpu)) << plan->describe();
  // W kept 16-bit (upload_matrix), whatever inputs the plan asks for (a 16-bit B is read from its
  // storage buffer, or as RG32UI texels): the numbers of its widened copy
  for (Narrow narrow : {Narrow::float16, Narrow::bfloat16}) {
    if (!with_16bit_b) break;
    for (auto [N, K, M] : {std::tuple{1, 1, 1}, {3, 4, 65}, {17, 64, 130}, {113, 17, 3}, {70, 3, 129}, {520, 64, 70}}) {
      const Tensor x = random_tensor({N, K}, 1), w = testing::rounded_to(random_tensor({M, K}, 2), narrow);
      const Tensor bias = random_tensor({M}, 3);
      auto run = [&](Backend& b) {
        Value kept = b.upload_matrix("q_proj.weight", w), on = b.upload("bias", bias);
        EXPECT_EQ(kept.narrow, b.keeps_16bit() ? narrow : Narrow::none);
        return b.download(b.linear("q_proj", b.upload("x", x), kept, &on));
      };
      EXPECT_TRUE(all_close(run(gpu), run(cpu))) << plan->describe() << ", W " << narrow_name(narrow) << " ("
                                                 << M << ", " << K << "), " << N << " rows";
    }
  }
  EXPECT_EQ(testing::shared_context()->validation_message_count(), before);
}
INSTANTIATE_TEST_SUITE_P(Plans, GemmTiling, ::testing::ValuesIn(testing::gemm_cases()),
                         [](const auto& case_info) { return case_info.param.name(); });

TEST(GemmPlan, ABadPlanIsRefusedWithWhatTheDeviceLacks) {
  // 3 is no device's subgroup size
  const vulkan::GemmPlan plan{.variant = vulkan::GemmVariant::broadcast, .workgroup_size = 63, .lanes = 3, .tile_m = 3};
  try {
    VulkanBackend gpu(testing::shared_context(), {.gemm = std::make_shared<const vulkan::GemmPlan>(plan)});
    FAIL() << "3 lanes were accepted";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("needs its 3 lanes guaranteed with subgroup shuffles"), std::string::npos) << e.what();
  }
}

// ---- grid folding ------------------------------------------------------------------------------------
// With at most 5 workgroups per dimension, every step's grid folds into y and z (and softmax's
// 113 rows need 5×5×5); the results must not change.
TEST(Folding, EveryStepMatchesReferenceOnAForcedTinyGrid) {
  uint64_t before = testing::shared_context()->validation_message_count();
  VulkanBackend gpu(testing::shared_context(), {.workgroup_size = 8, .max_groups_per_dim = 5});
  ReferenceBackend cpu;
  auto step = [&](std::vector<Tensor> in, const Step& s) { EXPECT_TRUE(gpu_matches_reference(gpu, cpu, in, s, {})); };
  step({random_tensor({9, 7}, 1), random_tensor({11, 7}, 2), random_tensor({11}, 3)},
       [](Backend& b, const std::vector<Value>& v) { return b.linear("q_proj", v[0], v[1], &v[2]); });
  step({random_tensor({2, 9, 12}, 4)}, [](Backend& b, const std::vector<Value>& v) { return b.split_heads("split_heads_q", v[0], 3); });
  step({random_tensor({2, 3, 9, 4}, 4)}, [](Backend& b, const std::vector<Value>& v) { return b.merge_heads("merge_heads", v[0]); });
  step({random_tensor({6, 9, 4}, 4), random_tensor({4}, 5)}, [](Backend& b, const std::vector<Value>& v) { return b.append_row("add_bias_k", v[0], &v[1]); });
  step({random_tensor({113, 5}, 4)}, [](Backend& b, const std::vector<Value>& v) { return b.softmax("softmax", v[0]); });
  step({random_tensor({2, 3, 9, 4}, 5), random_tensor({2, 3, 7, 4}, 6)},
       [](Backend& b, const std::vector<Value>& v) { return b.attention_scores("attention_scores", v[0], v[1]); });
  // 70 columns: two workgroups of 8 · 8 scores a row, 108 workgroups folded into 5 × 5 × 5
  step({random_tensor({2, 3, 9, 70}, 5), additive_mask({9, 70}, 6), additive_mask({2, 70}, 7)},
       [](Backend& b, const std::vector<Value>& v) { return b.attention_mask("attention_mask", v[0], &v[1], &v[2], true); });
  step({random_tensor({2, 3, 9, 7}, 7), random_tensor({2, 3, 7, 4}, 8)},
       [](Backend& b, const std::vector<Value>& v) { return b.attention_values("attention_values", v[0], v[1]); });
  step({random_tensor({2, 3, 9, 7}, 9)}, [](Backend& b, const std::vector<Value>& v) { return b.average_heads("average_heads", v[0]); });
  // 6 heads × 10 groups of 16 rows (lavapipe's 8 lanes) = 60 subgroups, 8 workgroups of 8
  // subgroups; without subgroups 6 heads × 19 workgroups of 8 rows = 114: folded into y and z
  step(flash_inputs({2, 3, 150, 7, 4}, 2), flash_step(2, true, true));
  step({random_tensor({113, 6}, 10), random_tensor({6}, 11), random_tensor({6}, 12)},
       [](Backend& b, const std::vector<Value>& v) { return b.layer_norm("norm1", v[0], v[1], v[2], 1e-5f); });
  step({random_tensor({2, 9, 12}, 13)}, [](Backend& b, const std::vector<Value>& v) { return b.gelu("gelu", v[0]); });
  step({random_tensor({2, 9, 12}, 14)}, [](Backend& b, const std::vector<Value>& v) { return b.relu("relu", v[0]); });
  step({random_tensor({2, 9, 12}, 15), random_tensor({2, 9, 12}, 16)},
       [](Backend& b, const std::vector<Value>& v) { return b.residual_add("residual_add1", v[0], v[1]); });
  step({Tensor({3, 9}, std::vector<float>(27, 4.0f), DType::int64), random_tensor({7, 12}, 17)},
       [](Backend& b, const std::vector<Value>& v) { return b.embedding("embedding", v[0], v[1]); });
  step({random_tensor({2, 9, 12}, 18), random_tensor({11, 12}, 19)},
       [](Backend& b, const std::vector<Value>& v) { return b.positional_encoding("positional_encoding", v[0], v[1]); });
  step({random_tensor({9, 5, 12}, 20)}, [](Backend& b, const std::vector<Value>& v) { return b.mean_pool("mean_pool", v[0]); });
  EXPECT_EQ(testing::shared_context()->validation_message_count(), before);
}

// Real dispatches past 65535 workgroups in one dimension, at the device's own limits.
TEST_F(Ops, SoftmaxOverMoreThan65535Rows) {
  // one workgroup per row: 70001 workgroups
  EXPECT_TRUE(check({random_tensor({70001, 3}, 17)}, [](Backend& b, const std::vector<Value>& v) { return b.softmax("softmax", v[0]); },
                    {"r", "j"}));
}

TEST_F(Ops, SplitHeadsOverMoreThan65535Workgroups) {
  // 1·4100·1088 = 4,460,800 elements / 64 per workgroup = 69,700 workgroups
  EXPECT_TRUE(check({random_tensor({1, 4100, 1088}, 18)},
                    [](Backend& b, const std::vector<Value>& v) { return b.split_heads("split_heads_q", v[0], 17); },
                    {"b", "h", "t", "c"}));
}

}  // namespace
}  // namespace vkattn
