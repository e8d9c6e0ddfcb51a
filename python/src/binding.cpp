#include "binding.h"

#include <sstream>

namespace vkattn::python {
namespace {

std::mutex devices_mutex;
std::map<std::pair<std::string, std::string>, std::shared_ptr<Device>> open_devices;

py::dict info_dict(const TensorInfo& t) {
  py::dict d;
  d["name"] = t.name;
  d["shape"] = py::tuple(py::cast(t.shape));
  d["dtype"] = dtype_name(t.dtype);
  if (!t.stored_as.empty()) d["stored_as"] = py::tuple(py::cast(t.stored_as));
  return d;
}

}  // namespace

Tensor to_tensor(const FloatArray& a) {
  const float* data = a.data();
  return Tensor(shape_of(a), std::vector<float>(data, data + a.size()));
}

std::optional<Tensor> to_mask(const std::optional<py::array>& a) {
  if (!a) return std::nullopt;
  if (a->dtype().kind() == 'b') {
    BoolArray b = BoolArray::ensure(*a);
    Tensor t(shape_of(b), DType::boolean);
    for (py::ssize_t k = 0; k < b.size(); ++k) t.data[static_cast<size_t>(k)] = b.data()[k] ? 1.0f : 0.0f;
    return t;
  }
  return to_tensor(FloatArray::ensure(*a));
}

py::array to_array(Tensor t) {
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
  if (t.dtype == DType::boolean) {
    py::array_t<bool> a(shape);
    for (size_t k = 0; k < t.data.size(); ++k) a.mutable_data()[k] = t.data[k] != 0;
    return a;
  }
  if (t.dtype == DType::int64) {
    py::array_t<int64_t> a(shape);
    for (size_t k = 0; k < t.data.size(); ++k) a.mutable_data()[k] = static_cast<int64_t>(t.data[k]);
    return a;
  }
  auto* owned = new std::vector<float>(std::move(t.data));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  return py::array_t<float>(shape, owned->data(), owner);
}

std::shared_ptr<Device> open_device(const std::string& kind, const std::string& selector) {
  std::lock_guard lock(devices_mutex);
  auto& device = open_devices[{kind, selector}];
  if (!device) {
    auto made = std::make_shared<Device>();
    made->backend = make_backend(kind, selector);
    // Ctrl-C stops a long forward between its submissions: while C++ runs, Python's handler only
    // notes the signal, so the progress callback (run with the GIL released) asks for it.
    made->backend->on_progress([](const Backend::Progress& p) {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) {
        PyErr_Clear();
        throw Interrupted("the forward stopped after " + std::to_string(static_cast<int>(100 * p.done)) + "% of " +
                          p.step + ", between two of its submissions");
      }
    });
    device = made;
  }
  return device;
}

void release_devices() {
  std::lock_guard lock(devices_mutex);
  open_devices.clear();
}

std::string device_label(const Device& d) { return d.backend->name() + ": " + d.backend->device_name(); }

py::list step_dicts(const Trace& trace) {
  py::list out;
  const auto& times = trace.steps.pass_end().step_times;
  const auto& steps = trace.steps.steps();
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepEvent& e = steps[i].event;
    py::dict d;
    d["index"] = e.index;
    d["name"] = e.name;
    d["op"] = e.op;
    py::list inputs;
    for (const auto& input : e.inputs) inputs.append(info_dict(input));
    d["inputs"] = inputs;
    d["shape"] = py::tuple(py::cast(e.output.shape));
    d["dims"] = py::tuple(py::cast(e.output.dims));
    d["dtype"] = dtype_name(e.output.dtype);
    d["start_us"] = i < times.size() ? py::cast(times[i].start_us) : py::none();
    d["time_us"] = i < times.size() ? py::cast(times[i].duration_us) : py::none();
    d["values"] = steps[i].values ? py::object(to_array(*steps[i].values)) : py::none();
    d["folded"] = e.folded.empty() ? py::none() : py::cast(e.folded);
    d["stored_as"] = e.output.stored_as.empty() ? py::none() : py::object(py::tuple(py::cast(e.output.stored_as)));
    out.append(d);
  }
  return out;
}

std::string trace_table(const Trace& trace, bool values) {
  std::ostringstream out;
  ConsoleTracer console(out, values);
  replay(trace.steps, console);
  return out.str();
}

void trace_dump(const Trace& trace, const std::filesystem::path& dir, bool values) {
  TraceDump dump(dir, values, trace.config);
  replay(trace.steps, dump);
}

}  // namespace vkattn::python
