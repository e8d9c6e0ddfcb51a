#include "vkattn/io/heatmap.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>

#include "engine/io/file.h"
#include "engine/io/svg.h"
#include "vkattn/errors.h"

namespace vkattn::io {

namespace {

// White (t = 0) to dark blue (t = 1).
std::string shade(double t) {
  auto mix = [&](int from, int to) { return static_cast<int>(std::lround(from + (to - from) * t)); };
  return svg::format("#%02x%02x%02x", mix(255, 8), mix(255, 48), mix(255, 107));
}

}  // namespace

std::string heatmap_svg(const Tensor& plane, const HeatmapLabels& labels) {
  if (plane.rank() != 2) throw ShapeError("a heatmap needs a 2-D plane, not " + shape_string(plane.shape));
  const int64_t R = plane.shape[0], C = plane.shape[1];
  const bool mask = plane.dtype == DType::boolean;
  // Cells of 32 px when they fit, smaller (at least 3) so that the grid stays within ~800 px.
  const int cell = static_cast<int>(std::clamp<int64_t>(800 / std::max(R, C), 3, 32));
  const int tick_every = static_cast<int>(std::max<int64_t>(1, (14 + cell - 1) / cell));  // labels >= 14 px apart
  const int left = 90, top = 70, right = 20, bottom = 50;
  // wide enough for the title and legend too (about 8 px a character)
  const int64_t text_width = left + 8 * static_cast<int64_t>(std::max(labels.title.size(), size_t{40})) + right;
  const int64_t width = std::max(left + C * cell + right, text_width), height = top + R * cell + bottom;

  float lo = INFINITY, hi = -INFINITY;
  size_t blocked_cells = 0;
  for (float v : plane.data) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    else ++blocked_cells;
  }
  const double span = hi > lo ? static_cast<double>(hi) - lo : 1.0;

  std::string image = svg::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%lld\" height=\"%lld\" viewBox=\"0 0 %lld %lld\" "
      "font-family=\"sans-serif\" data-rows=\"%lld\" data-cols=\"%lld\">\n",
      static_cast<long long>(width), static_cast<long long>(height), static_cast<long long>(width),
      static_cast<long long>(height), static_cast<long long>(R), static_cast<long long>(C));
  image += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  image += svg::format("<text x=\"%d\" y=\"20\" font-size=\"15\">", left) + svg::escape(labels.title) + "</text>\n";
  std::string legend = mask                                   ? "white: attends, grey: blocked (True)"
                       : blocked_cells == plane.data.size() ? "every cell is -inf (blocked)"
                       : svg::format("white = %.4g, dark blue = %.4g%s", static_cast<double>(lo), static_cast<double>(hi),
                                blocked_cells ? ", grey = -inf (blocked)" : "");
  image += svg::format("<text x=\"%d\" y=\"38\" font-size=\"11\" fill=\"#555\">", left) + svg::escape(legend) + "</text>\n";
  // axis titles: columns below the grid, rows rotated at its left
  image += svg::format("<text x=\"%lld\" y=\"%lld\" font-size=\"12\" text-anchor=\"middle\">",
                static_cast<long long>(left + C * cell / 2), static_cast<long long>(top + R * cell + 35)) +
         svg::escape(labels.cols) + "</text>\n";
  image += svg::format("<text transform=\"translate(20 %lld) rotate(-90)\" font-size=\"12\" text-anchor=\"middle\">",
                static_cast<long long>(top + R * cell / 2)) +
         svg::escape(labels.rows) + "</text>\n";
  for (int64_t j = 0; j < C; j += tick_every) {
    image += svg::format("<text x=\"%lld\" y=\"%lld\" font-size=\"10\" text-anchor=\"middle\">%lld</text>\n",
                  static_cast<long long>(left + j * cell + cell / 2), static_cast<long long>(top + R * cell + 15),
                  static_cast<long long>(j));
  }
  for (int64_t i = 0; i < R; i += tick_every) {
    image += svg::format("<text x=\"%d\" y=\"%lld\" font-size=\"10\" text-anchor=\"end\" dominant-baseline=\"middle\">%lld</text>\n",
                  left - 6, static_cast<long long>(top + i * cell + cell / 2), static_cast<long long>(i));
  }
  for (int64_t i = 0; i < R; ++i) {
    for (int64_t j = 0; j < C; ++j) {
      const float v = plane.data[static_cast<size_t>(i * C + j)];
      const bool blocked = mask ? v != 0.0f : !std::isfinite(v);
      const double t = blocked || mask ? 0.0 : (v - lo) / span;
      const long long x = left + j * cell, y = top + i * cell;
      image += svg::format("<rect class=\"cell\" x=\"%lld\" y=\"%lld\" width=\"%d\" height=\"%d\" fill=\"%s\" stroke=\"#eee\"/>\n",
                    x, y, cell, cell, blocked ? "#555" : shade(t).c_str());
      if (cell >= 28 && !mask) {
        std::string text = blocked ? (std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf")) : svg::format("%.2f", static_cast<double>(v));
        image += svg::format("<text x=\"%lld\" y=\"%lld\" font-size=\"9\" text-anchor=\"middle\" dominant-baseline=\"middle\" fill=\"%s\">",
                      x + cell / 2, y + cell / 2, blocked || t > 0.55 ? "white" : "black") + text + "</text>\n";
      }
    }
  }
  image += "</svg>\n";
  return image;
}

std::vector<std::filesystem::path> write_heatmaps(const std::filesystem::path& dir, const std::string& stem,
                                                  const Tensor& t, const std::vector<std::string>& dims,
                                                  const HeatmapLabels& labels) {
  if (t.rank() < 2) throw ShapeError("heatmaps need (…, rows, cols), not " + shape_string(t.shape));
  const Shape lead(t.shape.begin(), t.shape.end() - 2);
  const int64_t R = t.shape[t.shape.size() - 2], C = t.shape.back(), planes = element_count(lead);
  std::vector<PendingFile> files;
  for (int64_t p = 0; p < planes; ++p) {
    std::string suffix, where;
    Shape index = unravel_index(lead, p);
    for (size_t k = 0; k < index.size(); ++k) {
      std::string name = k < dims.size() ? dims[k] : "d" + std::to_string(k);
      suffix += "_" + name + std::to_string(index[k]);
      where += (where.empty() ? "" : ", ") + name + "=" + std::to_string(index[k]);
    }
    auto begin = t.data.begin() + p * R * C;
    Tensor plane({R, C}, std::vector<float>(begin, begin + R * C), t.dtype);
    HeatmapLabels l = labels;
    if (!where.empty()) l.title += " (" + where + ")";
    std::string image = heatmap_svg(plane, l);
    files.emplace_back(dir / (stem + suffix + ".svg"), std::as_bytes(std::span(image.data(), image.size())));
  }
  std::vector<std::filesystem::path> paths;
  for (auto& file : files) {
    file.commit();
    paths.push_back(file.target());
  }
  return paths;
}

}  // namespace vkattn::io
