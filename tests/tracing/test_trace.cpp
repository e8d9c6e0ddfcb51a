// The tracer: every configuration's step list and shapes, GPU timestamps, dumps whose values
// equal the reference, a timeline with one event per step, a diff that agrees on CPU vs GPU
// and names the step and index of an injected corruption, shape-only tracing without
// readbacks, a failed pass that keeps its trace, and the side-by-side table of two passes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "engine/vulkan/context.h"
#include "engine/vulkan/recorder.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/backends/roofline.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/check.h"
#include "vkattn/tracing/diagnoses.h"
#include "vkattn/tracing/side_by_side.h"
#include "vkattn/tracing/step_table.h"
#include "vkattn/tracing/trace_dump.h"

namespace vkattn {
namespace {

namespace fs = std::filesystem;
using testing::random_tensor;

struct Case {
  const char* name;
  MultiHeadAttentionConfig config;
  int64_t L, S;
  bool mask, need_weights, average;
  std::vector<std::string> steps;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const std::vector<std::string> kCore = {"q_proj", "split_heads_q", "k_proj", "split_heads_k", "v_proj", "split_heads_v",
                                        "attention_scores"};
std::vector<std::string> steps(std::vector<std::string> head, std::vector<std::string> tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

class TraceSteps : public testing::GpuTest, public ::testing::WithParamInterface<Case> {};

// Both backends report the same steps with the same shapes; the GPU times them by timestamps.
TEST_P(TraceSteps, AreTheRecipesStepsWithTheirShapesOnBothBackends) {
  const Case& c = GetParam();
  MultiHeadAttention mha(c.config, MultiHeadAttentionWeights::random(c.config, 1));
  const int64_t B = 2, E = c.config.embed_dim, H = c.config.num_heads, d = E / H;
  Tensor q = random_tensor({B, c.L, E}, 2), k = random_tensor({B, c.S, c.config.key_dim()}, 3),
         v = random_tensor({B, c.S, c.config.value_dim()}, 4);
  ForwardOptions o;
  o.need_weights = c.need_weights;
  o.average_attn_weights = c.average;
  if (c.mask) o.key_padding_mask = testing::random_bool_mask({B, c.S}, 0.3f, 5);
  for (Backend* backend : {static_cast<Backend*>(&cpu()), static_cast<Backend*>(&gpu())}) {
    StepRecorder rec(false);
    backend->add_tracer(rec);
    mha.forward(*backend, q, k, v, o);
    backend->remove_tracer(rec);
    std::vector<std::string> names;
    for (const auto& s : rec.steps()) names.push_back(s.event.name);
    EXPECT_EQ(names, c.steps) << backend->name();
    for (const auto& s : rec.steps()) {
      const auto& e = s.event;
      Shape want;
      if (e.op == "linear") want = {B, e.name == "q_proj" || e.name == "out_proj" ? c.L : c.S, E};
      if (e.name == "split_heads_q") want = {B, H, c.L, d};
      if (e.name == "split_heads_k" || e.name == "split_heads_v") want = {B, H, c.S, d};
      if (e.op == "attention_scores" || e.op == "attention_mask" || e.op == "softmax") want = {B, H, c.L, c.S};
      if (e.op == "attention_values" || e.op == "flash_attention") want = {B, H, c.L, d};
      if (e.op == "merge_heads") want = {B, c.L, E};
      if (e.op == "average_heads") want = {B, c.L, c.S};
      EXPECT_EQ(e.output.shape, want) << backend->name() << " " << e.name;
      EXPECT_EQ(e.output.dims.size(), want.size()) << e.name;
    }
    const PassEnd& end = rec.pass_end();
    EXPECT_EQ(end.clock, backend == &gpu() ? "gpu" : "host") << "lavapipe has timestamp queries";
    ASSERT_EQ(end.step_times.size(), rec.steps().size());
    for (size_t i = 0; i < end.step_times.size(); ++i) {
      EXPECT_GE(end.step_times[i].start_us, 0.0);
      EXPECT_GE(end.step_times[i].duration_us, 0.0);
      if (i > 0) {
        const StepTime& before = end.step_times[i - 1];
        EXPECT_GE(end.step_times[i].start_us, before.start_us + before.duration_us) << "steps run in order, apart";
      }
    }
    EXPECT_FALSE(end.error);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tracer, TraceSteps,
    ::testing::Values(
        // without weights the module picks the fused path by itself
        Case{"self_no_weights_fused", {.embed_dim = 8, .num_heads = 2, .batch_first = true}, 5, 5, false, false, true,
             {"q_proj", "split_heads_q", "k_proj", "split_heads_k", "v_proj", "split_heads_v", "flash_attention",
              "merge_heads", "out_proj"}},
        Case{"self_averaged", {.embed_dim = 8, .num_heads = 2, .batch_first = true}, 5, 5, false, true, true,
             steps(kCore, {"softmax", "attention_values", "merge_heads", "out_proj", "average_heads"})},
        Case{"masked_per_head", {.embed_dim = 12, .num_heads = 3, .batch_first = true}, 4, 4, true, true, false,
             steps(kCore, {"attention_mask", "softmax", "attention_values", "merge_heads", "out_proj"})},
        Case{"cross_kdim_vdim", {.embed_dim = 12, .num_heads = 4, .kdim = 5, .vdim = 7, .batch_first = true}, 3, 17,
             true, true, true,
             steps(kCore, {"attention_mask", "softmax", "attention_values", "merge_heads", "out_proj", "average_heads"})}),
    [](const auto& p) { return std::string(p.param.name); });

class TraceFiles : public testing::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    dir_ = fs::temp_directory_path() / ("vkattn_trace_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    GpuTest::TearDown();
  }
  // A causal cross-attention with a padding mask, dumped from `backend` into dir_/<name>.
  fs::path dump(Backend& backend, const std::string& name, bool values) {
    MultiHeadAttentionConfig c{.embed_dim = 12, .num_heads = 3, .kdim = 5, .batch_first = true};
    MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 7));
    ForwardOptions o;
    o.is_causal = true;
    o.key_padding_mask = testing::random_bool_mask({2, 6}, 0.3f, 8);
    TraceDump trace(dir_ / name, values, {{"test", name}});
    backend.add_tracer(trace);
    mha.forward(backend, random_tensor({2, 4, 12}, 9), random_tensor({2, 6, 5}, 10), random_tensor({2, 6, 12}, 11), o);
    backend.remove_tracer(trace);
    return dir_ / name;
  }
  fs::path dir_;
};

TEST_F(TraceFiles, ValueDumpsEqualTheReferenceAndDiffAgrees) {
  StepRecorder reference(true);
  cpu().add_tracer(reference);
  fs::path cpu_dump = dump(cpu(), "cpu", true);
  cpu().remove_tracer(reference);
  fs::path gpu_dump = dump(gpu(), "gpu", true);

  TraceFile trace = read_trace(gpu_dump);
  EXPECT_EQ(trace.backend, "gpu");
  ASSERT_EQ(trace.steps.size(), reference.steps().size());
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    const TraceStep& step = trace.steps[i];
    ASSERT_TRUE(step.file) << step.name;
    char expected_name[64];
    std::snprintf(expected_name, sizeof expected_name, "%03zu_%s.npy", i, step.name.c_str());
    EXPECT_EQ(step.file->filename(), expected_name);
    EXPECT_TRUE(testing::all_close(io::read_npy(*step.file), *reference.steps()[i].values)) << step.name;
  }
  TraceDiff diff = diff_traces(read_trace(cpu_dump), trace, 1e-5, 1e-5);
  EXPECT_FALSE(diff.first_divergent);
  for (const auto& d : diff.steps) EXPECT_TRUE(d.compared) << d.step.name;
}

TEST_F(TraceFiles, DiffNamesTheStepAndIndexOfAChangedValue) {
  fs::path a = dump(cpu(), "a", true), b = dump(gpu(), "b", true);
  TraceFile tb = read_trace(b);
  const TraceStep& softmax = tb.steps[8];
  ASSERT_EQ(softmax.name, "softmax");
  Tensor p = io::read_npy(*softmax.file);  // (2, 3, 4, 6)
  p.at({1, 2, 3, 4}) += 0.01f;
  io::write_npy(*softmax.file, p);

  TraceDiff diff = diff_traces(read_trace(a), read_trace(b), 1e-5, 1e-5);
  ASSERT_TRUE(diff.first_divergent);
  const StepDiff& d = diff.steps[*diff.first_divergent];
  EXPECT_EQ(d.step.name, "softmax");
  EXPECT_EQ(d.mismatches, 1u);
  EXPECT_EQ(d.first_mismatch, ((1u * 3 + 2) * 4 + 3) * 6 + 4);
  EXPECT_EQ(index_string(d.step.shape, static_cast<int64_t>(d.first_mismatch), d.step.dims), "(b=1, h=2, i=3, j=4)");
  EXPECT_NEAR(d.max_abs_error, 0.01, 1e-6);
  EXPECT_FLOAT_EQ(d.b_value - d.a_value, 0.01f);
}

TEST_F(TraceFiles, DiffRefusesDifferentRecipesAndNaNIsADivergence) {
  fs::path a = dump(cpu(), "a", true);
  TraceFile ta = read_trace(a), tb = ta;
  tb.steps[3].shape = {2, 3, 5, 4};
  EXPECT_THROW(diff_traces(ta, tb, 1e-5, 1e-5), FileError);
  Tensor v = io::read_npy(*ta.steps[11].file);
  v.data[0] = NAN;
  fs::copy(a, dir_ / "nan", fs::copy_options::recursive);
  io::write_npy(dir_ / "nan" / ta.steps[11].file->filename(), v);
  TraceDiff diff = diff_traces(ta, read_trace(dir_ / "nan"), 1e-5, 1e-5);
  ASSERT_TRUE(diff.first_divergent);
  EXPECT_EQ(diff.steps[*diff.first_divergent].step.index, 11);
}

TEST_F(TraceFiles, TimelineHasOneCompleteEventPerStepWithGpuTimes) {
  fs::path dir = dump(gpu(), "gpu", false);
  std::ifstream in(dir / "timeline.json");
  auto timeline = nlohmann::json::parse(in);  // throws if it is not JSON
  std::ifstream trace_in(dir / "trace.json");
  auto trace = nlohmann::json::parse(trace_in);
  EXPECT_EQ(trace["format"], "vkattn-trace");
  EXPECT_EQ(trace["clock"], "gpu");
  EXPECT_EQ(trace["config"]["test"], "gpu");
  size_t complete = 0;
  for (const auto& e : timeline["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["name"], trace["steps"][complete]["name"]);
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_TRUE(e["args"].contains("output"));
    ++complete;
  }
  EXPECT_EQ(complete, trace["steps"].size());
  EXPECT_EQ(complete, 13u);
  EXPECT_FALSE(trace["steps"][0]["output"].contains("file")) << "shapes only: no value files";
}

TEST_F(TraceFiles, ShapeOnlyTracingReadsNothingBack) {
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 3));
  TraceDump trace(dir_ / "shapes", false);
  gpu().add_tracer(trace);
  ForwardOptions o;
  o.need_weights = false;
  uint64_t before = gpu().recorder().submissions();
  mha.forward(gpu(), random_tensor({1, 3, 8}, 4), o);
  EXPECT_EQ(gpu().recorder().submissions() - before, 1u) << "the output's readback only";
  gpu().remove_tracer(trace);
}

TEST_F(TraceFiles, EveryDispatchCarriesADebugLabelNamedAfterItsStep) {
  ASSERT_TRUE(gpu().context().debug_labels()) << "the tests run with the validation layer, which brings VK_EXT_debug_utils";
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .add_bias_kv = true, .add_zero_attn = true, .kdim = 3,
                             .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 3));
  StepRecorder steps(false);
  gpu().add_tracer(steps);
  mha.forward(gpu(), random_tensor({2, 3, 8}, 4), random_tensor({2, 5, 3}, 5), random_tensor({2, 5, 8}, 6));
  gpu().remove_tracer(steps);
  std::vector<std::string> names, dispatched;
  for (const auto& step : steps.steps()) {
    names.push_back(step.event.name);
    if (step.event.folded.empty()) dispatched.push_back(step.event.name);
  }
  ASSERT_EQ(names.size(), 16u);
  EXPECT_EQ(dispatched.size(), 14u) << "split_heads_q (into q_proj's store) and merge_heads (into out_proj's load)";
  EXPECT_EQ(gpu().recorder().pass_labels(), dispatched) << "a folded layout step has no dispatch";
}

// A tracer that fails at one step, as a full disk would.
class FailAt : public Tracer {
 public:
  explicit FailAt(std::string step) : step_(std::move(step)) {}
  void on_step(const StepEvent& e) override {
    if (e.name == step_) throw std::runtime_error("disk full while tracing");
  }

 private:
  std::string step_;
};

TEST_F(TraceFiles, AFailedPassKeepsItsTraceAndTheError) {
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 3));
  TraceDump trace(dir_ / "failed", true);
  FailAt fail("softmax");
  gpu().add_tracer(trace);
  gpu().add_tracer(fail);
  EXPECT_THROW(mha.forward(gpu(), random_tensor({1, 3, 8}, 4)), std::runtime_error);
  gpu().remove_tracer(fail);

  TraceFile t = read_trace(dir_ / "failed");
  ASSERT_EQ(t.steps.size(), 8u) << "q_proj … softmax";
  EXPECT_EQ(t.steps.back().name, "softmax");
  EXPECT_TRUE(fs::exists(*t.steps.back().file));
  ASSERT_TRUE(t.error);
  EXPECT_EQ(*t.error, "disk full while tracing");

  // An error in the inputs: no step ran, the trace says why.
  ForwardOptions o;
  o.key_padding_mask = Tensor({1, 4}, DType::boolean);
  EXPECT_THROW(mha.forward(gpu(), random_tensor({1, 3, 8}, 4), o), ShapeError);
  gpu().remove_tracer(trace);
  t = read_trace(dir_ / "failed");
  EXPECT_TRUE(t.steps.empty());
  ASSERT_TRUE(t.error);
  EXPECT_NE(t.error->find("key_padding_mask (1, 4)"), std::string::npos) << *t.error;
  EXPECT_FALSE(fs::exists(dir_ / "failed" / "007_softmax.npy")) << "the earlier pass's values are gone";
}

TEST(StepTimes, AStepNeverEndsAfterItsEndSoTheNextStartsNoEarlier) {
  // 127.252 - 61.043 rounds up, and 61.043 plus it is one ulp past 127.252: the next step,
  // starting at 127.252, would begin before this one ended (a CI run failed on this once)
  ASSERT_GT(61.043 + (127.252 - 61.043), 127.252);
  const StepTime t = StepTime::between(61.043, 127.252);
  EXPECT_EQ(t.start_us, 61.043);
  EXPECT_LE(t.start_us + t.duration_us, 127.252);
  EXPECT_NEAR(t.duration_us, 127.252 - 61.043, 1e-9);
  std::mt19937 random(7);
  std::uniform_real_distribution<double> at(0.0, 10000.0);
  for (int i = 0; i < 10000; ++i) {
    const double a = at(random), b = at(random);
    const StepTime s = StepTime::between(std::min(a, b), std::max(a, b));
    ASSERT_LE(s.start_us + s.duration_us, std::max(a, b)) << a << " " << b;
    ASSERT_GE(s.duration_us, 0.0);
  }
}

TEST(Passes, ANestedPassIsPartOfTheOuterOneAndAViewIsNoStep) {
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 3));
  ReferenceBackend cpu;
  StepRecorder steps(false);
  cpu.add_tracer(steps);
  ForwardOptions o;
  o.need_weights = false;
  o.attention = AttentionPath::unfused;
  cpu.begin_pass("two forwards");
  mha.forward(cpu, random_tensor({1, 3, 8}, 4), o);
  Value x = cpu.upload("x", random_tensor({1, 3, 2, 4}, 5));                  // (B, T, H, d)
  Value heads = cpu.split_heads("split_heads_x", view(x, {1, 3, 8}), 2);  // viewed as (B, T, E)
  mha.forward(cpu, random_tensor({1, 3, 8}, 6), o);
  cpu.end_pass();
  ASSERT_EQ(steps.steps().size(), 23u) << "11 + 1 + 11 steps, one pass";
  for (size_t i = 0; i < steps.steps().size(); ++i) EXPECT_EQ(steps.steps()[i].event.index, static_cast<int>(i));
  EXPECT_EQ(steps.pass_end().step_times.size(), 23u);
  EXPECT_EQ(heads.shape, (Shape{1, 2, 3, 4}));
  EXPECT_THROW(view(x, {1, 3, 7}), ShapeError);
}

TEST(ConsoleTracer, PrintsEveryStepWithTimesAndValuesAndTheError) {
  MultiHeadAttentionConfig c{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 3));
  ReferenceBackend cpu;
  std::ostringstream out;
  ConsoleTracer console(out, true);
  FailAt fail("merge_heads");
  cpu.add_tracer(console);
  cpu.add_tracer(fail);
  EXPECT_THROW(mha.forward(cpu, random_tensor({1, 3, 8}, 4)), std::runtime_error);
  std::string text = out.str();
  EXPECT_NE(text.find("host µs"), std::string::npos) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(\n7 +softmax +\(1, 2, 3, 3\) -> \(1, 2, 3, 3\) +[\d.]+\n)"))) << text;
  EXPECT_NE(text.find(" mean 0.3333"), std::string::npos) << "softmax rows of 3 sum to 1:\n" << text;
  EXPECT_NE(text.find("stopped after 10 steps: disk full while tracing"), std::string::npos) << text;
}

// ---- StepTable: the table every step printer shares ----

StepEvent event_of(int index, std::string name, std::string op, std::vector<Shape> inputs, Shape output) {
  StepEvent e;
  e.index = index;
  e.name = std::move(name);
  e.op = std::move(op);
  for (auto& shape : inputs) e.inputs.push_back({"", std::move(shape)});
  e.output.shape = std::move(output);
  return e;
}

TEST(StepTable, FitsItsWidthByWrappingShapesAtAShapesBoundaryAndCountsCodePoints) {
  EXPECT_EQ(display_width("gpu µs"), 6u);
  EXPECT_EQ(display_width("Q·Kᵀ/√d"), 7u);
  StepTable table({"gpu µs", "cpu µs"}, "max |gpu - cpu|", 100);
  table.add(event_of(0, "layers.0.self_attn.q_proj", "linear", {{2, 10, 512}, {512, 512}, {512}}, {2, 10, 512}),
            {"685.3", "2936.2"}, "5.36e-07");
  table.add(event_of(1, "layers.0.self_attn.softmax", "softmax", {{2, 8, 10, 10}}, {2, 8, 10, 10}), {"65.8", "26.6"},
            "2.98e-08");
  std::ostringstream out;
  table.print(out);
  std::istringstream lines(out.str());
  std::vector<std::string> all;
  for (std::string line; std::getline(lines, line);) all.push_back(line);
  // header, q_proj and its shapes' second line, softmax and its second line: 27 columns for shapes
  ASSERT_EQ(all.size(), 5u) << out.str();
  for (const auto& line : all) EXPECT_LE(display_width(line), 100u) << out.str();
  EXPECT_EQ(all[0].find("#  step"), 0u) << out.str();
  EXPECT_NE(all[1].find("0  layers.0.self_attn.q_proj (linear)  (2, 10, 512) (512, 512) "), std::string::npos)
      << out.str();
  EXPECT_NE(all[1].find("685.3  2936.2  5.36e-07"), std::string::npos) << out.str();
  // the continuation starts under the shapes column, with the next whole shape
  EXPECT_EQ(all[2].find_first_not_of(' '), all[0].find("inputs")) << out.str();
  EXPECT_EQ(all[2].substr(all[2].find_first_not_of(' ')), "(512,) -> (2, 10, 512)") << out.str();
  EXPECT_NE(all[3].find("layers.0.self_attn.softmax "), std::string::npos) << "its name says its op:\n" << out.str();
  EXPECT_EQ(all[3].find("(softmax)"), std::string::npos) << out.str();
  EXPECT_EQ(table.step_column(), 3u);
}

// ---- SideBySide: two recorded passes zipped ----

class SideBySideTest : public testing::GpuTest {
 protected:
  // A causal cross-attention with per-head weights: every kind of step, on both backends.
  void run_both(StepRecorder& gpu_steps, StepRecorder& cpu_steps) {
    MultiHeadAttentionConfig c{.embed_dim = 12, .num_heads = 3, .kdim = 5, .vdim = 7, .batch_first = true};
    MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 5));
    ForwardOptions o{.need_weights = true, .average_attn_weights = false, .is_causal = true};
    Tensor q = random_tensor({2, 3, 12}, 6), k = random_tensor({2, 17, 5}, 7), v = random_tensor({2, 17, 7}, 8);
    ReferenceBackend cpu;
    cpu.add_tracer(cpu_steps);
    gpu().add_tracer(gpu_steps);
    mha.forward(gpu(), q, k, v, o);
    mha.forward(cpu, q, k, v, o);
    gpu().remove_tracer(gpu_steps);
  }
};

TEST_F(SideBySideTest, GpuAgreesWithTheReferenceAtEveryStepAndTheTableShowsEach) {
  StepRecorder gpu_steps(true), cpu_steps(true);
  run_both(gpu_steps, cpu_steps);
  SideBySide table(gpu_steps, cpu_steps);
  EXPECT_TRUE(table.agree());
  EXPECT_FALSE(table.first_divergent());
  ASSERT_EQ(table.rows().size(), 12u);
  for (const auto& row : table.rows()) {
    ASSERT_TRUE(row.diff) << row.event().name;
    EXPECT_LE(row.diff->max_abs_error, 1e-5) << row.event().name;
    EXPECT_TRUE(row.tested_time && row.reference_time) << row.event().name;
  }
  std::ostringstream out;
  table.print(out);
  EXPECT_TRUE(std::regex_search(
      out.str(), std::regex(R"(\n7 +attention_mask +\(2, 3, 3, 17\) -> \(2, 3, 3, 17\) +[\d.]+ +[\d.]+  \d\.\d\de-\d\d\n)")))
      << out.str();
  EXPECT_TRUE(std::regex_search(out.str(), std::regex(R"(\n0 +q_proj \(linear\) +\(2, 3, 12\) \(12, 12\) \(12,\) -> \(2, 3, 12\) )")))
      << "a step whose name does not say its op shows it:\n" << out.str();
  EXPECT_NE(out.str().find("every step agrees: gpu and cpu within atol 1e-05 + rtol 1e-05 * |cpu|"), std::string::npos) << out.str();
}

TEST(StepTable, AStepsMicrosecondsTakeAtMostTheHeadersSixColumns) {
  EXPECT_EQ(step_microseconds(0.0), "0.0");
  EXPECT_EQ(step_microseconds(12.34), "12.3");
  EXPECT_EQ(step_microseconds(9999.9), "9999.9");
  EXPECT_EQ(step_microseconds(9999.96), "10000");
  EXPECT_EQ(step_microseconds(123456.4), "123456");
  EXPECT_EQ(step_microseconds(999999.4), "999999");
  EXPECT_EQ(step_microseconds(999999.6), "1e+06");
  EXPECT_EQ(step_microseconds(2.4e9), "2e+09");
}

TEST_F(SideBySideTest, ASlowStepDoesNotWidenTheTable) {
  // On a busy machine a step took 10 ms and more: its time had an extra digit, and lesson 09's
  // table a line of 101 columns. Times print in the header's 6 characters, whatever they are.
  StepRecorder gpu_steps(true), cpu_steps(true);
  run_both(gpu_steps, cpu_steps);
  auto widest = [&](double us) {
    PassEnd end = gpu_steps.pass_end();
    for (StepTime& t : end.step_times) t.duration_us = us;
    StepRecorder slow(true);
    replay(gpu_steps, slow);
    slow.on_pass_end(end);
    std::ostringstream out;
    SideBySide(slow, cpu_steps).print(out);
    size_t widest_line = 0;
    std::istringstream lines(out.str());
    for (std::string line; std::getline(lines, line);) widest_line = std::max(widest_line, display_width(line));
    return std::pair{widest_line, out.str()};
  };
  const auto [fast, fast_table] = widest(12.3);
  for (double us : {9999.96, 12345.6, 999999.4, 1.5e6, 3e9}) {
    const auto [slow, slow_table] = widest(us);
    EXPECT_EQ(slow, fast) << us << " µs:\n" << slow_table;
  }
  const auto [tenths, tenths_table] = widest(9999.9);
  EXPECT_NE(tenths_table.find(" 9999.9 "), std::string::npos) << tenths_table;
  const auto [whole, whole_table] = widest(123456.4);
  EXPECT_NE(whole_table.find(" 123456 "), std::string::npos) << whole_table;
  const auto [seconds, seconds_table] = widest(2.4e6);
  EXPECT_NE(seconds_table.find(" 2e+06 "), std::string::npos) << seconds_table;
}

TEST_F(SideBySideTest, NamesTheFirstStepThatDivergesWithItsIndexAndValues) {
  StepRecorder gpu_steps(true), cpu_steps(true);
  run_both(gpu_steps, cpu_steps);
  // Replay the GPU's pass with one softmax weight changed at (b=1, h=2, i=0, j=4).
  StepRecorder broken(true);
  broken.on_pass("forward", "gpu", "replayed");
  for (const auto& step : gpu_steps.steps()) {
    Tensor values = *step.values;
    if (step.event.name == "softmax") values.at({1, 2, 0, 4}) += 0.25f;
    StepEvent event = step.event;
    event.values = &values;
    broken.on_step(event);
  }
  broken.on_pass_end(gpu_steps.pass_end());
  SideBySide table(broken, cpu_steps);
  EXPECT_FALSE(table.agree());
  ASSERT_TRUE(table.first_divergent());
  EXPECT_EQ(table.rows()[*table.first_divergent()].event().name, "softmax");
  EXPECT_EQ(table.rows()[*table.first_divergent()].diff->mismatches, 1u);
  std::ostringstream out;
  table.print(out);
  EXPECT_NE(out.str().find("first divergent step: 8 softmax (softmax), 1 of 306 elements"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("= (b=1, h=2, i=0, j=4): gpu = "), std::string::npos) << out.str();
}

TEST_F(SideBySideTest, AFailedPassShowsHowFarItGotAndNeverAgrees) {
  StepRecorder gpu_steps(true), cpu_steps(true);
  FailAt fail("merge_heads");
  gpu().add_tracer(fail);
  EXPECT_THROW(run_both(gpu_steps, cpu_steps), std::runtime_error);
  gpu().remove_tracer(fail);
  gpu().remove_tracer(gpu_steps);
  // Steps 0-9 were recorded; at merge_heads (10) the tracer attached before the recorder threw.
  ASSERT_EQ(gpu_steps.steps().size(), 10u);
  ASSERT_TRUE(gpu_steps.pass_end().error);
  // Even against itself, a failed pass does not agree: its steps match, its end does not count.
  SideBySide table(gpu_steps, gpu_steps);
  EXPECT_FALSE(table.agree()) << "a failed pass agrees with nothing";
  std::ostringstream out;
  table.print(out);
  EXPECT_NE(out.str().find("gpu stopped after 10 steps: "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("disk full while tracing"), std::string::npos) << out.str();
}

// A check report prints both values of the first differing element, whatever they are: its lines
// fit 100 columns for values of every width, and NaN and infinities read as Python prints them.
// ---- the roofline: what each step must do at the least -------------------------------------------
StepEvent step(const std::string& op, std::vector<Shape> inputs, Shape output) {
  StepEvent e{.name = op, .op = op};
  for (Shape& shape : inputs) e.inputs.push_back({.shape = std::move(shape)});
  e.output.shape = std::move(output);
  return e;
}

TEST(Roofline, CountsTheProductsMultiplyAddsAndEveryStepsBytes) {
  // x (2, 5, 8) · W (4, 8)ᵀ + b: 2·40·8 operations, 80 + 32 + 4 + 40 numbers
  const StepCost linear = step_cost(step("linear", {{2, 5, 8}, {4, 8}, {4}}, {2, 5, 4}));
  EXPECT_EQ(linear.flops, 640);
  EXPECT_EQ(linear.bytes, 4 * 156);
  // Q (1, 2, 5, 4) · K (1, 2, 3, 4)ᵀ: 30 scores of 4 products; P (1, 2, 5, 3) · V: 40 of 3
  EXPECT_EQ(step_cost(step("attention_scores", {{1, 2, 5, 4}, {1, 2, 3, 4}}, {1, 2, 5, 3})).flops, 240);
  EXPECT_EQ(step_cost(step("attention_values", {{1, 2, 5, 3}, {1, 2, 3, 4}}, {1, 2, 5, 4})).flops, 240);
  // both, over 3 keys of one shared head: 4·40·3
  EXPECT_EQ(step_cost(step("flash_attention", {{1, 2, 5, 4}, {1, 1, 3, 4}, {1, 1, 3, 4}}, {1, 2, 5, 4})).flops, 480);
  const StepCost softmax = step_cost(step("softmax", {{1, 2, 5, 3}}, {1, 2, 5, 3}));
  EXPECT_EQ(softmax.flops, 0) << "counted by its bytes";
  EXPECT_EQ(softmax.bytes, 4 * 60);
  StepEvent folded = step("split_heads", {{2, 5, 4}}, {2, 2, 5, 2});
  folded.folded = "folded into q_proj's store";
  EXPECT_EQ(step_cost(folded).bytes, 0);
  // at 1000 operations and 100 bytes a second: the linear's bytes take longer than its sums
  EXPECT_DOUBLE_EQ(roofline_seconds(linear, {.flops = 1e3, .bytes = 1e2}), 6.24);
  EXPECT_DOUBLE_EQ(roofline_seconds(linear, {.flops = 1e2, .bytes = 1e4}), 6.4);
}

// Over a real forward's steps, the operations add up to the forward's: the four projections,
// Q·Kᵀ and P·V, as `vkattn bench` counts them (cross-attention, L 7, S 3, E 12).
TEST(Roofline, AForwardsStepsAddUpToItsMultiplyAdds) {
  const MultiHeadAttentionConfig c{.embed_dim = 12, .num_heads = 3, .batch_first = true};
  const MultiHeadAttention mha(c, MultiHeadAttentionWeights::random(c, 1));
  for (AttentionPath path : {AttentionPath::unfused, AttentionPath::fused}) {
    ReferenceBackend cpu;
    StepRecorder steps(false);
    cpu.add_tracer(steps);
    ForwardOptions options{.need_weights = false, .attention = path};
    (void)mha.forward(cpu, random_tensor({2, 7, 12}, 2), random_tensor({2, 3, 12}, 3), random_tensor({2, 3, 12}, 4),
                      options);
    double flops = 0;
    for (const auto& s : steps.steps()) flops += step_cost(s.event).flops;
    const double B = 2, L = 7, S = 3, E = 12;
    EXPECT_EQ(flops, 2 * B * (L * E * E + 2 * S * E * E + L * E * E) + 4 * B * L * S * E) << attention_path_name(path);
  }
}

// A Llama's step names run past the name column (layers.0.self_attn.rotary_embedding_q): such a
// name has a line of its own, and every row's shape, yours, error and verdict stay in their columns.
TEST(CheckReportText, LongStepNamesKeepTheColumnsAligned) {
  CheckReport report;
  report.backend = "cpu";
  report.device = "reference (C++ loops)";
  report.atol = report.rtol = 1e-4;
  for (const char* name : {"embed_tokens", "layers.0.self_attn.split_heads_q", "layers.0.self_attn.rotary_embedding_q",
                           "layers.0.self_attn.q_proj", "layers.11.post_attention_layernorm"}) {
    StepCheck step;
    step.index = static_cast<int>(report.steps.size());
    step.name = name;
    step.shape = step.yours.emplace(Shape{1, 4, 6, 16});
    step.dims = {"b", "h", "t", "c"};
    step.verdict = StepVerdict::agrees;
    step.diff = ValueDiff{};
    report.steps.push_back(step);
  }
  const std::string text = report.text();
  std::istringstream lines(text);
  std::vector<size_t> shape_columns, verdict_columns;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_LE(line.size(), 100u) << line;
    if (line.find("(b=1") != std::string::npos) shape_columns.push_back(line.find("(b=1"));
    if (line.find("agrees") != std::string::npos) verdict_columns.push_back(line.find("agrees"));
  }
  ASSERT_EQ(shape_columns.size(), 5u) << text;
  EXPECT_EQ(std::set<size_t>(shape_columns.begin(), shape_columns.end()).size(), 1u) << text;
  EXPECT_EQ(std::set<size_t>(verdict_columns.begin(), verdict_columns.end()).size(), 1u) << text;
  EXPECT_NE(text.find("\n2   layers.0.self_attn.rotary_embedding_q\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n0   embed_tokens"), std::string::npos) << text;
}

TEST(CheckReportText, FitsOneHundredColumnsForAnyValueAndPrintsNaNAsPython) {
  const double tiny = -1.234567890123e-38, huge = -3.402823466e38, nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<double, double>> pairs = {
      {-0.008269936, -0.08462802}, {tiny, huge}, {huge, tiny}, {nan, -inf}, {inf, nan}, {-1.0 / 3, 2.0 / 3}};
  for (const auto& [yours, theirs] : pairs) {
    CheckReport report;
    report.backend = "gpu";
    report.device = "llvmpipe (LLVM 15.0.6, 256 bits)";
    report.atol = report.rtol = 1e-4;
    StepCheck step;
    step.index = 13;
    step.name = "blocks.11.attn.attention_values";
    step.op = "attention_values";
    step.shape = {4096, 128, 16384, 16384};
    step.dims = {"b", "h", "i", "c"};
    step.yours = step.shape;
    step.verdict = StepVerdict::differs;
    step.diff = ValueDiff{};
    step.diff->mismatches = 4398046511104;
    step.diff->max_abs_error = std::isnan(yours - theirs) ? inf : std::abs(yours - theirs);
    step.diff->a_value = static_cast<float>(yours);
    step.diff->b_value = static_cast<float>(theirs);
    step.where = "(b=4095, h=127, i=16383, c=16383)";
    step.diagnosis = "yours is 0.5 × vkattn's everywhere: a constant factor";
    report.steps = {step};
    report.first_divergent = 0;
    const std::string text = report.text();
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      EXPECT_LE(line.size(), 100u) << "yours " << yours << ", vkattn's " << theirs << ":\n" << line;
    }
    EXPECT_EQ(text.find("-nan"), std::string::npos) << text;
    if (std::isnan(yours) || std::isnan(theirs)) {
      EXPECT_NE(text.find(" nan"), std::string::npos) << text;
    }
    if (std::isinf(theirs)) {
      EXPECT_NE(text.find("vkattn's -inf"), std::string::npos) << text;
    }
    if (yours == tiny) {
      EXPECT_NE(text.find("yours -1.234568e-38"), std::string::npos) << text;
    }
  }
}

// What check knows is one list: each diagnosis once, by a name code and docs can use, with every
// field a learner reads filled in.
TEST(Diagnoses, EachIsNamedOnceWithItsStepsMistakeCulpritAndFix) {
  std::set<std::string_view> names;
  for (const Diagnosis& d : diagnoses()) {
    EXPECT_TRUE(names.insert(d.id).second) << d.id << " is listed twice";
    EXPECT_FALSE(d.steps.empty() || d.mistake.empty() || d.culprit.empty() || d.fix.empty()) << d.id;
    EXPECT_EQ(diagnosis_named(d.id).id, d.id);
  }
  EXPECT_GE(names.size(), 20u);
  EXPECT_THROW(diagnosis_named("scale_by_pi"), std::out_of_range);
}

}  // namespace
}  // namespace vkattn
