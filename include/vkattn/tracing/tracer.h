#pragma once
// The tracer seam: every step a Backend runs is reported here, whichever backend runs it and
// whoever listens. A step never knows which sinks are attached.
#include <cmath>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "vkattn/tensor.h"

namespace vkattn {

struct TensorInfo {
  std::string name;  // "query", "q_proj.weight", or the step that produced it
  Shape shape;
  DType dtype = DType::float32;
  std::vector<std::string> dims;  // a step output's axis names, e.g. b, h, i, j (empty for inputs)
  // Empty: the tensor lies in its shape's own order. Else the order it lies in, when a layout
  // step was folded into the step that made it: q_proj's (B, T, E) stored as (B, H, T, d).
  Shape stored_as;
};

// When a step ran, in microseconds from the start of the pass's first step.
struct StepTime {
  double start_us = 0;
  double duration_us = 0;

  // The step from start to end. end - start rounds where start is far below end, and start plus
  // that can pass end by an ulp: the duration is shortened until it does not, so that a step that
  // begins where this one ends (the next dispatch, a folded layout step) never begins before it.
  static StepTime between(double start_us, double end_us) {
    double duration = end_us - start_us;
    while (start_us + duration > end_us) duration = std::nextafter(duration, 0.0);
    return {start_us, duration};
  }
};

// How a pass ended: each step's time, and the error that stopped it, if one did.
struct PassEnd {
  std::vector<StepTime> step_times;  // by step index; empty when the backend could not time them
  std::string clock;                 // "gpu" (timestamp queries) or "host" (the host's steady clock)
  std::optional<std::string> error;  // the exception's message when a step (or the pass) failed
};

struct StepEvent {
  int index = 0;                   // 0-based position in the pass
  std::string name;                // the step: q_proj, split_heads_q, attention_scores, …
  std::string op;                  // the operation = shader = reference function: linear, …
  std::vector<TensorInfo> inputs;  // absent optional inputs are not listed
  TensorInfo output;
  const Tensor* values = nullptr;  // the output read back, only when a tracer wants_values()
  // Empty for a step that ran. For a layout step (split_heads, merge_heads) folded into a
  // neighbour, which did its work by storing or reading in another order, or an activation
  // applied by the projection before it as it stored its products: what happened, as
  // "folded into q_proj's store, which wrote (B, T, H, d) at strides (160, 8, 40, 1)" or
  // "folded into linear1's store, which applied it to each product as it wrote it". Its time is
  // 0 µs.
  std::string folded;
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
  // True makes the backend hand on every tensor the pass takes from the host — its inputs and
  // weights, under their scoped names ("query", "layers.0.self_attn.q_proj_weight") — to
  // on_input: what a check needs to recompute a step as a mistake would have it.
  virtual bool wants_inputs() const { return false; }
  virtual void on_input(const std::string& name, const Tensor& tensor) { (void)name, (void)tensor; }
  // The pass is over, finished or failed; step times are known only now (the GPU's arrive when
  // its work completes). Called even when a step threw, with what was reported up to it.
  virtual void on_pass_end(const PassEnd& end) { (void)end; }
};

// Prints one table row per step when the pass ends: index, step, op, input shapes -> output
// shape, time; with values, a few leading values and min / max / mean of each output. A failed
// pass prints the rows it reached, then the error.
class ConsoleTracer : public Tracer {
 public:
  explicit ConsoleTracer(std::ostream& out, bool values = false) : out_(out), values_(values) {}
  bool wants_values() const override { return values_; }
  void on_pass(const std::string& pass, const std::string& backend, const std::string& device) override;
  void on_step(const StepEvent& event) override;
  void on_pass_end(const PassEnd& end) override;

 private:
  struct Row {
    StepEvent event;     // event.values is reset
    std::string values;  // their summary, when asked for
  };
  std::ostream& out_;
  bool values_;
  std::string title_;
  std::vector<Row> rows_;
};

// Keeps every event (and, when asked, a copy of every output) for later inspection: the
// side-by-side view zips two of these.
class StepRecorder : public Tracer {
 public:
  struct Step {
    StepEvent event;           // event.values is reset: use `values`
    std::optional<Tensor> values;
  };
  // keep_inputs: also a copy of every tensor the pass takes from the host (inputs()).
  explicit StepRecorder(bool keep_values, bool keep_inputs = false)
      : keep_values_(keep_values), keep_inputs_(keep_inputs) {}
  bool wants_values() const override { return keep_values_; }
  bool wants_inputs() const override { return keep_inputs_; }
  void on_pass(const std::string& pass, const std::string& backend, const std::string& device) override;
  void on_step(const StepEvent& event) override;
  void on_input(const std::string& name, const Tensor& tensor) override { inputs_.insert_or_assign(name, tensor); }
  void on_pass_end(const PassEnd& end) override { end_ = end; }
  const std::vector<Step>& steps() const { return steps_; }
  // How the last pass ended (its step times, its error).
  const PassEnd& pass_end() const { return end_; }
  // The last pass's name, and where it ran: "cpu" / "gpu", and the device's name.
  const std::string& pass() const { return pass_; }
  const std::string& backend() const { return backend_; }
  const std::string& device() const { return device_; }
  // The last pass's inputs and weights by their scoped names, when kept.
  const std::map<std::string, Tensor>& inputs() const { return inputs_; }

 private:
  bool keep_values_, keep_inputs_;
  std::string pass_, backend_, device_;
  std::vector<Step> steps_;
  std::map<std::string, Tensor> inputs_;
  PassEnd end_;
};

// Plays a recorded pass to `sink` as the backend played it (values where they were kept): a
// recorder's pass printed by a ConsoleTracer or written by a TraceDump after the fact.
void replay(const StepRecorder& recorded, Tracer& sink);

// "[0.1235, -0.5, 0.25, …]" — a tensor's first `n` values, 4 significant digits.
std::string leading_values(const Tensor& values, size_t n);

// "[0.12, -0.5, 0.33, …] min -1.2 max 0.9 mean 0.01" — a tensor in one line.
std::string value_summary(const Tensor& values, size_t leading = 4);

}  // namespace vkattn
