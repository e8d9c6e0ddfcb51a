#pragma once
// What every lesson shares: its command line (--images DIR, --device D), the CPU reference and a
// GPU, and parts. A part runs the same steps on the GPU and on the CPU, each as one pass traced
// with values, and prints every step's shapes, both times, both sides' leading values and their
// largest difference: the side-by-side view, made by the tracer (SideBySide), never by hand.
//
//   int main(int argc, char** argv) {
//     return vkattn::tutorial::run(argc, argv, "what this lesson teaches", [](Lesson& lesson) {
//       auto [gpu, cpu] = lesson.part("scores", [](Backend& b) { …steps…; return b.download(y); });
//     });
//   }
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/io/heatmap.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn::tutorial {

class Lesson {
 public:
  Lesson(std::unique_ptr<Backend> gpu, std::filesystem::path images);

  // Runs `steps(Backend&)` on the GPU, then on the CPU reference, each as one traced pass named
  // `heading`; prints the heading and the side-by-side table; returns {gpu result, cpu result}.
  template <class F>
  auto part(const std::string& heading, F&& steps) {
    using Result = std::invoke_result_t<F&, Backend&>;
    std::optional<Result> on_gpu, on_cpu;
    StepRecorder gpu_steps(true), cpu_steps(true);
    traced(*gpu_, gpu_steps, heading, [&](Backend& b) { on_gpu.emplace(steps(b)); });
    traced(cpu_, cpu_steps, heading, [&](Backend& b) { on_cpu.emplace(steps(b)); });
    compare(heading, gpu_steps, cpu_steps);
    return std::pair<Result, Result>{std::move(*on_gpu), std::move(*on_cpu)};
  }

  // A paragraph of the lesson's text.
  void say(const std::string& text) const;
  // A plane of `t` as a grid of numbers (or, for a bool mask, x = blocked, . = attends), rows
  // and columns labelled; `plane` indexes the leading dims (e.g. {b, h}).
  void grid(const std::string& caption, const Tensor& t, const Shape& plane = {}, int precision = 3) const;
  // With --images DIR: heatmaps of `t` (…, rows, cols), one per plane, named by `dims`.
  void images(const std::string& stem, const Tensor& t, const std::vector<std::string>& dims,
              const io::HeatmapLabels& labels) const;

  Backend& gpu() { return *gpu_; }
  ReferenceBackend& cpu() { return cpu_; }
  // 0 when the GPU agreed with the reference at every step of every part, else 1; says so.
  int finish() const;

 private:
  void traced(Backend& backend, StepRecorder& steps, const std::string& heading,
              const std::function<void(Backend&)>& run);
  void compare(const std::string& heading, const StepRecorder& gpu_steps, const StepRecorder& cpu_steps);

  std::unique_ptr<Backend> gpu_;
  ReferenceBackend cpu_;
  std::filesystem::path images_;
  int parts_ = 0, parts_agreeing_ = 0;
  double worst_ = 0;
};

// Parses the lesson's command line (--images DIR, --device D; --help), prints `title`, runs
// `lesson`, and returns the exit code: 0 when CPU and GPU agreed throughout, 1 when they did not
// or a step failed, 2 for a bad argument. Errors are one line on stderr.
int run(int argc, char** argv, const std::string& title, const std::function<void(Lesson&)>& lesson);

}  // namespace vkattn::tutorial
