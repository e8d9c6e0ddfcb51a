// vkattn decode: a PyTorch nn.TransformerDecoder (or one nn.TransformerDecoderLayer), from its
// state_dict in a safetensors file, on batch-first .npy inputs — the target and the encoder's
// output, memory — on the GPU (or the CPU reference with --backend cpu). The output is written
// whole or not at all.
#include <filesystem>
#include <iostream>
#include <memory>
#include <vector>

#include "engine/io/file.h"
#include "tools/commands.h"
#include "tools/interrupt.h"
#include "tools/inputs.h"
#include "tools/validators.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/transformer_decoder.h"
#include "vkattn/tracing/trace_dump.h"

namespace vkattn::cli {

namespace {

nlohmann::json trace_config(const DecodeArgs& a, const io::DecoderState& state) {
  const auto& c = state.config;
  nlohmann::json files = {{"weights", a.weights}, {"tgt", a.tgt}, {"memory", a.memory}};
  for (auto [name, path] : {std::pair{"tgt_mask", &a.tgt_mask}, {"memory_mask", &a.memory_mask},
                            {"tgt_key_padding_mask", &a.tgt_key_padding_mask},
                            {"memory_key_padding_mask", &a.memory_key_padding_mask}}) {
    if (!path->empty()) files[name] = *path;
  }
  return {{"module", state.single_layer ? "nn.TransformerDecoderLayer" : "nn.TransformerDecoder"},
          {"num_layers", c.num_layers}, {"d_model", c.layer.d_model}, {"nhead", c.layer.nhead},
          {"dim_feedforward", c.layer.dim_feedforward}, {"activation", activation_name(c.layer.activation)},
          {"norm_first", c.layer.norm_first}, {"layer_norm_eps", c.layer.layer_norm_eps},
          {"final_norm", c.final_norm}, {"batch_first", true}, {"tgt_is_causal", a.causal},
          {"attention", a.attention}, {"files", files}};
}

}  // namespace

CLI::App* add_decode(CLI::App& app, DecodeArgs& a) {
  auto* cmd = app.add_subcommand(
      "decode", "run a PyTorch nn.TransformerDecoder (or one layer's) state_dict on .npy target and memory");
  cmd->add_option("--weights", a.weights,
                  "W.safetensors: the state_dict under PyTorch's names (layers.N.… and norm.…, or one layer's)")
      ->required();
  cmd->add_option("--tgt", a.tgt, "T.npy: the target, float (B, T, E) batch-first, or unbatched (T, E)")->required();
  cmd->add_option("--memory", a.memory, "M.npy: the encoder's output, float (B, S, E), or unbatched (S, E)")
      ->required();
  cmd->add_option("--heads", a.heads, "nhead; default: num_heads in the weight file's __metadata__")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_layer_args(*cmd, a.layer);
  cmd->add_flag("--causal", a.causal, "block each target position from later ones (tgt_is_causal, with any --tgt-mask)");
  cmd->add_option("--tgt-mask", a.tgt_mask, "A.npy (T, T) or (B*H, T, T): bool True blocks, or float added");
  cmd->add_option("--memory-mask", a.memory_mask, "A.npy (T, S) or (B*H, T, S): bool True blocks, or float added");
  cmd->add_option("--tgt-key-padding-mask", a.tgt_key_padding_mask,
                  "M.npy (B, T): bool True marks target padding no position attends to, or float added");
  cmd->add_option("--memory-key-padding-mask", a.memory_key_padding_mask,
                  "M.npy (B, S): bool True marks memory padding no position attends to, or float added");
  cmd->add_option("--attention", a.attention,
                  "auto (= fused: a decoder returns no weights), unfused (four steps) or fused (flash_attention)")
      ->check(CLI::IsMember({"auto", "unfused", "fused"}))
      ->capture_default_str();
  cmd->add_option("--backend", a.backend, "gpu (a Vulkan device) or cpu (the reference)")
      ->check(CLI::IsMember({"gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--device", a.device, "GPU index or name substring (see vkattn devices); default: the best");
  cmd->add_option("--out", a.out, "Y.npy: write the output, shaped like the target");
  auto* trace = cmd->add_option("--trace", a.trace, "DIR: print every step and write DIR/trace.json and DIR/timeline.json");
  cmd->add_flag("--trace-values", a.trace_values, "also read back every step's output: DIR/NNN_<step>.npy")->needs(trace);
  return cmd;
}

int run_decode(const DecodeArgs& a) {
  if (!a.out.empty()) io::check_output_path(a.out);
  auto state = io::load_decoder(a.weights, a.heads);
  auto& layer = state.config.layer;
  apply_layer_args(a.layer, layer);

  Tensor tgt = read_input(a.tgt, "tgt");
  Tensor memory = read_input(a.memory, "memory");
  DecoderOptions options;
  options.tgt_mask = read_mask(a.tgt_mask, "tgt mask");
  options.memory_mask = read_mask(a.memory_mask, "memory mask");
  options.tgt_key_padding_mask = read_mask(a.tgt_key_padding_mask, "tgt key padding mask");
  options.memory_key_padding_mask = read_mask(a.memory_key_padding_mask, "memory key padding mask");
  options.tgt_is_causal = a.causal;
  options.attention = parse_attention_path(a.attention);

  auto backend = make_watched_backend(a.backend, a.device);
  std::vector<std::unique_ptr<Tracer>> sinks;
  if (!a.trace.empty()) {
    backend->add_tracer(*sinks.emplace_back(std::make_unique<TraceDump>(a.trace, a.trace_values, trace_config(a, state))));
    backend->add_tracer(*sinks.emplace_back(std::make_unique<ConsoleTracer>(std::cout, a.trace_values)));
  }
  Tensor output =
      state.single_layer
          ? TransformerDecoderLayer(layer, std::move(state.weights.layers[0])).forward(*backend, tgt, memory, options)
          : TransformerDecoder(state.config, std::move(state.weights)).forward(*backend, tgt, memory, options);
  require_finite(output, "output");
  stop_if_interrupted();
  if (!a.out.empty()) io::write_npy(a.out, output);

  std::cout << backend->name() << " backend: " << backend->device_name() << "\n"
            << describe_stack("Decoder", state.config.layer, state.single_layer,
                              state.config.num_layers, state.config.final_norm)
            << " from " << a.weights << "\n";
  print_summary(output, "output", a.out);
  return 0;
}

}  // namespace vkattn::cli
