#include "tests/support/gpu.h"

#include <atomic>

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

void GpuTest::SetUp() { gpu_ = std::make_unique<VulkanBackend>(shared_context()); }

void GpuTest::TearDown() {
  gpu_.reset();  // destruction is checked by the validation layer too (the watch, below)
}

namespace {

std::atomic<bool> messages_allowed{false};  // by the test running

class ValidationWatch : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override {
    messages_allowed = false;
    before_ = vulkan::Context::process_validation_message_count();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    const uint64_t raised = vulkan::Context::process_validation_message_count() - before_;
    if (raised > 0 && !messages_allowed) {
      ADD_FAILURE() << "the validation layer counted " << raised << " message(s) while the test ran; the last: "
                    << vulkan::Context::process_last_validation_message();
    }
  }
  uint64_t before_ = 0;
};

}  // namespace

void install_validation_watch() {
  // after gtest's printer, which then reports the failures the watch adds (gtest's advanced guide)
  ::testing::UnitTest::GetInstance()->listeners().Append(new ValidationWatch);
}

void allow_validation_messages() { messages_allowed = true; }

}  // namespace vkattn::testing
