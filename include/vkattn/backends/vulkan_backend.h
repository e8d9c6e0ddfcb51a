#pragma once
// VulkanBackend: every step as one compute-shader dispatch, recorded into one command buffer
// that is submitted only when a value is read back (download, or a tracer that wants values).
//
// The Vulkan objects behind it (context, buffers, kernels, plans) are internals, declared here
// only by name: a program that includes this header needs no Vulkan headers.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/backends/roofline.h"

namespace vkattn {

namespace vulkan {
class Buffer;
class Context;
class Kernel;
class Recorder;
struct GemmPlan;
struct RowPlan;
struct FlashPlan;
struct DecodingPlan;
enum class Op : uint8_t;  // engine/vulkan/ops.h
}  // namespace vulkan

struct VulkanBackendOptions {
  uint32_t workgroup_size = 64;     // invocations per workgroup, for every kernel but the GEMMs'
  uint32_t max_groups_per_dim = 0;  // > 0 lowers the device's limit (tests force folding)
  // linear, attention_scores and attention_values: the tiling the device suits (gemm_plan.h),
  // unless a plan is given (tests run every variant on one device)
  std::shared_ptr<const vulkan::GemmPlan> gemm;
  // linear for a product of at most this many rows (B·T: a decode step's) runs as a GEMV
  // (shaders/gemv.glsl), at most 8; 0: never. Unset: 8 on a GPU, 0 on a CPU device
  // (vulkan::gemv_rule), and 0 where a GEMM plan is given above.
  std::optional<uint32_t> gemv_rows;
  // Steps may use subgroups where the device guarantees their lanes (vulkan/lanes.h): the GEMMs'
  // broadcast tiling on CPU devices, softmax and layer_norm a row per subgroup, flash_attention
  // rows per subgroup, flash_decoding's parts walked by lanes on a GPU. false forces every
  // subgroup-free variant, as VKATTN_SUBGROUPS=off does.
  bool subgroups = true;
  // flash_attention: query rows per subgroup; 0 = the device's choice (two per lane on a CPU
  // device, at most 8 on a GPU). Tests run both on lavapipe.
  uint32_t flash_rows = 0;
  // flash_attention's whole plan (step_plans.h), unless null; it overrides flash_rows
  std::shared_ptr<const vulkan::FlashPlan> flash;
  // softmax's and layer_norm's (a row per subgroup, or per workgroup), unless null
  std::shared_ptr<const vulkan::RowPlan> rows;
  // Plans chosen by measuring (engine/backends/tuner.h): where a step has several plans, the
  // first problem of each shape class times them on the device and keeps the fastest that matches
  // the reference, remembered on disk per device, driver and vkattn build. Unset: VKATTN_TUNE
  // (on unless it says off). Off, or a plan given above: the fixed rules, as before.
  std::optional<bool> tune;
  // Where remembered plans are kept; empty: $XDG_CACHE_HOME/vkattn, else ~/.cache/vkattn.
  std::string plan_cache_directory;
  // > 0 caps the device memory a pass may use below the device's largest device-local heap
  // (a GPU shared with other work); preflight() refuses a pass that would need more
  uint64_t memory_limit_bytes = 0;
  // > 0 caps one tensor's buffer below the device's maxStorageBufferRange (tests make a device
  // look smaller); allocate() and preflight() refuse a larger one
  uint64_t buffer_limit_bytes = 0;
  // A tensor this large or larger may take a buffer that recorded commands still read, at the
  // cost of a barrier before its step: a step that size fills the device alone, so nothing is
  // lost by not overlapping it, and the pass holds a tensor fewer (the fused path's memory stays
  // a few (L, E) tensors at any L). A smaller tensor gets another buffer, so that independent
  // small steps (split_heads_q/k/v) can overlap. 4 MiB = 1 Mi floats, more invocations than any
  // GPU runs at once.
  uint64_t reuse_in_flight_bytes = 4u << 20;
  // Bounded work per submission: a flash_attention step the device would run for longer than
  // this is split into submissions of query rows, each about this long (sized from the device's
  // measured speed), with identical results: a desktop driver's watchdog kills a dispatch that
  // runs for seconds, and the host can report progress and stop between submissions. 0: never.
  double max_submission_seconds = 1.0;
  // > 0: split every flash_attention into submissions of at most this many workgroups (tests).
  uint64_t max_groups_per_submission = 0;
  // The device starts on a pass before the host has recorded all of it: the first this many
  // dispatches are submitted without waiting, then segments as long as all sent before (4, 4, 8,
  // 16, …), the readback the rest (vulkan::Recorder). 0: a pass is one command buffer, submitted
  // when a value is read back. Unset: 4 on a GPU; 0 on a CPU device, whose "device" is the host's
  // own cores (vulkan::early_dispatch_rule).
  std::optional<uint32_t> early_dispatches;
  // split_heads and merge_heads beside a projection are folded into its store or its load
  // (Backend::linear_split_heads): no copies, the same numbers. false runs them as copies.
  bool fold_layout_steps = true;
  // An activation or a residual_add after a projection done by its store
  // (Backend::linear_activation, Backend::linear's residual): one dispatch, and the product never
  // written; and, where combine_in_flash_decoding, attention_combine done by flash_decoding's
  // dispatch. false runs the two steps.
  bool fold_into_store = true;
  // attention_combine done by flash_decoding's workgroups at the end of its dispatch, for splits of
  // at most workgroup_size parts (Backend::flash_decoding_combine; needs fold_into_store). Unset:
  // on a GPU; not on a CPU device, where the barrier it needs made lavapipe's flash_decoding
  // slower than the dispatch it saves (docs/gpu.md).
  std::optional<bool> combine_in_flash_decoding;
  // flash_decoding's parts each walked by a group of a subgroup's lanes together, a lane a vec4 of
  // every key's row (its _subgroup build; vulkan::decoding_part_lanes): true where the device
  // guarantees lanes (DeviceError elsewhere), false an invocation a part. Unset: on a GPU that
  // guarantees them, where tuning measures both; not on a CPU device, whose lanes are few.
  std::optional<bool> flash_decoding_subgroups;
  // The GEMMs' products in float16 on cooperative matrices, accumulated in float32 (gemm.glsl's
  // COOPMAT tiling): linear's x and W, attention_scores' Q and K, attention_values' P and V rounded
  // to float16 as they are read, as torch's float16 matmul has them, so results are float16's, not
  // float32's 1e-4. Products of at most gemv_rows rows keep the float32 GEMV. flash_attention
  // rounds q, K, V and its weights so too (flash_attention.comp's _coopmat builds) where its block
  // fits shared memory at the head dim (MatrixProducts::flash_rows), else keeps its float32
  // kernels. Only on a device with DeviceReport::float16_products (Khronos's cooperative matrices,
  // or NVIDIA's); the backend refuses it elsewhere.
  bool float16_products = false;
};

class VulkanBackend final : public Backend {
 public:
  using Options = VulkanBackendOptions;

  // On a Context made from the environment (VKATTN_DEVICE, VKATTN_VALIDATION).
  VulkanBackend();
  explicit VulkanBackend(std::shared_ptr<vulkan::Context> context, Options options = {});
  ~VulkanBackend() override;

  std::string name() const override { return "gpu"; }
  std::string device_name() const override;
  // flash_decoding's parallelism: 256 invocations on a CPU device, 32768 on a GPU (a few per
  // lane of the largest GPUs' streaming multiprocessors)
  int64_t decoding_lanes() const override;
  // The rule's count, or where the backend tunes and there are at least 128 keys, the count
  // measured fastest for the shape class (flash_decoding and attention_combine timed together).
  int64_t decoding_parts(int64_t rows, int64_t length, int64_t d, int64_t queries = 1,
                         int64_t key_rows = 0) override;
  // Fused unless tuning measured the unfused steps faster for this shape class, where the
  // (B, H, L, S) scores fit in an eighth of the device's memory.
  bool prefers_fused(const AttentionProblem& problem) override;
  bool folds_layout_steps() const override;
  // From the next step on, folds split_heads and merge_heads into their projections or runs them
  // as copies (VulkanBackendOptions::fold_layout_steps): lesson 07 runs both.
  void fold_layout_steps(bool fold) override;
  bool folds_into_store() const override;
  bool combines_parts(int64_t parts, uint32_t part_lanes = 0) const override;
  // The lanes of the plan decoding_parts() chose (or, asked for, flash_decoding_subgroups's)
  uint32_t decoding_part_lanes(int64_t rows, int64_t length, int64_t d, int64_t queries = 1,
                               int64_t key_rows = 0) override;
  // The internals, for vkattn's own tools and tests (engine/vulkan/*.h define them).
  const vulkan::Context& context() const;
  const vulkan::Recorder& recorder() const;
  // What runs each step that has variants, and why (engine/vulkan/gemm_plan.h, step_plans.h).
  const vulkan::GemmPlan& gemm_plan() const;
  const vulkan::RowPlan& row_plan() const;
  // flash_plan(): the forced plan, or the subgroup plan (vulkan::plan_flash), which runs where a
  // GPU's tiled rule (vulkan::flash_rule) does not fit d and tuning is off
  const vulkan::FlashPlan& flash_plan() const;
  // The plans this backend chose by measuring (or found remembered), by shape class: "linear:
  // rows ≤ 4096, n ≤ 512, k ≤ 512" -> the plan's description. Empty when tuning is off.
  std::vector<std::pair<std::string, std::string>> tuned_plans() const;
  // Buffers are kept for reuse: a second forward of a shape makes none, and a pass reuses those
  // of the tensors it has finished with. This frees the ones not in use now (after the work
  // recorded so far), as torch.cuda.empty_cache() does.
  void empty_cache();
  // Runs everything recorded so far and waits for it, as torch.cuda.synchronize() does (a
  // download does too; this reads nothing back).
  void synchronize();
  // The device's peak, measured now (a few tenths of a second on lavapipe): the multiply-add
  // rate of shaders/peak_flops.comp (8 independent vec4 chains an invocation, its result checked)
  // and the bandwidth of shaders/peak_bytes.comp (a copy of 64 MiB), each the fastest of three
  // runs of some milliseconds (on a GPU, of a quarter of a second of them, while its clock
  // rises), by the device's timestamps (the host's clock where it has none).
  // Outside a pass; it frees the buffers not in use (empty_cache), its own 144 MiB among them.
  DevicePeak measure_peak();
  // The most Vulkan memory (device and staging buffers) allocated at once on this backend's
  // device since it was made or since reset_peak(), in bytes, as torch.cuda.max_memory_allocated.
  uint64_t peak_allocated_bytes() const;
  void reset_peak() const;
  // The device memory a pass must fit in, and the buffers a GEMM step takes besides its output,
  // as preflight() counts them.
  std::optional<MemoryLimits> memory_limits() const override;
  // A float16 or bfloat16 checkpoint's matrices stay 16-bit (upload_matrix): linear.comp and
  // embedding.comp widen each element as they read it (shaders/sixteen_bit.glsl).
  bool keeps_16bit() const override { return true; }

 protected:
  std::shared_ptr<Storage> allocate(const std::string& name, int64_t count) override;
  std::shared_ptr<Storage> store(const std::string& name, const Tensor& tensor, Narrow as) override;
  std::vector<float> load(const Storage& storage, int64_t count) override;
  // A pass keeps the buffers the one before it used, and frees the rest (on_begin_pass runs
  // at the start of each outermost pass).
  void on_failed_pass() noexcept override;
  void on_begin_pass(bool timed) override;
  std::optional<std::vector<StepTime>> device_step_times() override;

  void run_linear(const std::string& step, const Storage& x, const Storage& w, const Storage* b, Storage& y, int64_t N,
                  int64_t K, int64_t M, HeadsLayout x_layout, HeadsLayout y_layout, StoreFold fold) override;
  void run_split_heads(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T, int64_t H,
                       int64_t d, int64_t chunks, int64_t chunk) override;
  void run_append_row(const std::string& step, const Storage& x, const Storage* row, Storage& y, int64_t N,
                      int64_t T, int64_t C) override;
  void run_attention_scores(const std::string& step, const Storage& q, const Storage& k, Storage& scores,
                            int64_t BH, int64_t L, int64_t S, int64_t d, float scale, int64_t group) override;
  void run_attention_mask(const std::string& step, const Storage& scores, const Storage* attn_mask,
                          int attn_mask_rank, const Storage* key_padding_mask, bool causal, int64_t window,
                          Storage& out, int64_t B, int64_t H, int64_t L, int64_t S) override;
  void run_flash_attention(const std::string& step, const Storage& q, const Storage& k, const Storage& v, const Storage* attn_mask,
                           int attn_mask_rank, const Storage* key_padding_mask, bool causal, int64_t window,
                           Storage& out, int64_t B, int64_t H, int64_t L, int64_t S, int64_t d, float scale,
                           int64_t group) override;
  void run_softmax(const std::string& step, const Storage& x, Storage& y, int64_t R, int64_t S) override;
  void run_attention_values(const std::string& step, const Storage& p, const Storage& v, Storage& out,
                            int64_t BH, int64_t L, int64_t S, int64_t d, int64_t group) override;
  void run_merge_heads(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t H, int64_t T,
                       int64_t d) override;
  void run_average_heads(const std::string& step, const Storage& p, Storage& avg, int64_t B, int64_t H,
                         int64_t plane) override;
  void run_kv_cache_append(const std::string& step, Storage& cache, const Storage& rows, int64_t N, int64_t C,
                           int64_t T, int64_t d, int64_t position, Narrow format) override;
  void run_flash_decoding(const std::string& step, const Storage& q, const Storage& k, const Storage& v,
                          const Storage* key_padding_mask, bool causal, int64_t window, Storage& partials, int64_t B,
                          int64_t H, int64_t L, int64_t C, int64_t S, int64_t d, int64_t parts, uint32_t part_lanes,
                          float scale, int64_t group, Narrow kv_format, Storage* combined) override;
  void run_attention_combine(const std::string& step, const Storage& partials, Storage& out, int64_t R, int64_t parts,
                             int64_t d) override;
  void run_layer_norm(const std::string& step, const Storage& x, const Storage& weight, const Storage& bias, Storage& y,
                      int64_t N, int64_t E, float eps) override;
  void run_gelu(const std::string& step, const Storage& x, Storage& y, int64_t n) override;
  void run_gelu_tanh(const std::string& step, const Storage& x, Storage& y, int64_t n) override;
  void run_relu(const std::string& step, const Storage& x, Storage& y, int64_t n) override;
  void run_residual_add(const std::string& step, const Storage& x, const Storage& residual, Storage& y, int64_t n) override;
  void run_rms_norm(const std::string& step, const Storage& x, const Storage& weight, Storage& y, int64_t N, int64_t E,
                    float eps) override;
  void run_silu(const std::string& step, const Storage& x, Storage& y, int64_t n) override;
  void run_tanh(const std::string& step, const Storage& x, Storage& y, int64_t n) override;
  void run_multiply(const std::string& step, const Storage& x, const Storage& other, Storage& y, int64_t n) override;
  void run_embedding(const std::string& step, const Storage& ids, const Storage& table, Storage& y, int64_t N, int64_t V,
                     int64_t E, float scale) override;
  void run_positional_encoding(const std::string& step, const Storage& x, const Storage& table, Storage& y, int64_t B,
                               int64_t T, int64_t E) override;
  void run_mean_pool(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T, int64_t E) override;
  void run_first_token(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T, int64_t E) override;
  void run_last_tokens(const std::string& step, const Storage& x, Storage& y, int64_t B, int64_t T, int64_t n,
                       int64_t E) override;
  void run_rotary_embedding(const std::string& step, const Storage& x, const Storage& inv_freq,
                            const Storage& cos_sin, Storage& y, int64_t N, int64_t T, int64_t d, int64_t offset,
                            int64_t rotary_dims, bool pairs) override;

 private:
  // The pipeline for `op` with these extra specialization constants, made once per context
  // (vulkan::Kernels), its bindings and push constants as the table of ops says (ops.def);
  // `workgroup_size` 0 means options_.workgroup_size; `lanes` > 0 requires that subgroup size;
  // `build` names another build of the op's shader ("linear_subgroup_texel"; empty: the op's own).
  // `word_bindings`: those of the texel bindings read as RG32UI texels (16-bit weights).
  const vulkan::Kernel& kernel(vulkan::Op op, std::vector<uint32_t> specialization = {}, uint32_t workgroup_size = 0,
                               uint32_t texel_bindings = 0, uint32_t lanes = 0, const std::string& build = {},
                               uint32_t word_bindings = 0);
  // The GEMM plan for C (batch, M, N) = A (batch, M, K) · B through `name`'s shader, B stored as
  // `b_format` says: measured or remembered for the problem's shape class when tuning is on, else
  // gemm_plan() with B packed only for enough rows (GemmPlan::for_rows); a plan asked for
  // (options.gemm) as it is.
  vulkan::GemmPlan gemm_plan_for(const std::string& name, int64_t batch, int64_t M, int64_t N, int64_t K,
                                 Narrow b_format);
  // flash_attention's plan for `heads` heads of L queries and S keys of d: as gemm_plan_for.
  const vulkan::FlashPlan& flash_plan_for(int64_t heads, int64_t L, int64_t S, int64_t d, bool causal);
  // softmax's or layer_norm's plan for `rows` rows of `cols`: as gemm_plan_for.
  const vulkan::RowPlan& row_plan_for(const std::string& step, int64_t rows, int64_t cols);
  // flash_decoding's split and lanes (decoding_parts' arguments): as gemm_plan_for, from 128 keys
  vulkan::DecodingPlan decoding_plan(int64_t rows, int64_t length, int64_t d, int64_t queries, int64_t key_rows);
  // The lanes a part gets at head dim d where they share parts, else 0
  uint32_t part_lanes_rule(int64_t d) const;
  // How run_gemm runs C (batch, M, N) = A (batch, M, K) · B through `name`'s shader (arguments as
  // its; b_format: B kept 16-bit, read from its storage buffer or as RG32UI texels, never packed,
  // or not): the plan, and whether and how large B packed (in the .cpp).
  struct GemmLaunch;
  GemmLaunch gemm_launch(const std::string& name, int64_t batch, int64_t M, int64_t N, int64_t K, bool b_k_by_n,
                         int64_t group, int64_t a_heads, Narrow b_format);
  // C (batch, M, N) = scale · A (batch, M, K) · B + bias through shaders/<name>.comp (gemm.glsl);
  // B is stored (batch / group, K, N) when `b_k_by_n`, else (batch / group, N, K): `group`
  // consecutive items of A share one of B (grouped-query attention; 1 elsewhere); `fold` done to
  // each element of C as it is stored (linear's folds; its residual needs linear's fifth binding).
  void run_gemm(const std::string& step, const std::string& name, const Storage& a, const Storage& b,
                const Storage* bias, Storage& c, int64_t batch, int64_t M, int64_t N, int64_t K, float scale,
                bool b_k_by_n, int64_t group, HeadsLayout a_layout = {}, HeadsLayout c_layout = {},
                StoreFold fold = {});
  // run_gemm's product in float16 products on cooperative matrices (VulkanBackendOptions::
  // float16_products: <name>_coopmat_khr or <name>_coopmat, gemm.glsl's COOPMAT tiling), layouts
  // and steps folded as run_gemm's.
  void run_gemm_float16(const std::string& step, const std::string& name, const Storage& a, const Storage& b,
                        const Storage* bias, Storage& c, int64_t batch, int64_t M, int64_t N, int64_t K, float scale,
                        bool b_k_by_n, int64_t group, HeadsLayout a_layout, HeadsLayout c_layout, StoreFold fold);
  // y (N, M) = activation(x (N, K) · W (M, K)ᵀ + b) (+ residual) through shaders/gemv.glsl
  // (linear's _gemv build): a product of at most gemv_rows rows, layouts and steps folded as
  // run_gemm's.
  void run_gemv(const std::string& step, const Storage& x, const Storage& w, const Storage* b, Storage& y, int64_t N,
                int64_t K, int64_t M, HeadsLayout x_layout, HeadsLayout y_layout, StoreFold fold);
  // linear's five buffers (A, B, bias, residual, C), placeholders where there is none
  std::vector<std::shared_ptr<vulkan::Buffer>> linear_buffers(const Storage& x, const Storage& w, const Storage* b,
                                                              const StoreFold& fold, const Storage& y) const;
  // One dispatch of `kernel` over `invocations` (or `invocations` workgroups when per_group); the
  // last `outputs` buffers are written, the others read (vulkan::Recorder::dispatch).
  template <class Params>
  void dispatch(const std::string& step, const vulkan::Kernel& kernel,
                std::vector<std::shared_ptr<vulkan::Buffer>> buffers, const Params& params, uint64_t invocations,
                bool per_group = false, bool continuation = false, size_t outputs = 1);
  // How many of flash_attention's `groups` workgroups the next submission takes, from `first`,
  // to last about max_submission_seconds at the device's measured speed (all of them when the
  // whole step would; at most max_groups_per_submission when set). `work(a, b)` estimates the
  // multiply-adds of groups a..b.
  uint64_t submission_groups(uint64_t first, uint64_t groups, const std::function<double(uint64_t, uint64_t)>& work) const;

  struct State;  // the context, the plans, the recorder, the buffer pool, the kernels
  std::unique_ptr<State> s_;
};

}  // namespace vkattn
