#include "vkattn/backends/make_backend.h"

#include <optional>

#include "engine/vulkan/context.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/errors.h"

namespace vkattn {

std::unique_ptr<Backend> make_backend(const std::string& backend, const std::string& device,
                                      const VulkanBackendOptions& backend_options) {
  if (backend == "cpu") {
    if (!device.empty()) {
      throw ConfigError("a device ('" + device + "') chooses a GPU; it does not apply to the cpu backend");
    }
    return std::make_unique<ReferenceBackend>();
  }
  if (backend != "gpu") throw ConfigError("backend '" + backend + "' is neither gpu nor cpu");
  auto options = vulkan::ContextOptions::from_environment();
  if (!device.empty()) {
    const auto devices = vulkan::list_devices();  // DeviceError when Vulkan cannot start
    try {
      vulkan::select_device(devices, device);
    } catch (const DeviceError& e) {
      throw ConfigError(e.what());  // the user's choice, not the machine's failure
    }
    options.device = device;
  }
  return std::make_unique<VulkanBackend>(std::make_shared<vulkan::Context>(options), backend_options);
}

std::vector<DeviceInfo> devices() {
  const auto reports = vulkan::list_devices();
  std::optional<size_t> chosen;
  try {
    chosen = vulkan::select_device(reports, vulkan::ContextOptions::from_environment().device);
  } catch (const DeviceError&) {
    // none usable, or VKATTN_DEVICE matches none: every device is listed, none chosen
  }
  std::vector<DeviceInfo> out;
  for (const auto& r : reports) {
    out.push_back({static_cast<int>(r.index), r.name, vulkan::device_type_name(r.type), vulkan::driver_string(r),
                   r.device_local_bytes, r.suitable, r.rejection, chosen == r.index});
  }
  return out;
}

}  // namespace vkattn
