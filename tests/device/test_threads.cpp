// vkattn from several threads, as a library embedded in a server (or the Python package) is
// used: threads each with their own backend on one shared context, running their own modules and
// one module they share, agree with the reference on every forward; a backend used by a second
// thread while its pass is open says so (a DeviceError) rather than racing. CI runs this file
// under ThreadSanitizer (scripts/tsan) and AddressSanitizer (scripts/sanitize).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/vulkan/context.h"
#include "tests/support/expect_error.h"
#include "tests/support/tolerance.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/errors.h"
#include "vkattn/modules/multi_head_attention.h"

namespace vkattn {
namespace {

using testing::all_close;
using testing::expect_error;

constexpr int kThreads = 4;
constexpr int kForwards = 6;

MultiHeadAttentionConfig config_of(int t) {
  return {.embed_dim = 8 * (t + 1), .num_heads = t % 2 ? 2 : 4, .batch_first = true};
}

TEST(Threads, EachWithItsOwnBackendOnOneContextAgreeWithTheReference) {
  auto context = std::make_shared<vulkan::Context>();
  const MultiHeadAttentionConfig shared_config{.embed_dim = 16, .num_heads = 4, .batch_first = true};
  const MultiHeadAttention shared{shared_config, MultiHeadAttentionWeights::random(shared_config, 7)};
  std::atomic<int> agreed{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        VulkanBackend gpu(context);
        ReferenceBackend cpu;
        const MultiHeadAttention own{config_of(t), MultiHeadAttentionWeights::random(config_of(t), uint32_t(t))};
        for (int i = 0; i < kForwards; ++i) {
          const bool fused = (i + t) % 2 == 0;
          const ForwardOptions options{.need_weights = !fused, .attention = fused ? AttentionPath::fused
                                                                                   : AttentionPath::unfused};
          const MultiHeadAttention& module = i % 3 == 0 ? shared : own;
          const int64_t E = i % 3 == 0 ? shared_config.embed_dim : config_of(t).embed_dim;
          const Tensor x = random_tensor({1 + i % 2, 3 + 7 * i, E}, uint32_t(100 * t + i));
          const Tensor got = module.forward(gpu, x, x, x, options).output;
          const Tensor want = module.forward(cpu, x, x, x, options).output;
          (all_close(got, want, {.atol = 1e-5f, .rtol = 1e-5f}) ? agreed : failed)++;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
        failed++;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(agreed.load(), kThreads * kForwards);
  EXPECT_EQ(context->allocated_bytes(), 0u) << "every backend gave its buffers back";
}

// A tracer that holds the first thread's pass open until the second has tried to begin one.
struct Gate : Tracer {
  std::mutex mutex;
  std::condition_variable changed;
  bool inside = false, tried = false;
  void on_pass(const std::string&, const std::string&, const std::string&) override {
    std::unique_lock lock(mutex);
    inside = true;
    changed.notify_all();
    changed.wait(lock, [&] { return tried; });
  }
  void on_step(const StepEvent&) override {}
};

TEST(Threads, ABackendUsedByASecondThreadMidPassSaysSo) {
  VulkanBackend gpu(std::make_shared<vulkan::Context>());
  const MultiHeadAttentionConfig config{.embed_dim = 8, .num_heads = 2, .batch_first = true};
  const MultiHeadAttention module{config, MultiHeadAttentionWeights::random(config, 1)};
  const Tensor x = random_tensor({1, 5, 8}, 2);
  Gate gate;
  gpu.add_tracer(gate);
  std::thread first([&] { module.forward(gpu, x, x, x, {}); });
  {
    std::unique_lock lock(gate.mutex);
    gate.changed.wait(lock, [&] { return gate.inside; });
  }
  expect_error<DeviceError>([&] { module.forward(gpu, x, x, x, {}); },
                            {"pass multi_head_attention: this gpu backend is running a pass on another thread",
                             "give each thread its own"});
  {
    std::lock_guard lock(gate.mutex);
    gate.tried = true;
  }
  gate.changed.notify_all();
  first.join();
  gpu.remove_tracer(gate);
  EXPECT_NO_THROW(module.forward(gpu, x, x, x, {}));  // free again once the first pass ended
}

}  // namespace
}  // namespace vkattn
