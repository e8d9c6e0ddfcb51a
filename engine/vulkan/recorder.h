#pragma once
// Recorder: records a forward pass into command buffers and waits for them only when a value is
// read back. The device need not wait for the host to record the whole pass: the first few
// dispatches are submitted at once without waiting (`early_dispatches`), then segments as long as
// everything sent before them (4, 4, 8, 16, … dispatches), so that the device runs the pass's
// first steps while the host checks and records the rest; the readback submits what is left and
// waits for it all (a fence signals once every earlier submission on its queue is done too).
// It inserts a pipeline barrier only where a command touches a buffer that an
// earlier, unbarriered command wrote (read-after-write, write-after-write) or read
// (write-after-read): independent steps such as q_proj, k_proj and v_proj run without one
// between them. Every buffer a recorded command uses is kept alive until the submission that
// runs it has completed. Staging buffers and descriptor pools are kept and reused from one
// submission to the next. The host waits on a fence (blocking, never polling: on lavapipe the
// "GPU" is the CPU, and a spinning host thread would steal a core from the shaders).
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <vulkan/vulkan_raii.hpp>

#include "engine/vulkan/buffer.h"
#include "engine/vulkan/buffer_pool.h"
#include "engine/vulkan/context.h"
#include "engine/vulkan/grid.h"
#include "engine/vulkan/kernel.h"
#include "vkattn/errors.h"

namespace vkattn::vulkan {

// The first segment a Recorder sends without waiting, on `device`: 4 dispatches on a GPU; 0 on a
// CPU device, whose "device" is the host's own cores (lavapipe at S1: 0–3 % slower sent early).
uint32_t early_dispatch_rule(const DeviceReport& device);

class Recorder {
 public:
  // `max_groups_per_dim` > 0 lowers the device's workgroup-count limit (tests force folding).
  // `early_dispatches`: the first segment sent without waiting (early_dispatch_rule); 0: nothing
  // is, a pass is one command buffer submitted at its readback.
  Recorder(std::shared_ptr<const Context> context, uint32_t max_groups_per_dim = 0, uint32_t early_dispatches = 0);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Records `kernel` over `groups` workgroups (folded into y and z past the device's limit).
  // `buffers` are bound in order to bindings 0…; the last `outputs` are written, the others are
  // read. `label` names the step in barriers' logs and in debug-utils labels.
  // `continuation`: the next part of the dispatch before it (a step split into submissions):
  // timed as one with it.
  void dispatch(const Kernel& kernel, std::span<const std::shared_ptr<Buffer>> buffers,
                std::span<const std::byte> push_constants, uint64_t groups, const std::string& label,
                bool continuation = false, size_t outputs = 1);
  // Records a copy of `bytes` host bytes into `target` (through a staging buffer).
  void upload(const std::shared_ptr<Buffer>& target, const void* data, size_t bytes);
  // Submits everything recorded so far, waits, and returns the first `bytes` of `source`.
  void download(const std::shared_ptr<Buffer>& source, void* data, size_t bytes);
  // Submits everything recorded so far and waits for it and for every segment sent before it,
  // at most the context's fence timeout.
  // DeviceError when the queue refuses it or the wait fails; a lost device (or a wait that timed
  // out) marks the context lost, and every later call throws its check_usable() error.
  void flush();
  // Waits, at least a minute, for what the device may still run — segments sent and never read
  // back, or a submission whose wait failed (a timeout, a lost device): the owner calls it before
  // freeing the pipelines and buffers that work uses (the destructor calls it too). Never throws.
  void settle() noexcept;
  // Drops what is recorded and not yet submitted (a pass that failed half-way), with the
  // buffers it kept alive once the segments already sent have run.
  void abandon();
  // Frees the staging buffers no upload or download used since the last trim; clear() frees them all.
  void trim() { staging_.trim(); }
  void clear() { staging_.clear(); }
  // Whether a command recorded since the last barrier uses `buffer`.
  bool pending(const Buffer& buffer) const { return pending_.count(buffer.handle()) > 0; }

  // A timestamp query after every dispatch from now on, and one before the first of each run of
  // them (when `on` and the device has them), numbered afresh. dispatch_times() flushes and returns each timed dispatch's (start, end) in
  // microseconds from the first one's start, or nothing when timing is off, unsupported, or
  // ran out of queries.
  void time_dispatches(bool on);
  std::optional<std::vector<std::pair<double, double>>> dispatch_times();

  // A tiny buffer bound where a step's optional input (bias, mask) is absent; never written.
  const std::shared_ptr<Buffer>& placeholder() const { return placeholder_; }
  // The times the host submitted and waited (a readback, a flush); segments sent without
  // waiting are counted apart.
  uint64_t submissions() const { return submissions_; }
  uint64_t early_submissions() const { return early_submissions_; }
  // The longest a submission took (its first segment's vkQueueSubmit to its fence), in seconds,
  // since the last reset.
  double longest_submission_s() const { return longest_submission_s_; }
  void reset_longest_submission() { longest_submission_s_ = 0; }
  uint64_t barriers() const { return barriers_; }
  size_t descriptor_pools() const { return descriptor_pools_.size(); }
  // The debug-utils labels recorded since time_dispatches() began the pass, in order (empty
  // when the instance lacks VK_EXT_debug_utils): what RenderDoc and Nsight will show.
  const std::vector<std::string>& pass_labels() const { return pass_labels_; }

 private:
  enum class Access { read, write };
  void begin_if_idle();
  // Adds a barrier if any of `uses` conflicts with an access since the last barrier.
  void order(std::span<const std::pair<vk::Buffer, Access>> uses, const std::string& label);
  vk::DescriptorSet allocate_set(const Kernel& kernel);
  // Ends and submits what is recorded (an empty batch when nothing is) with `fence` (or none);
  // what the queue or an injected fault (`injectable`) answered.
  vk::Result submit(vk::Fence fence, bool injectable);
  // Submits the segment recorded so far without waiting, and begins the next (the policy above)
  void send();
  // Waits (at most bound_ns()) for the segments sent and not yet waited for; false, the device
  // marked lost and what they use kept alive, when they do not finish.
  bool finish_sent() noexcept;
  uint64_t bound_ns() const;  // the fence timeout, at least a minute
  // The DeviceError for a failed `call`; marks the device lost when it says so.
  DeviceError submission_error(vk::Result result, const char* call) const;
  // After a submission completed (or was dropped): descriptor pools reset, staging buffers back,
  // hazards and in-flight buffers forgotten.
  void release_recorded();

  std::shared_ptr<const Context> context_;
  glm::uvec3 group_limits_;
  vk::raii::CommandPool pool_ = nullptr;
  vk::raii::CommandBuffer commands_ = nullptr;  // the segment being recorded
  std::vector<vk::raii::CommandBuffer> sent_;   // segments submitted, not yet waited for
  std::vector<vk::raii::CommandBuffer> spare_;  // reset, for the next segments
  uint32_t early_dispatches_;
  uint32_t segment_dispatches_ = 0;  // in commands_
  uint32_t sent_dispatches_ = 0;     // in sent_
  std::chrono::steady_clock::time_point first_sent_at_;
  vk::raii::Fence fence_ = nullptr;
  std::vector<vk::raii::DescriptorPool> descriptor_pools_;  // reset, not freed, after each submission
  size_t current_pool_ = 0;
  uint32_t sets_in_current_pool_ = 0;
  BufferPool staging_;
  std::vector<std::shared_ptr<Buffer>> staging_in_flight_;  // back to staging_ once their copies ran
  bool recording_ = false;
  bool unfinished_ = false;  // a submission whose wait failed: the device may still run it
  bool fence_pending_ = false;  // fence_ submitted and not yet reset
  // accesses since the last barrier, by buffer
  std::unordered_map<VkBuffer, Access> pending_;
  std::unordered_map<VkBuffer, std::string> writer_;  // which step wrote each pending buffer (debug log on)
  std::vector<std::shared_ptr<Buffer>> in_flight_;   // alive until the fence signals
  std::shared_ptr<Buffer> placeholder_;
  uint64_t submissions_ = 0;
  uint64_t early_submissions_ = 0;
  double longest_submission_s_ = 0;
  uint64_t barriers_ = 0;
  std::vector<std::string> pass_labels_;
  // timestamps: one query per timed dispatch, and one before each run of them
  vk::raii::QueryPool timestamps_ = nullptr;
  bool timing_ = false;
  bool reset_pending_ = false;  // the pool is reset in the command buffer before its first use
  uint32_t queries_used_ = 0;
  std::vector<std::pair<uint32_t, uint32_t>> timed_queries_;  // each timed dispatch's (start, end) query
  bool chained_ = false;  // the last command recorded is a timed dispatch's end timestamp
  bool out_of_queries_ = false;
};

}  // namespace vkattn::vulkan
