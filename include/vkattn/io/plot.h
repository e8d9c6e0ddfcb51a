#pragma once
// Line plots as SVG: a few named series of (x, y) points on shared axes, each a coloured line
// with its points marked and its name in the legend; axes from 0 with ticks at round values.
// Lesson 07 draws time and memory against the sequence length with it.
#include <filesystem>
#include <string>
#include <vector>

namespace vkattn::io {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // as many of each; finite, y >= 0
};

struct PlotLabels {
  std::string title, x, y;  // y: the quantity with its unit, "time (ms)"
};

// The SVG text; ShapeError when a series' x and y differ in length, or nothing is to be drawn.
std::string line_plot_svg(const std::vector<PlotSeries>& series, const PlotLabels& labels);

// line_plot_svg written all-or-nothing to `path`; FileError on failure.
void write_line_plot(const std::filesystem::path& path, const std::vector<PlotSeries>& series,
                     const PlotLabels& labels);

}  // namespace vkattn::io
