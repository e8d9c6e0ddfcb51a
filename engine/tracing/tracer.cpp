#include "vkattn/tracing/tracer.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

namespace vkattn {

std::string input_shapes(const StepEvent& event) {
  std::string out;
  for (const TensorInfo& input : event.inputs) {
    if (!out.empty()) out += " ";
    out += shape_string(input.shape);
  }
  return out;
}

std::string value_summary(const Tensor& values, size_t leading) {
  std::ostringstream s;
  s << std::setprecision(4) << "[";
  for (size_t i = 0; i < std::min(leading, values.data.size()); ++i) s << (i ? ", " : "") << values.data[i];
  s << (values.data.size() > leading ? ", …]" : "]");
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
  rows_.push_back({std::to_string(event.index), event.name, event.op,
                   input_shapes(event) + " -> " + shape_string(event.output.shape),
                   event.values ? value_summary(*event.values) : std::string()});
}

void ConsoleTracer::on_pass_end(const PassEnd& end) {
  size_t shapes_width = 16, name_width = 20;  // scoped names (layers.0.self_attn.q_proj) widen the column
  for (const Row& r : rows_) {
    shapes_width = std::max(shapes_width, r.shapes.size() + 2);
    name_width = std::max(name_width, r.name.size() + 2);
  }
  const int name_w = static_cast<int>(name_width);
  out_ << title_ << "\n"
       << std::left << std::setw(4) << "#" << std::setw(name_w) << "step" << std::setw(18) << "op" << std::setw(static_cast<int>(shapes_width))
       << "inputs -> output" << std::right << std::setw(12) << (end.clock + " us") << (values_ ? "  values" : "") << "\n";
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    out_ << std::left << std::setw(4) << r.index << std::setw(name_w) << r.name << std::setw(18) << r.op
         << std::setw(static_cast<int>(shapes_width)) << r.shapes << std::right << std::setw(12);
    std::ostringstream time;  // formatted apart: the caller's stream keeps its own precision
    if (i < end.step_times.size()) {
      time << std::fixed << std::setprecision(1) << end.step_times[i].duration_us;
    } else {
      time << "-";
    }
    out_ << time.str();
    if (values_) out_ << "  " << r.values;
    out_ << "\n";
  }
  if (end.error) out_ << "stopped after " << rows_.size() << " steps: " << *end.error << "\n";
}

void StepRecorder::on_pass(const std::string& pass, const std::string& backend, const std::string& device) {
  steps_.clear();
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
