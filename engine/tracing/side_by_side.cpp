#include "vkattn/tracing/side_by_side.h"

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <sstream>

namespace vkattn {

namespace {

std::optional<StepTime> time_of(const StepRecorder& r, size_t i) {
  const auto& times = r.pass_end().step_times;
  return i < times.size() ? std::optional(times[i]) : std::nullopt;
}

std::string format_time(const std::optional<StepTime>& t) { return t ? step_microseconds(t->duration_us) : "-"; }

}  // namespace

std::string SideBySide::cell(const Row& r) const {
  std::ostringstream s;
  if (!r.tested || !r.reference) {
    s << "(only on " << (r.tested ? tested_.backend() : reference_.backend()) << ")";
  } else if (!r.same_step) {
    s << "(" << reference_.backend() << " ran " << r.reference->event.name << ")";
  } else if (!r.diff) {
    s << "(no values)";
  } else {
    s << std::scientific << std::setprecision(2) << r.diff->max_abs_error << (r.diff->mismatches ? " DIVERGES" : "");
  }
  return s.str();
}

SideBySide::SideBySide(const StepRecorder& tested, const StepRecorder& reference, double atol, double rtol)
    : tested_(tested),
      reference_(reference),
      atol_(atol),
      rtol_(rtol),
      table_({tested.backend() + " µs", reference.backend() + " µs"},
             "max |" + tested.backend() + " - " + reference.backend() + "|") {
  const auto &a = tested.steps(), &b = reference.steps();
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    Row row;
    if (i < a.size()) row.tested = &a[i], row.tested_time = time_of(tested, i);
    if (i < b.size()) row.reference = &b[i], row.reference_time = time_of(reference, i);
    if (row.tested && row.reference) {
      const StepEvent &x = row.tested->event, &y = row.reference->event;
      row.same_step = x.name == y.name && x.op == y.op && x.output.shape == y.output.shape;
      if (row.same_step && row.tested->values && row.reference->values) {
        row.diff = compare_values(*row.tested->values, *row.reference->values, atol_, rtol_);
      }
    }
    rows_.push_back(std::move(row));
  }
  for (const Row& r : rows_) table_.add(r.event(), {format_time(r.tested_time), format_time(r.reference_time)}, cell(r));
}

std::optional<size_t> SideBySide::first_divergent() const {
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    if (!r.tested || !r.reference || !r.same_step || (r.diff && r.diff->mismatches)) return i;
  }
  return std::nullopt;
}

bool SideBySide::agree() const {
  if (first_divergent() || tested_.pass_end().error || reference_.pass_end().error) return false;
  return std::all_of(rows_.begin(), rows_.end(), [](const Row& r) { return r.diff.has_value(); });
}

void SideBySide::print(std::ostream& out, bool values) const {
  print_header(out);
  for (size_t i = 0; i < rows_.size(); ++i) print_row(out, i, values);
  print_summary(out);
}

void SideBySide::print_header(std::ostream& out) const {
  out << tested_.backend() << ": " << tested_.device() << "    " << reference_.backend() << ": " << reference_.device()
      << "\n";
  table_.print_header(out);
}

void SideBySide::print_row(std::ostream& out, size_t i, bool values) const {
  table_.print_row(out, i);
  const Row& r = rows_[i];
  for (const StepRecorder::Step* step : {r.tested, r.reference}) {
    if (step && !step->event.folded.empty()) {
      out << std::string(step_column() + 2, ' ') << (step == r.tested ? tested_ : reference_).backend() << ": "
          << step->event.folded << "\n";
    }
  }
  if (values && r.diff) {
    const size_t indent = step_column() + 2;
    out << std::string(indent, ' ') << tested_.backend() << " " << leading_values(*r.tested->values, 6) << "\n"
        << std::string(indent, ' ') << reference_.backend() << " " << leading_values(*r.reference->values, 6) << "\n";
  }
}

void SideBySide::print_summary(std::ostream& out) const {
  const std::string a = tested_.backend(), b = reference_.backend();
  for (const StepRecorder* r : {&tested_, &reference_}) {
    if (r->pass_end().error) out << r->backend() << " stopped after " << r->steps().size() << " steps: " << *r->pass_end().error << "\n";
  }
  if (auto i = first_divergent(); i && rows_[*i].diff) {
    const Row& r = rows_[*i];
    const StepEvent& e = r.tested->event;
    out << "first divergent step: " << e.index << " " << e.name << " (" << e.op << "), "
        << mismatch_report(*r.diff, e.output.shape, e.output.dims, a, b, atol_, rtol_) << "\n";
  } else if (i) {
    const Row& r = rows_[*i];
    out << "first divergent step: " << r.event().index << ": "
        << (r.tested && r.reference ? "the passes ran different steps" : "only one pass reached it") << "\n";
  } else if (agree()) {
    std::ostringstream line;  // apart: the caller's stream may be set to fixed or scientific
    line << "every step agrees: " << a << " and " << b << " within atol " << atol_ << " + rtol " << rtol_ << " * |" << b
         << "|\n";
    out << line.str();
  }
}

}  // namespace vkattn
