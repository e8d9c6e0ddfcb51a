// vkattn devices: every Vulkan device, its limits and optional features, the one vkattn picks,
// and why any device is unusable; and the backend a command asks for.
#include <iostream>
#include <optional>

#include "engine/errors.h"
#include "engine/reference_backend.h"
#include "engine/vulkan/context.h"
#include "engine/vulkan_backend.h"
#include "tools/commands.h"

namespace vkattn::cli {

CLI::App* add_devices(CLI::App& app) {
  return app.add_subcommand("devices", "list every Vulkan device, its limits, and why one is unusable");
}

int run_devices() {
  auto reports = vulkan::list_devices();
  std::optional<size_t> chosen;
  try {
    chosen = vulkan::select_device(reports, vulkan::ContextOptions::from_environment().device);
  } catch (const DeviceError& e) {
    std::cout << "no device is selected: " << e.what() << "\n";
  }
  for (const auto& r : reports) {
    std::cout << (chosen == r.index ? "* " : "  ") << r.index << ": " << r.name << " (" << vulkan::device_type_name(r.type)
              << ", Vulkan " << vulkan::version_string(r.api_version) << ")\n";
    if (!r.suitable) {
      std::cout << "     unusable: it " << r.rejection << "\n";
      continue;
    }
    std::cout << "     workgroups: count " << r.max_workgroup_count[0] << " x " << r.max_workgroup_count[1] << " x "
              << r.max_workgroup_count[2] << ", size x <= " << r.max_workgroup_size_x << ", invocations <= "
              << r.max_workgroup_invocations << ", shared memory " << r.max_shared_memory_bytes << " B\n"
              << "     storage buffer range " << r.max_storage_buffer_range << " B, push constants "
              << r.max_push_constants_bytes << " B, device-local heap " << (r.device_local_bytes >> 20) << " MiB\n"
              << "     subgroup size " << r.subgroup_size << (r.subgroup_arithmetic ? " (arithmetic in compute)" : "")
              << ", 16-bit storage " << (r.storage_buffer_16bit ? "yes" : "no") << ", RGBA32F texel buffers "
              << (r.texel_rgba32f ? "yes" : "no") << ", timestamps " << (r.timestamps ? "yes" : "no") << "\n";
  }
  if (chosen) std::cout << "* = the device vkattn uses (set VKATTN_DEVICE to an index or a name to choose)\n";
  return chosen ? 0 : 1;
}

std::unique_ptr<Backend> make_backend(const std::string& backend, const std::string& device) {
  if (backend == "cpu") {
    if (!device.empty()) throw UsageError("--device chooses a GPU; it does not apply to --backend cpu");
    return std::make_unique<ReferenceBackend>();
  }
  auto options = vulkan::ContextOptions::from_environment();
  if (!device.empty()) {
    try {
      vulkan::select_device(vulkan::list_devices(), device);
    } catch (const DeviceError& e) {
      throw UsageError(std::string("--device: ") + e.what());
    }
    options.device = device;
  }
  return std::make_unique<VulkanBackend>(std::make_shared<vulkan::Context>(options));
}

}  // namespace vkattn::cli
