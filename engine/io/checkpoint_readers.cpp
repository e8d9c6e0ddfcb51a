// ConfigReader and CheckpointTensors: what every architecture's reader shares.
#include "engine/io/checkpoints.h"

#include <cmath>
#include <limits>

#include "vkattn/errors.h"

namespace vkattn::io::checkpoints {

int64_t ConfigReader::size(const char* key, std::optional<int64_t> fallback) const {
  const auto it = config_.find(key);
  if (it == config_.end() || it->is_null()) {
    if (fallback) return *fallback;
    throw error(std::string("no ") + key + ", which the architecture's config has");
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 1) {
    throw error(std::string(key) + " is " + it->dump() + ", not a positive integer");
  }
  return it->get<int64_t>();
}

int64_t ConfigReader::count(const char* key, int64_t fallback) const {
  const auto it = config_.find(key);
  if (it == config_.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    throw error(std::string(key) + " is " + it->dump() + ", not an integer >= 0");
  }
  return it->get<int64_t>();
}

float ConfigReader::number(const char* key, float fallback) const {
  const auto it = config_.find(key);
  if (it == config_.end() || it->is_null()) return fallback;
  const double value = it->is_number() ? it->get<double>() : NAN;
  if (!std::isfinite(value) || std::abs(value) > std::numeric_limits<float>::max()) {
    throw error(std::string(key) + " is " + it->dump() + ", not a number a float holds");
  }
  return static_cast<float>(value);
}

bool ConfigReader::flag(const char* key, bool fallback) const {
  const auto it = config_.find(key);
  if (it == config_.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw error(std::string(key) + " is " + it->dump() + ", not true or false");
  return it->get<bool>();
}

std::string ConfigReader::text(const char* key, const std::string& fallback) const {
  const auto it = config_.find(key);
  if (it == config_.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw error(std::string(key) + " is " + it->dump() + ", not a string");
  return it->get<std::string>();
}

Activation ConfigReader::activation(const char* key, const std::string& fallback) const {
  const std::string name = text(key, fallback);
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::gelu_tanh;
  if (auto a = activation_from_name(name)) return *a;
  throw error(std::string(key) + " '" + name + "' is not one vkattn runs (gelu, gelu_new, gelu_pytorch_tanh, relu)");
}

bool ConfigReader::has(const char* key) const {
  const auto it = config_.find(key);
  return it != config_.end() && !it->is_null();
}

void ConfigReader::require(const char* key, bool supported, bool fallback) const {
  if (flag(key, fallback) != supported) {
    throw error(std::string(key) + " = " + (supported ? "false" : "true") + " is not supported by vkattn");
  }
}

CheckpointTensors::CheckpointTensors(std::map<std::string, Tensor> tensors, std::string dir, const std::string& prefix)
    : dir_(std::move(dir)) {
  for (auto& [name, t] : tensors) {
    tensors_.emplace(name.starts_with(prefix) ? name.substr(prefix.size()) : name, std::move(t));
  }
}

void CheckpointTensors::ignore_prefix(const std::string& prefix) {
  for (const auto& [name, t] : tensors_) {
    if (name.starts_with(prefix)) used_.insert(name);
  }
}

const Tensor& CheckpointTensors::take(const std::string& name, const Shape& shape, const std::string& spelled) {
  const auto it = tensors_.find(name);
  const std::string expected = spelled + " = " + shape_string(shape);
  if (it == tensors_.end()) throw FileError(dir_ + ": missing tensor '" + name + "', expected " + expected);
  if (it->second.dtype != DType::float32 || it->second.shape != shape) {
    throw FileError(dir_ + ": tensor '" + name + "' is " + dtype_name(it->second.dtype) + " " +
                    shape_string(it->second.shape) + ", expected float " + expected);
  }
  used_.insert(name);
  return it->second;
}

std::optional<Tensor> CheckpointTensors::take_if_there(const std::string& name, const Shape& shape,
                                                       const std::string& spelled) {
  if (!has(name)) return std::nullopt;
  return take(name, shape, spelled);
}

void CheckpointTensors::check_all_taken(const std::string& described) const {
  for (const auto& [name, t] : tensors_) {
    if (!used_.contains(name)) {
      throw FileError(dir_ + ": unexpected tensor '" + name + "' " + shape_string(t.shape) + " in " + described);
    }
  }
}

}  // namespace vkattn::io::checkpoints
