#pragma once
// What every lesson shares: its command line (--images DIR, --values, --report FILE, --device D), the CPU
// reference and a GPU, and parts. A part runs the same steps on the GPU and on the CPU, each as
// one pass traced with values, and prints every step's shapes, both times and their largest
// difference: the side-by-side view, made by the tracer (SideBySide), never by hand. Above each
// step's row it prints the lesson's words for that step: the PyTorch line, the formula, why the
// shape changes. Every step a lesson shows must have words somewhere in it, or it fails.
//
//   int main(int argc, char** argv) {
//     return vkattn::tutorial::run(argc, argv, "what this lesson teaches", [](Lesson& lesson) {
//       auto [gpu, cpu] = lesson.part("scores", [](Backend& b) { …steps…; return b.download(y); },
//                                     {{"attention_scores", "scores = Q @ K.transpose(-2, -1) …"}});
//     });
//   }
//
// Times: before its traced GPU pass a part runs its steps once untimed, which builds the
// pipelines they need (the driver compiles each shader the first time); the table shows the
// second run, and the line above it says how long the first took.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/io/heatmap.h"
#include "vkattn/io/plot.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn::tutorial {

// A lesson's words for its steps, by step name ("q_proj" also covers "self_attn.q_proj"): one or
// two short lines each, wrapped to the terminal's 100 columns.
using Notes = std::map<std::string, std::string>;

class Lesson {
 public:
  // The GPU is the device `device` names (make_backend's; empty: the best). `report`: a page
  // (FILE.html) written by finish() with every part's two passes, or empty.
  Lesson(std::string device, std::filesystem::path images, bool values, std::filesystem::path report = {},
         std::string title = {});

  // Runs `steps(Backend&)` on the GPU (once untimed, then traced), then on the CPU reference, each
  // traced pass named `heading`; prints the heading and the side-by-side table, each step's row
  // under its `notes`; returns {gpu result, cpu result}.
  template <class F>
  auto part(const std::string& heading, F&& steps, const Notes& notes = {}) {
    return run_part(heading, steps, &notes);
  }
  // A part whose table would repeat one already shown: run and checked the same way, printed as
  // one line (its step count and agreement) after `why`, which says what a table would show.
  template <class F>
  auto check(const std::string& heading, F&& steps, const std::string& why) {
    say(why);
    return run_part(heading, steps, nullptr);
  }

  // A paragraph of the lesson's text; each line wrapped at 100 columns, indented as it starts.
  void say(const std::string& text) const;
  // A plane of `t` as a grid of numbers (or, for a bool mask, x = blocked, . = attends), rows
  // and columns labelled; `plane` indexes the leading dims (e.g. {b, h}).
  void grid(const std::string& caption, const Tensor& t, const Shape& plane = {}, int precision = 3) const;
  // With --images DIR: heatmaps of `t` (…, rows, cols), one per plane, named by `dims`.
  void images(const std::string& stem, const Tensor& t, const std::vector<std::string>& dims,
              const io::HeatmapLabels& labels) const;

  // With --images DIR: a line plot, DIR/<stem>.svg.
  void plot(const std::string& stem, const std::vector<io::PlotSeries>& series, const io::PlotLabels& labels) const;

  // With --report FILE: one more section of the page, `pass` against `against` (e.g. a broken
  // recipe's dump against a good one's), before the parts' sections.
  void report(const std::string& title, StepRecorder pass, StepRecorder against, const std::string& pass_label,
              const std::string& against_label);
  Backend& gpu() { return *gpu_; }
  // Another backend on the same device, shaped by `options` (lesson 09 times with tuning off)
  std::unique_ptr<Backend> gpu_with(const VulkanBackendOptions& options) const;
  ReferenceBackend& cpu() { return cpu_; }
  // 0 when the GPU agreed with the reference at every step of every part, else 1; says so.
  // Throws when a step was shown that the lesson's words never explained.
  int finish() const;

 private:
  template <class F>
  auto run_part(const std::string& heading, F& steps, const Notes* notes) {
    using Result = std::invoke_result_t<F&, Backend&>;
    std::optional<Result> on_gpu, on_cpu;
    const double first_run_s = untimed(*gpu_, [&](Backend& b) { steps(b); });
    StepRecorder gpu_steps(true), cpu_steps(true);
    traced(*gpu_, gpu_steps, heading, [&](Backend& b) { on_gpu.emplace(steps(b)); });
    traced(cpu_, cpu_steps, heading, [&](Backend& b) { on_cpu.emplace(steps(b)); });
    compare(heading, gpu_steps, cpu_steps, first_run_s, notes);
    if (!report_.empty()) parts_report_.push_back({heading, std::move(gpu_steps), std::move(cpu_steps), "gpu", "cpu"});
    return std::pair<Result, Result>{std::move(*on_gpu), std::move(*on_cpu)};
  }
  // Seconds that `run` took on `backend`, untraced; a failure is left for the traced pass to show.
  static double untimed(Backend& backend, const std::function<void(Backend&)>& run);
  void traced(Backend& backend, StepRecorder& steps, const std::string& heading,
              const std::function<void(Backend&)>& run);
  // The table, with `notes` above the rows (nullptr: one line instead of the table).
  void compare(const std::string& heading, const StepRecorder& gpu_steps, const StepRecorder& cpu_steps,
               double first_run_s, const Notes* notes);

  std::string device_;
  std::unique_ptr<Backend> gpu_;
  ReferenceBackend cpu_;
  std::filesystem::path images_;
  bool values_;
  std::filesystem::path report_;
  std::string title_;
  struct ReportPart {
    std::string title;
    StepRecorder pass, against;
    std::string pass_label, against_label;
  };
  std::vector<ReportPart> extra_report_, parts_report_;  // report()'s sections, then the parts'
  void write_report() const;
  int parts_ = 0, parts_agreeing_ = 0;
  double worst_ = 0;
  std::map<std::string, bool> explained_;  // each step name shown (unscoped): whether words said what it is
};

// Parses the lesson's command line (--images DIR, --values, --report FILE, --device D; --help), prints `title`, runs
// `lesson`, and returns the exit code: 0 when CPU and GPU agreed throughout, 1 when they did not
// or a step failed, 2 for a bad argument. Errors are one line on stderr.
int run(int argc, char** argv, const std::string& title, const std::function<void(Lesson&)>& lesson);

}  // namespace vkattn::tutorial
