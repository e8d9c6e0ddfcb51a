// vkattn.DeviceTensor: a tensor left on a device between calls, as torch's CUDA tensors are. An
// array goes there with vkattn.to_device, a forward on device tensors leaves its results there,
// and numpy() reads one back; a module on the same device takes it as it lies, so that modules
// chain without the data crossing to the host and back.
#include <string>

#include "binding.h"

namespace vkattn::python {

const DeviceTensor& on_same_device(const DeviceTensor& tensor, const std::string& name, const Device& device) {
  if (tensor.device.get() == &device) return tensor;
  throw DeviceError(name + " is on '" + device_label(*tensor.device) + "'; this module runs on '" +
                    device_label(device) + "': send the array there with vkattn.to_device(array, device=...)");
}

void bind_device_tensors(py::module_& m) {
  py::class_<DeviceTensor>(m, "DeviceTensor",
                           "A float32 tensor on a vkattn device: vkattn.to_device(array) sends one there, a "
                           "forward on device tensors leaves its results there, numpy() reads one back.")
      .def_property_readonly("shape", [](const DeviceTensor& t) { return py::tuple(py::cast(t.value.shape)); })
      .def_property_readonly("device", [](const DeviceTensor& t) { return device_label(*t.device); })
      .def("numpy", [](const DeviceTensor& t) {
             Tensor host = on_device(*t.device, [&](Backend& backend) { return backend.download(t.value); });
             return to_array(std::move(host));
           }, "the tensor read back to the host, as a float32 numpy array (a copy)")
      .def("__repr__", [](const DeviceTensor& t) {
        return "vkattn.DeviceTensor(shape=" + shape_string(t.value.shape) + ") on " + device_label(*t.device);
      });
  m.def("_to_device", [](const FloatArray& array, const std::string& kind, const std::string& selector) {
    DeviceTensor t{open_device(kind, selector), {}};
    Tensor host = to_tensor(array);
    t.value = on_device(*t.device, [&](Backend& backend) { return backend.upload("tensor", host); });
    return t;
  });
}

}  // namespace vkattn::python
