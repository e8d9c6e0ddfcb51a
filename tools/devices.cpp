// vkattn devices: every Vulkan device, its driver, limits and optional features, the one vkattn
// picks, why any device is unusable, and for each step with variants the one that will run and
// why; and the backend a command asks for.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "engine/vulkan/context.h"
#include "engine/vulkan/plan_cache.h"
#include "engine/vulkan/step_plans.h"
#include "tools/commands.h"
#include "tools/interrupt.h"
#include "vkattn/backends/make_backend.h"
#include "vkattn/errors.h"

namespace vkattn::cli {
namespace {

// `text` after `indent`, wrapped at word boundaries to lines of at most 100 columns.
void print_wrapped(const std::string& indent, const std::string& text) {
  constexpr size_t kWidth = 100;
  std::string line = indent;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    if (line.size() > indent.size() && line.size() + 1 + word.size() > kWidth) {
      std::cout << line << "\n";
      line = indent + "  ";
    }
    line += (line.size() > indent.size() && line.back() != ' ' ? " " : "") + word;
    at = end + 1;
  }
  std::cout << line << "\n";
}

// `items` joined by ", " after `indent`, a line broken only between two items (a number keeps its
// unit) where the next would pass 100 columns.
void print_items(const std::string& indent, const std::vector<std::string>& items) {
  std::string line = indent;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string item = items[i] + (i + 1 < items.size() ? "," : "");
    if (line.size() > indent.size() && line.size() + 1 + item.size() > 100) {
      std::cout << line << "\n";
      line = indent + "  ";
    }
    line += (line.size() > indent.size() && line.back() != ' ' ? " " : "") + item;
  }
  std::cout << line << "\n";
}

std::string subgroup_line(const vulkan::DeviceReport& r) {
  std::string ops = r.subgroup_arithmetic && r.subgroup_shuffle ? "arithmetic and shuffle"
                    : r.subgroup_arithmetic                     ? "arithmetic, no shuffle"
                    : r.subgroup_shuffle                        ? "shuffle, no arithmetic"
                                                                : "neither arithmetic nor shuffle";
  std::string control = r.size_control ? "size control " + std::to_string(r.min_subgroup_size) + ".." +
                                             std::to_string(r.max_subgroup_size) +
                                             (r.full_subgroups ? " with full subgroups" : " without full subgroups")
                                       : "no size control";
  return "subgroups: " + std::to_string(r.subgroup_size) + " lanes reported, " + ops + " in compute; " + control;
}

std::string switch_text(const char* name, bool on, const std::string& why) {
  return std::string(name) + (on ? " on" : " off (" + why + ")");
}

// The plans tuning measured on `r` (vkattn tune, or first use), as the cache file has them.
void print_remembered(const vulkan::DeviceReport& r) {
  auto cache = vulkan::plan_cache(r);
  if (cache->file().empty()) return;
  const auto entries = cache->entries();
  if (entries.empty()) {
    print_wrapped("     ", "plans measured on this device: none yet (they are measured at first use of a shape, or by "
                           "vkattn tune; VKATTN_TUNE=off keeps the rules above)");
    return;
  }
  print_wrapped("     ", "plans measured on this device (" + cache->file().string() + "):");
  for (const auto& [shape_class, entry] : entries) {
    std::cout << "       " << shape_class << "\n";
    print_wrapped("         ", entry.value("describe", std::string("?")) +
                                   (entry.value("describe", "") == entry.value("rule", "") ? " (the rule's too)" : ""));
  }
}

}  // namespace

CLI::App* add_devices(CLI::App& app) {
  return app.add_subcommand("devices", "list every Vulkan device, its limits, and why one is unusable");
}

int run_devices() {
  auto reports = vulkan::list_devices();
  std::optional<size_t> chosen;
  try {
    chosen = vulkan::select_device(reports, vulkan::ContextOptions::from_environment().device);
  } catch (const DeviceError& e) {
    std::cout << "no device is selected: " << e.what() << "\n";
  }
  for (const auto& r : reports) {
    std::cout << (chosen == r.index ? "* " : "  ") << r.index << ": " << r.name << " (" << vulkan::device_type_name(r.type)
              << ", Vulkan " << vulkan::version_string(r.api_version) << ")\n";
    print_wrapped("     ", "driver: " + vulkan::driver_string(r));
    if (!r.suitable) {
      std::cout << "     unusable: it " << r.rejection << "\n";
      continue;
    }
    // broken between items where needed: a device's limits are numbers of any width
    using std::to_string;
    print_items("     ", {"workgroups: count " + to_string(r.max_workgroup_count[0]) + " x " +
                              to_string(r.max_workgroup_count[1]) + " x " + to_string(r.max_workgroup_count[2]),
                          "size x <= " + to_string(r.max_workgroup_size_x),
                          "invocations <= " + to_string(r.max_workgroup_invocations),
                          "shared memory " + to_string(r.max_shared_memory_bytes) + " B"});
    print_items("     ", {"storage buffer range " + to_string(r.max_storage_buffer_range) + " B",
                          "push constants " + to_string(r.max_push_constants_bytes) + " B",
                          "device-local heap " + to_string(r.device_local_bytes >> 20) + " MiB"});
    std::cout << "     16-bit storage " << (r.storage_buffer_16bit ? "yes" : "no") << ", texel buffers RGBA32F "
              << (r.texel_rgba32f ? "yes" : "no") << " RG32UI " << (r.texel_rg32ui ? "yes" : "no") << ", timestamps "
              << (r.timestamps ? "yes" : "no") << "\n";
    const vulkan::MatrixProducts& products = r.float16_products;
    std::cout << "     float16 products on cooperative matrices: "
              << (products ? std::to_string(products.m) + " x " + std::to_string(products.n) + " x " +
                                 std::to_string(products.k) + " on " + std::to_string(products.lanes) + " lanes (" +
                                 products.extension + ")"
                           : std::string("none"))
              << "\n";
    print_wrapped("     ", subgroup_line(r));
    print_wrapped("     ", "switches: " + switch_text("subgroups", r.switches.subgroups, r.switches.subgroups_why) +
                               ", " + switch_text("texel inputs", r.switches.texel_inputs, r.switches.texel_inputs_why) +
                               " (VKATTN_SUBGROUPS, VKATTN_TEXEL_INPUTS: on|off)");
    std::cout << "     steps:\n";
    for (const auto& plan : vulkan::step_plans(r)) {
      std::cout << "       " << plan.steps << ": "
                << (plan.lanes ? std::to_string(plan.lanes) + " lanes required" : "no subgroups") << "\n";
      print_wrapped("         ", plan.variant);
      print_wrapped("         ", "why: " + plan.why);
    }
    print_remembered(r);
  }
  if (chosen) std::cout << "* = the device vkattn uses (set VKATTN_DEVICE to an index or a name to choose)\n";
  return chosen ? 0 : 1;
}

std::unique_ptr<Backend> make_watched_backend(const std::string& backend, const std::string& device,
                                              const VulkanBackendOptions& options) {
  try {
    auto made = vkattn::make_backend(backend, device, options);
    watch(*made);  // progress of long steps, Ctrl-C between submissions
    return made;
  } catch (const ConfigError& e) {
    throw UsageError(std::string("--device: ") + e.what());  // --backend is checked by CLI11
  }
}

}  // namespace vkattn::cli
