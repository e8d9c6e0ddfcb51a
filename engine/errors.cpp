#include "vkattn/errors.h"

#include <cstdio>
#include <system_error>

namespace vkattn {

std::string one_line(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    } else {
      out += c;  // printable ASCII, and UTF-8 as it came
    }
  }
  return out;
}

std::string vk_result_name(const std::string& vulkan_hpp_name) {
  std::string name = "VK_";
  for (size_t i = 0; i < vulkan_hpp_name.size(); ++i) {
    const char c = vulkan_hpp_name[i];
    const bool upper = c >= 'A' && c <= 'Z';
    const char before = i > 0 ? vulkan_hpp_name[i - 1] : 'A';
    // "OutOfDate" -> OUT_OF_DATE, "DateKHR" -> DATE_KHR
    if (upper && i > 0 && !(before >= 'A' && before <= 'Z')) name += '_';
    name += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  }
  return name;
}

DeviceError device_error(const std::string& where, const std::exception& failure) {
  const std::string at = where.empty() ? "" : where + ": ";
  const auto* vulkan = dynamic_cast<const std::system_error*>(&failure);
  if (!vulkan || std::string(vulkan->code().category().name()) != "vk::Result") {
    return DeviceError(at + failure.what());
  }
  // Vulkan-Hpp's what(): "vk::Device::allocateMemory: ErrorOutOfDeviceMemory"
  const std::string result = vk_result_name(vulkan->code().message());
  std::string call = failure.what();
  call = call.substr(0, call.rfind(": "));
  std::string meaning;
  if (result == "VK_ERROR_OUT_OF_DEVICE_MEMORY" || result == "VK_ERROR_OUT_OF_HOST_MEMORY") {
    meaning = std::string("; the ") + (result == "VK_ERROR_OUT_OF_HOST_MEMORY" ? "driver ran out of host" : "device ran out of") +
              " memory: try a smaller batch or sequence, or --attention fused, which never holds the (L, S) scores";
  } else if (result == "VK_ERROR_DEVICE_LOST") {
    meaning = "; the driver lost the device (a hang, a reset or a driver fault): nothing it computed can be trusted; "
              "make a new device (a new backend, or in Python a new module) and run again";
  } else if (result == "VK_ERROR_INCOMPATIBLE_DRIVER") {
    meaning = "; no Vulkan driver was found that can start: install one (Mesa's lavapipe is Debian's "
              "mesa-vulkan-drivers)";
  } else if (result == "VK_ERROR_INITIALIZATION_FAILED") {
    meaning = "; the Vulkan driver failed to start";
  }
  return DeviceError(at + call + " failed with " + result + meaning);
}

}  // namespace vkattn
