#pragma once
// The table every step printer shares (the console tracer, the side-by-side view, the lessons):
// one row per step — its index, its name (with its op where the name does not say it), its input
// shapes -> its output shape, then right-aligned numbers (times) and one last, left-aligned cell.
// Columns are as wide as their widest cell and the whole table fits `width` terminal columns:
// shapes that do not fit wrap onto continuation lines at a shape's boundary.
//
//   #   step                inputs -> output                                gpu µs    cpu µs  max |gpu - cpu|
//   0   q_proj (linear)     (2, 10, 512) (512, 512) (512,) -> (2, 10, 512)   685.3    2936.2  5.36e-07
#include <cstddef>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "vkattn/tracing/tracer.h"

namespace vkattn {

// Columns a string takes in a terminal: its UTF-8 code points ("µs" is 2, not 3 bytes' worth).
size_t display_width(std::string_view text);

// "q_proj (linear)" for a step whose name does not start with its op; "softmax", "split_heads_q",
// "layers.0.self_attn.softmax" for those that do.
std::string step_label(const StepEvent& event);

// A step's time for a "… µs" column, in at most 6 characters (the header "gpu µs"'s width), so
// that a slow step (a busy machine, a cold pipeline) never widens a table past its columns:
// 12.3 … 9999.9, then whole µs to 999999, then 1e+06 from a second on.
std::string step_microseconds(double us);

class StepTable {
 public:
  // `numbers`: the headers of the right-aligned columns after the shapes ("gpu µs", …); `last`:
  // the header of the final, left-aligned column ("" for none).
  StepTable(std::vector<std::string> numbers, std::string last, size_t width = 100);

  // A row for `event`: one cell per number column, and the last cell.
  void add(const StepEvent& event, std::vector<std::string> numbers, std::string last = {});
  size_t size() const { return rows_.size(); }

  void print_header(std::ostream& out) const;
  // Row `i`, with its shapes' continuation lines when they wrap.
  void print_row(std::ostream& out, size_t i) const;
  void print(std::ostream& out) const;

  // Where a row's step column starts: lines printed between rows (a lesson's words) indent to it.
  size_t step_column() const { return index_width(); }

 private:
  struct Row {
    std::string index, step;
    std::vector<std::string> shapes;  // each input's shape, then "-> " and the output's
    std::vector<std::string> numbers;
    std::string last;
  };
  struct Layout {
    size_t index, step, shapes;
    std::vector<size_t> numbers;
  };
  size_t index_width() const;
  Layout layout() const;
  // The row's shapes broken into lines of at most `width` columns, at shape boundaries.
  static std::vector<std::string> wrap(const std::vector<std::string>& shapes, size_t width);

  std::vector<std::string> number_headers_;
  std::string last_header_;
  size_t width_;
  std::vector<Row> rows_;
};

}  // namespace vkattn
