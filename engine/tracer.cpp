#include "engine/tracer.h"

#include <iomanip>
#include <ostream>

namespace vkattn {

std::string input_shapes(const StepEvent& event) {
  std::string out;
  for (const TensorInfo& input : event.inputs) {
    if (!out.empty()) out += " ";
    out += shape_string(input.shape);
  }
  return out;
}

void ConsoleTracer::on_pass(const std::string& pass, const std::string& backend, const std::string& device) {
  out_ << pass << " on " << backend << " (" << device << ")\n"
       << std::left << std::setw(4) << "#" << std::setw(20) << "step" << std::setw(18) << "op"
       << "inputs -> output\n";
}

void ConsoleTracer::on_step(const StepEvent& event) {
  out_ << std::left << std::setw(4) << event.index << std::setw(20) << event.name << std::setw(18)
       << event.op << input_shapes(event) << " -> " << shape_string(event.output.shape);
  if (event.host_time_us) out_ << "  " << std::fixed << std::setprecision(1) << *event.host_time_us << " us";
  out_ << "\n";
}

void StepRecorder::on_step(const StepEvent& event) {
  Step step{event, std::nullopt};
  step.event.values = nullptr;
  if (event.values) step.values = *event.values;
  steps_.push_back(std::move(step));
}

}  // namespace vkattn
