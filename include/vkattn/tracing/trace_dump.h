#pragma once
// The trace dump of DESIGN.md, written by a Tracer and read back by `vkattn diff`:
//   DIR/trace.json      {"format": "vkattn-trace", "version": 1, "backend", "device", "config",
//                        "clock", "error"?, "steps": [{"index", "name", "op", "inputs": [{"name",
//                        "shape", "dtype", "stored_as"?}], "output": {"name", "shape", "dtype",
//                        "dims", "stored_as"?, "file"?}, "folded"?, "start_us"?, "time_us"?}]}
//                       "folded": a layout step done by a neighbour's store or load (StepEvent);
//                       "stored_as": the order a tensor lies in when not its shape's own
//   DIR/NNN_<step>.npy  each step's output, when values are traced (numpy.load reads them)
//   DIR/timeline.json   Chrome trace events, one complete event per step (Perfetto opens it)
// trace.json and timeline.json are written when the pass ends, also when it failed: a failed
// pass leaves the steps it reached and the error.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "vkattn/tracing/compare.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {

class TraceDump : public Tracer {
 public:
  // Creates `dir` if needed (FileError if it cannot); `config` is stored as the dump's "config".
  TraceDump(std::filesystem::path dir, bool values, nlohmann::json config = nlohmann::json::object());
  bool wants_values() const override { return values_; }
  void on_pass(const std::string& pass, const std::string& backend, const std::string& device) override;
  void on_step(const StepEvent& event) override;
  void on_pass_end(const PassEnd& end) override;

 private:
  std::filesystem::path dir_;
  bool values_;
  nlohmann::json config_;
  nlohmann::json trace_;
};

// One dump read back.
struct TraceStep {
  int index = 0;
  std::string name, op;
  Shape shape;
  std::vector<std::string> dims;
  std::optional<std::filesystem::path> file;  // the values, when traced
};
struct TraceFile {
  std::string backend, device;
  std::optional<std::string> error;
  std::vector<TraceStep> steps;
};
// FileError "DIR/trace.json: …" when missing or not a vkattn trace.
TraceFile read_trace(const std::filesystem::path& dir);
// The whole pass a dump holds — every step's event with its inputs, its time, and its values
// where the dump has them — as the StepRecorder that recorded it (replay() it into any Tracer).
// FileError as read_trace, and for a value file that is missing or not the step's shape.
StepRecorder load_trace(const std::filesystem::path& dir);

// Step-by-step comparison of two dumps of the same recipe. One step's comparison; first_mismatch decodes as index_string(step.shape, it, step.dims).
struct StepDiff : ValueDiff {
  TraceStep step;
  bool compared = false;  // both dumps hold this step's values
};
struct TraceDiff {
  std::vector<StepDiff> steps;
  std::optional<size_t> first_divergent;  // index into steps
};
// FileError when a dump is unreadable or the two describe different recipes (another step
// list, op or shape).
TraceDiff diff_traces(const TraceFile& a, const TraceFile& b, double atol, double rtol);

}  // namespace vkattn
