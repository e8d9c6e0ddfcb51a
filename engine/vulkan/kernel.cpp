#include "engine/vulkan/kernel.h"

#include <chrono>
#include <iterator>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine/vulkan/shader_registry.h"
#include "vkattn/errors.h"

namespace vkattn::vulkan {

Kernel::Kernel(const Context& context, std::string name, uint32_t bindings, uint32_t push_constant_bytes,
               uint32_t workgroup_size, std::span<const uint32_t> specialization, uint32_t texel_bindings,
               uint32_t lanes, uint32_t word_bindings)
    : name_(std::move(name)),
      bindings_(bindings),
      texel_bindings_(texel_bindings),
      word_bindings_(word_bindings),
      push_constant_bytes_(push_constant_bytes),
      workgroup_size_(workgroup_size),
      lanes_(lanes) {
  const vk::raii::Device& device = context.device();
  std::vector<vk::DescriptorSetLayoutBinding> layout_bindings;
  for (uint32_t i = 0; i < bindings; ++i) {
    layout_bindings.emplace_back(i, texel_binding(i) ? vk::DescriptorType::eUniformTexelBuffer : vk::DescriptorType::eStorageBuffer,
                                 1, vk::ShaderStageFlagBits::eCompute);
  }
  set_layout_ = vk::raii::DescriptorSetLayout(device, vk::DescriptorSetLayoutCreateInfo({}, layout_bindings));
  vk::PushConstantRange push_range(vk::ShaderStageFlagBits::eCompute, 0, push_constant_bytes);
  vk::DescriptorSetLayout set_layout = *set_layout_;
  layout_ = vk::raii::PipelineLayout(device, vk::PipelineLayoutCreateInfo({}, set_layout, push_range));

  std::span<const uint32_t> spirv = shader_spirv(name_);
  vk::raii::ShaderModule module(device, vk::ShaderModuleCreateInfo({}, spirv.size_bytes(), spirv.data()));

  // constant 0: workgroup size; constants 1…: the shader's own (bools as 32-bit VkBool32)
  std::vector<uint32_t> values{workgroup_size};
  values.insert(values.end(), specialization.begin(), specialization.end());
  std::vector<vk::SpecializationMapEntry> entries;
  for (uint32_t i = 0; i < values.size(); ++i) entries.emplace_back(i, i * 4u, 4u);
  vk::SpecializationInfo spec(entries, vk::ArrayProxyNoTemporaries<const uint32_t>(values));

  vk::PipelineShaderStageCreateInfo stage({}, vk::ShaderStageFlagBits::eCompute, *module, "main", &spec);
  // Exactly `lanes` lanes a subgroup, all active: what a kernel that shuffles from lane t or strides
  // by the subgroup size needs to be right (the workgroup is whole subgroups of that size)
  vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo required(lanes);
  if (lanes > 0) {
    const DeviceReport& report = context.device_report();
    if (!report.size_control || !report.full_subgroups || lanes < report.min_subgroup_size ||
        lanes > report.max_subgroup_size || workgroup_size % lanes != 0) {
      throw DeviceError(name_ + ": cannot require " + std::to_string(lanes) + "-lane subgroups of a workgroup of " +
                        std::to_string(workgroup_size) + " on '" + report.name + "'");
    }
    stage.flags = vk::PipelineShaderStageCreateFlagBits::eRequireFullSubgroups;
    stage.pNext = &required;
  }
  pipeline_ = vk::raii::Pipeline(device, nullptr, vk::ComputePipelineCreateInfo({}, stage, *layout_));
}

const Kernel& Kernels::get(const std::string& name, uint32_t bindings, uint32_t push_constant_bytes,
                           uint32_t workgroup_size, std::span<const uint32_t> specialization, uint32_t texel_bindings,
                           uint32_t lanes, uint32_t word_bindings) {
  // The name, then the numbers' bytes: looked up at every dispatch, so not formatted (the log's
  // "softmax@256/0 b2 t0 w0 p16:1:0" is, once, when the pipeline is made)
  const uint32_t numbers[] = {workgroup_size, lanes, bindings, texel_bindings, word_bindings, push_constant_bytes};
  std::string key;
  key.reserve(name.size() + 1 + sizeof numbers + specialization.size_bytes());
  key.append(name).push_back('\0');
  key.append(reinterpret_cast<const char*>(numbers), sizeof numbers);
  key.append(reinterpret_cast<const char*>(specialization.data()), specialization.size_bytes());
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(mutex_);
    auto& entry = slots_[key];
    if (!entry) entry = std::make_shared<Slot>();
    slot = entry;
  }
  // compiled outside the map's lock: other threads' kernels need not wait for this one
  std::lock_guard lock(slot->mutex);
  if (!slot->kernel) {
    const auto start = std::chrono::steady_clock::now();
    slot->kernel = std::make_unique<Kernel>(context_, name, bindings, push_constant_bytes, workgroup_size,
                                            specialization, texel_bindings, lanes, word_bindings);
    ++made_;
    // how long the driver took to make it (VKATTN_LOG=debug); lavapipe compiles at first dispatch
    if (spdlog::should_log(spdlog::level::debug)) {
      std::string shown = fmt::format("{}@{}/{} b{} t{} w{} p{}", name, workgroup_size, lanes, bindings,
                                      texel_bindings, word_bindings, push_constant_bytes);
      for (uint32_t v : specialization) fmt::format_to(std::back_inserter(shown), ":{}", v);
      spdlog::debug("pipeline {} made in {:.1f} ms", shown,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
  }
  return *slot->kernel;
}

size_t Kernels::size() const { return made_.load(); }

}  // namespace vkattn::vulkan
