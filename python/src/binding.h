#pragma once
// What the bindings of python/src share: numpy arrays to and from the engine's tensors, the
// devices a process opens (one backend each, shared by the modules made for it), and traced
// passes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: type casters must agree across them
#include <pybind11/stl/filesystem.h>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "vkattn/vkattn.h"

namespace vkattn::python {

namespace py = pybind11;

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using BoolArray = py::array_t<bool, py::array::c_style | py::array::forcecast>;

template <class Array>
Shape shape_of(const Array& a) {
  return Shape(a.shape(), a.shape() + a.ndim());
}

// A float32 array as a Tensor (a copy: the engine owns its tensors).
Tensor to_tensor(const FloatArray& a);
// A mask: bool (True blocks; dtype boolean) or float (added to the scores).
std::optional<Tensor> to_mask(const std::optional<py::array>& a);
// A Tensor as a numpy array that owns its data (moved, not copied); bool and int64 tensors as
// numpy's bool and int64.
py::array to_array(Tensor t);

// ---- devices -----------------------------------------------------------------------------------

// One backend per device= value, shared by the modules made for it: a Vulkan device and its
// compiled pipelines are made once per process. Its mutex serialises the passes of threads
// that share it (each pass holds it from first upload to last download).
struct Device {
  std::unique_ptr<Backend> backend;
  std::mutex mutex;
};

std::shared_ptr<Device> open_device(const std::string& kind, const std::string& selector);
// Every device this process opened let go of (their modules keep theirs alive).
void release_devices();

// What `f(backend)` returns, run with the GIL released and the device held.
template <class F>
auto on_device(Device& device, F&& f) {
  py::gil_scoped_release release;
  std::lock_guard lock(device.mutex);
  return f(*device.backend);
}

// "gpu: <the device's name>" or "cpu: reference (C++ loops)"
std::string device_label(const Device& d);

// vkattn.DeviceTensor (device_tensor.cpp): a value on one of those devices, which keeps it open.
struct DeviceTensor {
  std::shared_ptr<Device> device;
  Value value;
};
// `tensor` when it is on `device`, else the DeviceError that names both (`name`: "query").
const DeviceTensor& on_same_device(const DeviceTensor& tensor, const std::string& name, const Device& device);

// ---- traces ------------------------------------------------------------------------------------

// A recorded pass with its values, and the module's configuration for the dump.
struct Trace {
  StepRecorder steps{true};
  nlohmann::json config = nlohmann::json::object();
};

// The steps as dicts for vkattn.Trace: name, op, inputs, shape, dims, dtype, times, values, …
py::list step_dicts(const Trace& trace);
// The console table of the pass, with values or not.
std::string trace_table(const Trace& trace, bool values);
// The trace written to `dir` as vkattn run --trace writes it.
void trace_dump(const Trace& trace, const std::filesystem::path& dir, bool values);

// The layout steps folded or copied as asked, for one pass (none asked: as the device does).
class LayoutStepsFor {
 public:
  LayoutStepsFor(Backend& backend, std::optional<bool> fold) : backend_(backend), before_(backend.folds_layout_steps()) {
    if (fold) backend.fold_layout_steps(*fold);
  }
  ~LayoutStepsFor() {
    try {
      backend_.fold_layout_steps(before_);
    } catch (const std::exception&) {  // false is always taken; true was taken before
    }
  }
  LayoutStepsFor(const LayoutStepsFor&) = delete;
  LayoutStepsFor& operator=(const LayoutStepsFor&) = delete;

 private:
  Backend& backend_;
  bool before_;
};

// Runs `pass` on `device` with a value recorder attached, the layout steps folded or copied as
// asked: the result and the trace.
template <class F>
auto traced(Device& device, nlohmann::json config, F&& pass, std::optional<bool> fold_layout_steps) {
  auto trace = std::make_shared<Trace>();
  trace->config = std::move(config);
  auto result = on_device(device, [&](Backend& backend) {
    LayoutStepsFor layout(backend, fold_layout_steps);
    AttachedTracer attached(backend, trace->steps);
    return pass(backend);
  });
  return std::pair{std::move(result), trace};
}

// ---- the bindings of other files -----------------------------------------------------------------

void bind_pretrained(py::module_& m);      // pretrained.cpp: vkattn._Pretrained
void bind_device_tensors(py::module_& m);  // device_tensor.cpp: vkattn.DeviceTensor, _to_device

}  // namespace vkattn::python
