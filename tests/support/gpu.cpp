#include "tests/support/gpu.h"

#include "engine/vulkan/context.h"

namespace vkattn::testing {

std::shared_ptr<vulkan::Context> shared_context() {
  static std::shared_ptr<vulkan::Context> context = std::make_shared<vulkan::Context>();
  return context;
}

Tensor random_bool_mask(Shape shape, float p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution blocked(p);
  Tensor t(std::move(shape), DType::boolean);
  for (float& v : t.data) v = blocked(rng) ? 1.0f : 0.0f;
  return t;
}

void GpuTest::SetUp() {
  messages_before_ = shared_context()->validation_message_count();
  gpu_ = std::make_unique<VulkanBackend>(shared_context());
}

void GpuTest::TearDown() {
  gpu_.reset();  // destruction is checked by the validation layer too
  const auto& context = *shared_context();
  EXPECT_EQ(context.validation_message_count(), messages_before_)
      << "validation layer: " << context.last_validation_message();
}

}  // namespace vkattn::testing
