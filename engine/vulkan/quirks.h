#pragma once
// Driver quirks: the one table of per-driver workarounds (which vendor and driver, which driver
// versions, what is switched off, and why), and the environment variables that override each
// switch. A switch turns a whole family of kernels off on a device; which kernel then runs for each
// step, and why, is lanes.h's and gemm_plan.h's business, and `vkattn devices` prints it.
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include <vulkan/vulkan.hpp>

namespace vkattn::vulkan {

struct DeviceReport;

// What vkattn may use on a device; each switch that is off says why.
struct Switches {
  // Kernels may use subgroup operations, each on lanes the device guarantees (lanes.h). Off: every
  // step runs its subgroup-free variant. Environment: VKATTN_SUBGROUPS=on|off.
  bool subgroups = true;
  std::string subgroups_why;
  // The GEMMs and flash_attention may read their inputs through RGBA32F uniform texel buffers
  // (on CPU devices, where that is faster). Environment: VKATTN_TEXEL_INPUTS=on|off.
  bool texel_inputs = true;
  std::string texel_inputs_why;
};

enum class Switch { subgroups, texel_inputs };

// "subgroups", "texel_inputs"
const char* switch_name(Switch what);

struct Quirk {
  uint32_t vendor_id;           // PCI vendor ID (0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel); 0 = any
  vk::DriverId driver;          // VkDriverId, as VkPhysicalDeviceDriverProperties reports it
  uint32_t min_driver_version;  // inclusive, in the driver's own encoding of driverVersion
  uint32_t max_driver_version;  // inclusive; UINT32_MAX = every later version too
  Switch what;                  // switched off where the row matches
  const char* why;              // what goes wrong without it, and where that was seen
};

// vkattn's table (quirks.cpp).
std::span<const Quirk> driver_quirks();

// Reads an environment variable: nullptr when unset.
using EnvReader = std::function<const char*(const char*)>;

// The switches for `device`: every row of `quirks` that matches it switches off its switch, then
// VKATTN_SUBGROUPS and VKATTN_TEXEL_INPUTS (on/off, 1/0, true/false, yes/no) override either way.
// Throws ConfigError naming the variable when one holds anything else.
Switches choose_switches(const DeviceReport& device, std::span<const Quirk> quirks = driver_quirks(),
                         const EnvReader& env = {});

}  // namespace vkattn::vulkan
