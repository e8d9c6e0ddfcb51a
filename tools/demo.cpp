// vkattn demo: random multi-head attention on the GPU and on the CPU reference, every step's
// shapes and the largest GPU-vs-reference difference.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <random>

#include "engine/multi_head_attention.h"
#include "engine/reference_backend.h"
#include "engine/vulkan/context.h"
#include "engine/vulkan_backend.h"
#include "tools/commands.h"

namespace vkattn::cli {

namespace {

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

}  // namespace

CLI::App* add_demo(CLI::App& app, DemoArgs& demo) {
  auto* cmd = app.add_subcommand("demo", "run attention on the GPU and the CPU reference and compare every step");
  cmd->add_option("--batch", demo.batch, "B")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--seq", demo.seq, "L, query length")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--kv-seq", demo.kv_seq, "S, key length (cross-attention when given)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--embed", demo.embed, "E")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--heads", demo.heads, "H (must divide E)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--causal", demo.causal, "block each query from later keys");
  cmd->add_option("--seed", demo.seed, "seed for weights and inputs");
  return cmd;
}

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

}  // namespace vkattn::cli
