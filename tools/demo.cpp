// vkattn demo: random multi-head attention on the GPU and on the CPU reference, every step's
// shapes and the largest GPU-vs-reference difference.
#include <iostream>

#include "engine/vulkan/context.h"
#include "tools/commands.h"
#include "tools/first_forward.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/side_by_side.h"

namespace vkattn::cli {


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
  int64_t S = a.kv_seq ? a.kv_seq : a.seq;
  Tensor query = random_tensor({a.batch, a.seq, a.embed}, a.seed + 1);
  Tensor memory = a.kv_seq ? random_tensor({a.batch, S, a.embed}, a.seed + 2) : query;
  ForwardOptions options;
  options.is_causal = a.causal;

  ReferenceBackend cpu;
  VulkanBackend gpu;
  const std::string first = untimed_first_forward([&] { mha.forward(gpu, query, memory, memory, options); });
  StepRecorder cpu_steps(true), gpu_steps(true);
  cpu.add_tracer(cpu_steps);
  gpu.add_tracer(gpu_steps);
  mha.forward(cpu, query, memory, memory, options);
  mha.forward(gpu, query, memory, memory, options);

  std::cout << "multi-head " << (a.kv_seq ? "cross" : "self") << "-attention: B=" << a.batch << " L=" << a.seq
            << " S=" << S << " E=" << a.embed << " H=" << a.heads << " d=" << a.embed / a.heads
            << (a.causal ? " causal" : "") << ": every step on the GPU and on the CPU reference\n"
            << "gpu device type: " << vulkan::device_type_name(gpu.context().device_report().type) << "\n"
            << first << "\n";
  SideBySide table(gpu_steps, cpu_steps);
  table.print(std::cout);
  return table.agree() ? 0 : 1;
}

}  // namespace vkattn::cli
