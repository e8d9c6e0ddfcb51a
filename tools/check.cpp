// vkattn check DIR: the user's own intermediate tensors, DIR/<step>.npy under vkattn's step names
// (q_proj.npy, split_heads_q.npy, attention_scores.npy, softmax.npy, …), against vkattn's recipe
// run on the same weights and inputs: every recorded step compared in the recipe's order, the
// first divergent one named with its decoded index, both values and a diagnosis. Exit 0 when
// every recorded step agrees, 1 when one differs, 2 for bad input (a name that is no step
// included: the report says which step it likely means).
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "tools/commands.h"
#include "tools/inputs.h"
#include "tools/validators.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/tracing/check.h"

namespace vkattn::cli {

CLI::App* add_check(CLI::App& app, CheckArgs& a) {
  auto* cmd = app.add_subcommand("check", "check your own attention's tensors (DIR/<step>.npy) against vkattn's recipe");
  cmd->add_option("DIR", a.dir, "a directory of .npy files named by vkattn's steps: q_proj.npy, softmax.npy, …")
      ->required();
  cmd->add_option("--weights", a.weights, "W.safetensors: the module's state_dict under PyTorch's names")->required();
  cmd->add_option("--query", a.query, "Q.npy: float (B, L, E) batch-first, or unbatched (L, E)")->required();
  auto* key = cmd->add_option("--key", a.key, "K.npy: (B, S, kdim); with --value; default: the query");
  auto* value = cmd->add_option("--value", a.value, "V.npy: (B, S, vdim); with --key; default: the query");
  key->needs(value);
  value->needs(key);
  cmd->add_option("--heads", a.heads, "H; default: num_heads in the weight file's __metadata__")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--causal", a.causal, "block each query from later keys (with any --attn-mask)");
  cmd->add_option("--key-padding-mask", a.key_padding_mask, "M.npy (B, S): bool True ignores that key, or float added");
  cmd->add_option("--attn-mask", a.attn_mask, "A.npy (L, S) or (B*H, L, S): bool True blocks, or float added");
  cmd->add_option("--backend", a.backend, "where vkattn's recipe runs: gpu (a Vulkan device) or cpu (the reference)")
      ->check(CLI::IsMember({"gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--device", a.device, "GPU index or name substring (see vkattn devices); default: the best");
  cmd->add_option("--atol", a.atol, "absolute tolerance")->capture_default_str()->check(kNonNegativeNumber);
  cmd->add_option("--rtol", a.rtol, "relative tolerance (times |vkattn's|)")->capture_default_str()->check(kNonNegativeNumber);
  return cmd;
}

int run_check(const CheckArgs& a) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(a.dir)) throw FileError(a.dir + ": not a directory");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(a.dir)) {
    if (entry.path().extension() == ".npy") files.push_back(entry.path());
  }
  if (files.empty()) throw FileError(a.dir + ": no .npy files (name each <step>.npy: q_proj.npy, softmax.npy, …)");
  std::sort(files.begin(), files.end());
  std::vector<std::pair<std::string, Tensor>> recorded;
  for (const auto& file : files) recorded.emplace_back(file.stem().string(), io::read_npy(file));

  auto state = io::load_attention(a.weights, a.heads);
  state.config.batch_first = true;
  MultiHeadAttention mha(state.config, std::move(state.weights));
  Tensor query = read_input(a.query, "query");
  Tensor key = a.key.empty() ? query : read_input(a.key, "key");
  Tensor value = a.value.empty() ? query : read_input(a.value, "value");
  ForwardOptions options;
  options.key_padding_mask = read_mask(a.key_padding_mask, "key padding mask");
  options.attn_mask = read_mask(a.attn_mask, "attention mask");
  options.is_causal = a.causal;
  auto backend = make_backend(a.backend, a.device);
  CheckReport report = check_attention(recorded, mha, *backend, query, key, value, options, {a.atol, a.rtol});
  std::cout << report.text();
  if (!report.unknown.empty()) {
    throw FileError(a.dir + "/" + report.unknown.front().first + ".npy: '" + report.unknown.front().first +
                    "' is not a step of vkattn's recipe");
  }
  return report.ok() ? 0 : 1;
}

}  // namespace vkattn::cli
