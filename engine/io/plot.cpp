#include "vkattn/io/plot.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "engine/io/file.h"
#include "engine/io/svg.h"
#include "vkattn/errors.h"

namespace vkattn::io {

namespace {

constexpr double kWidth = 560, kHeight = 340, kLeft = 64, kRight = 150, kTop = 40, kBottom = 48;
const char* const kColours[] = {"#d95f02", "#1b5e9e", "#1b9e77", "#7570b3"};

// A round step for about five ticks up to `top`: 1, 2 or 5 times a power of ten.
double tick_step(double top) {
  const double raw = top / 5, power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * power) return m * power;
  return 10 * power;
}

}  // namespace

std::string line_plot_svg(const std::vector<PlotSeries>& series, const PlotLabels& labels) {
  double x_top = 0, y_top = 0;
  for (const PlotSeries& s : series) {
    if (s.x.size() != s.y.size()) {
      throw ShapeError("plot series '" + s.name + "' has " + std::to_string(s.x.size()) + " x values and " +
                       std::to_string(s.y.size()) + " y values");
    }
    for (double v : s.x) x_top = std::max(x_top, v);
    for (double v : s.y) y_top = std::max(y_top, v);
  }
  if (x_top <= 0 || y_top <= 0) throw ShapeError("plot '" + labels.title + "' has no positive point to draw");
  const double dx = tick_step(x_top), dy = tick_step(y_top);
  x_top = std::ceil(x_top / dx) * dx;
  y_top = std::ceil(y_top / dy) * dy;
  const double w = kWidth - kLeft - kRight, h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + w * x / x_top; };
  auto py = [&](double y) { return kTop + h * (1 - y / y_top); };

  std::string out = svg::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
      "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      kWidth, kHeight, kWidth, kHeight);
  out += svg::format("<text x=\"%g\" y=\"22\" font-size=\"15\">", kLeft) + svg::escape(labels.title) + "</text>\n";
  for (double x = 0; x <= x_top + dx / 2; x += dx) {
    out += svg::format("<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#ddd\"/>", px(x), kTop, px(x), kTop + h);
    out += svg::format("<text x=\"%.1f\" y=\"%g\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n", px(x),
                       kTop + h + 15, x);
  }
  for (double y = 0; y <= y_top + dy / 2; y += dy) {
    out += svg::format("<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>", kLeft, py(y), kLeft + w, py(y));
    out += svg::format("<text x=\"%g\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", kLeft - 6,
                       py(y) + 4, y);
  }
  out += svg::format("<text x=\"%g\" y=\"%g\" font-size=\"12\" text-anchor=\"middle\">", kLeft + w / 2, kHeight - 10) +
         svg::escape(labels.x) + "</text>\n";
  out += svg::format("<text transform=\"translate(16 %g) rotate(-90)\" font-size=\"12\" text-anchor=\"middle\">",
                     kTop + h / 2) +
         svg::escape(labels.y) + "</text>\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const PlotSeries& s = series[k];
    const char* colour = kColours[k % std::size(kColours)];
    std::string points;
    for (size_t i = 0; i < s.x.size(); ++i) points += svg::format("%.1f,%.1f ", px(s.x[i]), py(s.y[i]));
    out += svg::format("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colour) + points + "\"/>\n";
    for (size_t i = 0; i < s.x.size(); ++i) {
      out += svg::format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>", px(s.x[i]), py(s.y[i]), colour) +
             svg::escape(s.name) + svg::format(": %g at %g</title></circle>\n", s.y[i], s.x[i]);
    }
    const double ly = kTop + 10 + 20 * static_cast<double>(k);
    out += svg::format("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"2\"/>", kLeft + w + 14,
                       ly, kLeft + w + 34, ly, colour);
    out += svg::format("<text x=\"%g\" y=\"%g\" font-size=\"12\">", kLeft + w + 40, ly + 4) + svg::escape(s.name) +
           "</text>\n";
  }
  return out + "</svg>\n";
}

void write_line_plot(const std::filesystem::path& path, const std::vector<PlotSeries>& series, const PlotLabels& labels) {
  const std::string image = line_plot_svg(series, labels);
  write_file(path, std::as_bytes(std::span(image.data(), image.size())));
}

}  // namespace vkattn::io
