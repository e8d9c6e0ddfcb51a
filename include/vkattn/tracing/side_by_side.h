#pragma once
// Two passes of one recipe, each recorded with its values (the GPU's and the CPU reference's),
// zipped step by step: every step's shapes, both times and the largest difference. This is the
// table `vkattn demo`, `vkattn run --side-by-side` and the tutorials print.
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "vkattn/tracing/compare.h"
#include "vkattn/tracing/step_table.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {

class SideBySide {
 public:
  struct Row {
    const StepRecorder::Step* tested = nullptr;     // null where that pass never reached the step
    const StepRecorder::Step* reference = nullptr;  // likewise
    std::optional<StepTime> tested_time, reference_time;
    std::optional<ValueDiff> diff;  // when both steps hold values and describe the same tensor
    bool same_step = true;          // false when the two passes ran different steps here
    const StepEvent& event() const { return (tested ? tested : reference)->event; }
  };

  // Compares `tested` against `reference` (rtol scales |reference|). Both recorders must
  // outlive this and keep their passes unchanged.
  SideBySide(const StepRecorder& tested, const StepRecorder& reference, double atol = 1e-5, double rtol = 1e-5);

  const std::vector<Row>& rows() const { return rows_; }
  // Both passes ran the same steps to the end and every step agrees within tolerance.
  bool agree() const;
  // The first row that disagrees (values beyond tolerance, a different step, or one side absent).
  std::optional<size_t> first_divergent() const;
  // The table, then either "every step agrees …" or the first divergent step with its index
  // decoded into the step's dims and both values; and each pass's error, if one failed. With
  // `values`, each step's row is followed by its leading values on both sides. Within 100
  // columns but for the values and the summary's decoded index.
  void print(std::ostream& out, bool values = false) const;
  // print()'s parts, for a caller that writes between the rows (a lesson's words):
  void print_header(std::ostream& out) const;  // the two devices, then the column headers
  void print_row(std::ostream& out, size_t i, bool values = false) const;
  void print_summary(std::ostream& out) const;  // failures, then the verdict
  // Where a row's step column starts, for lines written between the rows.
  size_t step_column() const { return table_.step_column(); }

 private:
  std::string cell(const Row& r) const;  // the last column: the largest difference, or why none

  const StepRecorder& tested_;
  const StepRecorder& reference_;
  double atol_, rtol_;
  std::vector<Row> rows_;
  StepTable table_;
};

}  // namespace vkattn
