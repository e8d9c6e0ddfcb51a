#include "engine/sizing_backend.h"

namespace vkattn {

namespace {
struct NoStorage final : Storage {};
}  // namespace

std::shared_ptr<Storage> SizingBackend::allocate(const std::string& name, int64_t count) {
  tensors_.push_back({name, count});
  return std::make_shared<NoStorage>();
}

std::shared_ptr<Storage> SizingBackend::store(const std::string& name, const Tensor& tensor) {
  return allocate(name, tensor.size());
}

// Zeros: a recipe that reads a value back mid-pass (a host step) gets numbers of the right count.
std::vector<float> SizingBackend::load(const Storage&, int64_t count) {
  return std::vector<float>(static_cast<size_t>(count));
}

}  // namespace vkattn
