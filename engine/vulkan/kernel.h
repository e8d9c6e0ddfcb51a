#pragma once
// Kernel: a compute pipeline for one shaders/<name>.comp, with its descriptor-set layout (one
// storage buffer per binding, or a uniform texel buffer where asked) and push-constant range. Sizes
// that shape the code are specialization constants: constant 0 is the workgroup size, constants 1…
// are the shader's own. A kernel that counts lanes is made with `lanes` > 0: the pipeline requires
// subgroups of exactly that size with every lane active (lanes.h says when a device allows it).
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include <vulkan/vulkan_raii.hpp>

#include "engine/vulkan/context.h"

namespace vkattn::vulkan {

class Kernel {
 public:
  // Bit i of `texel_bindings` makes binding i an RGBA32F uniform texel buffer, not a storage
  // buffer; an RG32UI one where bit i of `word_bindings` is set too (16-bit weights' words).
  Kernel(const Context& context, std::string name, uint32_t bindings, uint32_t push_constant_bytes,
         uint32_t workgroup_size, std::span<const uint32_t> specialization = {}, uint32_t texel_bindings = 0,
         uint32_t lanes = 0, uint32_t word_bindings = 0);

  const std::string& name() const { return name_; }
  uint32_t bindings() const { return bindings_; }
  bool texel_binding(uint32_t i) const { return (texel_bindings_ >> i) & 1u; }
  bool word_binding(uint32_t i) const { return (word_bindings_ >> i) & 1u; }
  uint32_t push_constant_bytes() const { return push_constant_bytes_; }
  uint32_t workgroup_size() const { return workgroup_size_; }
  uint32_t lanes() const { return lanes_; }  // the required subgroup size; 0 = none required
  const vk::raii::DescriptorSetLayout& set_layout() const { return set_layout_; }
  const vk::raii::PipelineLayout& layout() const { return layout_; }
  const vk::raii::Pipeline& pipeline() const { return pipeline_; }

 private:
  std::string name_;
  uint32_t bindings_;
  uint32_t texel_bindings_;
  uint32_t word_bindings_;
  uint32_t push_constant_bytes_;
  uint32_t workgroup_size_;
  uint32_t lanes_;
  vk::raii::DescriptorSetLayout set_layout_ = nullptr;
  vk::raii::PipelineLayout layout_ = nullptr;
  vk::raii::Pipeline pipeline_ = nullptr;
};

// Every Kernel made on one context, by all that shapes it (shader, workgroup, lanes, bindings,
// push constants, specialization), so that the backends sharing a context — a test binary's, the
// throwaway backends of tuning, a Python session's modules — compile each pipeline once: on
// lavapipe, compiling is most of a first run's time.
// The context owns it (Context::kernels()): a Kernel lives as long as the device. Thread-safe:
// threads asking for different new kernels compile them at once; a second thread asking for one
// being compiled waits for it (a kernel is made exactly once, so no copy is ever thrown away).
class Kernels {
 public:
  explicit Kernels(const Context& context) : context_(context) {}
  const Kernel& get(const std::string& name, uint32_t bindings, uint32_t push_constant_bytes, uint32_t workgroup_size,
                    std::span<const uint32_t> specialization = {}, uint32_t texel_bindings = 0, uint32_t lanes = 0,
                    uint32_t word_bindings = 0);
  size_t size() const;  // kernels made so far

 private:
  struct Slot {
    std::mutex mutex;                // held while the kernel compiles
    std::unique_ptr<Kernel> kernel;  // null until made (a compile that throws leaves it null)
  };
  const Context& context_;  // the owner
  mutable std::mutex mutex_;  // the map's
  std::map<std::string, std::shared_ptr<Slot>> slots_;
  std::atomic<size_t> made_{0};
};

}  // namespace vkattn::vulkan
