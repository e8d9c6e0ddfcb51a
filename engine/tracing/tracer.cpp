#include "vkattn/tracing/tracer.h"

#include "vkattn/tracing/step_table.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

namespace vkattn {

std::string leading_values(const Tensor& values, size_t n) {
  std::ostringstream s;
  s << std::setprecision(4) << "[";
  for (size_t i = 0; i < std::min(n, values.data.size()); ++i) s << (i ? ", " : "") << values.data[i];
  s << (values.data.size() > n ? ", …]" : "]");
  return s.str();
}

std::string value_summary(const Tensor& values, size_t leading) {
  std::ostringstream s;
  s << std::setprecision(4) << leading_values(values, leading);
  // min / max / mean over the finite values (a masked score is -inf by design)
  float lo = INFINITY, hi = -INFINITY;
  double sum = 0;
  size_t finite = 0;
  for (float v : values.data) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    ++finite;
  }
  if (finite) s << " min " << lo << " max " << hi << " mean " << sum / static_cast<double>(finite);
  if (finite != values.data.size()) s << " (" << values.data.size() - finite << " non-finite)";
  return s.str();
}

void ConsoleTracer::on_pass(const std::string& pass, const std::string& backend, const std::string& device) {
  title_ = pass + " on " + backend + " (" + device + ")";
  rows_.clear();
}

void ConsoleTracer::on_step(const StepEvent& event) {
  Row row{event, event.values ? value_summary(*event.values) : std::string()};
  row.event.values = nullptr;
  rows_.push_back(std::move(row));
}

void ConsoleTracer::on_pass_end(const PassEnd& end) {
  StepTable table({end.clock + " µs"}, "");
  for (size_t i = 0; i < rows_.size(); ++i) {
    table.add(rows_[i].event, {i < end.step_times.size() ? step_microseconds(end.step_times[i].duration_us) : "-"});
  }
  out_ << title_ << "\n";
  table.print_header(out_);
  for (size_t i = 0; i < rows_.size(); ++i) {
    table.print_row(out_, i);
    if (!rows_[i].event.folded.empty()) out_ << std::string(table.step_column() + 2, ' ') << rows_[i].event.folded << "\n";
    if (values_) out_ << std::string(table.step_column() + 2, ' ') << rows_[i].values << "\n";
  }
  if (end.error) out_ << "stopped after " << rows_.size() << " steps: " << *end.error << "\n";
}

void StepRecorder::on_pass(const std::string& pass, const std::string& backend, const std::string& device) {
  steps_.clear();
  inputs_.clear();
  end_ = {};
  pass_ = pass;
  backend_ = backend;
  device_ = device;
}

void StepRecorder::on_step(const StepEvent& event) {
  Step step{event, std::nullopt};
  step.event.values = nullptr;
  if (event.values) step.values = *event.values;
  steps_.push_back(std::move(step));
}

void replay(const StepRecorder& recorded, Tracer& sink) {
  sink.on_pass(recorded.pass(), recorded.backend(), recorded.device());
  for (const auto& step : recorded.steps()) {
    StepEvent event = step.event;
    event.values = sink.wants_values() && step.values ? &*step.values : nullptr;
    sink.on_step(event);
  }
  sink.on_pass_end(recorded.pass_end());
}

}  // namespace vkattn
