#pragma once
// Backend: the steps of attention, each one method, implemented by ReferenceBackend (plain C++
// loops) and VulkanBackend (one compute shader dispatch each). The recipe (MultiHeadAttention)
// is written once against this interface.
//
// Each public step method checks its inputs' shapes and dtypes (the same ShapeError, whatever
// the backend), makes the output, runs the backend's run_<op>, and reports the step to every
// attached Tracer. `step` is the step's name (q_proj, split_heads_k, …) and the method is its
// op (linear, split_heads, …): errors, traces and debug labels carry both.
//
// This header is what modules and programs call. A backend's author implements the hooks of
// backend_hooks.h (storage, run_<op>), which Backend inherits out of the callers' sight.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "vkattn/backends/backend_hooks.h"
#include "vkattn/errors.h"
#include "vkattn/tensor.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {

// Which features RoPE rotates together (checkpoints do not say; the wrong one gives other outputs):
// half — feature i with i + r/2 (GPT-NeoX, Hugging Face's rotate_half); pairs — 2i with 2i + 1
// (GPT-J, Meta's original Llama code).
enum class RotaryConvention { half, pairs };
// "half" / "pairs" -> the convention; ConfigError for another name.
RotaryConvention parse_rotary_convention(const std::string& name);

// How a checkpoint stretches RoPE past the positions it was first trained on (config.json's
// rope_scaling): not at all; linear — every inverse frequency divided by factor; llama3 (Llama
// 3.1's) — wavelengths 2π / inv_freq above original / low_freq_factor divided by factor, those
// below original / high_freq_factor kept, those between blended.
struct RopeScaling {
  enum class Type { none, linear, llama3 };
  Type type = Type::none;
  float factor = 1.0f;
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f;  // llama3's bands
  int64_t original_max_positions = 8192;                  // llama3: original_max_position_embeddings
};

// A tensor that lives on a backend. Cheap to copy: copies share the storage.
struct Value {
  std::string name;  // the input's name, or the step that produced it
  Shape shape;
  DType dtype = DType::float32;
  std::shared_ptr<Storage> storage;
  // float16 / bfloat16: a weight kept 16-bit (upload_matrix), which only linear (as its weight)
  // and embedding (as its table) read; every other step refuses it
  Narrow narrow = Narrow::none;

  int64_t dim(int64_t i) const { return shape.at(static_cast<size_t>(i < 0 ? static_cast<int64_t>(shape.size()) + i : i)); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

// A module's weights kept on one backend from pass to pass (Backend::upload_weight inside a
// KeepWeights scope), by scoped name, for the module numbered `owner` (new_weights_owner()). A
// KVCache holds those of the module decoding with it: each decoding step is a pass of its own.
struct KeptWeights {
  uint64_t owner = 0;
  std::map<std::string, Value> values;
  // The bytes they take on their backend (Backend::stored_bytes): 2 an element where kept 16-bit
  uint64_t bytes() const;
};
// A number no other module's weights have had in this process: a module takes one when made
// (its copies share it, and its weights, which do not change).
uint64_t new_weights_owner();

// The same numbers under another shape with as many elements, as torch's view: no step, no copy.
// (B, T, H, d) viewed as (B, T, E) is the same memory. ShapeError when the counts differ.
Value view(const Value& value, Shape shape);

// The device memory a backend's passes must fit in (VulkanBackend: its device's limits), each
// limit with the name a message gives it.
struct MemoryLimits {
  std::string device;
  uint64_t max_tensor_bytes = 0;  // one buffer
  std::string max_tensor_limit;   // "maxStorageBufferRange"
  uint64_t max_total_bytes = 0;   // everything a pass holds at once
  std::string max_total_limit;    // "the largest device-local memory heap"
  // A tensor this large or larger may take the buffer of one the pass has finished with (of
  // exactly its size); a smaller one is counted as a buffer of its own. By default none reuses.
  uint64_t reuse_from_bytes = std::numeric_limits<uint64_t>::max();
  // The floats a GEMM step takes besides its output, given back when it ends (VulkanBackend: B
  // rewritten for the broadcast tiling, shaders/gemm_pack.comp), 0 for none, none where unset:
  // `product` linear or attention_scores, A (batch, M, K) with its columns read from `a_heads`
  // heads (0: in place), B (batch / group, N, K), 16-bit where b_format says (upload_matrix).
  std::function<int64_t(const std::string& product, int64_t batch, int64_t group, int64_t M, int64_t N, int64_t K,
                        int64_t a_heads, Narrow b_format)>
      gemm_scratch_floats;
};

// DeviceError "NAME needs X MiB in one buffer, Y MiB over LIMIT (Z MiB) of 'DEVICE'" when a
// tensor of `count` floats does not fit.
void check_tensor_fits(const MemoryLimits& limits, const std::string& name, int64_t count);

class Backend : protected BackendHooks {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string name() const = 0;         // "cpu" or "gpu"
  virtual std::string device_name() const = 0;  // "reference (C++)", "llvmpipe (LLVM 15…)"

  // Host -> backend. Does not wait for anything.
  Value upload(const std::string& name, const Tensor& tensor);
  // upload() for a module's weight, which is the same in every pass. Inside a KeepWeights scope
  // the backend keeps it, and later passes in such a scope take the kept copy (same owner, scoped
  // name and shape) instead of uploading it again: a decoder uploads its weights on its first
  // step only. Elsewhere the same as upload().
  Value upload_weight(const std::string& name, const Tensor& tensor);
  // upload_weight() for a matrix that only linear (as its weight) or embedding (as its table)
  // reads: a float16 or bfloat16 checkpoint's (tensor.narrow) stays so where the backend
  // keeps_16bit(), 2 bytes an element, and the shader widens each element to fp32 as it reads it:
  // the same numbers as from the widened copy, in half the memory and half the bytes read.
  Value upload_matrix(const std::string& name, const Tensor& tensor);
  // Whether upload_matrix keeps 16-bit weights so (VulkanBackend: yes; the CPU reference keeps
  // every tensor as float32).
  virtual bool keeps_16bit() const { return false; }
  // The bytes `value` takes on the backend: 4 an element, 2 where kept 16-bit.
  static uint64_t stored_bytes(const Value& value);
  // Where upload_weight keeps weights from now on (null: nowhere); returns where it kept them.
  KeptWeights* keep_weights_in(KeptWeights* kept) {
    std::swap(kept, kept_);
    return kept;
  }
  // Backend -> host. On the GPU this submits everything recorded so far and waits for it.
  Tensor download(const Value& value);
  // A tensor already on this backend as a pass's input (a module's forward on device tensors):
  // the same value. The sizing backend of a preflight counts it as an input of its shape.
  virtual Value input(const Value& resident) { return resident; }
  // The bytes upload() and upload_weight() have taken from the host (a kept weight takes none)
  // and download() has given back, since the backend was made: what crosses between the two.
  uint64_t uploaded_bytes() const { return uploaded_bytes_; }
  uint64_t downloaded_bytes() const { return downloaded_bytes_; }

  // A residual_add after a projection (Backend::linear's and merge_heads_linear's `residual`):
  // its step's name, scoped where the sub-block adds it, and the tensor the projection's product
  // is added to, as residual_add(step, x, product) takes them. residual_after() scopes `step` now,
  // so that a projection in a deeper scope (self_attn.out_proj) adds it as layers.0.residual_add1.
  struct ResidualAfter {
    std::string step;
    const Value* x = nullptr;
  };
  ResidualAfter residual_after(const std::string& step, const Value& x) const { return {scoped(step), &x}; }

  // y = x · Wᵀ + b               x (…, K), weight (M, K), bias (M) or null -> (…, M)
  // With `residual`, then residual_add: -> residual.x + y (…, M), the residual_add's output.
  // Where the backend folds into stores (folds_into_store()) and no tracer wants values, the
  // product's store adds it: one dispatch, and the product never written and read again. The
  // trace still lists both steps: residual_add with 0 µs and "folded into linear2's store". A
  // trace with values runs the two steps, so that it shows the product before the sum. The
  // numbers are the two steps', bit for bit on lavapipe and SwiftShader.
  Value linear(const std::string& step, const Value& x, const Value& weight, const Value* bias,
               const ResidualAfter* residual = nullptr);
  // (B, T, E) -> (B, H, T, E/H). With chunks = n: x (B, T, n·E) holds n tensors side by side on
  // the feature axis (the packed in_proj's q, k, v: n = 3) and chunk c's heads are split out, as
  // torch's x.chunk(n, -1)[c].view(B, T, H, d).transpose(1, 2).
  Value split_heads(const std::string& step, const Value& x, int64_t heads, int64_t chunks = 1, int64_t chunk = 0);
  // (…, T, C) + row (C) -> (…, T+1, C); null row appends zeros
  Value append_row(const std::string& step, const Value& x, const Value* row);
  // Grouped-query attention: the steps that read keys or values (attention_scores,
  // attention_values, flash_attention, flash_decoding) take them with H_kv heads, H_kv dividing
  // the queries' H (H_kv = 1: multi-query attention); query head h reads key/value head
  // h / (H / H_kv), as torch's repeat_interleave(H / H_kv, dim=1) would copy them, without the copy.

  // Q (B, H, L, d) · K (B, H_kv, S, d)ᵀ / √d -> (B, H, L, S)
  Value attention_scores(const std::string& step, const Value& q, const Value& k);
  // scores (B, H, L, S) + attn_mask (L, S) | (B·H, L, S) + key_padding_mask (B, S), causal
  // -inf above the diagonal. Masks are additive float (a bool mask becomes 0 / -inf first).
  // window W > 0 (causal only; Mistral's sliding window): query i sees keys i - W < j <= i, the
  // last W, and the others are -inf too.
  Value attention_mask(const std::string& step, const Value& scores, const Value* attn_mask,
                       const Value* key_padding_mask, bool causal, int64_t window = 0);
  // The fused path: attention_scores, attention_mask, softmax and attention_values in one step
  // that never holds the (L, S) scores (an online softmax per query row). Q (B, H, L, d), K and
  // V (B, H_kv, S, d), masks and window as attention_mask's -> (B, H, L, d); a fully masked row
  // gives zeros. Keys outside every row's causal window are not visited at all.
  Value flash_attention(const std::string& step, const Value& q, const Value& k, const Value& v,
                        const Value* attn_mask, const Value* key_padding_mask, bool causal, int64_t window = 0);
  // row-wise over the last dim; a fully masked row gives zeros
  Value softmax(const std::string& step, const Value& x);
  // P (B, H, L, S) · V (B, H_kv, S, d) -> (B, H, L, d)
  Value attention_values(const std::string& step, const Value& p, const Value& v);
  // (B, H, T, d) -> (B, T, H·d)
  Value merge_heads(const std::string& step, const Value& x);

  // ---- layout steps folded into their neighbours --------------------------------------------
  // Where a backend folds layout steps (folds_layout_steps(): VulkanBackend unless told not to),
  // split_heads and merge_heads beside a projection copy nothing: the projection stores its
  // product in (B, H, T, d) at once, or reads the heads where they are. The trace still lists
  // both steps: the layout step with 0 µs and the words "folded into q_proj's store", the
  // projection's tensor read back in its own order (B, T, M) (its output's stored_as says how
  // it lies). Elsewhere the two steps run as written. The numbers are the same either way, bit
  // for bit: only the addresses differ.
  //
  // linear then split_heads: x (B, T, K) · Wᵀ + b -> (B, T, M) -> (B, H, T, M/H)
  Value linear_split_heads(const std::string& linear_step, const std::string& split_step, const Value& x,
                           const Value& weight, const Value* bias, int64_t heads);
  // merge_heads then linear: heads (B, H, T, d) -> (B, T, H·d) -> · Wᵀ + b -> (B, T, M), then
  // + residual.x as linear's `residual` (attention's out_proj and the residual_add after it).
  Value merge_heads_linear(const std::string& merge_step, const std::string& linear_step, const Value& heads,
                           const Value& weight, const Value* bias, const ResidualAfter* residual = nullptr);
  virtual bool folds_layout_steps() const { return false; }
  // From the next step on, folds the layout steps (true) or runs them as copies (false). A backend
  // that cannot fold takes false and refuses true (ConfigError naming it).
  virtual void fold_layout_steps(bool fold);
  // (B, H, L, S) -> (B, L, S), mean over H
  Value average_heads(const std::string& step, const Value& p);

  // ---- decoding with a key/value cache (KVCache) -------------------------------------------------
  // upload() of a cache's first contents (KVCache's zeros), rounded to `format` (KVCache's dtype;
  // none: as they are): float16 or bfloat16 numbers 2 bytes each on a backend that keeps_16bit(),
  // the same numbers as float32 on the CPU reference. kv_cache_append rounds what it writes.
  Value upload_cache(const std::string& name, const Tensor& contents, Narrow format);
  // Writes rows (B, H, T, d) — the T newest positions' keys or values — into `cache`
  // (B, H, C, d) at rows position … position + T - 1, in place, and returns the cache (the same
  // storage: its later rows keep what they held). ShapeError naming the capacity C when
  // position + T > C: a cache never wraps or overwrites silently.
  Value kv_cache_append(const std::string& step, const Value& cache, const Value& rows, int64_t position);
  // Attention of q (B, H, L, d) — the L newest positions, S - L … S - 1 — over the first
  // S = `length` rows of the caches k and v (B, H_kv, C, d), the keys split into `parts` ranges
  // (0: decoding_parts()) that run in parallel, each with its own online softmax (flash-decoding).
  // key_padding_mask (B, S) additive, or null; causal: query i sees keys j <= S - L + i, and with
  // a window W > 0 only keys j > S - L + i - W.
  // -> partials (B, H, L, parts, d + 2): each part's unnormalised output, its max m and sum l.
  Value flash_decoding(const std::string& step, const Value& q, const Value& k, const Value& v, int64_t length,
                       const Value* key_padding_mask, bool causal, int64_t window, int64_t parts = 0);
  // flash_decoding's parts merged: (B, H, L, P, d + 2) -> (B, H, L, d); zeros for a row that saw no key
  Value attention_combine(const std::string& step, const Value& partials);
  // flash_decoding then attention_combine: q's attention over the caches, (B, H, L, d). Where the
  // backend combines_parts() of the split and no tracer wants values, flash_decoding's
  // workgroups each hold every part of their rows and merge them once all are written: one
  // dispatch, and no barrier between two. The trace still lists both steps: attention_combine
  // with 0 µs and the words "folded into flash_decoding". A trace with values runs the two
  // steps. The merge is the same function either way (shaders/combine_parts.glsl).
  Value flash_decoding_combine(const std::string& decoding_step, const std::string& combine_step, const Value& q,
                               const Value& k, const Value& v, int64_t length, const Value* key_padding_mask,
                               bool causal, int64_t window, int64_t parts = 0);
  // Whether flash_decoding's own dispatch can merge a split of `parts`, each walked by
  // `part_lanes` lanes (flash_decoding_combine)
  virtual bool combines_parts(int64_t /*parts*/, uint32_t /*part_lanes*/ = 0) const { return false; }
  // The parts flash_decoding splits `length` keys into for `rows` (B·H·L) query rows of d: by
  // rule, enough (row, part) pairs to fill decoding_lanes() invocations, each part at least 32
  // keys; a VulkanBackend that tunes measures the counts once per shape class instead, on the
  // step's own problem: `queries` (L) rows a head, over `key_rows` (B·H_kv) heads of cached keys
  // (0: one a query head).
  virtual int64_t decoding_parts(int64_t rows, int64_t length, int64_t d, int64_t queries = 1, int64_t key_rows = 0);
  // The lanes that walk each of those parts together: 0, an invocation a part, unless the backend
  // has a build for lanes (VulkanBackend on a GPU)
  virtual uint32_t decoding_part_lanes(int64_t /*rows*/, int64_t /*length*/, int64_t /*d*/, int64_t /*queries*/ = 1,
                                       int64_t /*key_rows*/ = 0) {
    return 0;
  }
  // The invocations a decode step should offer the device: 256 on a CPU, many more on a GPU.
  virtual int64_t decoding_lanes() const { return 256; }

  // Attention without weights may take either path; a module asking for neither (automatic)
  // takes the fused one unless its backend prefers the unfused steps for this problem: a
  // VulkanBackend that tunes times both once per shape class (engine/backends/tuner.h).
  struct AttentionProblem {
    int64_t batch = 1, heads = 1, L = 1, S = 1, d = 1;
    bool causal = false;
  };
  virtual bool prefers_fused(const AttentionProblem& problem) {
    (void)problem;
    return true;
  }

  // ---- rotary position embeddings (RoPE) --------------------------------------------------------
  // x (B, H, T, d) — queries or keys after split_heads — with row t at position offset + t: its
  // first rotary_dims features (r: even, <= d; 0 means d) rotated pair by pair, pair i by the
  // angle position · inv_freq[i], inv_freq = 1 / θ^(2i/r) computed on the host in float32 as torch
  // computes it (then scaled as `scaling` says) and uploaded as the step's second input,
  // "<step>.inv_freq" (r/2,); the other features pass unchanged. Which features pair up is the
  // checkpoint's convention (RotaryConvention).
  Value rotary_embedding(const std::string& step, const Value& x, int64_t offset, float theta, int64_t rotary_dims,
                         RotaryConvention convention, const RopeScaling& scaling = {});

  // ---- the encoder block's steps (TransformerEncoderLayer) and the classifier's ----------------
  // Normalised over the last dim with its biased variance, eps inside the square root, then
  // scaled and shifted: torch's LayerNorm.   x (…, E), weight and bias (E) -> (…, E)
  Value layer_norm(const std::string& step, const Value& x, const Value& weight, const Value& bias, float eps);
  // x / √(mean(x²) + eps) · weight over the last dim: Llama's RMSNorm (no mean, no bias).
  //   x (…, E), weight (E) -> (…, E)
  Value rms_norm(const std::string& step, const Value& x, const Value& weight, float eps);
  // x · Φ(x) = x/2 · (1 + erf(x/√2)): torch's exact GELU (approximate='none'). Any shape.
  Value gelu(const std::string& step, const Value& x);
  // x/2 · (1 + tanh(√(2/π) · (x + 0.044715 · x³))): torch's gelu(approximate='tanh'), GPT-2's
  // gelu_new. Any shape.
  Value gelu_tanh(const std::string& step, const Value& x);
  // max(x, 0). Any shape.
  Value relu(const std::string& step, const Value& x);
  // x + residual, two tensors of one shape: the skip connection around a sub-block.
  Value residual_add(const std::string& step, const Value& x, const Value& residual);
  // x · sigmoid(x): torch's silu (Llama's act_fn). Any shape.
  Value silu(const std::string& step, const Value& x);
  // tanh(x): BERT's pooler activation. Any shape.
  Value tanh(const std::string& step, const Value& x);
  // The activation step named: relu, gelu, gelu_tanh, silu or tanh (none: x itself).
  Value activation(const std::string& step, ActivationStep activation, const Value& x);
  // linear then an activation step: x (…, K) · Wᵀ + b -> (…, M) -> activation (…, M). Where the
  // backend folds into stores (folds_into_store(): VulkanBackend unless told not to) and no
  // tracer wants values, linear's store applies the activation to each product: one dispatch, and
  // no (…, M) tensor written and read again between the two (a feed-forward's widest). The trace
  // still lists both steps: the activation with 0 µs and the words "folded into linear1's store".
  // A trace with values runs the two steps, so that it shows the product before the activation.
  // The activation computes the same function either way (shaders/activations.glsl).
  Value linear_activation(const std::string& linear_step, const std::string& activation_step, ActivationStep activation,
                          const Value& x, const Value& weight, const Value* bias);
  // Whether linear's store does the element-wise step after it: an activation
  // (linear_activation) or a residual_add (linear's `residual`).
  virtual bool folds_into_store() const { return false; }
  // x · other, two tensors of one shape: SwiGLU's silu(gate) · up.
  Value multiply(const std::string& step, const Value& x, const Value& other);
  // Rows of `table` picked by token id: ids (B, T) int64, table (V, E) -> (B, T, E), each times
  // `scale` (Gemma's √E: GemmaModel's normalizer, applied as it embeds). An id outside [0, V)
  // gives a row of NaN (modules check ids on the host before they upload them).
  Value embedding(const std::string& step, const Value& ids, const Value& table, float scale = 1.0f);
  // x + the first T rows of a learnt position table: x (B, T, E), table (P, E), P >= T -> (B, T, E)
  Value positional_encoding(const std::string& step, const Value& x, const Value& table);
  // The mean over the positions: (B, T, E) -> (B, E)
  Value mean_pool(const std::string& step, const Value& x);
  // Each sequence's first position, BERT's [CLS]: (B, T, E) -> (B, E)
  Value first_token(const std::string& step, const Value& x);
  // Each sequence's last n positions, x[:, -n:] (a language model's logits_to_keep):
  // (B, T, E) -> (B, n, E), 1 <= n <= T
  Value last_tokens(const std::string& step, const Value& x, int64_t n);

  // A step computed on the host: the inputs read back, `compute` run on them, its result stored
  // on this backend and traced like any step (`dims` names its axes). For trying out a new or a
  // hand-written version of a step; on the GPU it waits for the work before it.
  using HostStep = std::function<Tensor(const std::vector<Tensor>& inputs)>;
  Value host_step(const std::string& step, const std::string& op, const std::vector<const Value*>& inputs,
                  std::vector<std::string> dims, const HostStep& compute);

  // Runs `recipe` — a module's pass: its uploads and steps — on a SizingBackend, which computes
  // and allocates nothing, and checks every tensor it would create against memory_limits(), and
  // the buffers the pass would allocate together: every tensor's, except that one of
  // reuse_from_bytes or more takes the buffer of a finished tensor of its size, as a
  // VulkanBackend pass does (a bound from above: the real pass reuses some smaller ones too).
  // Throws the DeviceError that names the limit and the excess before anything is allocated;
  // nothing to check on a backend without limits (the reference).
  void preflight(const std::string& pass, const std::function<void(Backend&)>& recipe);
  virtual std::optional<MemoryLimits> memory_limits() const { return std::nullopt; }

  // Step scopes: inside push_scope("layers.0") every step and uploaded input is named
  // "layers.0.<name>" (in traces, errors and debug labels); scopes nest, as PyTorch's module
  // paths do ("layers.0.self_attn.out_proj"). StepScope pushes and pops one.
  void push_scope(const std::string& scope);
  void pop_scope() noexcept;
  std::string scoped(const std::string& name) const { return scope_ + name; }

  // Progress of a long step that runs as several submissions (VulkanBackendOptions::
  // max_submission_seconds): after each, how much of the step is done and how long the pass has
  // taken. The callback may throw (Interrupted) to stop the pass there; it then fails cleanly.
  struct Progress {
    std::string step;
    double done = 0;     // of the step, 0..1
    double seconds = 0;  // since the pass began
  };
  void on_progress(std::function<void(const Progress&)> callback) { progress_ = std::move(callback); }

  // Tracing. Tracers are not owned and must outlive their attachment.
  void add_tracer(Tracer& tracer);
  void remove_tracer(Tracer& tracer);
  // A Backend serves one thread at a time (its recorder, its buffers and its pass are its own);
  // threads each take their own, and may share one Context and one module. A pass begun while
  // another thread's pass is open on this backend is a DeviceError saying so, not a race.
  // Starts a new pass: step indices restart at 0 and tracers hear `pass`'s name. Passes nest: a
  // pass begun inside another (a module's forward inside a tutorial's part) is part of it.
  void begin_pass(const std::string& pass);
  // Ends it: tracers get every step's time (the GPU's once its work is done) and, when the pass
  // failed, the error; a nested pass's end only closes it. Never throws: it may run while an
  // exception is on its way out.
  void end_pass(const std::optional<std::string>& error = std::nullopt) noexcept;

 protected:
  // Tells the on_progress callback (if any) that `done` of `step` is done (it may throw).
  void report_progress(const std::string& step, double done);

 private:
  Value make_output(const std::string& step, Shape shape);
  // upload() and upload_weight() with the tensor stored `as` (BackendHooks::store)
  Value upload_as(const std::string& name, const Tensor& tensor, Narrow as);
  Value keep_weight(const std::string& name, const Tensor& tensor, Narrow as);
  using Clock = std::chrono::steady_clock;
  // Runs step `step` and remembers its host time (at_step names its failures).
  template <class F>
  void timed(const std::string& step, F&& run_step) {
    auto start = Clock::now();
    at_step(step, run_step);
    auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - pass_start_).count(); };
    host_times_.push_back(StepTime::between(us(start), us(Clock::now())));
  }
  // Runs `work` on behalf of `where` (a step, "reading back softmax", an uploaded tensor): a
  // failure that does not name it yet (a Vulkan error, a device error from below) is rethrown as
  // a DeviceError that does; shape, config and file errors pass unchanged.
  void at_step(const std::string& where, const std::function<void()>& work);
  // Tells the tracers how the pass ended (end_pass's part that may meet a failing device).
  void report_pass_end(const std::optional<std::string>& error) noexcept;
  // Tells the tracers about the step just run (called only when tracing()); `dims` names the
  // output's axes. Folding's `note`: a layout step that ran inside a neighbour
  // (StepEvent::folded); `stored_as`: the output lies in that order, and `reorder` turns what is
  // read back into the output's own order.
  struct Folding {
    std::string note;
    Shape stored_as;
    std::function<Tensor(Tensor)> reorder;
  };
  void report(const std::string& step, const char* op, std::vector<TensorInfo> inputs, const Value& output,
              std::vector<std::string> dims, const Folding& folding = {});
  // Whether a tracer listens: the steps call report() only then, so that a pass without one (and
  // every preflight's sizing run) builds no names, shapes or notes for it.
  bool tracing() const { return !tracers_.empty(); }
  // Whether a tracer listening wants each step's values
  bool wants_values() const;
  // A folded layout step's time: none, at the end of the step before it.
  void fold_time();
  // linear's checks (a ShapeError naming `step`); its N (rows), K (in) and M (out features)
  struct LinearSizes {
    int64_t N, K, M;
  };
  LinearSizes check_linear(const std::string& step, const Value& x, const Value& weight, const Value* bias);
  // residual_add's checks: x and residual float32, of one shape (a ShapeError naming `step`)
  void check_residual_add(const std::string& step, const Value& x, const Value& residual);
  // residual_add with `step` scoped already
  Value add_residual(const std::string& step, const Value& x, const Value& residual);
  // The output of linear `step` (scoped), a product of `shape`: with a residual folded in, the
  // residual_add's, which linear writes (its checks first).
  Value linear_output(const std::string& step, const Shape& shape, const ResidualAfter* residual);
  // A residual_add folded into `linear`'s store (its step scoped), which wrote `sum`: the time and
  // the trace's row of the step, for a product of `shape`
  void report_folded_residual(const ResidualAfter& residual, const std::string& linear, const Shape& shape,
                              const Value& sum);
  // flash_decoding's checks (a ShapeError naming `step`), its sizes and its split (parts 0:
  // decoding_parts())
  struct DecodingSizes {
    int64_t B, H, L, d, C, S, group, parts;
    uint32_t part_lanes;  // decoding_part_lanes()
  };
  DecodingSizes check_flash_decoding(const std::string& step, const Value& q, const Value& k, const Value& v,
                                     int64_t length, const Value* key_padding_mask, bool causal, int64_t window,
                                     int64_t parts);
  // flash_decoding's dispatch into `partials` (B, H, L, P, d + 2), and with `combined` not null the
  // parts merged into it too; its time and its trace row
  void flash_decoding_into(const std::string& step, const DecodingSizes& sizes, const Value& q, const Value& k,
                           const Value& v, const Value* key_padding_mask, bool causal, int64_t window,
                           const Value& partials, Storage* combined);
  // A tensor the pass takes from the host, to the tracers that want inputs.
  void report_input(const std::string& scoped_name, const Tensor& tensor);

  std::vector<Tracer*> tracers_;
  std::string scope_;                 // "layers.0.self_attn." inside two scopes
  std::vector<size_t> scope_lengths_;  // scope_'s length before each push
  int pass_depth_ = 0;
  int next_index_ = 0;
  Clock::time_point pass_start_ = Clock::now();
  std::vector<StepTime> host_times_;
  std::vector<bool> folded_;  // by step index: a layout step folded into a neighbour (no dispatch)
  std::function<void(const Progress&)> progress_;
  std::atomic<std::thread::id> pass_thread_{};  // the thread whose pass is open, or none
  KeptWeights* kept_ = nullptr;                 // upload_weight's, inside a KeepWeights scope
  uint64_t uploaded_bytes_ = 0, downloaded_bytes_ = 0;
};

// Attaches a tracer to a backend for as long as it lives (the tracer must outlive it).
class AttachedTracer {
 public:
  AttachedTracer(Backend& backend, Tracer& tracer) : backend_(backend), tracer_(tracer) {
    backend_.add_tracer(tracer_);
  }
  ~AttachedTracer() { backend_.remove_tracer(tracer_); }
  AttachedTracer(const AttachedTracer&) = delete;
  AttachedTracer& operator=(const AttachedTracer&) = delete;

 private:
  Backend& backend_;
  Tracer& tracer_;
};

// For as long as it lives, upload_weight on `backend` keeps `owner`'s weights in `kept` and takes
// them from there (nothing is kept where `kept` is null). Weights another owner left in `kept`
// are dropped first. Made around a whole pass (run_pass): left by an exception, it drops every
// kept weight, since a failed pass's uploads may never have run.
class KeepWeights {
 public:
  KeepWeights(Backend& backend, KeptWeights* kept, uint64_t owner);
  ~KeepWeights();
  KeepWeights(const KeepWeights&) = delete;
  KeepWeights& operator=(const KeepWeights&) = delete;

 private:
  Backend& backend_;
  KeptWeights* kept_;
  KeptWeights* previous_;
  int exceptions_;  // std::uncaught_exceptions() when made
};

// A sub-block's steps on its input that end with the residual_add after its last projection (a
// layer's attention, its feed-forward): f(in, residual) hands `residual` to that projection
// (Backend::linear, merge_heads_linear), which returns residual.x + … — the sum, added by its
// store where the backend folds.
using SubBlock = std::function<Value(const Value& in, const Backend::ResidualAfter& residual)>;

// Pushes a step scope for as long as it lives.
class StepScope {
 public:
  StepScope(Backend& backend, const std::string& scope) : backend_(backend) { backend_.push_scope(scope); }
  ~StepScope() { backend_.pop_scope(); }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  Backend& backend_;
};

}  // namespace vkattn
