// Steps folded into their neighbours. Layout steps (Backend::linear_split_heads, merge_heads_linear):
// the projections store Q, K and V straight in (B, H, T, d) and out_proj reads the heads where
// attention_values left them. The numbers must be the copying path's bit for bit (the same sums
// in the same order, only the addresses differ) under every GEMM plan, and the trace must list
// the same steps with the same tensors, the layout steps marked folded with no time of their own.
// Activations (Backend::linear_activation; each activation and store path: test_ops'
// LinearActivation): a layer's numbers are the two steps', its trace says so, a trace with values
// runs the two steps.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "engine/backends/tuner.h"
#include "engine/vulkan/gemm_plan.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/modules/grouped_query_attention.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tracing/report.h"
#include "vkattn/tracing/trace_dump.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {
namespace {

using testing::random_tensor;

// Fails a test on any validation message its passes raised (the GEMM's new specializations too).
class FoldedLayout : public testing::GpuTest {};

std::unique_ptr<VulkanBackend> folding(bool fold, std::shared_ptr<const vulkan::GemmPlan> plan = nullptr,
                                       std::optional<uint32_t> gemv_rows = std::nullopt) {
  VulkanBackendOptions options;
  options.gemm = std::move(plan);
  options.gemv_rows = gemv_rows;
  options.fold_layout_steps = fold;
  return std::make_unique<VulkanBackend>(testing::shared_context(), options);
}

// Bit for bit: the same floats, NaN nowhere.
::testing::AssertionResult identical(const Tensor& a, const Tensor& b) {
  if (a.shape != b.shape) return ::testing::AssertionFailure() << shape_string(a.shape) << " vs " << shape_string(b.shape);
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (std::memcmp(&a.data[i], &b.data[i], sizeof(float)) != 0 || std::isnan(a.data[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a.data[i] << " vs " << b.data[i];
    }
  }
  return ::testing::AssertionSuccess();
}

struct Case {
  int64_t B, L, S, E, H, kdim, vdim;
};
// Lengths 1, 3, 17, 113; L ≠ S; d = 17 (no vec4 loads), 16 and 1; kdim ≠ vdim ≠ E.
const Case kShapes[] = {{1, 1, 1, 4, 1, 0, 0},   {2, 3, 17, 12, 3, 0, 0},   {1, 17, 113, 51, 3, 0, 0},
                        {2, 113, 3, 64, 4, 0, 0}, {1, 17, 5, 32, 2, 24, 40}, {3, 5, 7, 8, 8, 0, 0}};

TEST_F(FoldedLayout, MultiHeadAttentionIsBitIdenticalToTheCopies) {
  for (const Case& s : kShapes) {
    const MultiHeadAttentionConfig config{.embed_dim = s.E, .num_heads = s.H, .kdim = s.kdim, .vdim = s.vdim,
                                          .batch_first = true};
    const MultiHeadAttention mha(config, MultiHeadAttentionWeights::random(config, 3));
    const Tensor q = random_tensor({s.B, s.L, s.E}, 1), k = random_tensor({s.B, s.S, config.key_dim()}, 2),
                 v = random_tensor({s.B, s.S, config.value_dim()}, 3);
    Tensor padding({s.B, s.S});
    for (int64_t j = 0; j < s.S; ++j) padding.at({s.B - 1, j}) = 1.0f;  // the last sequence fully masked
    padding.dtype = DType::boolean;
    for (AttentionPath path : {AttentionPath::unfused, AttentionPath::fused}) {
      ForwardOptions options;
      options.attention = path;
      options.need_weights = false;
      options.key_padding_mask = padding;
      SCOPED_TRACE(shape_string({s.B, s.L, s.S, s.E, s.H}) + " " + attention_path_name(path));
      auto folded = folding(true), copied = folding(false);
      const Tensor a = mha.forward(*folded, q, k, v, options).output, b = mha.forward(*copied, q, k, v, options).output;
      EXPECT_TRUE(identical(a, b));
      ReferenceBackend cpu;  // and right: the copies' path is tested against torch elsewhere
      const Tensor expected = mha.forward(cpu, q, k, v, options).output;
      for (size_t i = 0; i < a.data.size(); ++i) ASSERT_NEAR(a.data[i], expected.data[i], 1e-4) << "element " << i;
    }
  }
}

TEST_F(FoldedLayout, EveryGemmPlanFoldsBitIdentically) {
  // the GEMM plans tuning may choose (on a CPU device the broadcast tiles, B packed or not), and
  // the shared tiling
  const auto& device = testing::shared_context()->device_report();
  auto plans = tuning::gemm_candidates(device);
  ASSERT_FALSE(plans.empty());
  plans.push_back(vulkan::plan_gemm(device, vulkan::GemmVariant::shared));
  const MultiHeadAttentionConfig odd{.embed_dim = 51, .num_heads = 3, .batch_first = true};
  const MultiHeadAttentionConfig even{.embed_dim = 64, .num_heads = 4, .batch_first = true};
  for (const auto& plan : plans) {
    SCOPED_TRACE(plan.describe());
    auto shared = std::make_shared<const vulkan::GemmPlan>(plan);
    // d = 16: vec4 (texel) loads, stores by quads (C_HEADS 4), at every plan; d = 17: scalar loads,
    // stores column by column (C_HEADS 1), at the rule's plan (the first) and the shared tiling
    // (the last), once for each variant's code: its other tiles run that code with other
    // constants, and their pipelines at d = 17 took Mesa 25 70 s to compile (2-core EPYC).
    const bool scalar = &plan == &plans.front() || &plan == &plans.back();
    for (const auto& c : scalar ? std::vector{odd, even} : std::vector{even}) {
      const MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 5));
      const Tensor x = random_tensor({2, 37, c.embed_dim}, 6);
      ForwardOptions options;
      options.attention = AttentionPath::unfused;
      options.need_weights = false;
      auto folded = folding(true, shared), copied = folding(false, shared);
      EXPECT_TRUE(identical(mha.forward(*folded, x, options).output, mha.forward(*copied, x, options).output))
          << "E " << c.embed_dim;
    }
  }
}

TEST_F(FoldedLayout, TheGemvFoldsBitIdentically) {
  // products of at most 8 rows (B·T) as a GPU runs them, the GEMV (gemv.glsl), here on any device:
  // q_proj's store and out_proj's load folded at T > 1 — d a multiple of 4 (quads read whole),
  // d = 1 under K = 4 (quads read element by element), d = 17 (no quads); kdim ≠ vdim; the fused
  // path too. Its lanes must sum as for the copies: a GPU ran the folded steps on the GEMM's
  // tiling and the copies on the GEMV, 1 ulp apart.
  const Case shapes[] = {
      {2, 3, 5, 12, 3, 0, 0}, {2, 3, 5, 4, 4, 0, 0}, {1, 3, 2, 51, 3, 0, 0}, {2, 4, 7, 32, 2, 24, 40}};
  for (const Case& s : shapes) {
    const MultiHeadAttentionConfig config{
        .embed_dim = s.E, .num_heads = s.H, .kdim = s.kdim, .vdim = s.vdim, .batch_first = true};
    const MultiHeadAttention mha(config, MultiHeadAttentionWeights::random(config, 15));
    const Tensor q = random_tensor({s.B, s.L, s.E}, 16), k = random_tensor({s.B, s.S, config.key_dim()}, 17),
                 v = random_tensor({s.B, s.S, config.value_dim()}, 18);
    for (AttentionPath path : {AttentionPath::unfused, AttentionPath::fused}) {
      SCOPED_TRACE(shape_string({s.B, s.L, s.S, s.E, s.H}) + " " + attention_path_name(path));
      ForwardOptions options;
      options.attention = path;
      options.need_weights = false;
      auto folded = folding(true, nullptr, vulkan::kGemvRows), copied = folding(false, nullptr, vulkan::kGemvRows);
      const Tensor a = mha.forward(*folded, q, k, v, options).output, b = mha.forward(*copied, q, k, v, options).output;
      EXPECT_TRUE(identical(a, b));
      ReferenceBackend cpu;
      const Tensor expected = mha.forward(cpu, q, k, v, options).output;
      for (size_t i = 0; i < a.data.size(); ++i) ASSERT_NEAR(a.data[i], expected.data[i], 1e-4) << "element " << i;
    }
  }
}

TEST_F(FoldedLayout, GroupedQueryAttentionFoldsToo) {
  GroupedQueryAttentionConfig config;
  config.hidden_size = 48;
  config.num_heads = 6;
  config.num_kv_heads = 2;
  config.causal = true;
  const GroupedQueryAttention gqa(config, GroupedQueryAttentionWeights::random(config, 7));
  const Tensor x = random_tensor({2, 17, 48}, 8);
  auto folded = folding(true), copied = folding(false);
  EXPECT_TRUE(identical(gqa.forward(*folded, x).output, gqa.forward(*copied, x).output));
}

// Every step of a pass, recorded with values, on a folding and a copying backend.
struct Passes {
  StepRecorder folded{true}, copied{true};
};
Passes record_both(const MultiHeadAttention& mha, const Tensor& x, const ForwardOptions& options) {
  Passes p;
  auto folded = folding(true), copied = folding(false);
  {
    AttachedTracer a(*folded, p.folded), b(*copied, p.copied);
    mha.forward(*folded, x, options);
    mha.forward(*copied, x, options);
  }
  return p;
}

TEST_F(FoldedLayout, TheTraceListsTheSameStepsAndTensors) {
  const MultiHeadAttentionConfig config{.embed_dim = 32, .num_heads = 4, .batch_first = true};
  const MultiHeadAttention mha(config, MultiHeadAttentionWeights::random(config, 9));
  ForwardOptions options;  // unfused: weights wanted
  const Passes p = record_both(mha, random_tensor({2, 5, 32}, 10), options);
  ASSERT_EQ(p.folded.steps().size(), p.copied.steps().size());
  int folded_steps = 0;
  for (size_t i = 0; i < p.folded.steps().size(); ++i) {
    const auto &f = p.folded.steps()[i], &c = p.copied.steps()[i];
    SCOPED_TRACE(c.event.name);
    EXPECT_EQ(f.event.name, c.event.name);
    EXPECT_EQ(f.event.op, c.event.op);
    EXPECT_EQ(f.event.output.shape, c.event.output.shape);
    EXPECT_EQ(f.event.output.dims, c.event.output.dims);
    ASSERT_TRUE(f.values && c.values);
    EXPECT_TRUE(identical(*f.values, *c.values)) << "the tensor read back in its own order";
    EXPECT_TRUE(c.event.folded.empty());
    if (!f.event.folded.empty()) ++folded_steps;
  }
  EXPECT_EQ(folded_steps, 4) << "split_heads_q, _k, _v and merge_heads";
  auto step = [&](const std::string& name) -> const StepEvent& {
    for (const auto& s : p.folded.steps())
      if (s.event.name == name) return s.event;
    throw std::runtime_error("no step " + name);
  };
  // B = 2, T = 5, H = 4, d = 8: (B, T, H, d) over (B, H, T, d) memory has strides (160, 8, 40, 1)
  EXPECT_EQ(step("split_heads_q").folded, "folded into q_proj's store, which wrote (B, T, H, d) at strides "
                                          "(160, 8, 40, 1)");
  EXPECT_EQ(step("merge_heads").folded, "folded into out_proj's load, which read (B, T, H, d) at strides "
                                        "(160, 8, 40, 1)");
  EXPECT_EQ(step("q_proj").output.stored_as, (Shape{2, 4, 5, 8})) << "q_proj's (B, T, E) lies as (B, H, T, d)";
  EXPECT_EQ(step("merge_heads").output.stored_as, (Shape{2, 4, 5, 8}));
  EXPECT_EQ(step("out_proj").inputs.at(0).stored_as, (Shape{2, 4, 5, 8}));
  EXPECT_TRUE(step("attention_scores").folded.empty());
  EXPECT_TRUE(step("q_proj").folded.empty()) << "q_proj ran";
  // the folded steps take no time; every other step took some
  const PassEnd& end = p.folded.pass_end();
  ASSERT_EQ(end.step_times.size(), p.folded.steps().size()) << "each step timed, the folded ones too";
  for (size_t i = 0; i < end.step_times.size(); ++i) {
    const bool folded = !p.folded.steps()[i].event.folded.empty();
    EXPECT_EQ(end.step_times[i].duration_us == 0.0, folded) << p.folded.steps()[i].event.name << " on the " << end.clock << " clock";
  }
}

TEST_F(FoldedLayout, TheReferenceFoldsWhenAskedWithTheSameNumbers) {
  const MultiHeadAttentionConfig config{.embed_dim = 51, .num_heads = 3, .batch_first = true};
  const MultiHeadAttention mha(config, MultiHeadAttentionWeights::random(config, 13));
  const Tensor x = random_tensor({2, 17, 51}, 14);
  ReferenceBackend folded(true), copied;
  StepRecorder a(true), b(true);
  {
    AttachedTracer ta(folded, a), tb(copied, b);
    EXPECT_TRUE(identical(mha.forward(folded, x).output, mha.forward(copied, x).output));
  }
  ASSERT_EQ(a.steps().size(), b.steps().size());
  int folded_steps = 0;
  for (size_t i = 0; i < a.steps().size(); ++i) {
    EXPECT_EQ(a.steps()[i].event.name, b.steps()[i].event.name);
    EXPECT_TRUE(identical(*a.steps()[i].values, *b.steps()[i].values)) << b.steps()[i].event.name;
    folded_steps += !a.steps()[i].event.folded.empty();
  }
  EXPECT_EQ(folded_steps, 4);
}

TEST_F(FoldedLayout, TheConsoleAndTheDumpSayWhatWasFolded) {
  const MultiHeadAttentionConfig config{.embed_dim = 32, .num_heads = 4, .batch_first = true};
  const MultiHeadAttention mha(config, MultiHeadAttentionWeights::random(config, 9));
  ForwardOptions options;
  options.attention = AttentionPath::fused;
  options.need_weights = false;
  const Passes p = record_both(mha, random_tensor({2, 5, 32}, 10), options);
  std::ostringstream console;
  {
    ConsoleTracer tracer(console);
    replay(p.folded, tracer);
  }
  EXPECT_NE(console.str().find("folded into k_proj's store, which wrote (B, T, H, d) at strides (160, 8, 40, 1)"),
            std::string::npos)
      << console.str();
  const auto dir = std::filesystem::temp_directory_path() / ("vkattn_folded_" + std::to_string(::getpid()));
  {
    TraceDump dump(dir, true);
    replay(p.folded, dump);
  }
  EXPECT_NE(report_html({{.pass = &p.folded}}).find("folded into v_proj's store, which wrote"), std::string::npos)
      << "the report page's step data";
  const StepRecorder back = load_trace(dir);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(back.steps().size(), p.folded.steps().size());
  for (size_t i = 0; i < back.steps().size(); ++i) {
    const StepEvent &read = back.steps()[i].event, &written = p.folded.steps()[i].event;
    EXPECT_EQ(read.folded, written.folded) << written.name;
    EXPECT_EQ(read.output.stored_as, written.output.stored_as) << written.name;
    for (size_t j = 0; j < written.inputs.size(); ++j) EXPECT_EQ(read.inputs[j].stored_as, written.inputs[j].stored_as);
  }
}

TEST_F(FoldedLayout, FoldingHoldsFewerBuffers) {
  const MultiHeadAttentionConfig config{.embed_dim = 64, .num_heads = 4, .batch_first = true};
  const MultiHeadAttention mha(config, MultiHeadAttentionWeights::random(config, 11));
  const Tensor x = random_tensor({1, 256, 64}, 12);
  ForwardOptions options;
  options.attention = AttentionPath::fused;
  options.need_weights = false;
  // the rule's GEMM plan with B read where it lies: B packed takes a buffer a projection (16 KiB
  // here, new ones while in flight: reuse_in_flight_bytes), which is not what this compares
  auto plan = std::make_shared<vulkan::GemmPlan>(vulkan::plan_gemm(testing::shared_context()->device_report()));
  plan->packed_b = false;
  auto peak = [&](bool fold) {
    auto gpu = folding(fold, plan);
    gpu->reset_peak();
    mha.forward(*gpu, x, options);
    return gpu->peak_allocated_bytes();
  };
  const uint64_t folded = peak(true), copied = peak(false);
  EXPECT_LT(folded, copied) << "the (B, T, E) products and the merged heads are never allocated";
}

// ---- an activation folded into linear1's store ------------------------------------------------
TEST_F(FoldedLayout, AnEncoderLayersActivationFoldsWithTheTwoStepsNumbers) {
  const Tensor x = random_tensor({2, 17, 32}, 15);
  for (auto [activation, activation_step] : {std::pair{Activation::relu, ActivationStep::relu},
                                             {Activation::gelu, ActivationStep::gelu},
                                             {Activation::gelu_tanh, ActivationStep::gelu_tanh}}) {
    const std::string name = activation_name(activation);
    SCOPED_TRACE(name);
    const TransformerEncoderLayerConfig config{
        .d_model = 32, .nhead = 4, .dim_feedforward = 113, .activation = activation};
    const TransformerEncoderLayer layer(config, TransformerEncoderLayerWeights::random(config, 16));
    VulkanBackend folded(testing::shared_context()), apart(testing::shared_context(), {.fold_into_store = false});
    ReferenceBackend cpu;
    StepRecorder shapes(false), values(true);
    Tensor a;
    {
      AttachedTracer tracer(folded, shapes);
      a = layer.forward(folded, x);
    }
    EXPECT_TRUE(testing::all_close(a, layer.forward(apart, x), {.atol = 1e-6f, .rtol = 1e-6f}));
    EXPECT_TRUE(testing::all_close(a, layer.forward(cpu, x)));
    auto find = [&](const StepRecorder& recorder) -> const StepRecorder::Step& {
      for (const auto& step : recorder.steps())
        if (step.event.op == name) return step;
      throw std::runtime_error("no " + name + " step");
    };
    EXPECT_EQ(find(shapes).event.folded,
              "folded into linear1's store, which applied it to each product as it wrote it");
    // with values: the two steps, linear1's product read back and the activation's of it
    {
      AttachedTracer tracer(folded, values);
      layer.forward(folded, x);
    }
    const StepRecorder::Step& step = find(values);
    EXPECT_TRUE(step.event.folded.empty());
    ASSERT_TRUE(step.values);
    const StepRecorder::Step* product = nullptr;
    for (const auto& s : values.steps())
      if (s.event.name == step.event.inputs.at(0).name) product = &s;
    ASSERT_TRUE(product && product->values) << "the activation's input, linear1's product, is traced";
    ReferenceBackend reference;
    const Value product_there = reference.upload("x", *product->values);
    EXPECT_TRUE(testing::all_close(*step.values,
                                   reference.download(reference.activation(name, activation_step, product_there))));
  }
}

// ---- the residual_adds folded into out_proj's and linear2's stores ---------------------------------
// Pre-norm and post-norm: the folded layer's numbers are the two steps' (bit for bit where the
// device adds as it did apart) and the reference's; its shape trace lists the same steps in the same
// order, each residual_add folded into the projection before it, in the layer's scope though the
// projection ran in self_attn's; a trace with values runs the steps apart, the sum of the traced
// product and input.
TEST_F(FoldedLayout, AnEncoderLayersResidualAddsFoldWithTheTwoStepsNumbers) {
  const Tensor x = random_tensor({2, 17, 32}, 17);
  for (bool norm_first : {true, false}) {
    SCOPED_TRACE(norm_first ? "pre-norm" : "post-norm");
    const TransformerEncoderLayerConfig config{
        .d_model = 32, .nhead = 4, .dim_feedforward = 113, .norm_first = norm_first};
    const TransformerEncoderLayer layer(config, TransformerEncoderLayerWeights::random(config, 18));
    VulkanBackend folded(testing::shared_context()), apart(testing::shared_context(), {.fold_into_store = false});
    ReferenceBackend cpu;
    StepRecorder shapes(false), apart_shapes(false), values(true, true);
    Tensor a, b;
    {
      AttachedTracer tracer(folded, shapes);
      a = layer.forward(folded, x);
    }
    {
      AttachedTracer tracer(apart, apart_shapes);
      b = layer.forward(apart, x);
    }
    EXPECT_TRUE(testing::all_close(a, b, {.atol = 0.0f, .rtol = 3e-7f}));
    EXPECT_TRUE(testing::all_close(a, layer.forward(cpu, x)));
    auto names = [](const StepRecorder& recorder) {
      std::vector<std::string> out;
      for (const auto& step : recorder.steps()) out.push_back(step.event.name);
      return out;
    };
    EXPECT_EQ(names(shapes), names(apart_shapes));
    auto find = [&](const StepRecorder& recorder, const std::string& name) -> const StepRecorder::Step& {
      for (const auto& step : recorder.steps())
        if (step.event.name == name) return step;
      throw std::runtime_error("no step " + name);
    };
    const std::string note = "'s store, which added the residual to each product as it wrote it";
    EXPECT_EQ(find(shapes, "residual_add1").event.folded, "folded into out_proj" + note);
    EXPECT_EQ(find(shapes, "residual_add2").event.folded, "folded into linear2" + note);
    EXPECT_EQ(find(shapes, "residual_add1").event.inputs.at(1).name, "self_attn.out_proj");
    EXPECT_TRUE(find(apart_shapes, "residual_add1").event.folded.empty());
    {
      AttachedTracer tracer(folded, values);
      layer.forward(folded, x);
    }
    ReferenceBackend reference;
    for (const char* name : {"residual_add1", "residual_add2"}) {
      const StepRecorder::Step& step = find(values, name);
      EXPECT_TRUE(step.event.folded.empty()) << name;
      const auto& inputs = step.event.inputs;
      ASSERT_EQ(inputs.size(), 2u);
      auto values_of = [&](const std::string& tensor) {  // a step's output, or the pass's input
        for (const auto& traced : values.steps())
          if (traced.event.name == tensor && traced.values) return *traced.values;
        return values.inputs().at(tensor);
      };
      ASSERT_TRUE(step.values) << name;
      const Tensor sum =
          reference.download(reference.residual_add(name, reference.upload("x", values_of(inputs[0].name)),
                                                    reference.upload("product", values_of(inputs[1].name))));
      EXPECT_TRUE(testing::all_close(*step.values, sum, {.atol = 0.0f, .rtol = 0.0f})) << name;
    }
  }
}

}  // namespace
}  // namespace vkattn
