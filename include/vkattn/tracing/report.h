#pragma once
// The trace explorer: one self-contained HTML page (no server, no network, no file beside it)
// that shows recorded passes step by step — the recipe as a column of steps with their shapes and
// times, each step's tensor as a heatmap of a 2-D slice with selectors for the leading axes, the
// value and decoded index under the pointer, and the step times as a timeline. A pass reported
// against another (CPU against GPU, a broken dump against a good one) adds a third heatmap, the
// |difference|, marks the steps within tolerance, and opens at the first divergent step with the
// element `vkattn diff` would name.
//
// The page's HTML, CSS and JavaScript are ordinary files in engine/tracing/report/, inlined into
// the library at build time; the data (shapes, times, values as base64 float32) is one JSON
// object inside the page. `vkattn report`, `--report` on run / encode / the lessons, and the
// Python package's Trace._repr_html_ all write the page here.
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "vkattn/tracing/tracer.h"

namespace vkattn {

// One section of a report: a pass, or a pass against another of the same recipe.
struct ReportSection {
  std::string title;                      // e.g. "merge_heads without the transpose"
  const StepRecorder* pass = nullptr;     // required; recorded with values for heatmaps
  const StepRecorder* against = nullptr;  // optional: compared with |pass - against|
  std::string pass_label = "A", against_label = "B";  // e.g. "gpu" and "cpu"
};

struct ReportOptions {
  std::string title = "vkattn trace";
  double atol = 1e-5, rtol = 1e-5;  // a step agrees when |a - b| <= atol + rtol·|b| everywhere
  // Values embedded at most, per step's tensor and per page. A larger tensor is shown sampled:
  // every k-th row and column (the page says which), through the first divergent element; its
  // range and max |difference| are still computed from all of its values. 2^22 cells are 16 MiB
  // of float32, 22.4 MB as base64: with the page's 23 kB of code, the bound on a report's size.
  size_t cells_per_tensor = size_t{1} << 18;
  size_t cells_per_report = size_t{1} << 22;
};

// The page. ShapeError for a section without a pass; FileError when a section's two passes
// describe different recipes (another step name, op or shape at the same position).
std::string report_html(const std::vector<ReportSection>& sections, const ReportOptions& options = {});

// report_html() written to `file` all-or-nothing (FileError when it cannot be).
void write_report(const std::filesystem::path& file, const std::vector<ReportSection>& sections,
                  const ReportOptions& options = {});

}  // namespace vkattn
