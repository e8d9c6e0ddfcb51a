#include "engine/vulkan/recorder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <glm/common.hpp>

#include "engine/vulkan/faults.h"
#include "vkattn/errors.h"

namespace vkattn::vulkan {
namespace {

// "600 s", "0.25 s"
std::string seconds(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ns) / 1e9);
  return text;
}

constexpr uint32_t kSetsPerPool = 256;
constexpr uint32_t kMaxBindings = 6;  // flash_attention: q, attn_mask, key_padding_mask, k, v, out
constexpr uint32_t kMaxTexelBindings = 2;  // the GEMM's A and B, flash_attention's K and V
// One per timed dispatch and one per run of them: a forward pass has fewer than 20 steps.
constexpr uint32_t kTimestampQueries = 512;

using Stage = vk::PipelineStageFlagBits;
using Acc = vk::AccessFlagBits;

}  // namespace

uint32_t early_dispatch_rule(const DeviceReport& device) { return device.type == vk::PhysicalDeviceType::eCpu ? 0 : 4; }

Recorder::Recorder(std::shared_ptr<const Context> context, uint32_t max_groups_per_dim, uint32_t early_dispatches)
    : context_(std::move(context)), early_dispatches_(early_dispatches), staging_(context_) {
  const auto& limits = context_->device_report().max_workgroup_count;
  group_limits_ = {limits[0], limits[1], limits[2]};
  if (max_groups_per_dim > 0) group_limits_ = glm::min(group_limits_, glm::uvec3(max_groups_per_dim));
  const vk::raii::Device& device = context_->device();
  pool_ = vk::raii::CommandPool(device, vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eResetCommandBuffer,
                                                                  context_->queue_family()));
  commands_ = std::move(vk::raii::CommandBuffers(device, vk::CommandBufferAllocateInfo(*pool_, vk::CommandBufferLevel::ePrimary, 1)).front());
  fence_ = vk::raii::Fence(device, vk::FenceCreateInfo());
  placeholder_ = std::make_shared<Buffer>(context_, 16, Buffer::Kind::device);
  if (context_->device_report().timestamps) {
    timestamps_ = vk::raii::QueryPool(device, vk::QueryPoolCreateInfo({}, vk::QueryType::eTimestamp, kTimestampQueries));
  }
}

Recorder::~Recorder() { settle(); }

void Recorder::settle() noexcept {
  if (!unfinished_) {
    if (!sent_.empty()) finish_sent();  // a pass sent and never read back runs on
    return;
  }
  if (!fence_pending_) return;
  try {
    (void)context_->device().waitForFences(*fence_, VK_TRUE, bound_ns());
  } catch (const vk::SystemError&) {
    // lost: nothing will run any more
  }
}

uint64_t Recorder::bound_ns() const {
  // At least a minute: a timeout of a microsecond (a test's) must not free what still runs.
  return std::max<uint64_t>(context_->fence_timeout_ns(), 60'000'000'000ull);
}

bool Recorder::finish_sent() noexcept {
  // An empty submission's fence signals once every earlier one on the queue has finished.
  bool done = submit(*fence_, false) == vk::Result::eSuccess;
  fence_pending_ = done;
  try {
    done = done && context_->device().waitForFences(*fence_, VK_TRUE, bound_ns()) == vk::Result::eSuccess;
    if (done) context_->device().resetFences(*fence_);
  } catch (const vk::SystemError&) {
    done = false;
  }
  if (!done) {
    unfinished_ = true;  // what they use stays alive
    context_->mark_lost("segments of a pass sent to the device did not finish");
    return false;
  }
  fence_pending_ = false;
  return true;
}

void Recorder::begin_if_idle() {
  if (recording_) return;
  context_->check_usable();
  commands_.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
  recording_ = true;
}

void Recorder::order(std::span<const std::pair<vk::Buffer, Access>> uses, const std::string& label) {
  // why the barrier is there, for the debug log alone: not spelled out (nor writers named) unless
  // it is on, since most dispatches of a pass need one
  const bool explain = spdlog::should_log(spdlog::level::debug);
  bool conflict = false;
  std::string reason;
  for (const auto& [buffer, access] : uses) {
    auto it = pending_.find(buffer);
    if (it == pending_.end()) continue;
    if (it->second == Access::write) {
      conflict = true;
      if (explain)
        reason = (access == Access::read ? "reads" : "overwrites") + std::string(" what ") + writer_[buffer] + " wrote";
      break;
    }
    if (access == Access::write) {
      conflict = true;
      reason = "overwrites a buffer an earlier command still reads";
      break;
    }
  }
  if (conflict) {
    // Makes every earlier shader or transfer write visible to later shader and transfer
    // accesses, and orders later writes after earlier reads. One global memory barrier: cheaper
    // than per-buffer barriers on every vendor's driver, and the only kind a compute-only
    // queue needs.
    vk::MemoryBarrier barrier(Acc::eShaderWrite | Acc::eTransferWrite,
                              Acc::eShaderRead | Acc::eShaderWrite | Acc::eTransferRead | Acc::eTransferWrite);
    commands_.pipelineBarrier(Stage::eComputeShader | Stage::eTransfer, Stage::eComputeShader | Stage::eTransfer, {},
                              barrier, {}, {});
    if (explain) spdlog::debug("barrier before {}: it {}", label, reason);
    barriers_++;
    pending_.clear();
    writer_.clear();
  }
  for (const auto& [buffer, access] : uses) {
    auto [it, inserted] = pending_.try_emplace(buffer, access);
    if (access == Access::write) {
      it->second = Access::write;
      if (explain) writer_[buffer] = label;
    }
  }
}

vk::DescriptorSet Recorder::allocate_set(const Kernel& kernel) {
  if (sets_in_current_pool_ == kSetsPerPool) {
    current_pool_++;
    sets_in_current_pool_ = 0;
  }
  if (current_pool_ == descriptor_pools_.size()) {
    std::array sizes{vk::DescriptorPoolSize(vk::DescriptorType::eStorageBuffer, kSetsPerPool * kMaxBindings),
                     vk::DescriptorPoolSize(vk::DescriptorType::eUniformTexelBuffer, kSetsPerPool * kMaxTexelBindings)};
    descriptor_pools_.emplace_back(context_->device(), vk::DescriptorPoolCreateInfo({}, kSetsPerPool, sizes));
  }
  vk::DescriptorSetLayout layout = *kernel.set_layout();
  vk::DescriptorSetAllocateInfo info(*descriptor_pools_[current_pool_], layout);
  vk::DescriptorSet set = (*context_->device()).allocateDescriptorSets(info, *context_->device().getDispatcher()).front();
  sets_in_current_pool_++;
  return set;
}

void Recorder::dispatch(const Kernel& kernel, std::span<const std::shared_ptr<Buffer>> buffers,
                        std::span<const std::byte> push_constants, uint64_t groups, const std::string& label,
                        bool continuation, size_t outputs) {
  if (buffers.size() != kernel.bindings() || buffers.size() > kMaxBindings) {
    throw std::logic_error(label + ": kernel " + kernel.name() + " has " + std::to_string(kernel.bindings()) +
                           " bindings but " + std::to_string(buffers.size()) + " buffers were given (at most " +
                           std::to_string(kMaxBindings) + ")");
  }
  if (push_constants.size() != kernel.push_constant_bytes()) {
    throw std::logic_error(label + ": push constants of " + std::to_string(push_constants.size()) + " bytes for kernel " +
                           kernel.name() + " which declares " + std::to_string(kernel.push_constant_bytes()));
  }
  glm::uvec3 grid = fold_grid(groups, group_limits_);
  begin_if_idle();

  std::vector<std::pair<vk::Buffer, Access>> uses;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i] == placeholder_) continue;  // never written: needs no ordering
    uses.emplace_back(buffers[i]->handle(), i + outputs >= buffers.size() ? Access::write : Access::read);
  }
  order(uses, label);

  vk::DescriptorSet set = allocate_set(kernel);
  std::vector<vk::DescriptorBufferInfo> infos;
  std::vector<vk::BufferView> views;
  for (const auto& buffer : buffers) infos.emplace_back(buffer->handle(), 0, VK_WHOLE_SIZE);
  for (uint32_t i = 0; i < buffers.size(); ++i) {
    views.push_back(kernel.texel_binding(i) ? buffers[i]->texel_view(kernel.word_binding(i)) : nullptr);
  }
  std::vector<vk::WriteDescriptorSet> writes;
  for (uint32_t i = 0; i < infos.size(); ++i) {
    if (kernel.texel_binding(i)) {
      writes.emplace_back(set, i, 0, 1, vk::DescriptorType::eUniformTexelBuffer, nullptr, nullptr, &views[i]);
    } else {
      writes.emplace_back(set, i, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &infos[i]);
    }
  }
  context_->device().updateDescriptorSets(writes, {});

  if (context_->debug_labels()) {
    commands_.beginDebugUtilsLabelEXT(vk::DebugUtilsLabelEXT(label.c_str()));
    pass_labels_.push_back(label);
  }
  commands_.bindPipeline(vk::PipelineBindPoint::eCompute, *kernel.pipeline());
  commands_.bindDescriptorSets(vk::PipelineBindPoint::eCompute, *kernel.layout(), 0, set, {});
  commands_.pushConstants<std::byte>(*kernel.layout(), vk::ShaderStageFlagBits::eCompute, 0, push_constants);
  // A continuation ends the timed dispatch before it later: one step, one (start, end).
  const bool extend = continuation && timing_ && !timed_queries_.empty() && !out_of_queries_;
  const bool time_this = timing_ && queries_used_ + (chained_ || extend ? 1 : 2) <= kTimestampQueries;
  out_of_queries_ |= timing_ && !time_this;
  if (time_this && reset_pending_) {
    commands_.resetQueryPool(*timestamps_, 0, kTimestampQueries);
    reset_pending_ = false;
  }
  // Start: once every earlier command's compute work is done (barriers included); end: this
  // one's. A dispatch right after a timed one starts at that one's end timestamp, which marks
  // the same moment: one timestamp per dispatch, not two (each costs lavapipe a flush).
  std::pair<uint32_t, uint32_t> queries{queries_used_ - 1, 0};
  if (time_this && extend) queries.first = timed_queries_.back().first;
  if (time_this && !chained_ && !extend) {
    commands_.writeTimestamp(vk::PipelineStageFlagBits::eComputeShader, *timestamps_, queries_used_);
    queries.first = queries_used_++;
  }
  commands_.dispatch(grid.x, grid.y, grid.z);
  if (time_this) {
    commands_.writeTimestamp(vk::PipelineStageFlagBits::eComputeShader, *timestamps_, queries_used_);
    queries.second = queries_used_++;
    if (extend) timed_queries_.back() = queries;
    else timed_queries_.push_back(queries);
    chained_ = true;
  }
  if (context_->debug_labels()) commands_.endDebugUtilsLabelEXT();
  in_flight_.insert(in_flight_.end(), buffers.begin(), buffers.end());
  if (early_dispatches_ > 0 && ++segment_dispatches_ >= std::max(early_dispatches_, sent_dispatches_)) send();
}

void Recorder::upload(const std::shared_ptr<Buffer>& target, const void* data, size_t bytes) {
  auto staging = staging_.acquire(bytes, Buffer::Kind::staging);
  chained_ = false;  // the copy runs before the next dispatch: not part of it
  // Host writes before vkQueueSubmit are visible to the device without a barrier.
  std::memcpy(staging->mapped(), data, bytes);
  begin_if_idle();
  std::pair<vk::Buffer, Access> use{target->handle(), Access::write};
  order({&use, 1}, "upload");
  commands_.copyBuffer(staging->handle(), target->handle(), vk::BufferCopy(0, 0, bytes));
  staging_in_flight_.push_back(std::move(staging));
  in_flight_.push_back(target);
}

void Recorder::download(const std::shared_ptr<Buffer>& source, void* data, size_t bytes) {
  auto staging = staging_.acquire(bytes, Buffer::Kind::staging);
  begin_if_idle();
  std::pair<vk::Buffer, Access> use{source->handle(), Access::read};
  order({&use, 1}, "download");
  commands_.copyBuffer(source->handle(), staging->handle(), vk::BufferCopy(0, 0, bytes));
  // Makes the copy's writes visible to the host's reads after the fence wait.
  vk::MemoryBarrier to_host(Acc::eTransferWrite, Acc::eHostRead);
  commands_.pipelineBarrier(Stage::eTransfer, Stage::eHost, {}, to_host, {}, {});
  in_flight_.push_back(source);
  staging_in_flight_.push_back(staging);
  flush();
  std::memcpy(data, staging->mapped(), bytes);
}

void Recorder::time_dispatches(bool on) {
  timing_ = on && *timestamps_;
  reset_pending_ = timing_;
  pass_labels_.clear();
  queries_used_ = 0;
  timed_queries_.clear();
  chained_ = false;
  out_of_queries_ = false;
}

std::optional<std::vector<std::pair<double, double>>> Recorder::dispatch_times() {
  if (!timing_ || out_of_queries_ || queries_used_ == 0) return std::nullopt;
  flush();
  auto [result, ticks] = timestamps_.getResults<uint64_t>(0, queries_used_, queries_used_ * sizeof(uint64_t),
                                                          sizeof(uint64_t), vk::QueryResultFlagBits::e64);
  if (result != vk::Result::eSuccess) return std::nullopt;
  const double us_per_tick = context_->device_report().timestamp_period_ns / 1000.0;
  std::vector<std::pair<double, double>> times;
  for (auto [start, end] : timed_queries_) {
    times.emplace_back(static_cast<double>(ticks[start] - ticks[0]) * us_per_tick,
                       static_cast<double>(ticks[end] - ticks[0]) * us_per_tick);
  }
  return times;
}

void Recorder::flush() {
  chained_ = false;  // the host waits between this submission and the next
  context_->check_usable();
  if (!recording_ && sent_.empty()) return;
  const auto submitted_at = std::chrono::steady_clock::now();
  if (const vk::Result submitted = submit(*fence_, true); submitted != vk::Result::eSuccess) {
    abandon();  // nothing of it ran (what was sent before runs on: abandon waits for it)
    throw submission_error(submitted, "vkQueueSubmit");
  }
  submissions_++;
  fence_pending_ = true;
  vk::Result waited = vk::Result::eSuccess;
  if (auto injected = faults::due(faults::Site::fence_wait)) {
    waited = *injected;
  } else {
    try {
      waited = context_->device().waitForFences(*fence_, VK_TRUE, context_->fence_timeout_ns());
    } catch (const vk::SystemError& e) {
      waited = static_cast<vk::Result>(e.code().value());
    }
  }
  if (waited != vk::Result::eSuccess) {
    // The device may still be running the submission: everything it uses stays alive (until
    // the destructor's bounded wait), and the device takes no more work.
    unfinished_ = true;
    if (waited == vk::Result::eTimeout) {
      const std::string why = "a submission did not finish within " + seconds(context_->fence_timeout_ns()) +
                              " (VKATTN_FENCE_TIMEOUT)";
      context_->mark_lost(why);
      throw DeviceError(why + ": the device is treated as lost; a GPU can stop answering when a dispatch runs "
                        "too long for its watchdog");
    }
    // Whatever the error, the submission's state is unknown: the device takes no more work.
    context_->mark_lost("vkWaitForFences failed with " + vk_result_name(vk::to_string(waited)));
    throw submission_error(waited, "vkWaitForFences");
  }
  const auto first = sent_.empty() ? submitted_at : first_sent_at_;
  longest_submission_s_ =
      std::max(longest_submission_s_, std::chrono::duration<double>(std::chrono::steady_clock::now() - first).count());
  context_->device().resetFences(*fence_);
  fence_pending_ = false;
  commands_.reset();
  release_recorded();
}

vk::Result Recorder::submit(vk::Fence fence, bool injectable) {
  const bool recorded = recording_;
  if (recording_) commands_.end();
  recording_ = false;
  if (injectable) {
    if (auto injected = faults::due(faults::Site::submission)) return *injected;
  }
  const vk::CommandBuffer command_buffer = *commands_;
  try {
    context_->submit(recorded ? vk::SubmitInfo({}, {}, command_buffer) : vk::SubmitInfo(), fence);
  } catch (const vk::SystemError& e) {
    return static_cast<vk::Result>(e.code().value());
  }
  return vk::Result::eSuccess;
}

void Recorder::send() {
  chained_ = false;  // the next dispatch's start is not this one's end: a new timestamp
  if (const vk::Result submitted = submit(nullptr, true); submitted != vk::Result::eSuccess) {
    abandon();
    throw submission_error(submitted, "vkQueueSubmit");
  }
  if (sent_.empty()) first_sent_at_ = std::chrono::steady_clock::now();
  early_submissions_++;
  sent_dispatches_ += segment_dispatches_;
  segment_dispatches_ = 0;
  sent_.push_back(std::move(commands_));
  if (spare_.empty()) {
    const vk::CommandBufferAllocateInfo info(*pool_, vk::CommandBufferLevel::ePrimary, 1);
    commands_ = std::move(vk::raii::CommandBuffers(context_->device(), info).front());
  } else {
    commands_ = std::move(spare_.back());
    spare_.pop_back();
  }
}

DeviceError Recorder::submission_error(vk::Result result, const char* call) const {
  if (result == vk::Result::eErrorDeviceLost)
    context_->mark_lost(std::string(call) + " failed with VK_ERROR_DEVICE_LOST");
  return device_error("", vk::SystemError(vk::make_error_code(result), call));
}

void Recorder::abandon() {
  if (unfinished_) return;  // what the device may still run stays alive
  commands_.reset();  // recorded (or refused by the queue), never run: dropped
  recording_ = false;
  // The segments sent before run on: what they use stays alive until they are done.
  if (!sent_.empty() && !finish_sent()) return;
  release_recorded();
  staging_.drop_taken();
}

void Recorder::release_recorded() {
  chained_ = false;
  for (auto& segment : sent_) {
    segment.reset();
    spare_.push_back(std::move(segment));
  }
  sent_.clear();
  sent_dispatches_ = 0;
  segment_dispatches_ = 0;
  for (auto& pool : descriptor_pools_) pool.reset();
  current_pool_ = 0;
  sets_in_current_pool_ = 0;
  for (auto& staging : staging_in_flight_) staging_.release(std::move(staging));
  staging_in_flight_.clear();
  pending_.clear();
  writer_.clear();
  in_flight_.clear();
}

}  // namespace vkattn::vulkan
