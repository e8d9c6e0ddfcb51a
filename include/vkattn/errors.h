#pragma once
// The exceptions vkattn throws. Each message is one line that names the step (or file, or
// argument), what it received and the rule that was broken, e.g.
//   out_proj: input (2, 5, 60) has 60 features but the weight (64, 64) expects 64
#include <exception>
#include <stdexcept>
#include <string>

namespace vkattn {

// `text` with its control characters escaped (a newline as \n, others as \xNN), so that a
// message quoting a file's own bytes (a dtype, a tensor name) stays one line.
std::string one_line(const std::string& text);

// Base of every vkattn error; its message is always one line.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(one_line(what)) {}
  explicit Error(const char* what) : Error(std::string(what)) {}
};

// A tensor of the wrong shape or dtype was handed to a step or to forward().
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A module was configured with values that cannot work (embed_dim not divisible by num_heads…).
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A file is missing, unreadable, malformed, or holds tensors that do not fit what was asked for
// (an .npy of the wrong dtype, a safetensors header pointing past the end, a weight file without
// out_proj.weight). The message starts with the file's path.
class FileError : public Error {
 public:
  using Error::Error;
};

// Vulkan setup or execution failed: no usable device, a missing layer, a failed call.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// The pass was stopped on purpose between two of its submissions (Ctrl-C on the command line,
// a progress callback that threw it): nothing it computed is returned.
class Interrupted : public Error {
 public:
  using Error::Error;
};

// "VK_ERROR_OUT_OF_DEVICE_MEMORY": a VkResult's C name from Vulkan-Hpp's "ErrorOutOfDeviceMemory".
std::string vk_result_name(const std::string& vulkan_hpp_name);

// The DeviceError for `failure` met at `where` (a step; empty for none): a Vulkan call's error
// (vk::SystemError) by its VkResult name and what it means for the user — out of device memory,
// device lost — anything else by its message.
DeviceError device_error(const std::string& where, const std::exception& failure);

}  // namespace vkattn
