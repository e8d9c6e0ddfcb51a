#include "engine/vulkan/buffer.h"

namespace vkattn::vulkan {

Buffer::Buffer(std::shared_ptr<const Context> context, vk::DeviceSize bytes, Kind kind)
    : context_(std::move(context)), bytes_(bytes), kind_(kind) {
  using U = vk::BufferUsageFlagBits;
  using M = vk::MemoryPropertyFlagBits;
  vk::BufferUsageFlags usage = U::eTransferSrc | U::eTransferDst;
  if (kind == Kind::device) usage |= U::eStorageBuffer;
  if (kind == Kind::device && context_->device_report().texel_rgba32f) usage |= U::eUniformTexelBuffer;
  const vk::raii::Device& device = context_->device();
  buffer_ = vk::raii::Buffer(device, vk::BufferCreateInfo({}, bytes, usage, vk::SharingMode::eExclusive));

  vk::MemoryRequirements needs = buffer_.getMemoryRequirements();
  uint32_t type = kind == Kind::device
                      ? context_->memory_type(needs.memoryTypeBits, {}, M::eDeviceLocal)
                      : context_->memory_type(needs.memoryTypeBits, M::eHostVisible | M::eHostCoherent, M::eHostCached);
  memory_ = vk::raii::DeviceMemory(device, vk::MemoryAllocateInfo(needs.size, type));
  buffer_.bindMemory(*memory_, 0);
  if (kind == Kind::staging) mapped_ = memory_.mapMemory(0, bytes);
  context_->on_allocate(bytes_, kind == Kind::staging);
}

vk::BufferView Buffer::texel_view() const {
  if (!*texel_view_) {
    texel_view_ = vk::raii::BufferView(
        context_->device(), vk::BufferViewCreateInfo({}, *buffer_, vk::Format::eR32G32B32A32Sfloat, 0, bytes_ / 16 * 16));
  }
  return *texel_view_;
}

Buffer::~Buffer() {
  if (context_) context_->on_free(bytes_);
}

}  // namespace vkattn::vulkan
