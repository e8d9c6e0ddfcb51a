#pragma once
// The backend a program runs on, chosen by name as the command line (--backend, --device), the
// examples and the Python package choose it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/backends/vulkan_backend.h"

namespace vkattn {

// "gpu": a VulkanBackend on the device `device` names — an index into `vkattn devices`' list or a
// substring of a device's name; empty: VKATTN_DEVICE, else the best suitable device — with the
// validation layer when VKATTN_VALIDATION asks for it. "cpu": the ReferenceBackend.
// ConfigError for a backend that is neither, for a device given with "cpu", and for a device that
// matches none (the message lists those there are); DeviceError when Vulkan cannot start.
// `options` shape a "gpu" backend (VulkanBackendOptions: tuning, plans, limits).
std::unique_ptr<Backend> make_backend(const std::string& backend = "gpu", const std::string& device = "",
                                      const VulkanBackendOptions& options = {});

// One Vulkan device as `vkattn devices` lists it.
struct DeviceInfo {
  int index = 0;             // what device = "0" chooses
  std::string name;          // "NVIDIA H100 80GB HBM3", "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string type;          // "discrete GPU", "integrated GPU", "CPU", …
  std::string driver;        // "NVIDIA, 580.159.04", "llvmpipe, Mesa 22.3.6 (LLVM 15.0.6)"
  uint64_t memory_bytes = 0;  // the largest device-local heap
  bool usable = false;
  std::string unusable_because;  // why not, when not usable
  bool chosen = false;           // the one make_backend("gpu") takes (VKATTN_DEVICE, else the best)
};
// Every Vulkan device there is; DeviceError when Vulkan cannot start.
std::vector<DeviceInfo> devices();

}  // namespace vkattn
