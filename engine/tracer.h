#pragma once
// The tracer seam: every step a Backend runs is reported here, whichever backend runs it and
// whoever listens. A step never knows which sinks are attached.
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace vkattn {

struct TensorInfo {
  std::string name;  // "query", "q_proj.weight", or the step that produced it
  Shape shape;
  DType dtype = DType::float32;
};

struct StepEvent {
  int index = 0;                   // 0-based position in the pass
  std::string name;                // the step: q_proj, split_heads_q, attention_scores, …
  std::string op;                  // the operation = shader = reference function: linear, …
  std::vector<TensorInfo> inputs;  // absent optional inputs are not listed
  TensorInfo output;
  const Tensor* values = nullptr;  // the output read back, only when a tracer wants_values()
  std::optional<double> host_time_us;  // wall time of the step where the host computes it (cpu)
};

class Tracer {
 public:
  virtual ~Tracer() = default;
  // True makes the backend read back every step's output (one wait per step on the GPU);
  // false keeps tracing free of readbacks and synchronisation.
  virtual bool wants_values() const { return false; }
  // A new pass (a forward) begins on `backend` ("cpu", "gpu") running on `device`.
  virtual void on_pass(const std::string& pass, const std::string& backend, const std::string& device) {
    (void)pass, (void)backend, (void)device;
  }
  virtual void on_step(const StepEvent& event) = 0;
};

// Prints one table row per step: index, step, op, input shapes -> output shape (and time).
class ConsoleTracer : public Tracer {
 public:
  explicit ConsoleTracer(std::ostream& out) : out_(out) {}
  void on_pass(const std::string& pass, const std::string& backend, const std::string& device) override;
  void on_step(const StepEvent& event) override;

 private:
  std::ostream& out_;
};

// Keeps every event (and, when asked, a copy of every output) for later inspection: the
// side-by-side view zips two of these.
class StepRecorder : public Tracer {
 public:
  struct Step {
    StepEvent event;           // event.values is reset: use `values`
    std::optional<Tensor> values;
  };
  explicit StepRecorder(bool keep_values) : keep_values_(keep_values) {}
  bool wants_values() const override { return keep_values_; }
  void on_pass(const std::string&, const std::string&, const std::string&) override { steps_.clear(); }
  void on_step(const StepEvent& event) override;
  const std::vector<Step>& steps() const { return steps_; }

 private:
  bool keep_values_;
  std::vector<Step> steps_;
};

// "(2, 5, 64) (64, 64) (64,)" — the shapes of a step's inputs, as the console shows them.
std::string input_shapes(const StepEvent& event);

}  // namespace vkattn
