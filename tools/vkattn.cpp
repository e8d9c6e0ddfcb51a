// vkattn — the command line.
//   vkattn devices   every Vulkan device, what it offers, and why one is unusable
//   vkattn demo      multi-head attention on the GPU and the CPU reference, step by step, with
//                    each step's shapes and the largest GPU-vs-reference difference
// Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input; errors are one line on stderr.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <random>

#include "engine/errors.h"
#include "engine/multi_head_attention.h"
#include "engine/reference_backend.h"
#include "engine/vulkan/context.h"
#include "engine/vulkan_backend.h"

namespace {

using namespace vkattn;

int run_devices() {
  auto reports = vulkan::list_devices();
  std::optional<size_t> chosen;
  try {
    chosen = vulkan::select_device(reports, vulkan::ContextOptions::from_environment().device);
  } catch (const DeviceError& e) {
    std::cout << "no device is selected: " << e.what() << "\n";
  }
  for (const auto& r : reports) {
    std::cout << (chosen == r.index ? "* " : "  ") << r.index << ": " << r.name << " (" << vulkan::device_type_name(r.type)
              << ", Vulkan " << vulkan::version_string(r.api_version) << ")\n";
    if (!r.suitable) {
      std::cout << "     unusable: it " << r.rejection << "\n";
      continue;
    }
    std::cout << "     workgroups: count " << r.max_workgroup_count[0] << " x " << r.max_workgroup_count[1] << " x "
              << r.max_workgroup_count[2] << ", size x <= " << r.max_workgroup_size_x << ", invocations <= "
              << r.max_workgroup_invocations << ", shared memory " << r.max_shared_memory_bytes << " B\n"
              << "     storage buffer range " << r.max_storage_buffer_range << " B, push constants "
              << r.max_push_constants_bytes << " B, device-local heap " << (r.device_local_bytes >> 20) << " MiB\n"
              << "     subgroup size " << r.subgroup_size << (r.subgroup_arithmetic ? " (arithmetic in compute)" : "")
              << ", 16-bit storage " << (r.storage_buffer_16bit ? "yes" : "no") << ", timestamps "
              << (r.timestamps ? "yes" : "no") << "\n";
  }
  if (chosen) std::cout << "* = the device vkattn uses (set VKATTN_DEVICE to an index or a name to choose)\n";
  return chosen ? 0 : 1;
}

Tensor random_tensor(Shape shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t(std::move(shape));
  for (float& v : t.data) v = dist(rng);
  return t;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.data.size(); ++i) {
    float x = a.data[i], y = b.data[i];
    if (std::isinf(x) && x == y) continue;  // both -inf: a blocked score on both sides
    float d = std::fabs(x - y);
    if (std::isnan(d)) return NAN;
    worst = std::max(worst, d);
  }
  return worst;
}

struct DemoArgs {
  int64_t batch = 2, seq = 5, kv_seq = 0, embed = 16, heads = 4;
  bool causal = false;
  uint32_t seed = 0;
};

int run_demo(const DemoArgs& a) {
  MultiHeadAttentionConfig config{.embed_dim = a.embed, .num_heads = a.heads, .batch_first = true};
  MultiHeadAttention mha(config, MultiHeadAttentionWeights::random(config, a.seed));
  std::mt19937 rng(a.seed + 1);
  int64_t S = a.kv_seq ? a.kv_seq : a.seq;
  Tensor query = random_tensor({a.batch, a.seq, a.embed}, rng);
  Tensor memory = a.kv_seq ? random_tensor({a.batch, S, a.embed}, rng) : query;
  ForwardOptions options;
  options.is_causal = a.causal;

  ReferenceBackend cpu;
  VulkanBackend gpu;
  StepRecorder cpu_steps(true), gpu_steps(true);
  cpu.add_tracer(cpu_steps);
  gpu.add_tracer(gpu_steps);
  AttentionResult expected = mha.forward(cpu, query, memory, memory, options);
  AttentionResult actual = mha.forward(gpu, query, memory, memory, options);

  std::cout << "multi-head " << (a.kv_seq ? "cross" : "self") << "-attention: B=" << a.batch << " L=" << a.seq
            << " S=" << S << " E=" << a.embed << " H=" << a.heads << " d=" << a.embed / a.heads
            << (a.causal ? " causal" : "") << "\n"
            << "gpu: " << gpu.device_name() << " (" << vulkan::device_type_name(gpu.context().device_report().type)
            << ")    cpu: " << cpu.device_name() << "\n\n"
            << std::left << std::setw(4) << "#" << std::setw(18) << "step" << std::setw(18) << "op" << std::setw(44)
            << "inputs -> output" << "max |gpu - cpu|\n";
  for (size_t i = 0; i < gpu_steps.steps().size(); ++i) {
    const auto& g = gpu_steps.steps()[i];
    const auto& c = cpu_steps.steps()[i];
    std::string shapes = input_shapes(g.event) + " -> " + shape_string(g.event.output.shape);
    std::cout << std::left << std::setw(4) << g.event.index << std::setw(18) << g.event.name << std::setw(18)
              << g.event.op << std::setw(44) << shapes << std::scientific << std::setprecision(2)
              << max_abs_diff(*g.values, *c.values) << std::defaultfloat << "\n";
  }
  float out_err = max_abs_diff(actual.output, expected.output);
  float w_err = max_abs_diff(*actual.weights, *expected.weights);
  const float tolerance = 1e-5f;
  bool ok = out_err <= tolerance && w_err <= tolerance;
  std::cout << "\noutput " << shape_string(actual.output.shape) << " max |gpu - cpu| = " << out_err
            << "; weights " << shape_string(actual.weights->shape) << " (averaged over heads) max |gpu - cpu| = "
            << w_err << "\n"
            << (ok ? "GPU and CPU agree within 1e-5." : "GPU and CPU DISAGREE beyond 1e-5.") << "\n";
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("vkattn: multi-head attention, step by step, on any Vulkan device", "vkattn");
  app.require_subcommand(1);
  app.add_subcommand("devices", "list every Vulkan device, its limits, and why one is unusable");
  DemoArgs demo;
  auto* demo_cmd = app.add_subcommand("demo", "run attention on the GPU and the CPU reference and compare every step");
  demo_cmd->add_option("--batch", demo.batch, "B")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  demo_cmd->add_option("--seq", demo.seq, "L, query length")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  demo_cmd->add_option("--kv-seq", demo.kv_seq, "S, key length (cross-attention when given)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  demo_cmd->add_option("--embed", demo.embed, "E")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  demo_cmd->add_option("--heads", demo.heads, "H (must divide E)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  demo_cmd->add_flag("--causal", demo.causal, "block each query from later keys");
  demo_cmd->add_option("--seed", demo.seed, "seed for weights and inputs");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "vkattn: " << e.what() << " (see vkattn --help)\n";
    return 2;
  }
  try {
    if (app.got_subcommand("devices")) return run_devices();
    return run_demo(demo);
  } catch (const ShapeError& e) {
    std::cerr << "vkattn: " << e.what() << "\n";
    return 2;
  } catch (const ConfigError& e) {
    std::cerr << "vkattn: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "vkattn: " << e.what() << "\n";
    return 1;
  }
}
