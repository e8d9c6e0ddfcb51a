#pragma once
// Fault injection, for tests: makes a chosen Vulkan call — a memory allocation, a queue
// submission or a fence wait — fail with a chosen VkResult, so that what a user sees when the
// device runs out of memory, is lost or stops answering can be tested on any device.
//
// A fault is armed for the nth call from now at its site (1: the next), optionally only while a
// given step runs or is read back (`during`, the step's name as the trace shows it); it fires
// once, or `times` times in a row. The sites call due() before the real call and fail as that call would. Built with
// VKATTN_FAULT_INJECTION (on with the tests, CMake option); without it due() is always empty.
//
// The environment arms one too, for the command line and Python: VKATTN_FAULT=SITE:N:RESULT[:STEP]
// with SITE allocation | submission | fence_wait and RESULT out_of_device_memory |
// out_of_host_memory | device_lost | timeout, e.g. VKATTN_FAULT=allocation:1:out_of_device_memory:softmax.
#include <cstdint>
#include <optional>
#include <string>

#include <vulkan/vulkan.hpp>

namespace vkattn::vulkan::faults {

enum class Site { allocation, submission, fence_wait };

struct Fault {
  Site site = Site::allocation;
  uint64_t nth = 1;                // the nth call at `site` (counted only `during` the step) fails
  vk::Result result = vk::Result::eErrorOutOfDeviceMemory;
  std::string during;              // a step's name; empty: any call
  uint64_t times = 1;              // calls that fail, one after another from the nth
};

// Arms `fault` (replacing any armed one). Throws std::logic_error when built without injection.
void inject(const Fault& fault);
// Disarms it; returns whether it had fired.
bool clear();

// Where the calls now made come from: the step run or read back on this thread (RAII).
class Where {
 public:
  explicit Where(const std::string& step);
  ~Where();
  Where(const Where&) = delete;
  Where& operator=(const Where&) = delete;

 private:
  const std::string* previous_;
};

#ifdef VKATTN_FAULT_INJECTION
// At each site, before its Vulkan call: the result it must fail with, when a fault is due.
std::optional<vk::Result> due(Site site);
#else
inline std::optional<vk::Result> due(Site) { return std::nullopt; }
#endif

}  // namespace vkattn::vulkan::faults
