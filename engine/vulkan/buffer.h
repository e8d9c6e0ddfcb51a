#pragma once
// Buffer: a VkBuffer with its own memory. Device buffers hold tensors (storage buffers in
// device-local memory where the device has it); staging buffers are host-visible and mapped,
// the way data reaches and leaves device memory.
#include <memory>

#include <vulkan/vulkan_raii.hpp>

#include "engine/vulkan/context.h"

namespace vkattn::vulkan {

class Buffer {
 public:
  enum class Kind { device, staging };

  // DeviceError "allocating 1.50 MiB of device memory: … failed with VK_ERROR_OUT_OF_DEVICE_MEMORY;
  // …" when the device cannot, or is lost.
  Buffer(std::shared_ptr<const Context> context, vk::DeviceSize bytes, Kind kind);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  vk::Buffer handle() const { return *buffer_; }
  vk::DeviceSize bytes() const { return bytes_; }
  Kind kind() const { return kind_; }
  // Host address of a staging buffer's memory (coherent); null for device buffers.
  void* mapped() const { return mapped_; }
  // The buffer as RGBA32F texels, bytes / 16 of them (a device buffer on a device with
  // texel_rgba32f), made on first use and kept with the buffer, which a pool reuses. `words`:
  // as RG32UI texels instead, bytes / 8 of them (16-bit weights, four to a texel; texel_rg32ui).
  vk::BufferView texel_view(bool words = false) const;

 private:
  void make();  // the VkBuffer and its memory; vk::SystemError when the driver refuses

  std::shared_ptr<const Context> context_;  // the device outlives every buffer made on it
  vk::DeviceSize bytes_;
  Kind kind_;
  vk::raii::Buffer buffer_ = nullptr;
  vk::raii::DeviceMemory memory_ = nullptr;
  void* mapped_ = nullptr;
  mutable vk::raii::BufferView texel_view_ = nullptr, word_view_ = nullptr;
};

}  // namespace vkattn::vulkan
