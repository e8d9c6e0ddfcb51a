// SVG pictures. Heatmaps: one cell per element with its shade or "blocked" grey, the plane's size
// in the image's attributes, labelled axes, escaped titles, one file per plane named by its index.
// Line plots: one line per series through its points, round ticks, a legend.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>

#include "vkattn/errors.h"
#include "vkattn/io/heatmap.h"
#include "vkattn/io/plot.h"

namespace vkattn {
namespace {

namespace fs = std::filesystem;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Heatmap, HasOneCellPerElementAndItsSizeAndLabels) {
  Tensor p({3, 17});
  for (size_t i = 0; i < p.data.size(); ++i) p.data[i] = static_cast<float>(i) / 50.0f;
  p.data[5] = -INFINITY;
  std::string svg = io::heatmap_svg(p, {.title = "weights <b=0>"});
  EXPECT_EQ(count(svg, "class=\"cell\""), 51u);
  EXPECT_NE(svg.find("data-rows=\"3\" data-cols=\"17\""), std::string::npos);
  EXPECT_EQ(count(svg, "fill=\"#555\" stroke"), 1u) << "the -inf cell is grey";
  EXPECT_NE(svg.find("fill=\"#ffffff\""), std::string::npos) << "the lowest finite value is white";
  EXPECT_NE(svg.find("fill=\"#08306b\""), std::string::npos) << "the highest is dark blue";
  EXPECT_NE(svg.find("weights &lt;b=0&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">query position i<"), std::string::npos);
  EXPECT_NE(svg.find(">key position j<"), std::string::npos);
  EXPECT_NE(svg.find(">16<"), std::string::npos) << "the last column is labelled";
  std::smatch size;
  ASSERT_TRUE(std::regex_search(svg, size, std::regex(R"re(width="(\d+)" height="(\d+)")re")));
  EXPECT_GE(std::stoi(size[1]), 17 * 32);
  EXPECT_GE(std::stoi(size[2]), 3 * 32);
}

TEST(Heatmap, ABoolMaskIsGreyWhereBlockedAndALargePlaneShrinksItsCells) {
  Tensor causal({4, 4}, DType::boolean);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = i + 1; j < 4; ++j) causal.at({i, j}) = 1.0f;
  std::string svg = io::heatmap_svg(causal, {.title = "causal mask"});
  EXPECT_EQ(count(svg, "fill=\"#555\" stroke"), 6u);
  EXPECT_NE(svg.find("grey: blocked"), std::string::npos);

  std::string big = io::heatmap_svg(Tensor({113, 200}), {.title = "big"});
  EXPECT_EQ(count(big, "class=\"cell\""), 113u * 200);
  EXPECT_NE(big.find("width=\"4\" height=\"4\""), std::string::npos) << "800 px / 200 columns";
  EXPECT_THROW(io::heatmap_svg(Tensor({2, 3, 4}), {}), ShapeError);
}

TEST(Heatmap, WritesOnePlanePerFileNamedByItsIndex) {
  fs::path dir = fs::temp_directory_path() / ("vkattn_heatmap_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto paths = io::write_heatmaps(dir, "w", Tensor({2, 3, 4, 5}), {"b", "h"}, {.title = "weights"});
  ASSERT_EQ(paths.size(), 6u);
  EXPECT_EQ(paths[5].filename(), "w_b1_h2.svg");
  for (const auto& p : paths) EXPECT_TRUE(fs::exists(p)) << p;
  EXPECT_THROW(io::write_heatmaps(dir / "missing", "w", Tensor({2, 2}), {}, {}), FileError);
  fs::remove_all(dir);
}

TEST(LinePlot, DrawsEverySeriesThroughItsPointsOnRoundAxes) {
  const std::vector<io::PlotSeries> series{{"unfused <L²>", {0, 5, 10}, {0, 1, 4.5}}, {"fused", {0, 10}, {0, 1}}};
  std::string svg = io::line_plot_svg(series, {.title = "time", .x = "L", .y = "time (ms)"});
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(count(svg, "<circle"), 5u);
  // x runs 0..10 (ticks every 2) over 346 px from x = 64; y 0..5 (ticks every 1) over 252 px up from 292
  EXPECT_NE(svg.find("points=\"64.0,292.0 237.0,241.6 410.0,65.2 \""), std::string::npos) << svg;
  EXPECT_NE(svg.find("points=\"64.0,292.0 410.0,241.6 \""), std::string::npos) << svg;
  EXPECT_NE(svg.find(">unfused &lt;L²&gt;<"), std::string::npos) << "the legend names it, escaped";
  EXPECT_NE(svg.find(">time (ms)<"), std::string::npos);
  EXPECT_EQ(count(svg, "text-anchor=\"end\">"), 6u) << "y ticks 0, 1, …, 5";
  EXPECT_THROW(io::line_plot_svg({{"bad", {1, 2}, {1}}}, {}), ShapeError);
  EXPECT_THROW(io::line_plot_svg({{"flat", {0, 0}, {0, 0}}}, {}), ShapeError);
}

}  // namespace
}  // namespace vkattn
