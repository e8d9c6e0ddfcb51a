// vkattn — the command line (DESIGN.md: command-line contract).
//   vkattn devices   every Vulkan device, what it offers, and why one is unusable
//   vkattn run       a PyTorch nn.MultiheadAttention state_dict on .npy inputs, on the GPU or the CPU
//   vkattn encode    a PyTorch nn.TransformerEncoder state_dict on a .npy input, on the GPU or the CPU
//   vkattn decode    a PyTorch nn.TransformerDecoder state_dict on .npy target and memory
//   vkattn generate  a small causal language model continues a prompt, with a KV cache or without
//   vkattn diff      two trace dumps compared step by step, down to the first divergent element
//   vkattn report    a trace dump (or two, against each other) as one offline HTML page to explore
//   vkattn check     your own attention's tensors against vkattn's recipe: where and why they differ
//   vkattn tune      the plans of every step with several measured for some shapes, and remembered
//   vkattn bench     one shape timed (validated first): per-step times, GFLOP/s, memory, tracing cost
//   vkattn demo      random attention on the GPU and the CPU reference, compared step by step
// Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input, 130 interrupted (Ctrl-C);
// errors are one line on stderr.
#include <CLI/CLI.hpp>

#include <iostream>

#include "tools/commands.h"
#include "vkattn/errors.h"

int main(int argc, char** argv) {
  namespace cli = vkattn::cli;
  CLI::App app("vkattn: multi-head attention, step by step, on any Vulkan device", "vkattn");
  app.require_subcommand(1);
  auto* devices = cli::add_devices(app);
  cli::RunArgs run_args;
  auto* run = cli::add_run(app, run_args);
  cli::EncodeArgs encode_args;
  auto* encode = cli::add_encode(app, encode_args);
  cli::DecodeArgs decode_args;
  auto* decode = cli::add_decode(app, decode_args);
  cli::GenerateArgs generate_args;
  auto* generate = cli::add_generate(app, generate_args);
  cli::DiffArgs diff_args;
  auto* diff = cli::add_diff(app, diff_args);
  cli::ReportArgs report_args;
  auto* report = cli::add_report(app, report_args);
  cli::CheckArgs check_args;
  auto* check = cli::add_check(app, check_args);
  cli::TuneArgs tune_args;
  auto* tune = cli::add_tune(app, tune_args);
  cli::BenchArgs bench_args;
  auto* bench = cli::add_bench(app, bench_args);
  cli::DemoArgs demo_args;
  auto* demo = cli::add_demo(app, demo_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "vkattn: " << vkattn::one_line(e.what()) << " (see vkattn --help)\n";
    return 2;
  }
  try {
    if (devices->parsed()) return cli::run_devices();
    if (run->parsed()) return cli::run_run(run_args);
    if (encode->parsed()) return cli::run_encode(encode_args);
    if (decode->parsed()) return cli::run_decode(decode_args);
    if (generate->parsed()) return cli::run_generate(generate_args);
    if (diff->parsed()) return cli::run_diff(diff_args);
    if (report->parsed()) return cli::run_report(report_args);
    if (check->parsed()) return cli::run_check(check_args);
    if (tune->parsed()) return cli::run_tune(tune_args);
    if (bench->parsed()) return cli::run_bench(bench_args);
    if (demo->parsed()) return cli::run_demo(demo_args);
    return 2;
  } catch (const vkattn::Interrupted& e) {
    std::cerr << "vkattn: " << vkattn::one_line(e.what()) << "\n";
    return 130;  // as a shell reports a process ended by SIGINT
  } catch (const std::exception& e) {
    const bool ours = cli::is_bad_input(e) || dynamic_cast<const vkattn::Error*>(&e);
    // anything else — a Vulkan call's error outside any step, by its VkResult name — as a DeviceError
    std::cerr << "vkattn: " << (ours ? vkattn::one_line(e.what()) : std::string(vkattn::device_error("", e).what()))
              << "\n";
    return cli::is_bad_input(e) ? 2 : 1;
  }
}
