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
#include "tools/validators.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"
#include "vkattn/tracing/check.h"

namespace vkattn::cli {

CLI::App* add_check(CLI::App& app, CheckArgs& a) {
  auto* cmd = app.add_subcommand("check", "check your own attention's tensors (DIR/<step>.npy) against vkattn's recipe");
  cmd->add_option("DIR", a.dir, "a directory of .npy files named by vkattn's steps: q_proj.npy, softmax.npy, …")
      ->required();
  add_attention_args(*cmd, a.inputs);
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

  AttentionInputs in = read_attention_inputs(a.inputs);
  auto backend = make_backend(a.backend, a.device);
  CheckReport report = check_attention(recorded, in.module, *backend, in.query, in.key_or_query(), in.value_or_query(),
                                       in.options, {a.atol, a.rtol});
  std::cout << report.text();
  if (!report.unknown.empty()) {
    throw FileError(a.dir + "/" + report.unknown.front().first + ".npy: '" + report.unknown.front().first +
                    "' is not a step of vkattn's recipe");
  }
  return report.ok() ? 0 : 1;
}

}  // namespace vkattn::cli
