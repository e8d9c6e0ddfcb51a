#pragma once
// Context: the Vulkan instance, the chosen physical device, its logical device and compute queue.
//
// Device choice: every physical device is listed with what it offers and, when the engine cannot
// use it, why (DeviceReport::rejection). The best usable one wins: discrete > integrated >
// virtual > CPU (Mesa's lavapipe is a CPU device, and a valid one). VKATTN_DEVICE picks one by
// index or by a case-insensitive substring of its name. VKATTN_VALIDATION=1 turns on
// VK_LAYER_KHRONOS_validation with its messages routed through spdlog and counted.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <vulkan/vulkan_raii.hpp>

#include "engine/vulkan/quirks.h"

namespace vkattn::vulkan {

// A cooperative-matrix configuration of float16 A (m × k) and B (k × n) into float32 C (m × n), a
// subgroup's, in compute shaders, with shaderFloat16 and the Vulkan memory model, on a subgroup size
// the pipeline can require (size control with full subgroups). Khronos's extension
// (VK_KHR_cooperative_matrix: any vendor's, any size the device lists, where this build holds
// the _coopmat_khr shaders) before NVIDIA's (VK_NV_cooperative_matrix: 16 × 16 × 16 on 32 lanes).
struct MatrixProducts {
  const char* extension = nullptr;  // its extension's name; null where the device has none
  uint32_t m = 0, n = 0, k = 0;
  uint32_t lanes = 0;  // the subgroup size the pipeline requires
  explicit operator bool() const { return extension != nullptr; }

  // gemm.glsl's COOPMAT tiling: kSubgroupsM × kSubgroupsN subgroups, each kTilesM × kTilesN
  // accumulators, K walked kDepth at a time through two shared tiles of each input in float16, each
  // row kPad longer than its data (B's rows are block_n() long where it is stored (K, N)); the
  // accumulators leave through the A tiles: 40 KiB at 16 × 16
  static constexpr uint32_t kSubgroupsM = 2, kSubgroupsN = 4, kTilesM = 4, kTilesN = 2, kDepth = 32, kPad = 8;
  uint32_t block_m() const { return kSubgroupsM * m * kTilesM; }
  uint32_t block_n() const { return kSubgroupsN * n * kTilesN; }
  uint32_t invocations() const { return kSubgroupsM * kSubgroupsN * lanes; }
  uint32_t shared_bytes() const {
    const uint32_t b_tile = std::max(block_n() * (kDepth + kPad), kDepth * (block_n() + kPad));
    return 2 * (block_m() * (kDepth + kPad) + b_tile) * 2;
  }
  // The tiling takes these sizes: the tiles are read as uvec4s of eight float16 (m, n and k
  // multiples of 8), K divides kDepth, and every subgroup's m × n float32 fit the A tiles
  bool shapes_fit() const {
    const bool whole = m % 8 == 0 && n % 8 == 0 && k % 8 == 0 && kDepth % k == 0;
    return whole && kSubgroupsM * kSubgroupsN * m * n * 4 <= 2 * block_m() * (kDepth + kPad) * 2;
  }

  // flash_attention_coopmat (flash_attention.comp): a workgroup of rows / m subgroups, m query rows
  // each, over tiles of flash_keys() keys; d padded to the matrices' n and k.
  uint32_t flash_keys() const { return 2 * std::max(n, k); }
  uint32_t flash_padded(uint32_t d) const { return (d + std::max(n, k) - 1) / std::max(n, k) * std::max(n, k); }
  // Its shared memory for `rows` query rows at head dim d: the K and V tiles (q's rows first, at
  // most twice the keys), the scores, their float16 weights and the rows' outputs, each row padded
  uint64_t flash_shared_bytes(uint32_t rows, uint32_t d) const {
    const uint64_t dp = flash_padded(d), keys = flash_keys();
    return 2 * keys * (dp + kPad) * 2 + rows * (keys + 8) * 4 + rows * (keys + kPad) * 2 + rows * (dp + 8) * 4;
  }
  // The most rows (4, 2 or 1 subgroups', at most twice the keys) whose block fits `shared_memory`
  // bytes at head dim d; 0 where none does, or a row's lanes would not split its keys and d's
  // padding in quads (lanes a row: lanes / m where there are more lanes than rows)
  uint32_t flash_rows(uint32_t d, uint32_t shared_memory) const {
    const uint32_t lanes_a_row = lanes > m ? lanes / m : 1;
    if (!*this || (lanes % m != 0 && m % lanes != 0) || flash_keys() % (4 * lanes_a_row) != 0 ||
        std::max(n, k) % (4 * lanes_a_row) != 0) {
      return 0;
    }
    for (uint32_t subgroups : {4u, 2u, 1u}) {  // q's rows are staged in the K and V tiles
      const uint32_t rows = subgroups * m;
      if (rows <= 2 * flash_keys() && flash_shared_bytes(rows, d) <= shared_memory) return rows;
    }
    return 0;
  }
};

struct DeviceReport {
  uint32_t index = 0;  // position in vkEnumeratePhysicalDevices
  std::string name;
  vk::PhysicalDeviceType type = vk::PhysicalDeviceType::eOther;
  uint32_t api_version = 0;
  uint32_t vendor_id = 0;
  bool suitable = false;
  std::string rejection;  // why the engine cannot use it; empty when suitable
  uint32_t compute_queue_family = 0;

  // limits that shape kernels and dispatches
  std::array<uint32_t, 3> max_workgroup_count{};
  uint32_t max_workgroup_size_x = 0;
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_shared_memory_bytes = 0;
  uint32_t max_storage_buffer_range = 0;
  uint32_t max_push_constants_bytes = 0;
  uint64_t device_local_bytes = 0;  // the largest device-local heap

  // the driver, where the device says (Vulkan 1.2 or VK_KHR_driver_properties): driver_id 0 and
  // empty names where it does not; driver_version in the driver's own encoding
  vk::DriverId driver_id{};
  std::string driver_name;  // "llvmpipe"
  std::string driver_info;  // "Mesa 22.3.6 (LLVM 15.0.6)"
  uint32_t driver_version = 0;
  std::string uuid;  // deviceUUID as 32 hex digits: which device, across processes (plan_cache.h)

  // optional features: queried, used only where present
  uint32_t subgroup_size = 0;        // what the device reports; no kernel may count on it alone
  bool subgroup_arithmetic = false;  // in compute shaders
  bool subgroup_shuffle = false;     // in compute shaders
  // Subgroup size control (Vulkan 1.3 or VK_EXT_subgroup_size_control): a compute pipeline may
  // require a subgroup size in min..max, and with full_subgroups require every lane active. Only
  // then does a kernel know how many lanes it has (lanes.h).
  uint32_t min_subgroup_size = 0;
  uint32_t max_subgroup_size = 0;
  uint32_t max_workgroup_subgroups = 0;  // maxComputeWorkgroupSubgroups
  bool size_control = false;             // subgroupSizeControl, and compute may require a size
  bool full_subgroups = false;           // computeFullSubgroups
  bool size_control_extension = false;   // enabled as VK_EXT_subgroup_size_control (Vulkan < 1.3)
  bool storage_buffer_16bit = false;
  // float16 products on cooperative matrices: the GEMMs' float16_products (gemm.glsl's COOPMAT
  // tiling) run only where this is set (MatrixProducts).
  MatrixProducts float16_products;
  // RGBA32F uniform texel buffers (texelFetch), up to this many texels in one: the GEMM's inputs
  // on CPU devices, where a texel fetch costs less than a storage-buffer load
  bool texel_rgba32f = false;
  bool texel_rg32ui = false;  // RG32UI uniform texel buffers: 16-bit weights read as texels
  uint32_t max_texel_buffer_elements = 0;
  bool timestamps = false;  // on the compute queue
  float timestamp_period_ns = 0.0f;

  // What vkattn switches on this device: the driver quirks table, then the environment
  // (quirks.h). Filled for every device, usable or not.
  Switches switches;
};

// "llvmpipe, Mesa 22.3.6 (LLVM 15.0.6), driverVersion 0x00000001" ("unknown driver, …" without
// driver properties)
std::string driver_string(const DeviceReport& device);

// "1.3.230"
std::string version_string(uint32_t api_version);

// "discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other"
const char* device_type_name(vk::PhysicalDeviceType type);

// The index into `reports` of the device `selector` names (an index or a name substring), or of
// the best suitable device when `selector` is empty. Throws DeviceError saying why none fits.
size_t select_device(const std::vector<DeviceReport>& reports, const std::string& selector);

struct ContextOptions {
  bool validation = false;       // VK_LAYER_KHRONOS_validation; an error if it is not installed
  bool sync_validation = true;  // with validation: its synchronization validation too
  std::string device;           // index or name substring; empty picks the best device
  // How long the host waits for a submission before it treats the device as lost: generous,
  // since lavapipe runs a long fused pass as one dispatch for minutes (L = 70,000: over 2).
  double fence_timeout_s = 600;
  // VKATTN_VALIDATION (1/true/on), VKATTN_SYNC_VALIDATION (0/false/off turns it off),
  // VKATTN_DEVICE and VKATTN_FENCE_TIMEOUT (seconds).
  static ContextOptions from_environment();
};

class Kernels;  // kernel.h

class Context {
 public:
  explicit Context(const ContextOptions& options = ContextOptions::from_environment());
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceReport& device_report() const { return reports_[chosen_]; }
  const std::vector<DeviceReport>& all_devices() const { return reports_; }
  bool validation_enabled() const { return validation_ != nullptr; }
  bool debug_labels() const { return debug_utils_; }
  // Validation warnings and errors seen so far, and the last one's text.
  uint64_t validation_message_count() const;
  std::string last_validation_message() const;
  // The same for every context the process has made (the tests' main fails a test during which
  // any of them counted one: tests/support/main.cpp).
  static uint64_t process_validation_message_count();
  static std::string process_last_validation_message();

  const vk::raii::Device& device() const { return device_; }
  const vk::raii::Queue& queue() const { return queue_; }
  // Submits to the queue: Vulkan wants vkQueueSubmit on one queue from one thread at a time, and
  // backends on several threads share this context's queue. vk::SystemError when it fails.
  void submit(const vk::SubmitInfo& info, vk::Fence fence) const;
  uint32_t queue_family() const { return device_report().compute_queue_family; }
  // The compute pipelines made on this device, shared by every backend on it (kernel.h).
  Kernels& kernels() const { return *kernels_; }
  // A memory type index with all `required` flags, preferring one that also has `preferred`.
  uint32_t memory_type(uint32_t type_bits, vk::MemoryPropertyFlags required, vk::MemoryPropertyFlags preferred) const;

  // A lost device (VK_ERROR_DEVICE_LOST, or a fence that did not signal within
  // fence_timeout_s) does no more work: every later use throws check_usable()'s DeviceError.
  void mark_lost(const std::string& why) const;
  bool lost() const { return lost_.load(); }
  // DeviceError "the device was lost earlier (WHY): …make a new one" when lost.
  void check_usable() const;
  uint64_t fence_timeout_ns() const { return fence_timeout_ns_; }
  // Device memory accounting (bytes in live Buffers, Buffers ever made), for benchmarks and tests.
  void on_allocate(uint64_t bytes, bool staging) const;
  void on_free(uint64_t bytes) const;
  uint64_t buffers_created() const { return buffers_created_; }
  uint64_t staging_buffers_created() const { return staging_buffers_created_; }
  uint64_t device_bytes_created() const { return device_bytes_created_; }  // of the non-staging Buffers made
  uint64_t allocated_bytes() const { return allocated_; }
  uint64_t peak_allocated_bytes() const { return peak_; }
  // Starts a new peak measurement from what is allocated now.
  void reset_peak() const { peak_ = allocated_.load(); }

  struct ValidationState;

 private:
  // Declared in creation order: destroyed in reverse.
  vk::raii::Context loader_;
  std::unique_ptr<ValidationState> validation_;  // outlives the messenger that writes to it
  vk::raii::Instance instance_ = nullptr;
  vk::raii::DebugUtilsMessengerEXT messenger_ = nullptr;
  std::vector<DeviceReport> reports_;
  size_t chosen_ = 0;
  vk::PhysicalDeviceMemoryProperties memory_{};
  vk::raii::Device device_ = nullptr;
  vk::raii::Queue queue_ = nullptr;
  std::unique_ptr<Kernels> kernels_;  // made after the device, gone before it
  bool debug_utils_ = false;
  mutable std::atomic<uint64_t> buffers_created_{0};
  mutable std::atomic<uint64_t> staging_buffers_created_{0};
  mutable std::atomic<uint64_t> device_bytes_created_{0};
  mutable std::atomic<uint64_t> allocated_{0};
  mutable std::atomic<uint64_t> peak_{0};
  uint64_t fence_timeout_ns_ = 0;
  mutable std::mutex queue_mutex_;
  mutable std::atomic<bool> lost_{false};
  mutable std::mutex lost_mutex_;
  mutable std::string lost_why_;
};

// Every physical device on the machine, with a fresh instance (for `vkattn devices`).
std::vector<DeviceReport> list_devices();

}  // namespace vkattn::vulkan
