#include "engine/vulkan/buffer.h"

#include <cstdio>

#include "engine/vulkan/faults.h"
#include "vkattn/errors.h"

namespace vkattn::vulkan {

namespace {

// "allocating 1.50 MiB of device memory"
std::string allocating(vk::DeviceSize bytes, Buffer::Kind kind) {
  char size[64];
  if (bytes < 1024) std::snprintf(size, sizeof size, "%llu bytes", static_cast<unsigned long long>(bytes));
  else if (bytes < 1024 * 1024) std::snprintf(size, sizeof size, "%.2f KiB", static_cast<double>(bytes) / 1024);
  else std::snprintf(size, sizeof size, "%.2f MiB", static_cast<double>(bytes) / (1024 * 1024));
  return std::string("allocating ") + size + (kind == Buffer::Kind::device ? " of device memory" : " of staging memory");
}

}  // namespace

Buffer::Buffer(std::shared_ptr<const Context> context, vk::DeviceSize bytes, Kind kind)
    : context_(std::move(context)), bytes_(bytes), kind_(kind) {
  context_->check_usable();
  try {
    make();
  } catch (const vk::SystemError& e) {
    throw device_error(allocating(bytes, kind), e);
  }
  context_->on_allocate(bytes_, kind == Kind::staging);
}

void Buffer::make() {
  using U = vk::BufferUsageFlagBits;
  using M = vk::MemoryPropertyFlagBits;
  vk::BufferUsageFlags usage = U::eTransferSrc | U::eTransferDst;
  if (kind_ == Kind::device) usage |= U::eStorageBuffer;
  if (kind_ == Kind::device && (context_->device_report().texel_rgba32f || context_->device_report().texel_rg32ui)) {
    usage |= U::eUniformTexelBuffer;
  }
  const vk::raii::Device& device = context_->device();
  buffer_ = vk::raii::Buffer(device, vk::BufferCreateInfo({}, bytes_, usage, vk::SharingMode::eExclusive));

  vk::MemoryRequirements needs = buffer_.getMemoryRequirements();
  uint32_t type = kind_ == Kind::device
                      ? context_->memory_type(needs.memoryTypeBits, {}, M::eDeviceLocal)
                      : context_->memory_type(needs.memoryTypeBits, M::eHostVisible | M::eHostCoherent, M::eHostCached);
  if (auto result = faults::due(faults::Site::allocation)) {
    throw vk::SystemError(vk::make_error_code(*result), "vk::Device::allocateMemory");
  }
  memory_ = vk::raii::DeviceMemory(device, vk::MemoryAllocateInfo(needs.size, type));
  buffer_.bindMemory(*memory_, 0);
  if (kind_ == Kind::staging) mapped_ = memory_.mapMemory(0, bytes_);
}

vk::BufferView Buffer::texel_view(bool words) const {
  auto& view = words ? word_view_ : texel_view_;
  const vk::DeviceSize texel = words ? 8 : 16;
  if (!*view) {
    const vk::Format format = words ? vk::Format::eR32G32Uint : vk::Format::eR32G32B32A32Sfloat;
    view = vk::raii::BufferView(context_->device(), vk::BufferViewCreateInfo({}, *buffer_, format, 0, bytes_ / texel * texel));
  }
  return *view;
}

Buffer::~Buffer() {
  if (context_) context_->on_free(bytes_);
}

}  // namespace vkattn::vulkan
