// vkattn encode: a PyTorch nn.TransformerEncoder (or one nn.TransformerEncoderLayer), from its
// state_dict in a safetensors file, on a batch-first .npy input, on the GPU (or the CPU
// reference with --backend cpu). The output is written whole or not at all.
#include <filesystem>
#include <iostream>
#include <memory>
#include <vector>

#include "engine/io/file.h"
#include "tools/commands.h"
#include "tools/inputs.h"
#include "tools/interrupt.h"
#include "tools/validators.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tracing/report.h"
#include "vkattn/tracing/trace_dump.h"

namespace vkattn::cli {

namespace {

nlohmann::json trace_config(const EncodeArgs& a, const io::EncoderState& state) {
  const auto& c = state.config;
  nlohmann::json files = {{"weights", a.weights}, {"input", a.input}};
  if (!a.src_key_padding_mask.empty()) files["src_key_padding_mask"] = a.src_key_padding_mask;
  if (!a.mask.empty()) files["mask"] = a.mask;
  return {{"module", state.single_layer ? "nn.TransformerEncoderLayer" : "nn.TransformerEncoder"},
          {"num_layers", c.num_layers}, {"d_model", c.layer.d_model}, {"nhead", c.layer.nhead},
          {"dim_feedforward", c.layer.dim_feedforward}, {"activation", activation_name(c.layer.activation)},
          {"norm_first", c.layer.norm_first}, {"layer_norm_eps", c.layer.layer_norm_eps},
          {"final_norm", c.final_norm}, {"batch_first", true}, {"is_causal", a.causal},
          {"attention", a.attention}, {"pack_in_proj", a.pack_in_proj}, {"files", files}};
}

}  // namespace

CLI::App* add_encode(CLI::App& app, EncodeArgs& a) {
  auto* cmd = app.add_subcommand("encode", "run a PyTorch nn.TransformerEncoder (or one layer's) state_dict on a .npy input");
  cmd->add_option("--weights", a.weights,
                  "W.safetensors: the state_dict under PyTorch's names (layers.N.… and norm.…, or one layer's)")
      ->required();
  cmd->add_option("--input", a.input, "X.npy: float (B, L, E) batch-first, or unbatched (L, E)")->required();
  cmd->add_option("--heads", a.heads, "nhead; default: num_heads in the weight file's __metadata__")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_layer_args(*cmd, a.layer);
  cmd->add_option("--src-key-padding-mask", a.src_key_padding_mask,
                  "M.npy (B, L): bool True marks padding no position attends to, or float added");
  cmd->add_option("--mask", a.mask, "A.npy (L, L) or (B*H, L, L): bool True blocks, or float added (torch's mask)");
  cmd->add_flag("--causal", a.causal, "block each position from later ones (with any --mask)");
  cmd->add_option("--attention", a.attention,
                  "auto (= fused: an encoder returns no weights), unfused (scores, mask, softmax, values: four steps) or fused (one flash_attention step)")
      ->check(CLI::IsMember({"auto", "unfused", "fused"}))
      ->capture_default_str();
  cmd->add_flag("--pack-in-proj", a.pack_in_proj,
                "each layer's self-attention projects q, k and v with one in_proj GEMM, as PyTorch does");
  cmd->add_option("--backend", a.backend, "gpu (a Vulkan device) or cpu (the reference)")
      ->check(CLI::IsMember({"gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--device", a.device, "GPU index or name substring (see vkattn devices); default: the best");
  cmd->add_option("--out", a.out, "Y.npy: write the output, shaped like the input");
  auto* trace = cmd->add_option("--trace", a.trace, "DIR: print every step and write DIR/trace.json and DIR/timeline.json");
  cmd->add_flag("--trace-values", a.trace_values, "also read back every step's output: DIR/NNN_<step>.npy")->needs(trace);
  cmd->add_option("--report", a.report, "FILE.html: every step of the pass as one page to explore in a browser");
  return cmd;
}

int run_encode(const EncodeArgs& a) {
  for (const auto& path : {a.out, a.report})
    if (!path.empty()) io::check_output_path(path);
  auto state = io::load_encoder(a.weights, a.heads);
  auto& layer = state.config.layer;
  apply_layer_args(a.layer, layer);

  Tensor input = read_input(a.input, "input");
  EncoderOptions options;
  options.src_key_padding_mask = read_mask(a.src_key_padding_mask, "src key padding mask");
  options.mask = read_mask(a.mask, "mask");
  options.is_causal = a.causal;
  options.attention = parse_attention_path(a.attention);
  options.pack_in_proj = a.pack_in_proj;

  auto backend = make_watched_backend(a.backend, a.device);
  std::vector<std::unique_ptr<Tracer>> sinks;
  if (!a.trace.empty()) {
    backend->add_tracer(*sinks.emplace_back(std::make_unique<TraceDump>(a.trace, a.trace_values, trace_config(a, state))));
    backend->add_tracer(*sinks.emplace_back(std::make_unique<ConsoleTracer>(std::cout, a.trace_values)));
  }
  StepRecorder recorded(true);
  if (!a.report.empty()) backend->add_tracer(recorded);
  Tensor output = state.single_layer
                      ? TransformerEncoderLayer(layer, std::move(state.weights.layers[0])).forward(*backend, input, options)
                      : TransformerEncoder(state.config, std::move(state.weights)).forward(*backend, input, options);
  require_finite(output, "output");
  stop_if_interrupted();
  if (!a.out.empty()) io::write_npy(a.out, output);
  if (!a.report.empty()) {
    write_report(a.report, {{.title = "encoder", .pass = &recorded, .pass_label = backend->name()}},
                 {.title = "vkattn encode " + a.weights});
  }

  std::cout << backend->name() << " backend: " << backend->device_name() << "\n"
            << describe_stack("Encoder", state.config.layer, state.single_layer,
                              state.config.num_layers, state.config.final_norm)
            << " from " << a.weights << "\n";
  print_summary(output, "output", a.out);
  if (!a.report.empty()) say_report_written(a.report, "every step of the pass");
  return 0;
}

}  // namespace vkattn::cli
