#include "vkattn/tracing/step_table.h"

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <sstream>

namespace vkattn {

namespace {

constexpr size_t kGap = 2;  // spaces between columns

void pad_right(std::ostream& out, const std::string& text, size_t width) {
  out << text << std::string(width - std::min(width, display_width(text)), ' ');
}

void pad_left(std::ostream& out, const std::string& text, size_t width) {
  out << std::string(width - std::min(width, display_width(text)), ' ') << text;
}

}  // namespace

size_t display_width(std::string_view text) {
  // every byte but UTF-8's continuation bytes (10xxxxxx) starts a code point
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0u) != 0x80u;
  }));
}

std::string step_label(const StepEvent& event) {
  const size_t scope = event.name.rfind('.');
  const std::string_view local = std::string_view(event.name).substr(scope == std::string::npos ? 0 : scope + 1);
  return local.starts_with(event.op) ? event.name : event.name + " (" + event.op + ")";
}

std::string step_microseconds(double us) {
  std::ostringstream s;
  if (us < 9999.95) {
    s << std::fixed << std::setprecision(1) << us;
  } else if (us < 999999.5) {
    s << std::fixed << std::setprecision(0) << us;
  } else {
    s << std::scientific << std::setprecision(0) << us;
  }
  return s.str();
}

StepTable::StepTable(std::vector<std::string> numbers, std::string last, size_t width)
    : number_headers_(std::move(numbers)), last_header_(std::move(last)), width_(width) {}

void StepTable::add(const StepEvent& event, std::vector<std::string> numbers, std::string last) {
  Row row{std::to_string(event.index), step_label(event), {}, std::move(numbers), std::move(last)};
  for (const TensorInfo& input : event.inputs) row.shapes.push_back(shape_string(input.shape));
  row.shapes.push_back("-> " + shape_string(event.output.shape));
  row.numbers.resize(number_headers_.size());
  rows_.push_back(std::move(row));
}

size_t StepTable::index_width() const {
  size_t w = 1;
  for (const Row& r : rows_) w = std::max(w, r.index.size());
  return w + kGap;
}

StepTable::Layout StepTable::layout() const {
  Layout l{index_width(), display_width("step") + kGap, 0, {}};
  size_t shapes = display_width("inputs -> output"), piece = shapes, last = display_width(last_header_);
  for (size_t c = 0; c < number_headers_.size(); ++c) l.numbers.push_back(display_width(number_headers_[c]));
  for (const Row& r : rows_) {
    l.step = std::max(l.step, display_width(r.step) + kGap);
    size_t all = 0;
    for (const auto& s : r.shapes) {
      all += display_width(s) + (all ? 1 : 0);
      piece = std::max(piece, display_width(s));
    }
    shapes = std::max(shapes, all);
    for (size_t c = 0; c < r.numbers.size(); ++c) l.numbers[c] = std::max(l.numbers[c], display_width(r.numbers[c]));
    last = std::max(last, display_width(r.last));
  }
  // Each number column is preceded by a gap; the last cell by another.
  size_t fixed = l.index + l.step + (last ? kGap + last : 0);
  for (size_t& n : l.numbers) fixed += n += kGap;
  // The shapes take what is left, down to their widest single shape (which never breaks).
  l.shapes = std::max(std::min(shapes, width_ > fixed ? width_ - fixed : 0), piece);
  return l;
}

std::vector<std::string> StepTable::wrap(const std::vector<std::string>& shapes, size_t width) {
  std::vector<std::string> lines{""};
  for (const auto& s : shapes) {
    if (!lines.back().empty() && display_width(lines.back()) + 1 + display_width(s) > width) lines.emplace_back();
    lines.back() += (lines.back().empty() ? "" : " ") + s;
  }
  return lines;
}

void StepTable::print_header(std::ostream& out) const {
  const Layout l = layout();
  pad_right(out, "#", l.index);
  pad_right(out, "step", l.step);
  pad_right(out, "inputs -> output", l.shapes);
  for (size_t c = 0; c < number_headers_.size(); ++c) pad_left(out, number_headers_[c], l.numbers[c]);
  if (!last_header_.empty()) out << std::string(kGap, ' ') << last_header_;
  out << "\n";
}

void StepTable::print_row(std::ostream& out, size_t i) const {
  const Layout l = layout();
  const Row& r = rows_.at(i);
  const auto lines = wrap(r.shapes, l.shapes);
  std::ostringstream row;
  pad_right(row, r.index, l.index);
  pad_right(row, r.step, l.step);
  pad_right(row, lines[0], l.shapes);
  for (size_t c = 0; c < r.numbers.size(); ++c) pad_left(row, r.numbers[c], l.numbers[c]);
  if (!r.last.empty()) row << std::string(kGap, ' ') << r.last;
  out << row.str() << "\n";
  for (size_t k = 1; k < lines.size(); ++k) out << std::string(l.index + l.step, ' ') << lines[k] << "\n";
}

void StepTable::print(std::ostream& out) const {
  print_header(out);
  for (size_t i = 0; i < rows_.size(); ++i) print_row(out, i);
}

}  // namespace vkattn
