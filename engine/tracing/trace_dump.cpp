#include "vkattn/tracing/trace_dump.h"

#include <cmath>
#include <cstdio>
#include <regex>

#include "engine/io/file.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"
#include "vkattn/tracing/compare.h"

namespace vkattn {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json info_json(const TensorInfo& t) {
  json j = {{"name", t.name}, {"shape", t.shape}, {"dtype", dtype_name(t.dtype)}};
  if (!t.stored_as.empty()) j["stored_as"] = t.stored_as;
  return j;
}

void write_json(const fs::path& path, const json& value) {
  std::string text = value.dump(1) + "\n";
  io::write_file(path, std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace

TraceDump::TraceDump(fs::path dir, bool values, json config)
    : dir_(std::move(dir)), values_(values), config_(std::move(config)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_)) throw FileError(dir_.string() + ": cannot create the trace directory" + (ec ? ": " + ec.message() : ""));
}

void TraceDump::on_pass(const std::string& pass, const std::string& backend, const std::string& device) {
  // A dump describes one pass: value files of an earlier one would mislead a reader.
  static const std::regex step_file(R"(\d{3}_\w+\.npy)");
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (std::regex_match(entry.path().filename().string(), step_file)) fs::remove(entry.path());
  }
  trace_ = {{"format", "vkattn-trace"}, {"version", 1}, {"pass", pass}, {"backend", backend},
            {"device", device}, {"config", config_}, {"steps", json::array()}};
}

void TraceDump::on_step(const StepEvent& event) {
  json step = {{"index", event.index}, {"name", event.name}, {"op", event.op}, {"inputs", json::array()}};
  for (const auto& input : event.inputs) step["inputs"].push_back(info_json(input));
  step["output"] = info_json(event.output);
  step["output"]["dims"] = event.output.dims;
  if (!event.folded.empty()) step["folded"] = event.folded;
  if (event.values) {
    char file[300];
    std::snprintf(file, sizeof file, "%03d_%s.npy", event.index, event.name.c_str());
    io::write_npy(dir_ / file, *event.values);
    step["output"]["file"] = file;
  }
  trace_["steps"].push_back(std::move(step));
}

void TraceDump::on_pass_end(const PassEnd& end) {
  json& steps = trace_["steps"];
  trace_["clock"] = end.clock;
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1},
                    {"args", {{"name", "vkattn " + trace_["backend"].get<std::string>() + " (" +
                                           trace_["device"].get<std::string>() + ")"}}}});
  for (size_t i = 0; i < steps.size(); ++i) {
    json& step = steps[i];
    json args = {{"op", step["op"]}, {"output", shape_string(step["output"]["shape"].get<Shape>())}};
    for (const auto& input : step["inputs"]) args["inputs"].push_back(input["name"].get<std::string>() + " " +
                                                                      shape_string(input["shape"].get<Shape>()));
    json event = {{"name", step["name"]}, {"cat", step["op"]}, {"ph", "X"}, {"pid", 1}, {"tid", 1}, {"args", args}};
    if (i < end.step_times.size()) {
      step["start_us"] = end.step_times[i].start_us;
      step["time_us"] = end.step_times[i].duration_us;
      event["ts"] = end.step_times[i].start_us;
      event["dur"] = end.step_times[i].duration_us;
    } else {
      event["ts"] = 0;
      event["dur"] = 0;
    }
    events.push_back(std::move(event));
  }
  if (end.error) trace_["error"] = *end.error;
  write_json(dir_ / "timeline.json", {{"traceEvents", events}, {"displayTimeUnit", "ms"}});
  write_json(dir_ / "trace.json", trace_);
}

TraceFile read_trace(const fs::path& dir) {
  const fs::path path = dir / "trace.json";
  auto fail = [&](const std::string& why) { return FileError(path.string() + ": " + why); };
  auto bytes = io::read_file(path);
  TraceFile out;
  try {
    json t = json::parse(reinterpret_cast<const char*>(bytes.data()), reinterpret_cast<const char*>(bytes.data() + bytes.size()));
    if (!t.is_object() || t.value("format", "") != "vkattn-trace") throw fail("not a vkattn trace (no \"format\": \"vkattn-trace\")");
    if (t.value("version", 0) != 1) throw fail("trace version " + t.value("version", json()).dump() + " is not 1");
    out.backend = t.at("backend").get<std::string>();
    out.device = t.at("device").get<std::string>();
    if (t.contains("error")) out.error = t["error"].get<std::string>();
    for (const auto& s : t.at("steps")) {
      TraceStep step{s.at("index").get<int>(), s.at("name").get<std::string>(), s.at("op").get<std::string>(),
                     s.at("output").at("shape").get<Shape>(), s.at("output").value("dims", std::vector<std::string>{}),
                     std::nullopt};
      if (s.at("output").contains("file")) step.file = dir / s["output"]["file"].get<std::string>();
      out.steps.push_back(std::move(step));
    }
  } catch (const json::exception& e) {
    throw fail(std::string("malformed trace: ") + e.what());
  }
  return out;
}

StepRecorder load_trace(const fs::path& dir) {
  (void)read_trace(dir);  // the format's checks, with their messages
  const fs::path path = dir / "trace.json";
  auto bytes = io::read_file(path);
  StepRecorder recorder(true);
  PassEnd end;
  try {
    json t = json::parse(reinterpret_cast<const char*>(bytes.data()), reinterpret_cast<const char*>(bytes.data() + bytes.size()));
    auto info = [](const json& j) {
      DType dtype = DType::float32;
      for (DType d : {DType::float32, DType::boolean, DType::int64})
        if (j.value("dtype", "float32") == dtype_name(d)) dtype = d;
      return TensorInfo{j.at("name").get<std::string>(), j.at("shape").get<Shape>(), dtype,
                        j.value("dims", std::vector<std::string>{}), j.value("stored_as", Shape{})};
    };
    recorder.on_pass(t.value("pass", std::string()), t.at("backend").get<std::string>(), t.at("device").get<std::string>());
    end.clock = t.value("clock", std::string());
    if (t.contains("error")) end.error = t["error"].get<std::string>();
    for (const auto& s : t.at("steps")) {
      StepEvent event{s.at("index").get<int>(), s.at("name").get<std::string>(), s.at("op").get<std::string>(), {},
                      info(s.at("output")), nullptr, s.value("folded", std::string())};
      for (const auto& input : s.at("inputs")) event.inputs.push_back(info(input));
      std::optional<Tensor> values;
      if (s.at("output").contains("file")) {
        const fs::path file = dir / s["output"]["file"].get<std::string>();
        values = io::read_npy(file);
        if (values->shape != event.output.shape) {
          throw FileError(file.string() + ": holds " + shape_string(values->shape) + " but step " + event.name +
                          " is " + shape_string(event.output.shape));
        }
        event.values = &*values;
      }
      recorder.on_step(event);
      if (s.contains("time_us")) end.step_times.push_back({s.value("start_us", 0.0), s["time_us"].get<double>()});
    }
  } catch (const json::exception& e) {
    throw FileError(path.string() + ": malformed trace: " + e.what());
  }
  if (end.step_times.size() != recorder.steps().size()) end.step_times.clear();
  recorder.on_pass_end(end);
  return recorder;
}

TraceDiff diff_traces(const TraceFile& a, const TraceFile& b, double atol, double rtol) {
  auto describe = [](const TraceStep& s) { return s.name + " (" + s.op + ") " + shape_string(s.shape); };
  const size_t common = std::min(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < common; ++i) {
    const auto &sa = a.steps[i], &sb = b.steps[i];
    if (sa.name != sb.name || sa.op != sb.op || sa.shape != sb.shape) {
      throw FileError("the dumps describe different recipes: step " + std::to_string(i) + " is " + describe(sa) +
                      " in one and " + describe(sb) + " in the other");
    }
  }
  if (a.steps.size() != b.steps.size() && !a.error && !b.error) {
    throw FileError("the dumps describe different recipes: " + std::to_string(a.steps.size()) + " steps against " +
                    std::to_string(b.steps.size()));
  }
  TraceDiff diff;
  for (size_t i = 0; i < common; ++i) {
    StepDiff d;
    d.step = a.steps[i];
    if (a.steps[i].file && b.steps[i].file) {
      Tensor va = io::read_npy(*a.steps[i].file), vb = io::read_npy(*b.steps[i].file);
      if (va.shape != a.steps[i].shape || vb.shape != b.steps[i].shape || va.data.size() != vb.data.size()) {
        throw FileError(a.steps[i].file->string() + ": its shape does not match the trace's " + shape_string(a.steps[i].shape));
      }
      d.compared = true;
      static_cast<ValueDiff&>(d) = compare_values(va, vb, atol, rtol);
      if (d.mismatches && !diff.first_divergent) diff.first_divergent = diff.steps.size();
    }
    diff.steps.push_back(d);
  }
  return diff;
}

}  // namespace vkattn
