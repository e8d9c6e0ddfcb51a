#include "vkattn/tracing/report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>

#include "engine/io/file.h"
#include "engine/tracing/report_assets.h"
#include "vkattn/errors.h"
#include "vkattn/tracing/side_by_side.h"
#include "vkattn/version.h"  // VKATTN_VERSION_STRING

namespace vkattn {

namespace {

using nlohmann::json;

std::string base64(std::span<const float> values) {
  static constexpr char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());  // little-endian float32
  const size_t n = values.size_bytes();
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t chunk = uint32_t{bytes[i]} << 16 | (i + 1 < n ? uint32_t{bytes[i + 1]} << 8 : 0) |
                           (i + 2 < n ? uint32_t{bytes[i + 2]} : 0);
    out += digits[chunk >> 18 & 63];
    out += digits[chunk >> 12 & 63];
    out += i + 1 < n ? digits[chunk >> 6 & 63] : '=';
    out += i + 2 < n ? digits[chunk & 63] : '=';
  }
  return out;
}

// Which cells of a (planes, R, C) tensor the page embeds: every plane, every row_step-th row
// from row0 and every col_step-th column from col0 — chosen so that at most `budget` cells are
// kept and, when `focus` is given (a flat index: the first divergent element), it is one of them.
struct Sampling {
  int64_t planes = 1, rows = 1, cols = 1;
  int64_t shown_planes = 1, row0 = 0, row_step = 1, col0 = 0, col_step = 1;
  int64_t shown_rows() const { return (rows - row0 + row_step - 1) / row_step; }
  int64_t shown_cols() const { return (cols - col0 + col_step - 1) / col_step; }
  int64_t cells() const { return shown_planes * shown_rows() * shown_cols(); }
};

Sampling sampling(const Shape& shape, size_t budget, std::optional<size_t> focus) {
  Sampling s;
  s.cols = shape.empty() ? 1 : shape.back();
  s.rows = shape.size() < 2 ? 1 : shape[shape.size() - 2];
  s.planes = s.rows * s.cols == 0 ? 0 : element_count(shape) / (s.rows * s.cols);
  s.shown_planes = std::min<int64_t>(s.planes, static_cast<int64_t>(budget));
  const auto fits = [&] { return s.shown_planes * ((s.rows + s.row_step - 1) / s.row_step) *
                                     ((s.cols + s.col_step - 1) / s.col_step) <= static_cast<int64_t>(budget); };
  // Widen the longer side's step first, so that a (1, 4096) row is not squeezed to a few cells.
  while (!fits() && (s.row_step < s.rows || s.col_step < s.cols)) {
    const int64_t shown_r = (s.rows + s.row_step - 1) / s.row_step, shown_c = (s.cols + s.col_step - 1) / s.col_step;
    if (shown_r >= shown_c && s.row_step < s.rows) ++s.row_step;
    else if (s.col_step < s.cols) ++s.col_step;
    else ++s.row_step;
  }
  if (focus && s.rows * s.cols > 0) {
    s.row0 = static_cast<int64_t>(*focus) / s.cols % s.rows % s.row_step;
    s.col0 = static_cast<int64_t>(*focus) % s.cols % s.col_step;
  }
  return s;
}

std::vector<float> sampled(const Tensor& t, const Sampling& s) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(s.cells()));
  for (int64_t p = 0; p < s.shown_planes; ++p)
    for (int64_t i = s.row0; i < s.rows; i += s.row_step)
      for (int64_t j = s.col0; j < s.cols; j += s.col_step) out.push_back(t.data[static_cast<size_t>((p * s.rows + i) * s.cols + j)]);
  return out;
}

json sampling_json(const Sampling& s) {
  return {{"planes", s.planes},         {"rows", s.rows},         {"cols", s.cols},
          {"shown_planes", s.shown_planes}, {"row0", s.row0},     {"row_step", s.row_step},
          {"col0", s.col0},             {"col_step", s.col_step}, {"shown_rows", s.shown_rows()},
          {"shown_cols", s.shown_cols()}};
}

// The finite range of the tensors (all their values, not the sample), and whether any cell is
// blocked (-inf, NaN, or True in a bool mask).
void add_range(json& step, std::initializer_list<const Tensor*> tensors) {
  float lo = INFINITY, hi = -INFINITY;
  bool blocked = false;
  for (const Tensor* t : tensors) {
    if (!t) continue;
    for (float v : t->data) {
      if (t->dtype == DType::boolean) blocked |= v != 0.0f;
      else if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
      else blocked = true;
    }
  }
  step["range"] = lo <= hi ? json::array({lo, hi}) : json(nullptr);
  step["blocked"] = blocked;
}

json pass_json(const StepRecorder& r, const std::string& label) {
  json pass = {{"label", label}, {"backend", r.backend()}, {"device", r.device()}, {"pass", r.pass()},
               {"clock", r.pass_end().clock}};
  if (r.pass_end().error) pass["error"] = *r.pass_end().error;
  bool fused = false, unfused = false;
  for (const auto& step : r.steps()) {
    fused |= step.event.op == "flash_attention" || step.event.op == "flash_decoding";
    unfused |= step.event.op == "softmax";
  }
  pass["path"] = fused && unfused ? "fused and unfused" : fused ? "fused" : unfused ? "unfused" : "";
  return pass;
}

json time_json(const StepRecorder* r, size_t i) {
  if (!r || i >= r->pass_end().step_times.size()) return nullptr;
  const StepTime& t = r->pass_end().step_times[i];
  return {t.start_us, t.duration_us};
}

json step_json(const StepEvent& e) {
  json inputs = json::array();
  for (const auto& input : e.inputs) inputs.push_back({input.name, shape_string(input.shape)});
  json step = {{"index", e.index},         {"name", e.name},           {"op", e.op},
               {"inputs", inputs},         {"shape", e.output.shape},  {"dims", e.output.dims},
               {"dtype", dtype_name(e.output.dtype)}};
  if (!e.folded.empty()) step["folded"] = e.folded;  // a layout step done by its neighbour
  return step;
}

json section_json(const ReportSection& section, const ReportOptions& o, size_t budget) {
  const StepRecorder& a = *section.pass;  // report_html checked that there is one
  const StepRecorder* b = section.against;
  json out = {{"title", section.title}, {"passes", json::array({pass_json(a, section.pass_label)})}};
  if (b) out["passes"].push_back(pass_json(*b, section.against_label));
  json steps = json::array();
  std::optional<size_t> first_divergent;
  size_t compared = 0;
  const size_t count = b ? std::max(a.steps().size(), b->steps().size()) : a.steps().size();
  std::optional<SideBySide> table;
  if (b) table.emplace(a, *b, o.atol, o.rtol);
  for (size_t i = 0; i < count; ++i) {
    const StepRecorder::Step* sa = i < a.steps().size() ? &a.steps()[i] : nullptr;
    const StepRecorder::Step* sb = b && i < b->steps().size() ? &b->steps()[i] : nullptr;
    if (sa && sb && !table->rows()[i].same_step) {
      auto describe = [](const StepEvent& e) { return e.name + " (" + e.op + ") " + shape_string(e.output.shape); };
      throw FileError("the passes describe different recipes: step " + std::to_string(i) + " is " +
                      describe(sa->event) + " in one and " + describe(sb->event) + " in the other");
    }
    const StepEvent& event = (sa ? sa : sb)->event;
    json step = step_json(event);
    step["times"] = json::array({time_json(sa ? &a : nullptr, i)});
    if (b) step["times"].push_back(time_json(sb ? b : nullptr, i));
    const Tensor* va = sa && sa->values ? &*sa->values : nullptr;
    const Tensor* vb = sb && sb->values ? &*sb->values : nullptr;
    std::optional<size_t> focus;
    if (b) {
      const auto& row = table->rows()[i];
      if (!sa || !sb) {
        step["status"] = "only " + (sa ? section.pass_label : section.against_label);
      } else if (!row.diff) {
        step["status"] = "no values";
      } else {
        const ValueDiff& d = *row.diff;
        ++compared;
        step["status"] = d.mismatches ? "diverges" : "agrees";
        step["diff"] = {{"max_abs_error", d.max_abs_error}, {"mismatches", d.mismatches}};
        if (d.mismatches) {
          focus = d.first_mismatch;
          step["diff"]["first"] = d.first_mismatch;
          step["diff"]["report"] = mismatch_report(d, event.output.shape, event.output.dims, section.pass_label,
                                                   section.against_label, o.atol, o.rtol);
        }
      }
      if ((!sa || !sb || (row.diff && row.diff->mismatches)) && !first_divergent) first_divergent = i;
    }
    if (va || vb) {
      const Sampling s = sampling(event.output.shape, budget, focus);
      step["sample"] = sampling_json(s);
      step["values"] = json::array({va ? json(base64(sampled(*va, s))) : json(nullptr)});
      if (b) step["values"].push_back(vb ? json(base64(sampled(*vb, s))) : json(nullptr));
      add_range(step, {va, vb});
    }
    steps.push_back(std::move(step));
  }
  out["steps"] = std::move(steps);
  out["first_divergent"] = first_divergent ? json(*first_divergent) : json(nullptr);
  out["compared"] = compared;
  return out;
}

// Replaces the one `marker` in `page` by `text`.
void fill(std::string& page, const std::string& marker, const std::string& text) {
  const size_t at = page.find(marker);
  if (at == std::string::npos) throw std::logic_error("the report page lacks " + marker);
  page.replace(at, marker.size(), text);
}

}  // namespace

std::string report_html(const std::vector<ReportSection>& sections, const ReportOptions& options) {
  // Every traced tensor shares the page's budget equally, within the per-tensor bound.
  size_t tensors = 0;
  for (const auto& section : sections) {
    if (!section.pass) throw ShapeError("a report section needs a pass");
    for (const StepRecorder* r : {section.pass, section.against}) {
      if (!r) continue;
      for (const auto& step : r->steps()) tensors += step.values.has_value();
    }
  }
  const size_t budget = std::max<size_t>(1, std::min(options.cells_per_tensor, options.cells_per_report / std::max<size_t>(1, tensors)));
  json data = {{"title", options.title}, {"generator", std::string("vkattn ") + VKATTN_VERSION_STRING},
               {"atol", options.atol}, {"rtol", options.rtol}, {"sections", json::array()}};
  for (const auto& section : sections) data["sections"].push_back(section_json(section, options, budget));
  // Inside <script>, "</" could end the element early: JSON allows "<\/" for it.
  std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  for (size_t at = text.find("</"); at != std::string::npos; at = text.find("</", at + 3)) text.replace(at, 2, "<\\/");
  std::string page = report_assets::page_html;
  fill(page, "/*vkattn:css*/", report_assets::page_css);
  fill(page, "/*vkattn:js*/", report_assets::page_js);
  fill(page, "/*vkattn:data*/", text);
  return page;
}

void write_report(const std::filesystem::path& file, const std::vector<ReportSection>& sections,
                  const ReportOptions& options) {
  io::check_output_path(file);
  const std::string page = report_html(sections, options);
  io::write_file(file, std::as_bytes(std::span(page.data(), page.size())));
}

}  // namespace vkattn
