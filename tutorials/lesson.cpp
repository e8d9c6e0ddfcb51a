#include "tutorials/lesson.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "vkattn/backends/make_backend.h"
#include "vkattn/tracing/side_by_side.h"

namespace vkattn::tutorial {

Lesson::Lesson(std::unique_ptr<Backend> gpu, std::filesystem::path images)
    : gpu_(std::move(gpu)), images_(std::move(images)) {}

void Lesson::traced(Backend& backend, StepRecorder& steps, const std::string& heading,
                    const std::function<void(Backend&)>& run) {
  backend.add_tracer(steps);
  backend.begin_pass(heading);
  try {
    run(backend);
  } catch (const std::exception& e) {
    backend.end_pass(e.what());
    backend.remove_tracer(steps);
    ConsoleTracer console(std::cout);  // what the failed pass reached, then the error
    console.on_pass(heading, backend.name(), backend.device_name());
    for (const auto& step : steps.steps()) console.on_step(step.event);
    console.on_pass_end(steps.pass_end());
    throw;
  }
  backend.end_pass();
  backend.remove_tracer(steps);
}

void Lesson::compare(const std::string& heading, const StepRecorder& gpu_steps, const StepRecorder& cpu_steps) {
  ++parts_;
  // A GPU sums in its own order and contracts a·b + c into one rounding: on an NVIDIA H100,
  // lesson 02's unscaled d = 64 scores (up to ±22) came out 1.4e-5 from the reference after
  // attention_values, a relative 4e-5: float32 rounding, not a bug. 1e-4 leaves room for it;
  // lavapipe, which sums as the reference does, agrees within 1e-6.
  SideBySide table(gpu_steps, cpu_steps, 1e-4, 1e-4);
  std::cout << "\n== part " << parts_ << ": " << heading << "\n";
  table.print(std::cout, true);
  if (table.agree()) ++parts_agreeing_;
  for (const auto& row : table.rows())
    if (row.diff) worst_ = std::max(worst_, row.diff->max_abs_error);
}

void Lesson::say(const std::string& text) const { std::cout << "\n" << text << "\n"; }

void Lesson::grid(const std::string& caption, const Tensor& t, const Shape& plane, int precision) const {
  const int64_t R = t.rank() >= 2 ? t.shape[t.shape.size() - 2] : 1, C = t.shape.back();
  int64_t offset = 0, stride = R * C;
  for (size_t k = plane.size(); k-- > 0;) {
    offset += plane[k] * stride;
    stride *= t.shape[k];
  }
  const bool mask = t.dtype == DType::boolean;
  const int width = mask ? 2 : precision + 5;
  std::cout << caption << "\n" << std::string(5, ' ');
  for (int64_t j = 0; j < C; ++j) std::cout << std::setw(width) << j;
  std::cout << "\n";
  std::ostringstream rows;
  rows << std::fixed << std::setprecision(precision);
  for (int64_t i = 0; i < R; ++i) {
    rows << std::setw(4) << i << " ";
    for (int64_t j = 0; j < C; ++j) {
      float v = t.data[static_cast<size_t>(offset + i * C + j)];
      if (mask) {
        rows << std::setw(width) << (v != 0.0f ? "x" : ".");
      } else {
        rows << std::setw(width) << v;
      }
    }
    rows << "\n";
  }
  std::cout << rows.str();
}

void Lesson::images(const std::string& stem, const Tensor& t, const std::vector<std::string>& dims,
                    const io::HeatmapLabels& labels) const {
  if (images_.empty()) return;
  std::filesystem::create_directories(images_);
  auto paths = io::write_heatmaps(images_, stem, t, dims, labels);
  std::cout << "(" << paths.size() << " heatmap" << (paths.size() > 1 ? "s" : "") << ": " << (images_ / stem).string()
            << "*.svg)\n";
}

int Lesson::finish() const {
  const bool ok = parts_ > 0 && parts_agreeing_ == parts_;
  std::cout << "\n"
            << (ok ? "CPU and GPU agree" : "CPU and GPU DISAGREE") << " at every step of " << parts_agreeing_ << " of "
            << parts_ << " parts (largest |gpu - cpu| " << std::scientific << std::setprecision(2) << worst_ << ")\n";
  return ok ? 0 : 1;
}

int run(int argc, char** argv, const std::string& title, const std::function<void(Lesson&)>& lesson) {
  CLI::App app(title, std::filesystem::path(argv[0]).filename().string());
  std::string images, device;
  app.add_option("--images", images, "DIR: write the lesson's attention weights and masks as SVG heatmaps");
  app.add_option("--device", device, "GPU index or name substring (see vkattn devices); default: the best");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n";
    return 2;
  }
  try {
    Lesson l(make_backend("gpu", device), images);
    std::cout << title << "\n";
    lesson(l);
    return l.finish();
  } catch (const std::exception& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace vkattn::tutorial
