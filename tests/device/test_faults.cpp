// Faults of the device, not of the input, injected (engine/vulkan/faults.h) at each step kind of
// a forward — a projection, the scores, the softmax, the fused attention, the readback — on both
// paths: out of memory (device and host) when a buffer is allocated or the queue takes the work,
// a lost device at submission or while waiting, a fence that does not signal. Each case checks
// what the user is told, the memory afterwards, and the next forward on the same module: correct
// after running out of memory, refused with the lost device's message after a loss. A real
// timeout (a fence wait shorter than the pass) is treated as a loss too, without a hang.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>

#include "engine/vulkan/context.h"
#include "engine/vulkan/faults.h"
#include "engine/vulkan/recorder.h"
#include "tests/support/expect_error.h"
#include "tests/support/tolerance.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/errors.h"
#include "vkattn/modules/multi_head_attention.h"

namespace vkattn {
namespace {

namespace faults = vulkan::faults;
using testing::all_close;
using testing::expect_error;

struct FaultCase {
  const char* name;
  faults::Site site;
  vk::Result result;
  const char* path;        // "unfused" or "fused"
  const char* during;      // the step (or "reading back <step>") the fault hits
  bool traced;             // values read back after every step: a submission per step
  const char* message;     // what the error says besides its place
  bool loses_device;
};
void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.name; }

constexpr auto kOom = vk::Result::eErrorOutOfDeviceMemory;
constexpr auto kHostOom = vk::Result::eErrorOutOfHostMemory;
constexpr auto kLost = vk::Result::eErrorDeviceLost;
constexpr auto kTimeout = vk::Result::eTimeout;
constexpr auto kAlloc = faults::Site::allocation;
constexpr auto kSubmit = faults::Site::submission;
constexpr auto kWait = faults::Site::fence_wait;
constexpr const char* kOomText = "failed with VK_ERROR_OUT_OF_DEVICE_MEMORY; the device ran out of memory";
constexpr const char* kHostOomText = "failed with VK_ERROR_OUT_OF_HOST_MEMORY; the driver ran out of host memory";
constexpr const char* kLostText = "failed with VK_ERROR_DEVICE_LOST; the driver lost the device";
constexpr const char* kTimeoutText = "did not finish within 600 s (VKATTN_FENCE_TIMEOUT): the device is treated as lost";

const FaultCase kCases[] = {
    // out of memory while a step's output (or the readback's staging buffer) is allocated
    {"oom_projection_unfused", kAlloc, kOom, "unfused", "q_proj", false, kOomText, false},
    {"oom_scores", kAlloc, kOom, "unfused", "attention_scores", false, kOomText, false},
    {"oom_softmax", kAlloc, kOom, "unfused", "softmax", false, kOomText, false},
    {"oom_readback_unfused", kAlloc, kOom, "unfused", "reading back out_proj", false, kOomText, false},
    {"oom_projection_fused", kAlloc, kOom, "fused", "k_proj", false, kOomText, false},
    {"oom_fused", kAlloc, kOom, "fused", "flash_attention", false, kOomText, false},
    {"oom_readback_fused", kAlloc, kOom, "fused", "reading back out_proj", false, kOomText, false},
    {"host_oom_softmax", kAlloc, kHostOom, "unfused", "softmax", false, kHostOomText, false},
    {"host_oom_fused", kAlloc, kHostOom, "fused", "flash_attention", false, kHostOomText, false},
    // the queue refuses the work for want of memory: nothing ran, the device is fine
    {"oom_at_submission_scores", kSubmit, kOom, "unfused", "reading back attention_scores", true, kOomText, false},
    {"oom_at_submission_readback", kSubmit, kOom, "fused", "reading back out_proj", false, kOomText, false},
    // the device is lost when the work is submitted, or while the host waits for it
    {"lost_at_submission_projection", kSubmit, kLost, "unfused", "reading back q_proj", true, kLostText, true},
    {"lost_at_submission_softmax", kSubmit, kLost, "unfused", "reading back softmax", true, kLostText, true},
    {"lost_at_submission_fused", kSubmit, kLost, "fused", "reading back flash_attention", true, kLostText, true},
    {"lost_waiting_scores", kWait, kLost, "unfused", "reading back attention_scores", true, kLostText, true},
    {"lost_waiting_readback_unfused", kWait, kLost, "unfused", "reading back out_proj", false, kLostText, true},
    {"lost_waiting_readback_fused", kWait, kLost, "fused", "reading back out_proj", false, kLostText, true},
    // the fence does not signal in time
    {"timeout_softmax", kWait, kTimeout, "unfused", "reading back softmax", true, kTimeoutText, true},
    {"timeout_fused", kWait, kTimeout, "fused", "reading back flash_attention", true, kTimeoutText, true},
    {"timeout_readback", kWait, kTimeout, "unfused", "reading back out_proj", false, kTimeoutText, true},
};

class InjectedFault : public ::testing::TestWithParam<std::tuple<FaultCase, uint32_t>> {
 protected:
  void TearDown() override { faults::clear(); }

  MultiHeadAttentionConfig config{.embed_dim = 16, .num_heads = 4, .batch_first = true};
  MultiHeadAttention module{config, MultiHeadAttentionWeights::random(config, 1)};
  Tensor x = random_tensor({2, 7, 16}, 2);
};

// NVIDIA's driver keeps thread-local storage in glibc's static TLS block, which glibc does not
// give back when the Vulkan loader unloads the driver with the last instance: a process that
// makes and drops one context a test ran out of it after 30 (an H200, driver 580: "cannot
// allocate memory in static TLS block", then no driver found). One context held for the whole
// run keeps the driver loaded; each test's own context loads nothing anew.
class DriverHeld : public ::testing::Environment {
  void SetUp() override { held_ = std::make_shared<vulkan::Context>(); }
  void TearDown() override { held_.reset(); }
  std::shared_ptr<vulkan::Context> held_;
};
[[maybe_unused]] ::testing::Environment* const kDriverHeld = ::testing::AddGlobalTestEnvironment(new DriverHeld);

// Each case with the pass submitted whole at its readback (early_dispatches 0), and sent to the
// device as it is recorded (1: segments of 1, 1, 2, 4 dispatches; 4, the default): a failed pass
// waits for what it sent before giving its buffers back, which the validation layer checks.
TEST_P(InjectedFault, SaysWhatAndWhereGivesTheMemoryBackAndTheNextForwardWorksOrIsRefused) {
  const auto& [c, early] = GetParam();
  // A context of its own: a fresh pool allocates every buffer, and a loss stays here.
  auto context = std::make_shared<vulkan::Context>();
  auto owned = std::make_unique<VulkanBackend>(context, VulkanBackendOptions{.early_dispatches = early});
  VulkanBackend& gpu = *owned;
  ForwardOptions options{.need_weights = false, .attention = std::string(c.path) == "fused" ? AttentionPath::fused
                                                                                             : AttentionPath::unfused};
  const Tensor expected = [&] {
    ReferenceBackend cpu;
    return module.forward(cpu, x, x, x, options).output;
  }();
  StepRecorder recorder(true);
  if (c.traced) gpu.add_tracer(recorder);
  const uint64_t before = context->allocated_bytes();

  faults::inject({.site = c.site, .nth = 1, .result = c.result, .during = c.during});
  const std::string where = std::string(c.during) + (c.site == kAlloc ? ": allocating " : ": ");
  expect_error<DeviceError>([&] { module.forward(gpu, x, x, x, options); }, {where, c.message});
  EXPECT_TRUE(faults::clear()) << "the fault never fired";
  EXPECT_EQ(context->lost(), c.loses_device);

  if (!c.loses_device) {
    EXPECT_LE(context->allocated_bytes(), before) << "the failed pass kept device memory";
    const Tensor again = module.forward(gpu, x, x, x, options).output;
    EXPECT_TRUE(all_close(again, expected, {.atol = 1e-5f, .rtol = 1e-5f}));
  } else {
    expect_error<DeviceError>([&] { module.forward(gpu, x, x, x, options); },
                              {"the device was lost earlier (", "make a new one"});
  }
  if (early == 1 && !c.loses_device) {
    EXPECT_GT(gpu.recorder().early_submissions(), 0u) << "nothing was sent early";
  }
  owned.reset();
  EXPECT_EQ(context->validation_message_count(), 0u) << context->last_validation_message();
}

INSTANTIATE_TEST_SUITE_P(Faults, InjectedFault,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(0u, 1u, 4u)),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param).name) + "_early" +
                                  std::to_string(std::get<1>(p.param));
                         });

TEST(InjectedFault, AnAllocationFailureNamesTheBytesAskedFor) {
  auto context = std::make_shared<vulkan::Context>();
  VulkanBackend gpu(context);
  MultiHeadAttentionConfig config{.embed_dim = 16, .num_heads = 4, .batch_first = true};
  MultiHeadAttention module{config, MultiHeadAttentionWeights::random(config, 1)};
  const Tensor x = random_tensor({2, 7, 16}, 2);
  faults::inject({.site = kAlloc, .result = kOom, .during = "attention_scores"});
  // the scores (B, H, L, S) = (2, 4, 7, 7) of float32: 1568 bytes = 1.53 KiB
  expect_error<DeviceError>([&] { module.forward(gpu, x, x, x, {.attention = AttentionPath::unfused}); },
                            {"attention_scores: allocating 1.53 KiB of device memory: vk::Device::allocateMemory failed "
                             "with VK_ERROR_OUT_OF_DEVICE_MEMORY"});
  faults::clear();
}

// A real timeout, not an injected one: a fence wait of a microsecond on a pass that takes
// milliseconds gives up, marks the device lost, and the backend and its context are then
// destroyed safely (the destructor waits for the running work, bounded) — no hang, no leak.
TEST(FenceTimeout, AWaitShorterThanThePassTreatsTheDeviceAsLost) {
  auto context = std::make_shared<vulkan::Context>(vulkan::ContextOptions{.fence_timeout_s = 1e-6});
  auto gpu = std::make_unique<VulkanBackend>(context);
  MultiHeadAttentionConfig config{.embed_dim = 256, .num_heads = 4, .batch_first = true};
  MultiHeadAttention module{config, MultiHeadAttentionWeights::random(config, 1)};
  const Tensor x = random_tensor({4, 256, 256}, 2);
  expect_error<DeviceError>([&] { module.forward(*gpu, x, x, x, {.attention = AttentionPath::unfused}); },
                            {"reading back out_proj: a submission did not finish within 1e-06 s", "treated as lost"});
  EXPECT_TRUE(context->lost());
  expect_error<DeviceError>([&] { module.forward(*gpu, x, x, x, {}); }, {"the device was lost earlier (a submission"});
  gpu.reset();
  EXPECT_EQ(context->allocated_bytes(), 0u) << "every buffer goes with the backend";
}

}  // namespace
}  // namespace vkattn
