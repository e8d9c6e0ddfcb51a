// vkattn run: a PyTorch nn.MultiheadAttention, from its state_dict in a safetensors file, on
// batch-first .npy inputs, on the GPU (or the CPU reference with --backend cpu). Outputs are
// written whole or not at all: every file is finished under a temporary name before any is
// renamed into place.
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/io/file.h"
#include "tools/commands.h"
#include "tools/first_forward.h"
#include "tools/inputs.h"
#include "tools/validators.h"
#include "vkattn/errors.h"
#include "vkattn/io/heatmap.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/side_by_side.h"
#include "vkattn/tracing/trace_dump.h"

namespace vkattn::cli {

namespace {

// What the trace records of the run: the module's config and the files it read.
nlohmann::json trace_config(const RunArgs& a, const MultiHeadAttentionConfig& c) {
  const AttentionArgs& in = a.inputs;
  nlohmann::json files = {{"weights", in.weights}, {"query", in.query}};
  for (auto [name, path] : {std::pair{"key", &in.key}, {"value", &in.value}, {"key_padding_mask", &in.key_padding_mask},
                            {"attn_mask", &in.attn_mask}}) {
    if (!path->empty()) files[name] = *path;
  }
  return {{"module", "nn.MultiheadAttention"}, {"embed_dim", c.embed_dim}, {"num_heads", c.num_heads},
          {"bias", c.bias}, {"add_bias_kv", c.add_bias_kv}, {"kdim", c.key_dim()}, {"vdim", c.value_dim()},
          {"batch_first", true}, {"is_causal", in.causal}, {"need_weights", !a.attn_weights.empty()},
          {"average_attn_weights", !a.per_head_weights}, {"attention", attention_path_name(resolve_attention(parse_attention_path(a.attention), !a.attn_weights.empty()))},
          {"pack_in_proj", a.pack_in_proj},
          {"files", files}};
}

}  // namespace

CLI::App* add_run(CLI::App& app, RunArgs& a) {
  auto* cmd = app.add_subcommand("run", "run a PyTorch nn.MultiheadAttention state_dict on .npy inputs");
  add_attention_args(*cmd, a.inputs);
  cmd->add_option("--attention", a.attention,
                  "auto (fused when no weights are written, else unfused), unfused (scores, mask, softmax, values: four steps) or fused (one flash_attention step, no weights)")
      ->check(CLI::IsMember({"auto", "unfused", "fused"}))
      ->capture_default_str();
  cmd->add_flag("--pack-in-proj", a.pack_in_proj,
                "self-attention: project q, k and v with one in_proj GEMM (B, L, E) -> (B, L, 3E), as PyTorch packs them");
  auto* backend = cmd->add_option("--backend", a.backend, "gpu (a Vulkan device) or cpu (the reference)")
                      ->check(CLI::IsMember({"gpu", "cpu"}))
                      ->capture_default_str();
  cmd->add_option("--device", a.device, "GPU index or name substring (see vkattn devices); default: the best");
  cmd->add_option("--out", a.out, "O.npy: write the output (B, L, E)");
  auto* weights = cmd->add_option("--attn-weights", a.attn_weights,
                                  "P.npy: write the attention weights (B, L, S), averaged over heads");
  cmd->add_flag("--per-head-weights", a.per_head_weights, "write the weights per head, (B, H, L, S)")->needs(weights);
  cmd->add_option("--images", a.images, "DIR: also draw the attention weights, one SVG heatmap per batch item (and head)")
      ->needs(weights);
  auto* trace = cmd->add_option("--trace", a.trace, "DIR: print every step and write DIR/trace.json and DIR/timeline.json");
  cmd->add_flag("--trace-values", a.trace_values, "also read back every step's output: DIR/NNN_<step>.npy")->needs(trace);
  auto* side = cmd->add_flag("--side-by-side", a.side_by_side,
                             "run on the GPU and the CPU reference; print each step's max |gpu - cpu| "
                             "(with --trace: DIR/gpu and DIR/cpu); write outputs only when every step agrees")
                   ->excludes(backend);
  cmd->add_option("--atol", a.atol, "--side-by-side's absolute tolerance")->capture_default_str()->check(kNonNegativeNumber)->needs(side);
  cmd->add_option("--rtol", a.rtol, "--side-by-side's relative tolerance (times |cpu|)")->capture_default_str()->check(kNonNegativeNumber)->needs(side);
  return cmd;
}

int run_run(const RunArgs& a) {
  if (!a.out.empty() && a.out == a.attn_weights) throw UsageError("--out and --attn-weights both name " + a.out);
  for (const auto& path : {a.out, a.attn_weights})
    if (!path.empty()) io::check_output_path(path);

  AttentionInputs in = read_attention_inputs(a.inputs);
  const MultiHeadAttention& mha = in.module;
  ForwardOptions& options = in.options;
  options.need_weights = !a.attn_weights.empty();
  options.average_attn_weights = !a.per_head_weights;
  options.attention = parse_attention_path(a.attention);
  options.pack_in_proj = a.pack_in_proj;

  // One pass, or two side by side (the GPU's is the result; the reference checks it).
  std::vector<std::unique_ptr<Backend>> backends;
  for (const std::string& name : a.side_by_side ? std::vector<std::string>{"gpu", "cpu"} : std::vector{a.backend}) {
    backends.push_back(make_backend(name, a.side_by_side && name == "cpu" ? "" : a.device));  // --device picks the GPU
  }
  // Side by side, the GPU's times are shown: its first forward, which makes the pipelines, is not.
  std::string first;
  if (a.side_by_side) {
    first = untimed_first_forward(
        [&] { mha.forward(*backends.front(), in.query, in.key_or_query(), in.value_or_query(), options); });
  }
  std::vector<std::unique_ptr<StepRecorder>> recorders;
  std::vector<std::unique_ptr<Tracer>> sinks;
  for (auto& backend : backends) {
    if (a.side_by_side) backend->add_tracer(*recorders.emplace_back(std::make_unique<StepRecorder>(true)));
    if (a.trace.empty()) continue;
    auto dir = a.side_by_side ? std::filesystem::path(a.trace) / backend->name() : std::filesystem::path(a.trace);
    backend->add_tracer(*sinks.emplace_back(std::make_unique<TraceDump>(dir, a.trace_values, trace_config(a, mha.config()))));
    if (!a.side_by_side) backend->add_tracer(*sinks.emplace_back(std::make_unique<ConsoleTracer>(std::cout, a.trace_values)));
  }
  // Side by side, a failing pass does not stop the other: the table shows how far each got.
  std::optional<AttentionResult> result_of_first;
  std::exception_ptr failure;
  for (auto& backend : backends) {
    try {
      AttentionResult r = mha.forward(*backend, in.query, in.key_or_query(), in.value_or_query(), options);
      if (!result_of_first) result_of_first = std::move(r);
    } catch (...) {
      if (!a.side_by_side) throw;
      if (!failure) failure = std::current_exception();
    }
  }
  if (a.side_by_side) {
    SideBySide table(*recorders[0], *recorders[1], a.atol, a.rtol);
    std::cout << first;
    table.print(std::cout);
    if (failure) std::rethrow_exception(failure);
    if (!table.agree()) {
      const auto& step = table.rows()[*table.first_divergent()].event();
      throw std::runtime_error("the gpu and cpu passes disagree from step " + std::to_string(step.index) + " " +
                               step.name + " on; nothing was written");
    }
  }
  const AttentionResult& result = *result_of_first;  // the GPU's, side by side
  const Backend& backend = *backends.front();
  require_finite(result.output, "output");
  if (result.weights) require_finite(*result.weights, "attention weights");

  std::vector<io::PendingFile> files;
  if (!a.out.empty()) files.emplace_back(a.out, io::encode_npy(result.output));
  if (result.weights) files.emplace_back(a.attn_weights, io::encode_npy(*result.weights));
  for (auto& file : files) file.commit();
  std::vector<std::filesystem::path> images;
  if (!a.images.empty()) {
    std::filesystem::create_directories(a.images);
    const bool batched = result.weights->rank() == (a.per_head_weights ? 4 : 3);
    std::vector<std::string> dims = batched ? std::vector<std::string>{"b"} : std::vector<std::string>{};
    if (a.per_head_weights) dims.push_back("h");
    images = io::write_heatmaps(a.images, "attn_weights", *result.weights, dims,
                                {.title = a.per_head_weights ? "attention weights" : "attention weights, averaged over heads"});
  }

  const auto& c = mha.config();
  std::cout << backend.name() << " backend: " << backend.device_name() << (a.side_by_side ? ", checked by the cpu reference" : "") << "\n"
            << "nn.MultiheadAttention(embed_dim=" << c.embed_dim << ", num_heads=" << c.num_heads
            << ", bias=" << (c.bias ? "True" : "False") << ", add_bias_kv=" << (c.add_bias_kv ? "True" : "False")
            << ", kdim=" << c.key_dim() << ", vdim=" << c.value_dim() << ", batch_first=True) from " << a.inputs.weights << "\n";
  print_summary(result.output, "output", a.out);
  if (result.weights) {
    print_summary(*result.weights, a.per_head_weights ? "attention weights per head" : "attention weights averaged over heads",
                  a.attn_weights);
  }
  if (!images.empty()) std::cout << images.size() << " heatmap" << (images.size() > 1 ? "s" : "") << " -> " << a.images << "/attn_weights*.svg\n";
  return 0;
}

bool is_bad_input(const std::exception& e) {
  return dynamic_cast<const UsageError*>(&e) || dynamic_cast<const ShapeError*>(&e) ||
         dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const FileError*>(&e);
}

}  // namespace vkattn::cli
