#include "vkattn/backends/vulkan_backend.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>

#include <glm/gtc/packing.hpp>
#include <spdlog/spdlog.h>

#include "engine/backends/tuner.h"
#include "engine/backends/vulkan_backend_state.h"
#include "engine/vulkan/buffer.h"
#include "engine/vulkan/buffer_pool.h"
#include "engine/vulkan/context.h"
#include "engine/vulkan/gemm_plan.h"
#include "engine/vulkan/grid.h"
#include "engine/vulkan/kernel.h"
#include "engine/vulkan/ops.h"
#include "engine/vulkan/plan_cache.h"
#include "engine/vulkan/push_constants.h"
#include "engine/vulkan/recorder.h"
#include "engine/vulkan/step_plans.h"
#include "vkattn/errors.h"

namespace vkattn {
namespace {

using vulkan::Buffer;
using vulkan::ceil_div;

// A tensor's buffer, back to the pool when the last Value holding it is gone (recorded commands
// that use it keep their own reference: see buffer_pool.h).
struct DeviceStorage final : Storage {
  std::shared_ptr<Buffer> buffer;
  std::weak_ptr<vulkan::BufferPool> pool;
  Narrow narrow = Narrow::none;  // 16-bit elements, two to a 32-bit word (BackendHooks::store)
  ~DeviceStorage() override {
    if (auto p = pool.lock()) p->release(std::move(buffer));
  }
};

const std::shared_ptr<Buffer>& buffer_of(const Storage& s) { return static_cast<const DeviceStorage&>(s).buffer; }
Narrow narrow_of(const Storage& s) { return static_cast<const DeviceStorage&>(s).narrow; }
// The shaders' constant for how a weight is stored (sixteen_bit.glsl): 0 float32, 1
// float16, 2 bfloat16.
uint32_t storage_format(Narrow narrow) { return static_cast<uint32_t>(narrow); }

// gemm.glsl's VEC4: every row of A and B starts on a multiple of 4 floats, and A's heads too where
// A is read from (B, H, T, d)
bool rows_of_quads(int64_t K, int64_t N, bool b_k_by_n, int64_t a_heads) {
  return K % 4 == 0 && (!b_k_by_n || N % 4 == 0) && (a_heads == 0 || K / a_heads % 4 == 0);
}
// gemm.glsl's C_HEADS and gemv.glsl's A_HEADS, for a (…, width) matrix kept as `heads` heads: 0
// for the plain layout (no heads), 4 where it lies (B, H, T, d) with d a multiple of 4 (whole
// quads), else 1
uint32_t heads_constant(int64_t heads, int64_t width) {
  if (heads == 0) return 0u;
  return width / heads % 4 == 0 ? 4u : 1u;
}
static_assert(uint32_t(Narrow::float16) == 1 && uint32_t(Narrow::bfloat16) == 2);

// `values`, every one a `narrow` number, as 16-bit words two to a uint32, the first in the low half
std::vector<uint32_t> pack_16bit(const std::vector<float>& values, Narrow narrow) {
  std::vector<uint32_t> words(static_cast<size_t>(stored_words(int64_t(values.size()), narrow)), 0u);
  for (size_t i = 0; i < values.size(); ++i) {
    // bfloat16: a float's top half
    const uint32_t half = narrow == Narrow::float16 ? glm::packHalf1x16(values[i]) : std::bit_cast<uint32_t>(values[i]) >> 16;
    words[i / 2] |= half << (16 * (i % 2));
  }
  return words;
}

// pack_16bit's inverse: `count` floats
std::vector<float> unpack_16bit(const std::vector<uint32_t>& words, Narrow narrow, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t half = (words[i / 2] >> (16 * (i % 2))) & 0xffffu;
    values[i] = narrow == Narrow::float16 ? glm::unpackHalf1x16(uint16_t(half)) : std::bit_cast<float>(half << 16);
  }
  return values;
}

glm::uint u32(int64_t v) { return static_cast<glm::uint>(v); }

// attention_mask: the scores of a row each invocation masks (its specialization constant RUN)
constexpr uint32_t kMaskRun = 8;

}  // namespace

VulkanBackend::VulkanBackend() : VulkanBackend(std::make_shared<vulkan::Context>()) {}

VulkanBackend::VulkanBackend(std::shared_ptr<vulkan::Context> context, Options options)
    : s_(std::make_unique<State>(std::move(context), options)) {
  if (s_->options.workgroup_size == 0 || s_->options.workgroup_size > s_->device.max_workgroup_size_x ||
      s_->options.workgroup_size > s_->device.max_workgroup_invocations) {
    throw DeviceError("workgroup size " + std::to_string(s_->options.workgroup_size) + " is outside 1.." +
                      std::to_string(s_->device.max_workgroup_size_x) + " for device '" + s_->device.name + "'");
  }
  if (s_->options.float16_products && !s_->device.float16_products) {
    throw DeviceError("float16_products: '" + s_->device.name +
                      "' has no float16 cooperative matrices (VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix "
                      "with float16 products into float32, shaderFloat16, the Vulkan memory model and subgroup "
                      "size control)");
  }
  s_->gemm = options.gemm ? *options.gemm : vulkan::plan_gemm(s_->device);
  vulkan::check_gemm_plan(s_->gemm, s_->device);
  s_->gemv_rows = options.gemv_rows.value_or(options.gemm ? 0 : vulkan::gemv_rule(s_->device));
  vulkan::check_gemv_rows(s_->gemv_rows, s_->device);
  s_->decoding_lanes =
      vulkan::guaranteed_lanes(s_->device, vulkan::SubgroupOps::shuffle, 0, vulkan::kDecodingLanesWorkgroup);
  if (options.flash_decoding_subgroups.value_or(false) && !s_->decoding_lanes) {
    throw DeviceError("flash_decoding_subgroups: '" + s_->device.name +
                      "' guarantees no lanes: " + s_->decoding_lanes.why);
  }
  s_->rows = options.rows ? *options.rows : vulkan::plan_rows(s_->device, s_->options.workgroup_size);
  vulkan::check_row_plan(s_->rows, s_->device, s_->options.workgroup_size);
  s_->flash = options.flash ? *options.flash : vulkan::plan_flash(s_->device, s_->options.workgroup_size, s_->options.flash_rows);
  vulkan::check_flash_plan(s_->flash, s_->device);
  s_->fallback_flash = vulkan::plan_flash(s_->device, s_->options.workgroup_size);
  if (options.tune.value_or(tuning::tune_from_environment())) {
    s_->cache = vulkan::plan_cache(s_->device, options.plan_cache_directory);
    // other switches, other candidates: their plans are kept apart
    if (!s_->device.switches.subgroups) s_->class_suffix += " [subgroups off]";
    if (!s_->device.switches.texel_inputs) s_->class_suffix += " [texel inputs off]";
    if (s_->options.workgroup_size != VulkanBackendOptions{}.workgroup_size) {
      s_->class_suffix += " [workgroup " + std::to_string(s_->options.workgroup_size) + "]";
    }
  }
}

std::string VulkanBackend::device_name() const { return s_->device.name; }
const vulkan::Context& VulkanBackend::context() const { return *s_->context; }
const vulkan::Recorder& VulkanBackend::recorder() const { return s_->recorder; }
const vulkan::GemmPlan& VulkanBackend::gemm_plan() const { return s_->gemm; }
const vulkan::RowPlan& VulkanBackend::row_plan() const { return s_->rows; }
const vulkan::FlashPlan& VulkanBackend::flash_plan() const { return s_->flash; }

uint64_t VulkanBackend::peak_allocated_bytes() const { return s_->context->peak_allocated_bytes(); }
void VulkanBackend::reset_peak() const { s_->context->reset_peak(); }

void VulkanBackend::on_begin_pass(bool timed) {
  s_->recorder.time_dispatches(timed);
  s_->buffers->trim();
  s_->recorder.trim();
}

void VulkanBackend::on_failed_pass() noexcept {
  s_->recorder.abandon();
  s_->buffers->drop_taken();  // the buffers the failed pass took, back to the device
  s_->recorder.trim();
}

void VulkanBackend::synchronize() { s_->recorder.flush(); }

DevicePeak VulkanBackend::measure_peak() {
  vulkan::Recorder& recorder = s_->recorder;
  recorder.flush();
  // the seconds the dispatches `record` makes take: from the first's start to the last's end by
  // the device's timestamps, else around their submission by the host's clock
  auto seconds = [&](const std::function<void()>& record) {
    recorder.time_dispatches(true);
    const auto start = std::chrono::steady_clock::now();
    record();
    const auto times = recorder.dispatch_times();
    recorder.flush();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    recorder.time_dispatches(false);
    return times && !times->empty() ? (times->back().second - times->front().first) / 1e6 : wall;
  };
  // The fastest of three runs; on a GPU, of as many as fill a quarter of a second: one idle a
  // moment before (while the host checked a benchmark's results) runs at a fraction of its clock
  // for the first tenths of a second. (On an H200, bench_gemm's peak, measured after its checks,
  // came out a fifth of the fp32 rate, and below its own GEMM's.)
  const double warm_s = s_->device.type == vk::PhysicalDeviceType::eCpu ? 0.0 : 0.25;
  auto fastest = [&](const std::function<void()>& record) {
    double best = seconds(record), spent = best;
    for (int runs = 1; runs < 3 || (spent < warm_s && runs < 200); ++runs) {
      const double s = seconds(record);
      best = std::min(best, s);
      spent += s;
    }
    return best;
  };
  DevicePeak peak;

  // multiply-adds: invocations doubled from 4096 until a run takes 10 ms (at most 2^22 of them),
  // each count's time the faster of two runs after an untimed one: a first run may carry a
  // one-time cost. (bench_gemm on an H200 measured 12.85 TFLOP/s twice, to four digits — about
  // what 4096 invocations give it, 64 workgroups for its 132 multiprocessors — as if the doubling
  // had stopped at its first run; vkattn bench, with the device busy before, about 48.)
  constexpr uint32_t kIterations = 4096, kMost = 1u << 22;
  constexpr float kMultiplier = 1.0f - 1.0f / 4096, kAddend = 1.0f / 4096;
  const vulkan::Kernel& fma = kernel(vulkan::Op::peak_flops, {}, 64);
  uint32_t count = 4096;
  std::shared_ptr<Storage> sums = allocate("peak_flops", kMost);
  auto run_fma = [&] {
    dispatch("peak_flops", fma, {buffer_of(*sums)}, vulkan::PeakFlopsParams{count, kIterations, kMultiplier, kAddend},
             count);
  };
  seconds(run_fma);
  while (count < kMost && std::min(seconds(run_fma), seconds(run_fma)) < 0.01) count *= 2;
  peak.flops = 64.0 * kIterations * count / fastest(run_fma);
  // every chain went x -> x·m + a, 4096 times: 1 + (x - 1)·m^4096, summed over 32 lanes from x = k/1024
  const double expected = 32 + (496.0 / 1024 - 32) * std::pow(double(kMultiplier), kIterations);
  for (float sum : load(*sums, count)) {
    if (!(std::abs(sum - expected) <= 2e-5 * expected)) {  // one multiply-add fewer: 1.4e-4
      throw DeviceError("peak_flops: an invocation summed " + std::to_string(sum) + " where " +
                        std::to_string(expected) + " is right: the device did not run it as written");
    }
  }
  sums.reset();

  // bandwidth: a copy of 16 Mi floats (64 MiB, past the largest GPU caches), twice a run
  constexpr uint32_t kPer = 16;  // vec4s an invocation copies
  const int64_t n = std::min<int64_t>(int64_t(1) << 24, memory_limits()->max_tensor_bytes / sizeof(float)) /
                    (4 * kPer) * (4 * kPer);
  std::shared_ptr<Storage> x = store("peak_bytes.x", Tensor({n}), Narrow::none), y = allocate("peak_bytes.y", n);
  const vulkan::Kernel& copy = kernel(vulkan::Op::peak_bytes);
  auto run_copy = [&] {
    for (int i = 0; i < 2; ++i) {
      dispatch("peak_bytes", copy, {buffer_of(*x), buffer_of(*y)}, vulkan::PeakBytesParams{u32(n / 4 / kPer), kPer},
               uint64_t(n / 4 / kPer));
    }
  };
  peak.bytes = 2 * 8.0 * double(n) / fastest(run_copy);
  x.reset(), y.reset();
  empty_cache();
  peak.how = std::string(s_->device.timestamps ? "by the device's clock" : "by the host's clock") +
             " (peak_flops.comp, " + std::to_string(count) + " invocations; peak_bytes.comp, " +
             std::to_string(n * 4 >> 20) + " MiB)";
  return peak;
}

void VulkanBackend::empty_cache() {
  s_->recorder.flush();  // buffers released mid-pass may still be read by recorded commands
  s_->buffers->clear();
  s_->recorder.clear();
}

struct VulkanBackend::GemmLaunch {
  vulkan::GemmPlan plan;
  bool vec4 = false;    // every row of A and B starts on a multiple of 4 floats
  bool texels = false;  // A and B read as texels
  uint64_t packed_texels = 0;  // B packed first (shaders/gemm_pack.comp) into this many texels, or 0
};

std::optional<MemoryLimits> VulkanBackend::memory_limits() const {
  const auto& device = s_->context->device_report();
  MemoryLimits limits{.device = device.name,
                      .max_tensor_bytes = device.max_storage_buffer_range,
                      .max_tensor_limit = "maxStorageBufferRange",
                      .max_total_bytes = device.device_local_bytes,
                      .max_total_limit = "the largest device-local memory heap",
                      .reuse_from_bytes = s_->options.reuse_in_flight_bytes};
  // B packed by a GEMM step, as run_gemm decides it (which may measure the step's plan now, as the
  // pass's first GEMM of the class would: hence the cast)
  auto* self = const_cast<VulkanBackend*>(this);
  limits.gemm_scratch_floats = [self](const std::string& product, int64_t batch, int64_t group, int64_t M, int64_t N,
                                      int64_t K, int64_t a_heads, Narrow b_format) {
    return int64_t(self->gemm_launch(product, batch, M, N, K, false, group, a_heads, b_format).packed_texels) * 4;
  };
  if (s_->options.buffer_limit_bytes > 0 && s_->options.buffer_limit_bytes < limits.max_tensor_bytes) {
    limits.max_tensor_bytes = s_->options.buffer_limit_bytes;
    limits.max_tensor_limit = "the buffer limit set for this backend";
  }
  if (s_->options.memory_limit_bytes > 0 && s_->options.memory_limit_bytes < limits.max_total_bytes) {
    limits.max_total_bytes = s_->options.memory_limit_bytes;
    limits.max_total_limit = "the memory limit set for this backend";
  }
  return limits;
}

std::shared_ptr<Storage> VulkanBackend::allocate(const std::string& name, int64_t count) {
  // Shaders bind whole buffers: the range limit applies to every tensor. preflight() checks a
  // module's pass as a whole before this; a step run on its own is checked here.
  check_tensor_fits(*memory_limits(), name, count);
  auto storage = std::make_shared<DeviceStorage>();
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(float);
  storage->buffer = s_->buffers->acquire(bytes, Buffer::Kind::device, [this, bytes](const Buffer& b) {
    return bytes < s_->options.reuse_in_flight_bytes && s_->recorder.pending(b);
  });
  storage->pool = s_->buffers;
  return storage;
}

std::shared_ptr<Storage> VulkanBackend::store(const std::string& name, const Tensor& tensor, Narrow as) {
  auto storage = allocate(name, stored_words(tensor.size(), as));
  if (as == Narrow::none) {
    s_->recorder.upload(buffer_of(*storage), tensor.data.data(), tensor.data.size() * sizeof(float));
  } else {
    static_cast<DeviceStorage&>(*storage).narrow = as;
    const std::vector<uint32_t> words = pack_16bit(tensor.data, as);
    s_->recorder.upload(buffer_of(*storage), words.data(), words.size() * sizeof(uint32_t));
  }
  return storage;
}

std::vector<float> VulkanBackend::load(const Storage& storage, int64_t count) {
  const Narrow narrow = narrow_of(storage);
  if (narrow != Narrow::none) {
    std::vector<uint32_t> words(static_cast<size_t>(stored_words(count, narrow)));
    s_->recorder.download(buffer_of(storage), words.data(), words.size() * sizeof(uint32_t));
    return unpack_16bit(words, narrow, count);
  }
  std::vector<float> data(static_cast<size_t>(count));
  s_->recorder.download(buffer_of(storage), data.data(), data.size() * sizeof(float));
  return data;
}

const vulkan::Kernel& VulkanBackend::kernel(vulkan::Op op, std::vector<uint32_t> specialization,
                                            uint32_t workgroup_size, uint32_t texel_bindings, uint32_t lanes,
                                            const std::string& build, uint32_t word_bindings) {
  if (workgroup_size == 0) workgroup_size = s_->options.workgroup_size;
  const vulkan::OpInfo& info = vulkan::op_info(op);
  return s_->context->kernels().get(build.empty() ? std::string(info.name) : build, info.bindings, info.push_bytes,
                                    workgroup_size, specialization, texel_bindings, lanes, word_bindings);
}

template <class Params>
void VulkanBackend::dispatch(const std::string& step, const vulkan::Kernel& kernel,
                             std::vector<std::shared_ptr<Buffer>> buffers, const Params& params, uint64_t invocations,
                             bool per_group, bool continuation, size_t outputs) {
  uint64_t groups = per_group ? invocations : ceil_div(invocations, kernel.workgroup_size());
  if (invocations >= (uint64_t(1) << 32)) {
    throw DeviceError(step + ": " + std::to_string(invocations) + " elements exceed the 32-bit indexing of the shaders");
  }
  s_->recorder.dispatch(kernel, buffers, std::as_bytes(std::span(&params, 1)), groups, step, continuation, outputs);
}

VulkanBackend::GemmLaunch VulkanBackend::gemm_launch(const std::string& name, int64_t batch, int64_t M, int64_t N,
                                                     int64_t K, bool b_k_by_n, int64_t group, int64_t a_heads,
                                                     Narrow b_format) {
  GemmLaunch launch;
  launch.plan = gemm_plan_for(name, batch, M, N, K, b_format).fitted(uint64_t(N));
  const bool b_16bit = b_format != Narrow::none;
  launch.vec4 = rows_of_quads(K, N, b_k_by_n, a_heads);
  // texel inputs: whole texels (vec4), each input within the device's texel count; a 16-bit B
  // as RG32UI texels (four elements a texel too), where the device reads those
  const uint64_t max_texels = s_->device.max_texel_buffer_elements;
  launch.texels = launch.plan.texel_inputs && launch.vec4 && (!b_16bit || s_->device.texel_rg32ui) &&
                  uint64_t(batch) * M * K / 4 <= max_texels && uint64_t(batch / group) * N * K / 4 <= max_texels;
  // B (batch / group, N, K) as the lanes read it: N rounded up to a subgroup's columns
  const uint64_t block_cols = uint64_t(launch.plan.lanes) * launch.plan.tile_n;
  const uint64_t packed = uint64_t(batch / group) * ceil_div(uint64_t(N), block_cols) * block_cols * K / 4;
  if (!b_k_by_n && !b_16bit && launch.plan.packed_b && launch.texels && packed <= max_texels) {
    launch.packed_texels = packed;
  }
  launch.plan.packed_b = launch.packed_texels > 0;  // what runs
  return launch;
}

void VulkanBackend::run_gemm(const std::string& step, const std::string& name, const Storage& a, const Storage& b,
                             const Storage* bias, Storage& c, int64_t batch, int64_t M, int64_t N, int64_t K,
                             float scale, bool b_k_by_n, int64_t group, HeadsLayout a_layout, HeadsLayout c_layout,
                             StoreFold fold) {
  if (a_layout.heads > 0 && c_layout.heads > 0) throw std::logic_error(step + ": one folded layout at a time");
  if (fold.residual && (name != "linear" || c_layout.heads > 0)) {
    throw std::logic_error(step + ": a residual folds into linear's plain store only");
  }
  if (s_->options.float16_products) {
    run_gemm_float16(step, name, a, b, bias, c, batch, M, N, K, scale, b_k_by_n, group, a_layout, c_layout, fold);
    return;
  }
  const Narrow b_narrow = narrow_of(b);
  const GemmLaunch launch = gemm_launch(name, batch, M, N, K, b_k_by_n, group, a_layout.heads, b_narrow);
  const vulkan::GemmPlan& plan = launch.plan;
  std::vector<uint32_t> specialization = plan.specialization(launch.vec4, bias != nullptr);
  specialization.push_back(heads_constant(c_layout.heads, N));           // C_HEADS
  specialization.push_back(a_layout.heads > 0 ? 1u : 0u);                // A_HEADS
  specialization.push_back(launch.packed_texels > 0 ? 1u : 0u);          // PACKED_B
  specialization.push_back(plan.depth);                                   // DEPTH
  specialization.push_back(storage_format(b_narrow));                     // B_FORMAT
  specialization.push_back(static_cast<uint32_t>(fold.activation));       // ACTIVATION
  specialization.push_back(fold.residual ? 1u : 0u);                      // RESIDUAL
  std::shared_ptr<Storage> packed;  // given back to the pool when this step is recorded
  if (launch.packed_texels > 0) {
    packed = allocate(step + " (B packed)", int64_t(launch.packed_texels) * 4);
    // a workgroup a block's four k: the subgroup's columns, lanes · tile_n (≤ 16 · 16)
    const auto& pack = kernel(vulkan::Op::gemm_pack, {}, plan.lanes * plan.tile_n, 0b1u);
    dispatch(step, pack, {buffer_of(b), buffer_of(*packed)},
             vulkan::GemmPackParams{u32(launch.packed_texels), u32(N), u32(K / 4)}, launch.packed_texels);
  }
  const bool b_words = launch.texels && b_narrow != Narrow::none;  // B as RG32UI texels
  const auto& k = kernel(vulkan::op_named(name), specialization, plan.workgroup_size, launch.texels ? 0b11u : 0u,
                         plan.required_lanes(), plan.shader(name, launch.texels, b_words), b_words ? 0b10u : 0u);
  const HeadsLayout& heads = a_layout.heads > 0 ? a_layout : c_layout;
  vulkan::GemmParams params{u32(batch), u32(M), u32(N), u32(K), scale, u32(group), u32(heads.heads), u32(heads.tokens)};
  const uint64_t groups = plan.groups(uint64_t(batch), uint64_t(M), uint64_t(N));
  if (name == "linear") {  // its fifth binding, the residual
    dispatch(step, k, linear_buffers(a, packed ? *packed : b, bias, fold, c), params, groups, true, packed != nullptr);
    return;
  }
  dispatch(step, k,
           {buffer_of(a), buffer_of(packed ? *packed : b), bias ? buffer_of(*bias) : s_->recorder.placeholder(),
            buffer_of(c)},
           params, groups, true, /*continuation=*/packed != nullptr);
}

std::vector<std::shared_ptr<vulkan::Buffer>> VulkanBackend::linear_buffers(const Storage& x, const Storage& w,
                                                                           const Storage* b, const StoreFold& fold,
                                                                           const Storage& y) const {
  const auto& none = s_->recorder.placeholder();
  return {buffer_of(x), buffer_of(w), b ? buffer_of(*b) : none, fold.residual ? buffer_of(*fold.residual) : none,
          buffer_of(y)};
}

void VulkanBackend::run_linear(const std::string& step, const Storage& x, const Storage& w, const Storage* b,
                               Storage& y, int64_t N, int64_t K, int64_t M, HeadsLayout x_layout, HeadsLayout y_layout,
                               StoreFold fold) {
  if (N <= int64_t(s_->gemv_rows)) {
    run_gemv(step, x, w, b, y, N, K, M, x_layout, y_layout, fold);
    return;
  }
  run_gemm(step, "linear", x, w, b, y, 1, N, M, K, 1.0f, false, 1, x_layout, y_layout, fold);
}

void VulkanBackend::run_gemm_float16(const std::string& step, const std::string& name, const Storage& a,
                                     const Storage& b, const Storage* bias, Storage& c, int64_t batch, int64_t M,
                                     int64_t N, int64_t K, float scale, bool b_k_by_n, int64_t group,
                                     HeadsLayout a_layout, HeadsLayout c_layout, StoreFold fold) {
  // gemm.glsl's COOPMAT tiling (vulkan::MatrixProducts: a block of 128 × 128 for 16 × 16
  // matrices); its constants as run_gemm's, SIDE unused
  const vulkan::MatrixProducts& matrices = s_->device.float16_products;
  const bool khr = std::string_view(matrices.extension) != VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
  // VEC4, HAS_BIAS, TILE_M, TILE_N, SIDE, LANES, C_HEADS, A_HEADS, PACKED_B, DEPTH, B_FORMAT, ACTIVATION,
  // RESIDUAL, and the _khr builds' MATRIX_M, MATRIX_N, MATRIX_K
  std::vector<uint32_t> specialization{rows_of_quads(K, N, b_k_by_n, a_layout.heads) ? 1u : 0u,
                                       bias ? 1u : 0u,
                                       vulkan::MatrixProducts::kTilesM,
                                       vulkan::MatrixProducts::kTilesN,
                                       1u,
                                       matrices.lanes,
                                       heads_constant(c_layout.heads, N),
                                       a_layout.heads > 0 ? 1u : 0u,
                                       0u,
                                       vulkan::MatrixProducts::kDepth,
                                       storage_format(narrow_of(b)),
                                       static_cast<uint32_t>(fold.activation),
                                       fold.residual ? 1u : 0u};
  if (khr) specialization.insert(specialization.end(), {matrices.m, matrices.n, matrices.k});
  const auto& k = kernel(vulkan::op_named(name), specialization, matrices.invocations(), 0, matrices.lanes,
                         name + (khr ? "_coopmat_khr" : "_coopmat"));
  const HeadsLayout& heads = a_layout.heads > 0 ? a_layout : c_layout;
  vulkan::GemmParams params{u32(batch), u32(M), u32(N), u32(K), scale, u32(group), u32(heads.heads), u32(heads.tokens)};
  auto buffers = name == "linear" ? linear_buffers(a, b, bias, fold, c)
                                  : std::vector{buffer_of(a), buffer_of(b),
                                                bias ? buffer_of(*bias) : s_->recorder.placeholder(), buffer_of(c)};
  dispatch(step, k, std::move(buffers), params,
           uint64_t(batch) * ceil_div(uint64_t(M), matrices.block_m()) * ceil_div(uint64_t(N), matrices.block_n()),
           true);
}

void VulkanBackend::run_gemv(const std::string& step, const Storage& x, const Storage& w, const Storage* b, Storage& y,
                             int64_t N, int64_t K, int64_t M, HeadsLayout x_layout, HeadsLayout y_layout,
                             StoreFold fold) {
  // a folded layout step of one token reads and stores as the plain layout: (B·1, H·d) is (B, H, 1, d)
  const bool x_heads = x_layout.heads > 0 && x_layout.tokens > 1, y_heads = y_layout.heads > 0 && y_layout.tokens > 1;
  const HeadsLayout& heads = x_heads ? x_layout : y_layout;
  // VEC4, HAS_BIAS, B_FORMAT, ACTIVATION, RESIDUAL, C_HEADS, A_HEADS (gemv.glsl): vec4 reads of x
  // as for the plain layout, so that a lane's sums are the copying path's
  const auto& k =
      kernel(vulkan::Op::linear,
             {K % 4 == 0 ? 1u : 0u, b ? 1u : 0u, storage_format(narrow_of(w)), static_cast<uint32_t>(fold.activation),
              fold.residual ? 1u : 0u, y_heads ? 1u : 0u, x_heads ? heads_constant(x_layout.heads, K) : 0u},
             vulkan::kGemvWorkgroup, 0, 0, "linear_gemv");
  dispatch(step, k, linear_buffers(x, w, b, fold, y),
           vulkan::GemmParams{1, u32(N), u32(M), u32(K), 1.0f, 1, u32(heads.heads), u32(heads.tokens)},
           uint64_t(M) * vulkan::kGemvLanesPerColumn);
}

void VulkanBackend::run_split_heads(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T,
                                    int64_t H, int64_t d, int64_t chunks, int64_t chunk) {
  const uint32_t width = d % 4 == 0 ? 4 : 1;  // floats per invocation (heads.glsl)
  const auto& k = kernel(vulkan::Op::split_heads, {width});
  dispatch(step, k, {buffer_of(x), buffer_of(y)},
           vulkan::HeadsParams{u32(B), u32(H), u32(T), u32(d), u32(chunks), u32(chunk)},
           uint64_t(B) * T * H * d / width);
}

void VulkanBackend::run_append_row(const std::string& step, const Storage& x, const Storage* row, Storage& y,
                                   int64_t N, int64_t T, int64_t C) {
  const auto& k = kernel(vulkan::Op::append_row, {row ? 1u : 0u});
  dispatch(step, k, {buffer_of(x), row ? buffer_of(*row) : s_->recorder.placeholder(), buffer_of(y)},
           vulkan::AppendRowParams{u32(N), u32(T), u32(C)}, uint64_t(N) * (T + 1) * C);
}

void VulkanBackend::run_attention_scores(const std::string& step, const Storage& q, const Storage& k_,
                                         Storage& scores, int64_t BH, int64_t L, int64_t S, int64_t d, float scale,
                                         int64_t group) {
  run_gemm(step, "attention_scores", q, k_, nullptr, scores, BH, L, S, d, scale, false, group);
}

void VulkanBackend::run_attention_mask(const std::string& step, const Storage& scores, const Storage* attn_mask,
                                       int attn_mask_rank, const Storage* key_padding_mask, bool causal,
                                       int64_t window, Storage& out, int64_t B, int64_t H, int64_t L, int64_t S) {
  const auto& k = kernel(vulkan::Op::attention_mask, {kMaskRun});
  vulkan::AttentionMaskParams params{u32(B), u32(H), u32(L), u32(S), u32(attn_mask_rank),
                                     key_padding_mask ? 1u : 0u, causal ? 1u : 0u, u32(window)};
  dispatch(step, k,
           {buffer_of(scores), attn_mask ? buffer_of(*attn_mask) : s_->recorder.placeholder(),
            key_padding_mask ? buffer_of(*key_padding_mask) : s_->recorder.placeholder(), buffer_of(out)},
           params, uint64_t(B) * H * L * ceil_div(S, kMaskRun * k.workgroup_size()), /*per_group=*/true);
}

void VulkanBackend::run_flash_attention(const std::string& step, const Storage& q, const Storage& k, const Storage& v,
                                        const Storage* attn_mask, int attn_mask_rank, const Storage* key_padding_mask,
                                        bool causal, int64_t window, Storage& out, int64_t B, int64_t H, int64_t L,
                                        int64_t S, int64_t d, float scale, int64_t group) {
  // flash_plan_for(): ROWS query rows per subgroup of guaranteed lanes, per tiled workgroup, or a
  // row per invocation (flash_attention.comp). The head dim shapes each lane's share of the
  // output and the tiles: a pipeline per d.
  // With float16 products, their kernel where its block fits shared memory at this d (else the
  // float32 kernels): a tiled plan of its rows and keys, a subgroup of m rows (MatrixProducts)
  const vulkan::MatrixProducts& matrices = s_->device.float16_products;
  const uint32_t matrix_rows = s_->options.float16_products && s_->device.subgroup_shuffle
                                   ? matrices.flash_rows(u32(d), s_->device.max_shared_memory_bytes)
                                   : 0;
  vulkan::FlashPlan on_matrices;
  if (matrix_rows) {
    on_matrices = vulkan::tiled_flash(matrix_rows, matrices.flash_keys(), matrices.lanes);
    on_matrices.workgroup_size = matrix_rows / matrices.m * matrices.lanes;
  }
  const vulkan::FlashPlan* chosen = matrix_rows ? &on_matrices : &flash_plan_for(B * H, L, S, d, causal);
  // a tiled plan whose tiles of this d outgrow shared memory (a forced one): the subgroup plan
  if (!matrix_rows && chosen->shared_bytes(u32(d)) > s_->device.max_shared_memory_bytes) chosen = &s_->fallback_flash;
  const vulkan::FlashPlan& plan = *chosen;
  // K and V as texels where the GEMMs read theirs so (whole vec4 rows, within the texel count)
  const bool texels = !matrix_rows && plan.texel_inputs && d % 4 == 0 &&
                      uint64_t(B) * (H / group) * S * d / 4 <= s_->device.max_texel_buffer_elements;
  const bool masked = attn_mask || key_padding_mask;  // else a pipeline that reads no mask
  std::vector<uint32_t> specialization = plan.specialization(u32(d), masked);
  const bool khr = matrix_rows && std::string_view(matrices.extension) != VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
  if (khr) {  // MATRIX_M, MATRIX_N, MATRIX_K are constants 14–16
    specialization.resize(13, 0u);
    specialization.insert(specialization.end(), {matrices.m, matrices.n, matrices.k});
  }
  const std::string shader =
      matrix_rows ? std::string("flash_attention") + (khr ? "_coopmat_khr" : "_coopmat") : plan.shader(texels);
  const auto& kern = kernel(vulkan::Op::flash_attention, specialization, plan.workgroup_size, texels ? 0b11000u : 0u,
                            plan.lanes, shader);
  vulkan::FlashAttentionParams params{u32(B), u32(H), u32(L), u32(S), scale, u32(attn_mask_rank),
                                      key_padding_mask ? 1u : 0u, causal ? 1u : 0u, u32(window), u32(group)};
  const std::vector<std::shared_ptr<Buffer>> buffers{
      buffer_of(q), attn_mask ? buffer_of(*attn_mask) : s_->recorder.placeholder(),
      key_padding_mask ? buffer_of(*key_padding_mask) : s_->recorder.placeholder(), buffer_of(k), buffer_of(v),
      buffer_of(out)};
  // The grid in submissions of bounded work (a group's rows are independent of every other's:
  // any split gives the same bits). Group g holds rows_per_group query rows from
  // plan.first_row(g, …) on (a tiled plan's causal blocks come longest first).
  const uint64_t groups = plan.groups(uint64_t(B) * H, uint64_t(L));
  const uint64_t rows_per_group = uint64_t(plan.units_per_group()) * plan.rows_per_unit();
  const auto work = [&](uint64_t a, uint64_t b) {  // multiply-adds of groups a..b: QKᵀ and PV over the keys each row sees
    double total = 0;
    for (uint64_t g = a; g < b; ++g) {
      const double i = double(plan.first_row(g, uint64_t(B) * H, uint64_t(L), causal));
      double keys = causal ? std::min<double>(double(S), i + 1) : double(S);
      if (causal && window > 0) keys = std::min<double>(keys, double(window));
      total += keys * double(rows_per_group) * 2.0 * double(d);
    }
    return total;
  };
  for (uint64_t first = 0; first < groups;) {
    const uint64_t count = submission_groups(first, groups, work);
    params.first_group = u32(first);
    dispatch(step, kern, buffers, params, count, true, /*continuation=*/first > 0);
    first += count;
    if (first == groups) break;
    const auto start = std::chrono::steady_clock::now();
    s_->recorder.flush();  // (the first also runs what the pass recorded before: a slower, safe estimate)
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 0) s_->flash_rate = work(first - count, first) / seconds;
    report_progress(step, double(first) / double(groups));
  }
}

uint64_t VulkanBackend::submission_groups(uint64_t first, uint64_t groups,
                                          const std::function<double(uint64_t, uint64_t)>& work) const {
  uint64_t count = groups - first;
  if (s_->options.max_groups_per_submission > 0) count = std::min(count, s_->options.max_groups_per_submission);
  const double budget = s_->options.max_submission_seconds;
  if (budget <= 0) return count;
  // Unmeasured, assume a slow device (1 GFLOP/s: lavapipe on one core does several): a step
  // cheaper than the budget at that speed is never split; a dearer one starts with a probe.
  const double rate = s_->flash_rate > 0 ? s_->flash_rate : 1e9;
  if (work(first, first + count) <= budget * rate) return count;
  // The most groups that fit the budget at that rate, by halving (work grows with the groups).
  uint64_t fits = count;
  while (fits > 1 && work(first, first + fits) > budget * rate) fits = (fits + 1) / 2;
  return fits;
}

void VulkanBackend::run_kv_cache_append(const std::string& step, Storage& cache, const Storage& rows, int64_t N,
                                        int64_t C, int64_t T, int64_t d, int64_t position, Narrow format) {
  const auto& k = kernel(vulkan::Op::kv_cache_append, {storage_format(format)});
  // float32: an invocation an element; 16-bit: one a word, T·d / 2 + 1 words a row at most
  const uint64_t per_row = format == Narrow::none ? uint64_t(T) * d : uint64_t(T) * d / 2 + 1;
  dispatch(step, k, {buffer_of(rows), buffer_of(cache)},
           vulkan::KvCacheAppendParams{u32(N), u32(T), u32(C), u32(d), u32(position)}, uint64_t(N) * per_row);
}

int64_t VulkanBackend::decoding_lanes() const {
  return s_->device.type == vk::PhysicalDeviceType::eCpu ? 256 : 32768;
}

void VulkanBackend::run_flash_decoding(const std::string& step, const Storage& q, const Storage& k, const Storage& v,
                                       const Storage* key_padding_mask, bool causal, int64_t window, Storage& partials,
                                       int64_t B, int64_t H, int64_t L, int64_t C, int64_t S, int64_t d, int64_t parts,
                                       uint32_t part_lanes, float scale, int64_t group, Narrow kv_format,
                                       Storage* combined) {
  vulkan::FlashDecodingParams params{u32(B),           u32(H),      u32(L),    u32(C),
                                     u32(S),           u32(parts),  scale,     key_padding_mask ? 1u : 0u,
                                     causal ? 1u : 0u, u32(window), u32(group)};
  const std::vector<std::shared_ptr<Buffer>> buffers{
      buffer_of(q),        key_padding_mask ? buffer_of(*key_padding_mask) : s_->recorder.placeholder(),
      buffer_of(k),        buffer_of(v),
      buffer_of(partials), combined ? buffer_of(*combined) : s_->recorder.placeholder()};
  const uint64_t units = uint64_t(B) * H * L * parts;  // (row, part) pairs
  std::vector<uint32_t> constants{u32(d), storage_format(kv_format), combined ? 1u : 0u};
  if (part_lanes) {
    // a workgroup of kDecodingLanesWorkgroup lanes, part_lanes a unit; COMBINE: whole rows' units
    const uint32_t slots = vulkan::kDecodingLanesWorkgroup / part_lanes;
    const uint64_t per_group = combined ? slots / u32(parts) * u32(parts) : slots;
    constants.push_back(part_lanes);
    const auto& kern = kernel(vulkan::Op::flash_decoding, constants, vulkan::kDecodingLanesWorkgroup, 0,
                              s_->decoding_lanes.count, "flash_decoding_subgroup");
    dispatch(step, kern, buffers, params, ceil_div(units, per_group), true, false, /*partials, merged rows*/ 2);
    return;
  }
  // COMBINE: a workgroup of whole rows' parts (combines_parts: parts <= the workgroup size)
  const uint32_t workgroup =
      combined ? u32(parts) * (s_->options.workgroup_size / u32(parts)) : s_->options.workgroup_size;
  const auto& kern = kernel(vulkan::Op::flash_decoding, constants, workgroup);
  dispatch(step, kern, buffers, params, units, false, false, /*outputs: partials and the merged rows*/ 2);
}

void VulkanBackend::run_attention_combine(const std::string& step, const Storage& partials, Storage& out, int64_t R,
                                          int64_t parts, int64_t d) {
  const auto& k = kernel(vulkan::Op::attention_combine);
  dispatch(step, k, {buffer_of(partials), buffer_of(out)}, vulkan::AttentionCombineParams{u32(R), u32(parts), u32(d)},
           uint64_t(R) * d);
}

void VulkanBackend::run_softmax(const std::string& step, const Storage& x, Storage& y, int64_t R, int64_t S) {
  const vulkan::RowPlan& plan = row_plan_for("softmax", R, S);
  const auto& k = kernel(vulkan::Op::softmax, {}, 0, 0, plan.lanes, plan.shader("softmax"));
  dispatch(step, k, {buffer_of(x), buffer_of(y)}, vulkan::SoftmaxParams{u32(R), u32(S)},
           plan.groups(uint64_t(R), k.workgroup_size()), true);
}

void VulkanBackend::run_attention_values(const std::string& step, const Storage& p, const Storage& v, Storage& out,
                                         int64_t BH, int64_t L, int64_t S, int64_t d, int64_t group) {
  run_gemm(step, "attention_values", p, v, nullptr, out, BH, L, d, S, 1.0f, true, group);
}

void VulkanBackend::run_merge_heads(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t H,
                                    int64_t T, int64_t d) {
  const uint32_t width = d % 4 == 0 ? 4 : 1;  // floats per invocation (heads.glsl)
  const auto& k = kernel(vulkan::Op::merge_heads, {width});
  dispatch(step, k, {buffer_of(x), buffer_of(y)}, vulkan::HeadsParams{u32(B), u32(H), u32(T), u32(d), 1, 0},
           uint64_t(B) * H * T * d / width);
}

void VulkanBackend::run_average_heads(const std::string& step, const Storage& p, Storage& avg, int64_t B, int64_t H,
                                      int64_t plane) {
  const auto& k = kernel(vulkan::Op::average_heads);
  dispatch(step, k, {buffer_of(p), buffer_of(avg)}, vulkan::AverageHeadsParams{u32(B), u32(H), u32(plane)},
           uint64_t(B) * plane);
}

void VulkanBackend::run_layer_norm(const std::string& step, const Storage& x, const Storage& weight, const Storage& bias,
                                   Storage& y, int64_t N, int64_t E, float eps) {
  const vulkan::RowPlan& plan = row_plan_for("layer_norm", N, E);
  const auto& k = kernel(vulkan::Op::layer_norm, {}, 0, 0, plan.lanes, plan.shader("layer_norm"));
  dispatch(step, k, {buffer_of(x), buffer_of(weight), buffer_of(bias), buffer_of(y)},
           vulkan::LayerNormParams{u32(N), u32(E), eps}, plan.groups(uint64_t(N), k.workgroup_size()), true);
}

void VulkanBackend::run_gelu(const std::string& step, const Storage& x, Storage& y, int64_t n) {
  const auto& k = kernel(vulkan::Op::gelu);
  dispatch(step, k, {buffer_of(x), buffer_of(y)}, vulkan::ElementwiseParams{u32(n)}, uint64_t(n));
}

void VulkanBackend::run_gelu_tanh(const std::string& step, const Storage& x, Storage& y, int64_t n) {
  const auto& k = kernel(vulkan::Op::gelu_tanh);
  dispatch(step, k, {buffer_of(x), buffer_of(y)}, vulkan::ElementwiseParams{u32(n)}, uint64_t(n));
}

void VulkanBackend::run_relu(const std::string& step, const Storage& x, Storage& y, int64_t n) {
  const auto& k = kernel(vulkan::Op::relu);
  dispatch(step, k, {buffer_of(x), buffer_of(y)}, vulkan::ElementwiseParams{u32(n)}, uint64_t(n));
}

void VulkanBackend::run_residual_add(const std::string& step, const Storage& x, const Storage& residual, Storage& y,
                                     int64_t n) {
  const auto& k = kernel(vulkan::Op::residual_add);
  dispatch(step, k, {buffer_of(x), buffer_of(residual), buffer_of(y)}, vulkan::ElementwiseParams{u32(n)}, uint64_t(n));
}

// rms_norm shares layer_norm's row plan: the same rows, one reduction fewer.
void VulkanBackend::run_rms_norm(const std::string& step, const Storage& x, const Storage& weight, Storage& y, int64_t N,
                                 int64_t E, float eps) {
  const vulkan::RowPlan& plan = row_plan_for("layer_norm", N, E);
  const auto& k = kernel(vulkan::Op::rms_norm, {}, 0, 0, plan.lanes, plan.shader("rms_norm"));
  dispatch(step, k, {buffer_of(x), buffer_of(weight), buffer_of(y)}, vulkan::LayerNormParams{u32(N), u32(E), eps},
           plan.groups(uint64_t(N), k.workgroup_size()), true);
}

void VulkanBackend::run_silu(const std::string& step, const Storage& x, Storage& y, int64_t n) {
  const auto& k = kernel(vulkan::Op::silu);
  dispatch(step, k, {buffer_of(x), buffer_of(y)}, vulkan::ElementwiseParams{u32(n)}, uint64_t(n));
}

void VulkanBackend::run_tanh(const std::string& step, const Storage& x, Storage& y, int64_t n) {
  const auto& k = kernel(vulkan::Op::tanh);
  dispatch(step, k, {buffer_of(x), buffer_of(y)}, vulkan::ElementwiseParams{u32(n)}, uint64_t(n));
}

void VulkanBackend::run_multiply(const std::string& step, const Storage& x, const Storage& other, Storage& y, int64_t n) {
  const auto& k = kernel(vulkan::Op::multiply);
  dispatch(step, k, {buffer_of(x), buffer_of(other), buffer_of(y)}, vulkan::ElementwiseParams{u32(n)}, uint64_t(n));
}

void VulkanBackend::run_embedding(const std::string& step, const Storage& ids, const Storage& table, Storage& y,
                                  int64_t N, int64_t V, int64_t E, float scale) {
  const auto& k = kernel(vulkan::Op::embedding, {storage_format(narrow_of(table))});
  dispatch(step, k, {buffer_of(ids), buffer_of(table), buffer_of(y)},
           vulkan::EmbeddingParams{u32(N), u32(V), u32(E), scale}, uint64_t(N) * E);
}

void VulkanBackend::run_positional_encoding(const std::string& step, const Storage& x, const Storage& table,
                                            Storage& y, int64_t B, int64_t T, int64_t E) {
  const auto& k = kernel(vulkan::Op::positional_encoding);
  dispatch(step, k, {buffer_of(x), buffer_of(table), buffer_of(y)},
           vulkan::PositionalEncodingParams{u32(B * T * E), u32(T * E)}, uint64_t(B) * T * E);
}

void VulkanBackend::run_rotary_embedding(const std::string& step, const Storage& x, const Storage& /*inv_freq*/,
                                         const Storage& cos_sin, Storage& y, int64_t N, int64_t T, int64_t d,
                                         int64_t /*offset*/, int64_t rotary_dims, bool pairs) {
  const auto& k = kernel(vulkan::Op::rotary_embedding);
  dispatch(step, k, {buffer_of(x), buffer_of(cos_sin), buffer_of(y)},
           vulkan::RotaryEmbeddingParams{u32(N * T * d), u32(T), u32(d), u32(rotary_dims), pairs ? 1u : 0u},
           uint64_t(N) * T * d);
}

void VulkanBackend::run_mean_pool(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T,
                                  int64_t E) {
  const auto& k = kernel(vulkan::Op::mean_pool);
  dispatch(step, k, {buffer_of(x), buffer_of(y)}, vulkan::MeanPoolParams{u32(B), u32(T), u32(E)}, uint64_t(B) * E);
}

void VulkanBackend::run_first_token(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T,
                                    int64_t E) {
  const auto& k = kernel(vulkan::Op::first_token);
  dispatch(step, k, {buffer_of(x), buffer_of(y)}, vulkan::MeanPoolParams{u32(B), u32(T), u32(E)}, uint64_t(B) * E);
}

void VulkanBackend::run_last_tokens(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T,
                                    int64_t n, int64_t E) {
  const auto& k = kernel(vulkan::Op::last_tokens);
  dispatch(step, k, {buffer_of(x), buffer_of(y)}, vulkan::LastTokensParams{u32(B), u32(T), u32(n), u32(E)},
           uint64_t(B) * n * E);
}

std::optional<std::vector<StepTime>> VulkanBackend::device_step_times() {
  auto times = s_->recorder.dispatch_times();  // one dispatch per step
  if (!times) return std::nullopt;
  std::vector<StepTime> steps;
  for (auto [start, end] : *times) steps.push_back(StepTime::between(start, end));
  return steps;
}

}  // namespace vkattn
