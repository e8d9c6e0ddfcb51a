#pragma once
// The vkattn subcommands. Each add_* registers its options on `app`; each run_* returns the exit
// code (0 success, 1 runtime failure) and throws vkattn errors, which main() turns into one line
// on stderr and exit 2 (bad input) or 1 (runtime failure).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "tools/inputs.h"
#include "vkattn/backends/backend.h"
#include "vkattn/backends/vulkan_backend.h"

namespace vkattn::cli {

CLI::App* add_devices(CLI::App& app);
int run_devices();
// "gpu" on `device` (an index or name substring; empty: VKATTN_DEVICE or the best), or "cpu",
// watched (progress of long steps, Ctrl-C between submissions). UsageError for a device that
// matches none, or a device given with cpu.
std::unique_ptr<Backend> make_watched_backend(const std::string& backend, const std::string& device,
                                              const VulkanBackendOptions& options = {});

struct TuneArgs {
  std::vector<std::string> shapes{"S1", "S2", "S3", "S4"};
  std::string device;
  bool again = false;  // forget the device's remembered plans first
};
CLI::App* add_tune(CLI::App& app, TuneArgs& args);
int run_tune(const TuneArgs& args);

struct DemoArgs {
  int64_t batch = 2, seq = 5, kv_seq = 0, embed = 16, heads = 4;
  bool causal = false;
  uint32_t seed = 0;
};
CLI::App* add_demo(CLI::App& app, DemoArgs& args);
int run_demo(const DemoArgs& args);

struct RunArgs {
  AttentionArgs inputs;
  std::string model, text;   // instead of the inputs: a hub checkpoint folder on a text
  std::optional<std::string> text_pair;  // an encoder's second text, joined to the first by its tokenizer
  std::string weights_dtype = "stored";  // or BF16, F16: --model's weights rounded as they are read
  int64_t top_k = 0;  // a masked LM's tokens shown at each [MASK] of the text (0: not given, 5 shown),
                      // a question answerer's answers (0: not given, 1 shown)
  int64_t max_answer_len = 0;  // a question answerer's longest answer in tokens (0: not given, 15)
  std::optional<int64_t> max_seq_len, doc_stride;  // a question answerer's windows (io::AnswerOptions')
  GroupedQueryArgs grouped;  // a grouped-query attention's RoPE, key/value heads and window
  std::string backend = "gpu";
  std::string device;
  std::string out, attn_weights;
  bool per_head_weights = false;
  std::string images;  // a directory for heatmaps of the attention weights
  std::string trace;  // a dump directory; with side_by_side, DIR/gpu and DIR/cpu
  bool trace_values = false;
  std::string attention = "auto";  // fused without weights, else unfused; or "unfused", "fused"
  bool pack_in_proj = false;  // self-attention's q, k, v projections as one in_proj GEMM
  bool side_by_side = false;  // run the GPU and the CPU reference, compare every step
  double atol = 1e-5, rtol = 1e-5;
  std::string report;  // an HTML page of the pass (or both passes, side by side), values and all
};
CLI::App* add_run(CLI::App& app, RunArgs& args);
int run_run(const RunArgs& args);

struct EncodeArgs {
  std::string weights, input;
  int64_t heads = 0;  // 0: from the weight file's __metadata__
  LayerArgs layer;
  std::string src_key_padding_mask, mask;
  bool causal = false;
  std::string attention = "auto";  // or "unfused", "fused"
  bool pack_in_proj = false;       // each self_attn's q, k, v projections as one in_proj GEMM
  std::string backend = "gpu";
  std::string device;
  std::string out;
  std::string trace;
  bool trace_values = false;
  std::string report;  // an HTML page of the pass, values and all
};
CLI::App* add_encode(CLI::App& app, EncodeArgs& args);
int run_encode(const EncodeArgs& args);

struct DecodeArgs {
  std::string weights, tgt, memory;
  int64_t heads = 0;  // 0: from the weight file's __metadata__
  LayerArgs layer;
  bool causal = false;  // tgt_is_causal
  std::string tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask;
  std::string attention = "auto";  // or "unfused", "fused"
  std::string backend = "gpu";
  std::string device;
  std::string out;
  std::string trace;
  bool trace_values = false;
};
CLI::App* add_decode(CLI::App& app, DecodeArgs& args);
int run_decode(const DecodeArgs& args);

struct GenerateArgs {
  std::string model, weights, prompt;  // --model DIR or --weights FILE
  std::string weights_dtype = "stored";  // or BF16, F16: --model's weights rounded to bfloat16, float16
  int64_t max_new_tokens = 100;
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: every token
  uint64_t seed = 0;
  bool no_cache = false;
  std::string cache_dtype = "F32";  // or F16, BF16: the numbers the KV cache keeps
  std::string backend = "gpu", device;
  bool json = false;
};
CLI::App* add_generate(CLI::App& app, GenerateArgs& args);
int run_generate(const GenerateArgs& args);

struct DiffArgs {
  std::string a, b;
  double atol = 1e-5, rtol = 1e-5;
};
CLI::App* add_diff(CLI::App& app, DiffArgs& args);
int run_diff(const DiffArgs& args);

struct ReportArgs {
  std::string dir, against, out, title;
  double atol = 1e-5, rtol = 1e-5;
};
CLI::App* add_report(CLI::App& app, ReportArgs& args);
int run_report(const ReportArgs& args);
// "report.html: 1.2 MB, 14 steps; first divergent step 9 merge_heads" after writing it.
void say_report_written(const std::string& file, const std::string& what);

struct CheckArgs {
  std::string dir;  // the user's tensors, <step>.npy
  AttentionArgs inputs;
  GroupedQueryArgs grouped;  // a grouped-query attention's
  LayerArgs layer;           // an encoder's or decoder's
  std::string memory, memory_mask, memory_key_padding_mask;  // a decoder's
  std::string model, text;   // instead of --weights and --query: a hub checkpoint folder on a text
  std::optional<std::string> text_pair;  // an encoder's second text, joined to the first by its tokenizer
  std::string weights_dtype = "stored";  // or BF16, F16: --model's weights rounded as they are read
  std::string backend = "gpu", device;
  double atol = 1e-4, rtol = 1e-4;
};
CLI::App* add_check(CLI::App& app, CheckArgs& args);
int run_check(const CheckArgs& args);

struct BenchArgs {
  int64_t batch = 1, seq = 128, kv_seq = 0, embed = 256, heads = 8;
  bool causal = false;
  std::string backend = "gpu", device;
  std::string attention = "auto";  // or "unfused", "fused"
  bool pack_in_proj = false;       // self-attention's q, k, v projections as one in_proj GEMM
  bool copy_layout_steps = false;  // split_heads and merge_heads as copies, not folded (GPU)
  std::optional<uint32_t> early_dispatches;  // sent before the readback (GPU; unset: the device's rule)
  bool resident = false;           // input and weights kept on the backend, output left there
  bool float16_products = false;   // the products in float16 on cooperative matrices (GPU)
  int iters = 10, warmup = 2;
  std::string tracing = "none";   // the tracer on each timed forward: none, shapes, values
  bool tracing_overhead = false;  // time all three, alternating
  bool json = false;
  uint32_t seed = 0;
};
CLI::App* add_bench(CLI::App& app, BenchArgs& args);
int run_bench(const BenchArgs& args);

// A usage problem found after parsing (exit 2), e.g. two outputs with one path.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether an error is the user's input (exit 2: usage, shapes, config, files) or a runtime
// failure (exit 1: no device, a Vulkan error, out of memory).
bool is_bad_input(const std::exception& e);

}  // namespace vkattn::cli
