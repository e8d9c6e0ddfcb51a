#pragma once
// The exceptions vkattn throws. Each message is one line that names the step (or file, or
// argument), what it received and the rule that was broken, e.g.
//   out_proj: input (2, 5, 60) has 60 features but the weight (64, 64) expects 64
#include <stdexcept>
#include <string>

namespace vkattn {

// Base of every vkattn error.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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

}  // namespace vkattn
