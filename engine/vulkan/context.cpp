#include "engine/vulkan/context.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "engine/vulkan/kernel.h"
#include "engine/vulkan/shader_registry.h"
#include "vkattn/errors.h"
#include "vkattn/log.h"

namespace vkattn::vulkan {

struct Context::ValidationState {
  std::atomic<uint64_t> count{0};
  mutable std::mutex mutex;
  std::string last;
};

namespace {

// Every context's messages together (Context::process_validation_message_count)
Context::ValidationState& process_validation() {
  static Context::ValidationState state;
  return state;
}

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";
// The newest API the engine asks for: a device gives min(this, its own). vkattn needs 1.1 and
// uses 1.2's driver properties and 1.3's subgroup size control where the device has them (or their
// extensions on older devices).
constexpr uint32_t kApiVersion = VK_API_VERSION_1_3;

// Validation-layer messages go to spdlog; warnings and errors about the API's use are counted
// so that tests fail on any. Loader chatter (GENERAL) is only logged.
VKAPI_ATTR VkBool32 VKAPI_CALL on_debug_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                VkDebugUtilsMessageTypeFlagsEXT types,
                                                const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  auto* state = static_cast<Context::ValidationState*>(user);
  const char* text = data && data->pMessage ? data->pMessage : "(no message)";
  bool serious = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
  bool about_usage = types & (VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT);
  if (serious && about_usage && state) {
    for (Context::ValidationState* counted : {state, &process_validation()}) {
      counted->count++;
      std::lock_guard lock(counted->mutex);
      counted->last = text;
    }
  }
  if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) spdlog::error("vulkan: {}", text);
  else if (serious) spdlog::warn("vulkan: {}", text);
  else spdlog::debug("vulkan: {}", text);
  return VK_FALSE;
}

vk::DebugUtilsMessengerCreateInfoEXT messenger_info(Context::ValidationState* state) {
  // From the C struct: Vulkan-Hpp 1.4 deprecates the constructor that takes a C callback, and 1.3
  // has no other; both convert a VkDebugUtilsMessengerCreateInfoEXT.
  VkDebugUtilsMessengerCreateInfoEXT info{};
  info.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
  info.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_VERBOSE_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_INFO_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  info.pfnUserCallback = &on_debug_message;
  info.pUserData = state;
  return vk::DebugUtilsMessengerCreateInfoEXT(info);
}

bool has_extension(const std::vector<vk::ExtensionProperties>& list, const char* name) {
  return std::any_of(list.begin(), list.end(), [&](const auto& e) { return std::string_view(e.extensionName) == name; });
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Google's SwiftShader, as Debian's chromium ships it: a second CPU implementation of Vulkan (its
// own compiler, 4-lane subgroups) that the loader does not list by itself. vkattn adds it to the
// loader's drivers wherever it is installed, so that every device list (and its indices) holds
// it; a device is chosen from them as before, lavapipe before it (select_device). The user's own
// VK_ICD_FILENAMES or VK_DRIVER_FILES (a list that replaces the system's) is left as it is.
// VKATTN_SWIFTSHADER_ICD names another manifest, or none when empty.
void add_swiftshader_driver() {
  const char* manifest = std::getenv("VKATTN_SWIFTSHADER_ICD");
  if (manifest && !*manifest) return;
  const std::string path = manifest ? manifest : "/usr/lib/chromium/vk_swiftshader_icd.json";
  if (std::getenv("VK_ICD_FILENAMES") || std::getenv("VK_DRIVER_FILES")) return;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
  } else {
    return;
  }
  const char* added = std::getenv("VK_ADD_DRIVER_FILES");
  const std::string list = added && *added ? added : "";
  if (list.find(path) != std::string::npos) return;
  // before the loader scans its drivers (at instance creation), on the thread that makes it
  ::setenv("VK_ADD_DRIVER_FILES", (list.empty() ? path : list + ":" + path).c_str(), 1);
}

bool is_swiftshader(const DeviceReport& r) { return r.driver_id == vk::DriverId::eGoogleSwiftshader; }

int rank(vk::PhysicalDeviceType type) {
  switch (type) {
    case vk::PhysicalDeviceType::eDiscreteGpu: return 4;
    case vk::PhysicalDeviceType::eIntegratedGpu: return 3;
    case vk::PhysicalDeviceType::eVirtualGpu: return 2;
    case vk::PhysicalDeviceType::eCpu: return 1;
    default: return 0;
  }
}

// vkGetPhysicalDeviceFeatures2 and …Properties2 filling the chain that starts at `first`
void query_features(const vk::raii::PhysicalDevice& device, void* first) {
  vk::PhysicalDeviceFeatures2 features(vk::PhysicalDeviceFeatures{}, first);
  device.getDispatcher()->vkGetPhysicalDeviceFeatures2(static_cast<VkPhysicalDevice>(*device),
                                                       reinterpret_cast<VkPhysicalDeviceFeatures2*>(&features));
}
void query_properties(const vk::raii::PhysicalDevice& device, void* first) {
  vk::PhysicalDeviceProperties2 properties(vk::PhysicalDeviceProperties{}, first);
  device.getDispatcher()->vkGetPhysicalDeviceProperties2(static_cast<VkPhysicalDevice>(*device),
                                                         reinterpret_cast<VkPhysicalDeviceProperties2*>(&properties));
}

// The device's float16 products on cooperative matrices (MatrixProducts), given what they need
// besides (shaderFloat16, the memory model, size control with full subgroups): Khronos's
// extension where the Vulkan headers and this build's shaders know it, else NVIDIA's.
MatrixProducts float16_matrices(const vk::raii::PhysicalDevice& device,
                                const std::vector<vk::ExtensionProperties>& extensions, const DeviceReport& r) {
  MatrixProducts chosen;
  // the tiling takes its sizes, its tiles fit the device's shared memory, its workgroup the device
  const auto runs = [&r](const MatrixProducts& p) {
    return p.shapes_fit() && p.shared_bytes() <= r.max_shared_memory_bytes &&
           p.invocations() <= std::min(r.max_workgroup_size_x, r.max_workgroup_invocations);
  };
  const auto in_compute = [](vk::ShaderStageFlags stages) { return bool(stages & vk::ShaderStageFlagBits::eCompute); };
#ifdef VK_KHR_cooperative_matrix
  const auto builds = shader_builds();
  const bool built = std::find(builds.begin(), builds.end(), "linear_coopmat_khr") != builds.end();
  if (built && has_extension(extensions, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME)) {
    vk::PhysicalDeviceCooperativeMatrixFeaturesKHR feature;
    query_features(device, &feature);
    vk::PhysicalDeviceCooperativeMatrixPropertiesKHR stages;
    query_properties(device, &stages);
    // 32 lanes where the device can run them (NVIDIA's, AMD's wave32), else its own size
    const uint32_t lanes = r.min_subgroup_size <= 32 && r.max_subgroup_size >= 32 ? 32 : r.subgroup_size;
    // lavapipe offers them at 8 and 16 lanes (not 4), but Mesa 26.1's crashes making this pipeline
    // at 16 (LP_NATIVE_VECTOR_WIDTH=512), inside the driver: not taken there
    const bool crashes = r.driver_id == vk::DriverId::eMesaLlvmpipe && lanes > 8;
    if (feature.cooperativeMatrix && in_compute(stages.cooperativeMatrixSupportedStages) && !crashes) {
      using vk::ComponentTypeKHR;
      for (const auto& c : device.getCooperativeMatrixPropertiesKHR()) {
        // float16 into float32, sizes the tiling takes (runs); 16 × 16 × 16 where the device lists it
        const bool fits = c.AType == ComponentTypeKHR::eFloat16 && c.BType == ComponentTypeKHR::eFloat16 &&
                          c.CType == ComponentTypeKHR::eFloat32 && c.ResultType == ComponentTypeKHR::eFloat32 &&
                          !c.saturatingAccumulation && c.scope == vk::ScopeKHR::eSubgroup;
        const MatrixProducts listed{VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME, c.MSize, c.NSize, c.KSize, lanes};
        const bool better = !chosen || (c.MSize == 16 && c.NSize == 16 && c.KSize == 16);
        if (fits && runs(listed) && better) chosen = listed;
      }
    }
    if (chosen) return chosen;
  }
#endif
  if (!has_extension(extensions, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) || r.min_subgroup_size > 32 ||
      r.max_subgroup_size < 32) {
    return chosen;
  }
  vk::PhysicalDeviceCooperativeMatrixFeaturesNV feature;
  query_features(device, &feature);
  vk::PhysicalDeviceCooperativeMatrixPropertiesNV stages;
  query_properties(device, &stages);
  if (!feature.cooperativeMatrix || !in_compute(stages.cooperativeMatrixSupportedStages)) return chosen;
  using vk::ComponentTypeNV;
  for (const auto& c : device.getCooperativeMatrixPropertiesNV()) {
    if (c.MSize == 16 && c.NSize == 16 && c.KSize == 16 && c.AType == ComponentTypeNV::eFloat16 &&
        c.BType == ComponentTypeNV::eFloat16 && c.CType == ComponentTypeNV::eFloat32 &&
        c.DType == ComponentTypeNV::eFloat32 && c.scope == vk::ScopeNV::eSubgroup) {
      chosen = {VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME, 16, 16, 16, 32};
    }
  }
  if (chosen && !runs(chosen)) chosen = {};
  return chosen;
}

DeviceReport describe(const vk::raii::PhysicalDevice& device, uint32_t index) {
  DeviceReport r;
  auto props = device.getProperties();
  r.index = index;
  r.name = props.deviceName.data();
  r.type = props.deviceType;
  r.api_version = props.apiVersion;
  r.vendor_id = props.vendorID;
  const auto& limits = props.limits;
  r.max_workgroup_count = {limits.maxComputeWorkGroupCount[0], limits.maxComputeWorkGroupCount[1],
                           limits.maxComputeWorkGroupCount[2]};
  r.max_workgroup_size_x = limits.maxComputeWorkGroupSize[0];
  r.max_workgroup_invocations = limits.maxComputeWorkGroupInvocations;
  r.max_shared_memory_bytes = limits.maxComputeSharedMemorySize;
  r.max_storage_buffer_range = limits.maxStorageBufferRange;
  r.max_push_constants_bytes = limits.maxPushConstantsSize;
  for (const auto& heap : device.getMemoryProperties().memoryHeaps) {
    if (heap.flags & vk::MemoryHeapFlagBits::eDeviceLocal) r.device_local_bytes = std::max<uint64_t>(r.device_local_bytes, heap.size);
  }

  if (VK_API_VERSION_MINOR(r.api_version) < 1 && VK_API_VERSION_MAJOR(r.api_version) == 1) {
    r.rejection = "supports Vulkan " + version_string(r.api_version) + "; vkattn needs 1.1";
    return r;
  }
  auto families = device.getQueueFamilyProperties();
  auto family = std::find_if(families.begin(), families.end(),
                             [](const auto& f) { return bool(f.queueFlags & vk::QueueFlagBits::eCompute); });
  if (family == families.end()) {
    r.rejection = "has no queue family with compute";
    return r;
  }
  r.compute_queue_family = static_cast<uint32_t>(family - families.begin());
  r.timestamps = family->timestampValidBits > 0;
  r.timestamp_period_ns = limits.timestampPeriod;

  // Properties and features through pNext chains that hold only what the device knows: a struct
  // of an extension it lacks (or of a later core version) must not be chained.
  const uint32_t api = std::min(kApiVersion, r.api_version);
  const auto extensions = device.enumerateDeviceExtensionProperties();
  const bool knows_driver = api >= VK_API_VERSION_1_2 || has_extension(extensions, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
  const bool knows_size_control =
      api >= VK_API_VERSION_1_3 || has_extension(extensions, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  r.size_control_extension = knows_size_control && api < VK_API_VERSION_1_3;

  vk::PhysicalDeviceSubgroupProperties subgroup;
  vk::PhysicalDeviceDriverProperties driver;
  vk::PhysicalDeviceSubgroupSizeControlProperties size_control;
  vk::PhysicalDeviceIDProperties ids;
  if (api >= VK_API_VERSION_1_1) ids.pNext = std::exchange(subgroup.pNext, &ids);
  if (knows_driver) driver.pNext = std::exchange(subgroup.pNext, &driver);
  if (knows_size_control) size_control.pNext = std::exchange(subgroup.pNext, &size_control);
  query_properties(device, &subgroup);
  if (knows_driver) {
    r.driver_id = driver.driverID;
    r.driver_name = driver.driverName.data();
    r.driver_info = driver.driverInfo.data();
  }
  r.driver_version = props.driverVersion;
  // deviceUUID where the device has Vulkan 1.1, else the pipeline cache's (which names the build)
  const auto& uuid = api >= VK_API_VERSION_1_1 ? ids.deviceUUID : props.pipelineCacheUUID;
  for (uint8_t byte : uuid) {
    static const char* hex = "0123456789abcdef";
    r.uuid += hex[byte >> 4];
    r.uuid += hex[byte & 15];
  }
  r.subgroup_size = subgroup.subgroupSize;
  const bool in_compute = bool(subgroup.supportedStages & vk::ShaderStageFlagBits::eCompute);
  r.subgroup_arithmetic = in_compute && (subgroup.supportedOperations & vk::SubgroupFeatureFlagBits::eArithmetic);
  r.subgroup_shuffle = in_compute && (subgroup.supportedOperations & vk::SubgroupFeatureFlagBits::eShuffle);

  vk::PhysicalDevice16BitStorageFeatures storage16;
  vk::PhysicalDeviceSubgroupSizeControlFeatures size_features;
  vk::PhysicalDeviceShaderFloat16Int8Features float16_features;
  vk::PhysicalDeviceVulkanMemoryModelFeatures memory_model_features;
  if (knows_size_control) size_features.pNext = std::exchange(storage16.pNext, &size_features);
  if (api >= VK_API_VERSION_1_2) {
    float16_features.pNext = std::exchange(storage16.pNext, &float16_features);
    memory_model_features.pNext = std::exchange(storage16.pNext, &memory_model_features);
  }
  query_features(device, &storage16);
  r.storage_buffer_16bit = storage16.storageBuffer16BitAccess;
  if (knows_size_control) {
    r.min_subgroup_size = size_control.minSubgroupSize;
    r.max_subgroup_size = size_control.maxSubgroupSize;
    r.max_workgroup_subgroups = size_control.maxComputeWorkgroupSubgroups;
    r.size_control = size_features.subgroupSizeControl &&
                     bool(size_control.requiredSubgroupSizeStages & vk::ShaderStageFlagBits::eCompute);
    r.full_subgroups = size_features.computeFullSubgroups;
  }
  r.texel_rgba32f = bool(device.getFormatProperties(vk::Format::eR32G32B32A32Sfloat).bufferFeatures &
                         vk::FormatFeatureFlagBits::eUniformTexelBuffer);
  r.texel_rg32ui = bool(device.getFormatProperties(vk::Format::eR32G32Uint).bufferFeatures &
                        vk::FormatFeatureFlagBits::eUniformTexelBuffer);
  r.max_texel_buffer_elements = limits.maxTexelBufferElements;
  if (api >= VK_API_VERSION_1_2 && float16_features.shaderFloat16 && memory_model_features.vulkanMemoryModel &&
      r.size_control && r.full_subgroups) {
    r.float16_products = float16_matrices(device, extensions, r);
  }
  r.switches = choose_switches(r);

  if (r.max_workgroup_invocations < 64 || r.max_workgroup_size_x < 64) {
    r.rejection = "allows " + std::to_string(r.max_workgroup_invocations) + " invocations per workgroup; vkattn needs 64";
    return r;
  }
  r.suitable = true;
  return r;
}

std::vector<DeviceReport> describe_all(const vk::raii::Instance& instance) {
  std::vector<DeviceReport> reports;
  vk::raii::PhysicalDevices devices(instance);
  for (uint32_t i = 0; i < devices.size(); ++i) reports.push_back(describe(devices[i], i));
  return reports;
}

struct InstanceSetup {
  std::vector<const char*> layers;
  std::vector<const char*> extensions;
  vk::InstanceCreateFlags flags;
  bool debug_utils = false;
};

InstanceSetup instance_setup(const vk::raii::Context& loader, bool validation) {
  InstanceSetup setup;
  auto extensions = loader.enumerateInstanceExtensionProperties();
  if (validation) {
    auto layers = loader.enumerateInstanceLayerProperties();
    bool found = std::any_of(layers.begin(), layers.end(),
                             [](const auto& l) { return std::string_view(l.layerName) == kValidationLayer; });
    if (!found) {
      throw DeviceError(std::string("VKATTN_VALIDATION is on but ") + kValidationLayer +
                        " is not installed (Debian package: vulkan-validationlayers)");
    }
    setup.layers.push_back(kValidationLayer);
    // the layer's own extension: lets the instance turn on synchronization validation
    setup.extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
  }
  if (has_extension(extensions, VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
    setup.extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    setup.debug_utils = true;
  } else if (validation) {
    throw DeviceError("VKATTN_VALIDATION is on but the loader lacks VK_EXT_debug_utils to report messages");
  }
  // MoltenVK and other non-conformant implementations are listed only when asked for.
  if (has_extension(extensions, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    setup.extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    setup.flags |= vk::InstanceCreateFlagBits::eEnumeratePortabilityKHR;
  }
  return setup;
}

vk::raii::Context make_loader() {
  add_swiftshader_driver();  // before the loader scans its drivers
  try {
    return vk::raii::Context();
  } catch (const std::exception& e) {
    throw DeviceError(std::string("cannot load the Vulkan loader (libvulkan.so.1; Debian package libvulkan1): ") + e.what());
  }
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string s = lower(v);
  return s == "1" || s == "true" || s == "on" || s == "yes";
}

}  // namespace

std::string driver_string(const DeviceReport& d) {
  std::string name = d.driver_name.empty() ? "unknown driver" : d.driver_name;
  if (!d.driver_info.empty()) name += ", " + d.driver_info;
  char version[16];  // in the driver's own encoding: hexadecimal shows its fields best
  std::snprintf(version, sizeof version, "0x%08x", d.driver_version);
  return name + ", driverVersion " + version;
}

std::string version_string(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

const char* device_type_name(vk::PhysicalDeviceType type) {
  switch (type) {
    case vk::PhysicalDeviceType::eDiscreteGpu: return "discrete GPU";
    case vk::PhysicalDeviceType::eIntegratedGpu: return "integrated GPU";
    case vk::PhysicalDeviceType::eVirtualGpu: return "virtual GPU";
    case vk::PhysicalDeviceType::eCpu: return "CPU";
    default: return "other";
  }
}

size_t select_device(const std::vector<DeviceReport>& reports, const std::string& selector) {
  if (reports.empty()) {
    throw DeviceError("no Vulkan device found; install Mesa's lavapipe (Debian package mesa-vulkan-drivers) for a CPU device");
  }
  auto unusable = [](const DeviceReport& r) {
    return DeviceError("device " + std::to_string(r.index) + " '" + r.name + "' cannot be used: it " + r.rejection);
  };
  if (!selector.empty() && std::all_of(selector.begin(), selector.end(), [](unsigned char c) { return std::isdigit(c); })) {
    size_t index = std::stoul(selector);
    if (index >= reports.size()) {
      throw DeviceError("VKATTN_DEVICE=" + selector + " but there are " + std::to_string(reports.size()) +
                        " devices (0.." + std::to_string(reports.size() - 1) + "); see `vkattn devices`");
    }
    if (!reports[index].suitable) throw unusable(reports[index]);
    return index;
  }
  std::vector<size_t> candidates;
  for (size_t i = 0; i < reports.size(); ++i) {
    if (selector.empty() || lower(reports[i].name).find(lower(selector)) != std::string::npos) candidates.push_back(i);
  }
  if (candidates.empty()) {
    std::string names;
    for (const auto& r : reports) names += (names.empty() ? "" : ", ") + std::to_string(r.index) + " '" + r.name + "'";
    throw DeviceError("VKATTN_DEVICE='" + selector + "' matches no device name; devices: " + names);
  }
  std::optional<size_t> best;
  for (size_t i : candidates) {
    // the most capable type; between equals lavapipe before SwiftShader, listed or not
    if (!reports[i].suitable) continue;
    if (!best || rank(reports[i].type) > rank(reports[*best].type) ||
        (rank(reports[i].type) == rank(reports[*best].type) && is_swiftshader(reports[*best]) &&
         !is_swiftshader(reports[i]))) {
      best = i;
    }
  }
  if (!best) throw unusable(reports[candidates.front()]);
  return *best;
}

ContextOptions ContextOptions::from_environment() {
  ContextOptions options;
  options.validation = env_flag("VKATTN_VALIDATION");
  if (std::getenv("VKATTN_SYNC_VALIDATION")) options.sync_validation = env_flag("VKATTN_SYNC_VALIDATION");
  if (const char* device = std::getenv("VKATTN_DEVICE")) options.device = device;
  if (const char* timeout = std::getenv("VKATTN_FENCE_TIMEOUT"); timeout && *timeout) {
    char* end = nullptr;
    const double seconds = std::strtod(timeout, &end);
    if (*end || !(seconds > 0)) throw ConfigError(std::string("VKATTN_FENCE_TIMEOUT=") + timeout + ": expected seconds > 0");
    options.fence_timeout_s = seconds;
  }
  return options;
}

Context::Context(const ContextOptions& options) : loader_((init_logging(), make_loader())) {
  fence_timeout_ns_ = options.fence_timeout_s >= 1.8e10 ? UINT64_MAX : static_cast<uint64_t>(options.fence_timeout_s * 1e9);
  if (options.validation) validation_ = std::make_unique<ValidationState>();
  InstanceSetup setup = instance_setup(loader_, options.validation);
  debug_utils_ = setup.debug_utils;

  vk::ApplicationInfo app("vkattn", 1, "vkattn", 1, kApiVersion);
  vk::InstanceCreateInfo info(setup.flags, &app, setup.layers, setup.extensions);
  // Chained so that messages about instance creation itself are caught too; with validation on,
  // synchronization validation checks every barrier the Recorder inserts (or leaves out).
  auto debug_info = messenger_info(validation_.get());
  const vk::ValidationFeatureEnableEXT enabled[] = {vk::ValidationFeatureEnableEXT::eSynchronizationValidation};
  vk::ValidationFeaturesEXT features(enabled, {});
  if (validation_) info.pNext = &debug_info;
  if (validation_ && options.sync_validation) {
    features.pNext = &debug_info;  // debug_info itself stays unchained: the messenger is made from it too
    info.pNext = &features;
  }
  instance_ = vk::raii::Instance(loader_, info);
  if (validation_) messenger_ = vk::raii::DebugUtilsMessengerEXT(instance_, debug_info);

  reports_ = describe_all(instance_);
  for (const auto& r : reports_) {
    spdlog::debug("device {} '{}' ({}): {}", r.index, r.name, device_type_name(r.type),
                  r.suitable ? "usable" : r.rejection);
  }
  chosen_ = select_device(reports_, options.device);
  const DeviceReport& chosen = reports_[chosen_];
  vk::raii::PhysicalDevices devices(instance_);
  const vk::raii::PhysicalDevice& physical = devices[chosen_];
  memory_ = physical.getMemoryProperties();

  std::vector<const char*> device_extensions;
  // A portability (non-conformant) implementation requires this extension to be enabled.
  if (has_extension(physical.enumerateDeviceExtensionProperties(), "VK_KHR_portability_subset")) {
    device_extensions.push_back("VK_KHR_portability_subset");
  }
  // Subgroup size control, where the device has it: kernels that count lanes pin them (lanes.h).
  vk::PhysicalDeviceSubgroupSizeControlFeatures size_control(chosen.size_control, chosen.size_control && chosen.full_subgroups);
  if (chosen.size_control && chosen.size_control_extension) device_extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  // float16 products on cooperative matrices, where the device has them (DeviceReport)
  vk::PhysicalDeviceShaderFloat16Int8Features float16(true, false);
  vk::PhysicalDeviceVulkanMemoryModelFeatures memory_model(true);
  vk::PhysicalDeviceCooperativeMatrixFeaturesNV nv_matrices(true);
#ifdef VK_KHR_cooperative_matrix
  vk::PhysicalDeviceCooperativeMatrixFeaturesKHR khr_matrices(true);
#endif
  const MatrixProducts& products = chosen.float16_products;
  if (products) device_extensions.push_back(products.extension);
  float priority = 1.0f;
  vk::DeviceQueueCreateInfo queue_info({}, chosen.compute_queue_family, 1, &priority);
  vk::DeviceCreateInfo device_info({}, queue_info, {}, device_extensions);
  void* chain = nullptr;  // the features to enable, each struct pointing at the one before
  if (chosen.size_control) size_control.pNext = std::exchange(chain, &size_control);
  if (products) {
    float16.pNext = std::exchange(chain, &float16);
    memory_model.pNext = std::exchange(chain, &memory_model);
    if (std::string_view(products.extension) == VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) {
      nv_matrices.pNext = std::exchange(chain, &nv_matrices);
    }
#ifdef VK_KHR_cooperative_matrix
    if (std::string_view(products.extension) == VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME) {
      khr_matrices.pNext = std::exchange(chain, &khr_matrices);
    }
#endif
  }
  device_info.pNext = chain;
  device_ = vk::raii::Device(physical, device_info);
  queue_ = vk::raii::Queue(device_, chosen.compute_queue_family, 0);
  kernels_ = std::make_unique<Kernels>(*this);
  spdlog::debug("using device {} '{}' ({}), validation {}", chosen.index, chosen.name, device_type_name(chosen.type),
                validation_ ? "on" : "off");
}

Context::~Context() = default;

uint64_t Context::validation_message_count() const { return validation_ ? validation_->count.load() : 0; }

std::string Context::last_validation_message() const {
  if (!validation_) return {};
  std::lock_guard lock(validation_->mutex);
  return validation_->last;
}

uint64_t Context::process_validation_message_count() { return process_validation().count.load(); }

std::string Context::process_last_validation_message() {
  std::lock_guard lock(process_validation().mutex);
  return process_validation().last;
}

uint32_t Context::memory_type(uint32_t type_bits, vk::MemoryPropertyFlags required,
                              vk::MemoryPropertyFlags preferred) const {
  std::optional<uint32_t> fallback;
  for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
    auto flags = memory_.memoryTypes[i].propertyFlags;
    if (!(type_bits & (1u << i)) || (flags & required) != required) continue;
    if ((flags & preferred) == preferred) return i;
    if (!fallback) fallback = i;
  }
  if (!fallback) throw DeviceError("device '" + device_report().name + "' has no memory type with the properties " + vk::to_string(required));
  return *fallback;
}

void Context::on_allocate(uint64_t bytes, bool staging) const {
  buffers_created_++;
  if (staging) staging_buffers_created_++;
  if (!staging) device_bytes_created_ += bytes;
  uint64_t now = allocated_ += bytes;
  uint64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void Context::on_free(uint64_t bytes) const { allocated_ -= bytes; }

void Context::submit(const vk::SubmitInfo& info, vk::Fence fence) const {
  std::lock_guard lock(queue_mutex_);
  queue_.submit(info, fence);
}

void Context::mark_lost(const std::string& why) const {
  std::lock_guard lock(lost_mutex_);
  if (lost_) return;  // the first reason is the one to tell
  lost_why_ = why;
  lost_ = true;
}

void Context::check_usable() const {
  if (!lost_) return;
  std::lock_guard lock(lost_mutex_);
  throw DeviceError("the device was lost earlier (" + lost_why_ + "): it can do no more work; make a new one (a new "
                    "VulkanBackend on a new Context; in Python, a new module or device)");
}

std::vector<DeviceReport> list_devices() {
  vk::raii::Context loader = make_loader();
  InstanceSetup setup = instance_setup(loader, false);
  vk::ApplicationInfo app("vkattn", 1, "vkattn", 1, kApiVersion);
  vk::raii::Instance instance(loader, vk::InstanceCreateInfo(setup.flags, &app, {}, setup.extensions));
  return describe_all(instance);
}

}  // namespace vkattn::vulkan
