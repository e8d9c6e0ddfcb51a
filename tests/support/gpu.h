#pragma once
// Shared by the GPU tests: one Vulkan context per test process (from the environment, so ctest's
// VKATTN_VALIDATION=1 turns the validation layer on), random tensors, and a fixture that fails
// the test on any validation message raised while it ran. The context is named only: a test that
// calls into it (its device report, its plans) includes engine/vulkan/context.h, and so reads
// vulkan_raii.hpp, itself.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "vkattn/backends/reference_backend.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/tensor.h"

namespace vkattn::testing {

std::shared_ptr<vulkan::Context> shared_context();

using vkattn::random_tensor;  // uniform [-1, 1), seeded

// A bool mask (1 = blocked) with each entry blocked with probability `p`.
Tensor random_bool_mask(Shape shape, float p, uint32_t seed);

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // A VulkanBackend of its own on the shared context (whose pipelines every test's backend shares).
  VulkanBackend& gpu() { return *gpu_; }
  ReferenceBackend& cpu() { return cpu_; }

 private:
  std::unique_ptr<VulkanBackend> gpu_;
  ReferenceBackend cpu_;
  uint64_t messages_before_ = 0;
};

}  // namespace vkattn::testing
