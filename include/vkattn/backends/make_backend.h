#pragma once
// The backend a program runs on, chosen by name as the command line (--backend, --device), the
// examples and the Python package choose it.
#include <memory>
#include <string>

#include "vkattn/backends/backend.h"

namespace vkattn {

// "gpu": a VulkanBackend on the device `device` names — an index into `vkattn devices`' list or a
// substring of a device's name; empty: VKATTN_DEVICE, else the best suitable device — with the
// validation layer when VKATTN_VALIDATION asks for it. "cpu": the ReferenceBackend.
// ConfigError for a backend that is neither, for a device given with "cpu", and for a device that
// matches none (the message lists those there are); DeviceError when Vulkan cannot start.
std::unique_ptr<Backend> make_backend(const std::string& backend = "gpu", const std::string& device = "");

}  // namespace vkattn
