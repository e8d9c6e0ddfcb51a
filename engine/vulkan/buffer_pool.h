#pragma once
// BufferPool: buffers kept for reuse by kind and exact size, so that a second forward of a shape
// makes no new buffers, and a pass reuses the buffers of the tensors it has finished with.
//
// A released buffer may still be in use by recorded, unsubmitted commands: the Recorder keeps its
// own reference until the submission completes (so the memory lives), and orders the next
// user's write after those commands (its hazard tracking sees the same VkBuffer). Host-written
// staging buffers are different: the Recorder releases those only once their copy has run.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_set>
#include <utility>

#include "engine/vulkan/buffer.h"

namespace vkattn::vulkan {

class BufferPool {
 public:
  explicit BufferPool(std::shared_ptr<const Context> context) : context_(std::move(context)) {}

  // A free buffer of exactly `bytes` for which `busy` is false, or a new one. (VulkanBackend
  // passes the Recorder's pending() for tensors under reuse_in_flight_bytes: reusing a buffer
  // that commands since the last barrier still read would cost a barrier, and serialise small
  // steps that could run together.)
  std::shared_ptr<Buffer> acquire(vk::DeviceSize bytes, Buffer::Kind kind,
                                  const std::function<bool(const Buffer&)>& busy = {});
  // Frees every free buffer (torch.cuda.empty_cache()).
  void clear();
  // Back into the pool, for the next acquire of its size.
  void release(std::shared_ptr<Buffer> buffer);
  // Frees the free buffers that no acquire has taken and no release has given back since the
  // last trim: the pool holds what the work in between needed, not every size it ever saw. (A
  // value the caller held across a pass, such as the last forward's output, comes back after the
  // trim that begins the next pass: freed there, the pass after would make its buffer again, and
  // vkAllocateMemory costs a GPU's driver tens to hundreds of microseconds.)
  void trim();
  // Frees the free buffers that an acquire has taken since the last trim (those of a pass that
  // failed, begun with a trim): what the pool held before it is kept.
  void drop_taken();
  uint64_t free_bytes() const { return free_bytes_; }

 private:
  std::shared_ptr<const Context> context_;
  std::multimap<std::pair<Buffer::Kind, vk::DeviceSize>, std::shared_ptr<Buffer>> free_;
  std::unordered_set<const Buffer*> taken_since_trim_;
  std::unordered_set<const Buffer*> released_since_trim_;
  uint64_t free_bytes_ = 0;
};

}  // namespace vkattn::vulkan
