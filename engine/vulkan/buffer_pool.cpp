#include "engine/vulkan/buffer_pool.h"

namespace vkattn::vulkan {

std::shared_ptr<Buffer> BufferPool::acquire(vk::DeviceSize bytes, Buffer::Kind kind,
                                            const std::function<bool(const Buffer&)>& busy) {
  std::shared_ptr<Buffer> buffer;
  auto [first, last] = free_.equal_range({kind, bytes});
  for (auto it = first; it != last; ++it) {
    if (busy && busy(*it->second)) continue;
    buffer = std::move(it->second);
    free_.erase(it);
    free_bytes_ -= bytes;
    break;
  }
  if (!buffer) buffer = std::make_shared<Buffer>(context_, bytes, kind);
  taken_since_trim_.insert(buffer.get());
  return buffer;
}

void BufferPool::release(std::shared_ptr<Buffer> buffer) {
  free_bytes_ += buffer->bytes();
  released_since_trim_.insert(buffer.get());
  auto key = std::pair{buffer->kind(), buffer->bytes()};
  free_.emplace(key, std::move(buffer));
}

void BufferPool::clear() {
  free_.clear();
  free_bytes_ = 0;
  taken_since_trim_.clear();
  released_since_trim_.clear();
}

void BufferPool::drop_taken() {
  for (auto it = free_.begin(); it != free_.end();) {
    if (taken_since_trim_.count(it->second.get())) {
      free_bytes_ -= it->second->bytes();
      it = free_.erase(it);
    } else {
      ++it;
    }
  }
}

void BufferPool::trim() {
  for (auto it = free_.begin(); it != free_.end();) {
    const Buffer* buffer = it->second.get();
    if (taken_since_trim_.count(buffer) || released_since_trim_.count(buffer)) {
      ++it;
    } else {
      free_bytes_ -= it->second->bytes();
      it = free_.erase(it);
    }
  }
  taken_since_trim_.clear();
  released_since_trim_.clear();
}

}  // namespace vkattn::vulkan
