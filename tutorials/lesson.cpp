#include "tutorials/lesson.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include "engine/io/file.h"
#include "vkattn/backends/make_backend.h"
#include "vkattn/tracing/report.h"
#include "vkattn/tracing/side_by_side.h"
#include "vkattn/tracing/step_table.h"

namespace vkattn::tutorial {

namespace {

constexpr size_t kColumns = 100;  // a terminal's width: no line of a lesson is wider

// GPU and CPU agree when |gpu - cpu| <= kTolerance + kTolerance·|cpu|. A GPU sums in its own
// order and contracts a·b + c into one rounding: on an NVIDIA H100, lesson 02's unscaled d = 64
// scores (up to ±22) came out 1.4e-5 from the reference after attention_values, a relative 4e-5:
// float32 rounding, not a bug. 1e-4 leaves room for it; lavapipe, which sums as the reference
// does, agrees within 1e-6.
constexpr double kTolerance = 1e-4;

// `line` split at its spaces, but not those inside parentheses: "(B, H, T, d)" stays whole.
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (char c : line) {
    depth += c == '(' ? 1 : c == ')' && depth > 0 ? -1 : 0;
    if (c == ' ' && depth == 0) {
      if (!out.back().empty()) out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

// `text` with every line wider than kColumns broken at spaces; a broken line's continuation is
// indented two more than the line's own indent, and every line `indent` more.
std::string wrap(const std::string& text, size_t indent = 0) {
  std::istringstream lines(text);
  std::string line, out;
  while (std::getline(lines, line)) {
    if (indent + display_width(line) <= kColumns) {  // fits: kept as written, its spacing too
      out += std::string(indent, ' ') + line + "\n";
      continue;
    }
    const size_t own = line.find_first_not_of(' ') == std::string::npos ? 0 : line.find_first_not_of(' ');
    std::string current(indent + own, ' ');
    size_t width = indent + own;
    bool first = true;
    for (const std::string& word : words(line.substr(own))) {
      if (!first && width + 1 + display_width(word) > kColumns) {
        out += current + "\n";
        current = std::string(indent + own + 2, ' ');
        width = indent + own + 2;
        first = true;
      }
      current += (first ? "" : " ") + word;
      width += (first ? 0 : 1) + display_width(word);
      first = false;
    }
    out += current + "\n";
  }
  return out;
}

std::string seconds(double s) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(s < 0.01 ? 1 : s < 1 ? 0 : 2) << (s < 1 ? s * 1e3 : s) << (s < 1 ? " ms" : " s");
  return out.str();
}

std::string unscoped(const std::string& step) { return step.substr(step.rfind('.') + 1); }

}  // namespace

Lesson::Lesson(std::string device, std::filesystem::path images, bool values, std::filesystem::path report,
               std::string title)
    : device_(std::move(device)), gpu_(make_backend("gpu", device_)), images_(std::move(images)), values_(values),
      report_(std::move(report)), title_(std::move(title)) {
  if (!report_.empty()) io::check_output_path(report_);  // before the lesson's work, not after it
}

std::unique_ptr<Backend> Lesson::gpu_with(const VulkanBackendOptions& options) const {
  return make_backend("gpu", device_, options);
}

void Lesson::report(const std::string& title, StepRecorder pass, StepRecorder against, const std::string& pass_label,
                    const std::string& against_label) {
  if (!report_.empty()) extra_report_.push_back({title, std::move(pass), std::move(against), pass_label, against_label});
}

void Lesson::write_report() const {
  std::vector<ReportSection> sections;
  for (const auto* parts : {&extra_report_, &parts_report_}) {
    for (const auto& p : *parts) sections.push_back({p.title, &p.pass, &p.against, p.pass_label, p.against_label});
  }
  vkattn::write_report(report_, sections, {.title = title_, .atol = kTolerance, .rtol = kTolerance});
  std::cout << "(report: " << report_.string() << ", " << sections.size() << " part" << (sections.size() > 1 ? "s" : "")
            << "; open it in a browser)\n";
}

double Lesson::untimed(Backend& backend, const std::function<void(Backend&)>& run) {
  const auto start = std::chrono::steady_clock::now();
  try {
    run(backend);
  } catch (const std::exception&) {
    // the traced pass fails the same way, and shows how far it got
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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

void Lesson::compare(const std::string& heading, const StepRecorder& gpu_steps, const StepRecorder& cpu_steps,
                     double first_run_s, const Notes* notes) {
  ++parts_;
  SideBySide table(gpu_steps, cpu_steps, kTolerance, kTolerance);
  double largest = 0;
  for (const auto& row : table.rows())
    if (row.diff) largest = std::max(largest, row.diff->max_abs_error);
  worst_ = std::max(worst_, largest);
  if (table.agree()) ++parts_agreeing_;
  std::cout << "\n== part " << parts_ << ": " << heading << "\n";
  if (!notes && table.agree()) {
    std::ostringstream line;
    line << table.rows().size() << " steps on the GPU and the CPU, every one within 1e-4 (largest |gpu - cpu| "
         << std::scientific << std::setprecision(2) << largest << ")";
    std::cout << wrap(line.str());
    return;
  }
  std::cout << wrap("gpu µs: the steps' second run. The first, untimed, took " + seconds(first_run_s) +
                    ": it made the pipelines (compiled once per process, or read from the driver's disk cache)");
  table.print_header(std::cout);
  std::set<const std::string*> said;  // a note is said once a part, above the first step it names
  for (size_t i = 0; i < table.rows().size(); ++i) {
    const std::string& step = table.rows()[i].event().name;
    const std::string* note = nullptr;
    if (notes) {
      auto it = notes->find(step);
      if (it == notes->end()) it = notes->find(unscoped(step));
      if (it != notes->end() && said.insert(&it->second).second) note = &it->second;
    }
    if (note) std::cout << wrap(*note, table.step_column());
    if (notes) explained_[unscoped(step)] |= note != nullptr;  // a check() that disagreed shows its table bare
    table.print_row(std::cout, i, values_);
  }
  table.print_summary(std::cout);
}

void Lesson::say(const std::string& text) const { std::cout << "\n" << wrap(text); }

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

void Lesson::plot(const std::string& stem, const std::vector<io::PlotSeries>& series, const io::PlotLabels& labels) const {
  if (images_.empty()) return;
  std::filesystem::create_directories(images_);
  io::write_line_plot(images_ / (stem + ".svg"), series, labels);
  std::cout << "(plot: " << (images_ / (stem + ".svg")).string() << ")\n";
}

int Lesson::finish() const {
  if (!report_.empty()) write_report();
  for (const auto& [step, explained] : explained_) {
    if (!explained) throw std::logic_error("the lesson shows step '" + step + "' but never says what it is");
  }
  const bool ok = parts_ > 0 && parts_agreeing_ == parts_;
  std::cout << "\n"
            << (ok ? "CPU and GPU agree" : "CPU and GPU DISAGREE") << " at every step of " << parts_agreeing_ << " of "
            << parts_ << " parts (largest |gpu - cpu| " << std::scientific << std::setprecision(2) << worst_ << ")\n";
  return ok ? 0 : 1;
}

int run(int argc, char** argv, const std::string& title, const std::function<void(Lesson&)>& lesson) {
  CLI::App app(title, std::filesystem::path(argv[0]).filename().string());
  std::string images, device, report;
  bool values = false;
  app.add_option("--images", images, "DIR: write the lesson's pictures as SVG (heatmaps of weights and masks, plots)");
  app.add_flag("--values", values, "under every step, both sides' leading values");
  app.add_option("--report", report, "FILE.html: every part's GPU and CPU passes as one page to explore in a browser");
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
    Lesson l(device, images, values, report, title);
    std::cout << title << "\n";
    lesson(l);
    return l.finish();
  } catch (const std::exception& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace vkattn::tutorial
