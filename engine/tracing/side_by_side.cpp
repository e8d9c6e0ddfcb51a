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

std::string format_time(const std::optional<StepTime>& t) {
  if (!t) return "-";
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << t->duration_us;
  return s.str();
}

// "[0.1235, -0.5, 0.25, 1, 0.5, 0.75, …]"
std::string leading(const Tensor& t, size_t n = 6) {
  std::ostringstream s;
  s << std::setprecision(4) << "[";
  for (size_t i = 0; i < std::min(n, t.data.size()); ++i) s << (i ? ", " : "") << t.data[i];
  s << (t.data.size() > n ? ", …]" : "]");
  return s.str();
}

}  // namespace

SideBySide::SideBySide(const StepRecorder& tested, const StepRecorder& reference, double atol, double rtol)
    : tested_(tested), reference_(reference), atol_(atol), rtol_(rtol) {
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
  const std::string a = tested_.backend(), b = reference_.backend();
  std::vector<std::string> shapes;
  size_t width = 16, name_width = 20;  // scoped names (layers.0.self_attn.q_proj) widen the column
  for (const Row& r : rows_) {
    const StepEvent& e = r.event();
    shapes.push_back(input_shapes(e) + " -> " + shape_string(e.output.shape));
    width = std::max(width, shapes.back().size() + 2);
    name_width = std::max(name_width, e.name.size() + 2);
  }
  const int name_w = static_cast<int>(name_width);
  out << a << ": " << tested_.device() << "    " << b << ": " << reference_.device() << "\n"
      << std::left << std::setw(4) << "#" << std::setw(name_w) << "step" << std::setw(18) << "op"
      << std::setw(static_cast<int>(width)) << "inputs -> output" << std::right << std::setw(10) << (a + " us")
      << std::setw(10) << (b + " us") << "  max |" << a << " - " << b << "|\n";
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    const StepEvent& e = r.event();
    std::ostringstream err;
    if (!r.tested || !r.reference) {
      err << "(only on " << (r.tested ? a : b) << ")";
    } else if (!r.same_step) {
      err << "(" << b << " ran " << r.reference->event.name << " " << shape_string(r.reference->event.output.shape) << ")";
    } else if (!r.diff) {
      err << "(no values)";
    } else {
      err << std::scientific << std::setprecision(2) << r.diff->max_abs_error << (r.diff->mismatches ? "  DIVERGES" : "");
    }
    out << std::left << std::setw(4) << e.index << std::setw(name_w) << e.name << std::setw(18) << e.op
        << std::setw(static_cast<int>(width)) << shapes[i] << std::right << std::setw(10) << format_time(r.tested_time)
        << std::setw(10) << format_time(r.reference_time) << "  " << err.str() << "\n";
    if (values && r.diff) {
      out << "      " << a << " " << leading(*r.tested->values) << "\n      " << b << " " << leading(*r.reference->values) << "\n";
    }
  }
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
    out << "every step agrees: " << a << " and " << b << " within atol " << atol_ << " + rtol " << rtol_ << " * |" << b << "|\n";
  }
}

}  // namespace vkattn
