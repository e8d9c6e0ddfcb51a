#pragma once
// Heatmap pictures of attention weights and masks, as SVG (every browser shows it, and its text
// is searchable): one image per (rows, cols) plane, cells shaded from white (the plane's lowest
// value) to dark blue (its highest), the value printed in each cell when cells are large
// enough, blocked cells (-inf, or True in a bool mask) dark grey. Axes are labelled with their
// name and positions.
#include <filesystem>
#include <string>
#include <vector>

#include "vkattn/tensor.h"

namespace vkattn::io {

struct HeatmapLabels {
  std::string title;
  std::string rows = "query position i";
  std::string cols = "key position j";
};

// The SVG text for `plane` (R, C); ShapeError when it is not 2-D.
std::string heatmap_svg(const Tensor& plane, const HeatmapLabels& labels);

// One image per plane of `t` (…, R, C), written all-or-nothing to DIR/<stem>[_<dim><k>…].svg,
// the leading axes named by `dims` (e.g. {"b", "h"} gives weights_b0_h1.svg). A plane's title
// is labels.title with its index appended. Returns the paths written; FileError on failure.
std::vector<std::filesystem::path> write_heatmaps(const std::filesystem::path& dir, const std::string& stem,
                                                  const Tensor& t, const std::vector<std::string>& dims,
                                                  const HeatmapLabels& labels);

}  // namespace vkattn::io
