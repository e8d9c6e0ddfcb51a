#pragma once
// Shared by the GPU tests: one Vulkan context per test process (from the environment, so ctest's
// VKATTN_VALIDATION=1 turns the validation layer on), random tensors, a fixture with a backend of
// its own, and the watch that fails any test during which a context of the process — the shared
// one or a test's own — counted a validation message. The context is named only: a test that
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

// Installed by the tests' main (support/main.cpp): each test fails on the validation messages
// counted while it ran (vulkan::Context::process_validation_message_count), unless it called
// allow_validation_messages(), as a test that provokes one on purpose does.
void install_validation_watch();
void allow_validation_messages();

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
};

}  // namespace vkattn::testing
