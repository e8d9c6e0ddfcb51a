// Lesson 08: debugging with traces: a deliberately broken step, and how a diff of two trace
// dumps points at it.
//
// The bug is the one "Implementing multi-head self-attention from scratch" warns about: merging
// the heads with attn_output.view(B, T, E) straight from (B, H, T, d), without the
// .transpose(1, 2) first. The shapes are all right, nothing raises, the numbers are wrong. Here
// merge_heads is replaced by that wrong version (a host step under the same name), both recipes
// are dumped with their values (as `vkattn run --trace DIR --trace-values` would), and the dumps
// are compared step by step (as `vkattn diff` does): the first step that differs is the broken
// one, with the first wrong element's index in its own dims and both values. Then the same diff
// as a page to look at (what `vkattn report broken --against good` writes).
//
// Note what does NOT find it: the GPU and the CPU agree on the broken recipe. Side by side checks
// the kernels; a diff against a known-good dump checks the recipe.
//
// Run: build/bin/tutorial_08_debugging_with_traces [--images DIR] [--report FILE] [--device D]
#include <cmath>
#include <filesystem>
#include <sstream>

#include "tutorials/lesson.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/compare.h"
#include "vkattn/tracing/report.h"
#include "vkattn/tracing/trace_dump.h"

using namespace vkattn;

namespace {

const int64_t B = 2, T = 4, E = 8, H = 2;

// (B, H, T, d) -> (B, T, E) the wrong way: the same memory read as (B, T, E), no transpose.
Tensor merge_without_transpose(const std::vector<Tensor>& inputs) { return Tensor({B, T, E}, inputs[0].data); }

// The recipe of lesson 04, with merge_heads done right or wrong.
Tensor attention(Backend& b, const MultiHeadAttentionWeights& w, const Tensor& x, bool broken) {
  Value X = b.upload("x", x);
  auto project = [&](const char* step, const Value& in, const Tensor& weight, const Tensor& bias) {
    Value W = b.upload(std::string(step) + ".weight", weight), bias_value = b.upload(std::string(step) + ".bias", bias);
    return b.linear(step, in, W, &bias_value);
  };
  Value Q = b.split_heads("split_heads_q", project("q_proj", X, w.q_proj_weight, *w.q_proj_bias), H);
  Value K = b.split_heads("split_heads_k", project("k_proj", X, w.k_proj_weight, *w.k_proj_bias), H);
  Value V = b.split_heads("split_heads_v", project("v_proj", X, w.v_proj_weight, *w.v_proj_bias), H);
  Value heads = b.attention_values("attention_values", b.softmax("softmax", b.attention_scores("attention_scores", Q, K)), V);
  Value merged = broken ? b.host_step("merge_heads", "merge_heads", {&heads}, {"b", "i", "f"}, merge_without_transpose)
                        : b.merge_heads("merge_heads", heads);
  return b.download(project("out_proj", merged, w.out_proj_weight, *w.out_proj_bias));
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 08: a broken step, found by diffing two trace dumps", [](tutorial::Lesson& lesson) {
    const MultiHeadAttentionConfig config{.embed_dim = E, .num_heads = H, .batch_first = true};
    const MultiHeadAttentionWeights w = MultiHeadAttentionWeights::random(config, 1);
    const Tensor x = random_tensor({B, T, E}, 2);
    const std::filesystem::path dumps = std::filesystem::temp_directory_path() / "vkattn_tutorial_08";

    // Each recipe on both backends; the CPU's pass is also dumped, values and all.
    auto run = [&](const char* heading, const char* dump, bool broken, const tutorial::Notes* notes) {
      TraceDump trace(dumps / dump, /*values=*/true);
      AttachedTracer attached(lesson.cpu(), trace);
      auto steps = [&](Backend& b) { return attention(b, w, x, broken); };
      return notes ? lesson.part(heading, steps, *notes)
                   : lesson.check(heading, steps,
                                  "Its table would look like the one above: every step agrees, GPU with CPU, "
                                  "because both run the same broken recipe.");
    };
    lesson.say("The recipe of lesson 04 on x (2, 4, 8), 2 heads, dumped to " + (dumps / "good").string() + ":");
    const tutorial::Notes notes{
        {"q_proj", "q = self.W_q(x), and k, v below: (B, T, E) = (2, 4, 8)"},
        {"k_proj", "k = self.W_k(x)"},
        {"v_proj", "v = self.W_v(x)"},
        {"split_heads_q", ".view(B, T, H, d).transpose(1, 2): 2 heads of d = 4, (B, H, T, d)"},
        {"split_heads_k", "the same for k"},
        {"split_heads_v", "and for v"},
        {"attention_scores", "q @ k.transpose(-2, -1) / math.sqrt(4): (B, H, T, T)"},
        {"softmax", "F.softmax(dim=-1)"},
        {"attention_values", "attn @ v: (B, H, T, d)"},
        {"merge_heads", "attn_output.transpose(1, 2).contiguous().view(B, T, E): the step that will break"},
        {"out_proj", "self.W_o(...)"}};
    auto [good, good_cpu] = run("the right recipe", "good", false, &notes);
    lesson.say(
        "The same recipe with merge_heads written as attn_output.view(B, T, E), forgetting .transpose(1, 2), "
        "dumped to " + (dumps / "broken").string() + ":");
    auto [broken, broken_cpu] = run("merge_heads without the transpose", "broken", true, nullptr);

    ValueDiff outputs = compare_values(broken, good, 1e-5, 1e-5);
    std::ostringstream symptom;
    symptom << "The GPU agreed with the CPU on both. Only the outputs tell them apart: " << outputs.mismatches << " of "
            << broken.size() << " values differ, by up to " << outputs.max_abs_error << ". Which step went wrong?\n"
            << "Diff the dumps step by step (vkattn diff " << (dumps / "broken").string() << " " << (dumps / "good").string() << "):";
    lesson.say(symptom.str());

    TraceDiff diff = diff_traces(read_trace(dumps / "broken"), read_trace(dumps / "good"), 1e-5, 1e-5);
    std::ostringstream rows;
    for (const StepDiff& d : diff.steps) {
      rows << "  " << d.step.index << " " << d.step.name << " " << shape_string(d.step.shape) << ": max |broken - good| "
           << d.max_abs_error << (d.mismatches ? "  DIVERGES" : "") << "\n";
    }
    lesson.say(rows.str());
    if (!diff.first_divergent) throw std::runtime_error("the diff found no divergence; the lesson's bug is gone");
    const StepDiff& first = diff.steps[*diff.first_divergent];
    lesson.say("first divergent step: " + std::to_string(first.step.index) + " " + first.step.name + ", " +
               mismatch_report(first, first.step.shape, first.step.dims, "broken", "good", 1e-5, 1e-5));
    lesson.say(
        "Every step before merge_heads agrees exactly, so the bug is in merge_heads itself. Element (b, i, f) of "
        "its output must be head f / d's feature f % d at position i; the view without the transpose reads the "
        "(B, H, T, d) memory as if it were (B, T, H, d), so position i gets another position's features.");
    if (first.step.name != "merge_heads") throw std::runtime_error("the diff pointed at " + first.step.name);

    // The same diff, to look at: a page with every step's tensor, both dumps and |broken - good|.
    const std::filesystem::path page = dumps / "broken_against_good.html";
    StepRecorder broken_pass = load_trace(dumps / "broken"), good_pass = load_trace(dumps / "good");
    const std::string look = "merge_heads without the transpose, against the right recipe";
    write_report(page, {{look, &broken_pass, &good_pass, "broken", "good"}}, {.title = "Lesson 08: " + look});
    lesson.say("Or look at it: vkattn report " + (dumps / "broken").string() + " --against " + (dumps / "good").string() +
               " -o " + page.string() + " wrote a page (open it in a browser) with each step's tensor from both "
               "dumps and their difference. It opens at merge_heads with the element above outlined, and the "
               "|broken - good| heatmap shows the pattern rather than one cell: of each sequence's 4 × 8 outputs, "
               "only (i=0, f<4) and (i=3, f≥4) are right, where .view happens to read the right head and position; "
               "a few others differ only slightly, because attention averages similar values.");
    lesson.report(look, std::move(broken_pass), std::move(good_pass), "broken", "good");
    // The picture of it: |broken - good| at merge_heads, sequence 0, positions by features.
    const auto merged = [&](const char* dump) {
      const StepRecorder pass = load_trace(dumps / dump);
      for (const auto& step : pass.steps())
        if (step.event.name == "merge_heads" && step.values) return *step.values;
      throw std::runtime_error(std::string("no merge_heads in the ") + dump + " dump");
    };
    const Tensor wrong = merged("broken"), right = merged("good");
    Tensor difference({T, E});
    for (size_t i = 0; i < difference.data.size(); ++i) difference.data[i] = std::abs(wrong.data[i] - right.data[i]);
    lesson.images("merge_heads_difference_b0", difference, {},
                  {.title = "|broken - good| at merge_heads, sequence 0: white = the same",
                   .rows = "position i", .cols = "feature f (head f / 4)"});
  });
}
