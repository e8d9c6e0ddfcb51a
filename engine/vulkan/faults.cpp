#include "engine/vulkan/faults.h"

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "vkattn/errors.h"

namespace vkattn::vulkan::faults {

namespace {

thread_local const std::string* current_step = nullptr;

#ifdef VKATTN_FAULT_INJECTION
struct Armed {
  std::mutex mutex;
  std::optional<Fault> fault;
  uint64_t calls = 0;  // at the fault's site (during its step) since it was armed
  bool fired = false;
  bool environment_read = false;
};
Armed& armed() {
  static Armed a;
  return a;
}

// VKATTN_FAULT=SITE:N:RESULT[:STEP]
std::optional<Fault> from_environment() {
  const char* text = std::getenv("VKATTN_FAULT");
  if (!text || !*text) return std::nullopt;
  std::vector<std::string> parts;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  auto bad = [&] {
    return ConfigError(std::string("VKATTN_FAULT=") + text + ": expected SITE:N:RESULT[:STEP], SITE allocation, "
                       "submission or fence_wait, N >= 1, RESULT out_of_device_memory, out_of_host_memory, "
                       "device_lost or timeout");
  };
  if (parts.size() < 3 || parts.size() > 4) throw bad();
  Fault f;
  if (parts[0] == "allocation") f.site = Site::allocation;
  else if (parts[0] == "submission") f.site = Site::submission;
  else if (parts[0] == "fence_wait") f.site = Site::fence_wait;
  else throw bad();
  try {
    f.nth = std::stoull(parts[1]);
  } catch (const std::exception&) {
    throw bad();
  }
  if (f.nth == 0) throw bad();
  if (parts[2] == "out_of_device_memory") f.result = vk::Result::eErrorOutOfDeviceMemory;
  else if (parts[2] == "out_of_host_memory") f.result = vk::Result::eErrorOutOfHostMemory;
  else if (parts[2] == "device_lost") f.result = vk::Result::eErrorDeviceLost;
  else if (parts[2] == "timeout") f.result = vk::Result::eTimeout;
  else throw bad();
  if (parts.size() == 4) f.during = parts[3];
  return f;
}
#endif

}  // namespace

Where::Where(const std::string& step) : previous_(current_step) { current_step = &step; }
Where::~Where() { current_step = previous_; }

#ifdef VKATTN_FAULT_INJECTION

void inject(const Fault& fault) {
  Armed& a = armed();
  std::lock_guard lock(a.mutex);
  a.environment_read = true;  // an explicit fault replaces the environment's
  a.fault = fault;
  a.calls = 0;
  a.fired = false;
}

bool clear() {
  Armed& a = armed();
  std::lock_guard lock(a.mutex);
  a.fault.reset();
  return a.fired;
}

std::optional<vk::Result> due(Site site) {
  Armed& a = armed();
  std::lock_guard lock(a.mutex);
  if (!a.environment_read) {
    a.environment_read = true;
    a.fault = from_environment();
  }
  if (!a.fault || a.fault->site != site) return std::nullopt;
  if (!a.fault->during.empty() && (!current_step || *current_step != a.fault->during)) return std::nullopt;
  if (++a.calls < a.fault->nth) return std::nullopt;
  const vk::Result result = a.fault->result;
  if (a.calls - a.fault->nth + 1 >= a.fault->times) a.fault.reset();
  a.fired = true;
  return result;
}

#else

void inject(const Fault&) { throw std::logic_error("vkattn was built without VKATTN_FAULT_INJECTION"); }
bool clear() { return false; }

#endif

}  // namespace vkattn::vulkan::faults
