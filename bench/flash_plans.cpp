// bench_flash: the fused attention step (flash_attention on q (B, H, L, d), k and v (B, H, S, d))
// under every flash plan tuning measures on the device (tuning::flash_candidates: subgroup blocks
// of rows and keys; on a GPU also FlashAttention-2's order, K and V tiles in shared memory, which
// are measured here on a CPU device too), beside the four unfused steps it replaces (attention_scores, attention_mask,
// softmax, attention_values), taking turns round after round so that a shared machine's drift
// falls on all alike. Each plan's output is checked against the unfused steps' first (1e-4; the
// steps are held to the CPU reference by the tests). Inputs stay on the device; each turn is timed
// to its last step's end. Prints each plan's median time and GFLOP/s (QKᵀ and P·V over the keys
// each row sees), and the rule's and tuning's plans. Where the device has float16 cooperative
// matrices (DeviceReport::float16_products), flash_attention on them (VulkanBackendOptions::
// float16_products) takes its turns too, on q, k and v rounded to float16, checked against the
// rule's float32 plan on the same rounded inputs within a weight's rounding, 2⁻¹¹ · max |v|
// (Float16Products.FlashAttention… holds it to the reference so).
//
//   bench_flash [--batch 1] [--heads 8] [--seq 4096] [--kv-seq S] [--head-dim 64] [--causal]
//               [--rounds 5] [--reps 5] [--skip-unfused]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backends/tuner.h"
#include "engine/vulkan/context.h"
#include "engine/vulkan/step_plans.h"
#include "reference/reference.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/errors.h"
#include "vkattn/tensor.h"
#include "vkattn/tracing/compare.h"

using namespace vkattn;

int main(int argc, char** argv) {
  CLI::App app{"the fused attention step under every flash plan, and the unfused steps, on the default Vulkan device"};
  int64_t B = 1, H = 8, L = 4096, d = 64;
  std::optional<int64_t> kv_seq;
  bool causal = false, skip_unfused = false;
  int rounds = 5, reps = 5;
  app.add_option("--batch", B, "B")->check(CLI::PositiveNumber);
  app.add_option("--heads", H, "H")->check(CLI::PositiveNumber);
  app.add_option("--seq", L, "L, query rows")->check(CLI::PositiveNumber);
  app.add_option("--kv-seq", kv_seq, "S, keys (default L)")->check(CLI::PositiveNumber);
  app.add_option("--head-dim", d, "d")->check(CLI::PositiveNumber);
  app.add_flag("--causal", causal, "block each query from later keys");
  app.add_option("--rounds", rounds, "turns each plan takes")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "steps per turn")->check(CLI::PositiveNumber);
  app.add_flag("--skip-unfused", skip_unfused, "leave out the unfused steps (their (B, H, L, S) scores)");
  CLI11_PARSE(app, argc, argv);
  const int64_t S = kv_seq.value_or(L);
  try {
    auto context = std::make_shared<vulkan::Context>();
    const auto& device = context->device_report();
    const Tensor q = random_tensor({B, H, L, d}, 1), k = random_tensor({B, H, S, d}, 2), v = random_tensor({B, H, S, d}, 3);
    struct Candidate {
      std::string name;
      std::unique_ptr<VulkanBackend> backend;
      bool fused = true;
      std::vector<double> ms;
      bool rounded = false;  // on q, k, v rounded to float16 (the float16 products)
    };
    const auto attend = [&](Candidate& c, const Value& qv, const Value& kv, const Value& vv) {
      Backend& b = *c.backend;
      if (c.fused) return b.flash_attention("flash_attention", qv, kv, vv, nullptr, nullptr, causal);
      Value scores = b.attention_mask("attention_mask", b.attention_scores("attention_scores", qv, kv), nullptr,
                                      nullptr, causal);
      return b.attention_values("attention_values", b.softmax("softmax", scores), vv);
    };
    std::vector<Candidate> candidates;
    if (!skip_unfused) candidates.push_back({"the unfused steps (the device's plans)", std::make_unique<VulkanBackend>(context), false, {}});
    const vulkan::FlashPlan rule = vulkan::flash_rule(device, 64, uint32_t(d));
    auto add = [&](const vulkan::FlashPlan& plan) {
      for (const auto& c : candidates) {
        if (c.name == plan.describe()) return;
      }
      VulkanBackendOptions options{.flash = std::make_shared<const vulkan::FlashPlan>(plan)};
      candidates.push_back({plan.describe(), std::make_unique<VulkanBackend>(context, options), true, {}});
    };
    for (const auto& plan : tuning::flash_candidates(device, 64, uint32_t(d))) add(plan);
    const auto float16 = [](Tensor t) {
      for (float& x : t.data) x = reference::round_to(x, static_cast<int>(Narrow::float16));
      return t;
    };
    const Tensor q16 = float16(q), k16 = float16(k), v16 = float16(v);
    if (device.float16_products) {
      candidates.push_back({"float16 products on cooperative matrices",
                            std::make_unique<VulkanBackend>(context, VulkanBackendOptions{.float16_products = true}),
                            true, {}, true});
    }
    // the tiled plans on a CPU device too, where tuning leaves them out
    for (const auto& plan : vulkan::tiled_flash_plans(device, uint32_t(d))) add(plan);
    // what tuning chooses for this problem's class (whatever VKATTN_TUNE says)
    std::string tuned = "none (the problem is too small to be tuned)";
    {
      VulkanBackendOptions options;
      options.tune = true;
      VulkanBackend gpu(context, options);
      gpu.download(gpu.flash_attention("flash_attention", gpu.upload("q", q), gpu.upload("k", k), gpu.upload("v", v),
                                       nullptr, nullptr, causal));
      if (!gpu.tuned_plans().empty()) tuned = gpu.tuned_plans().front().second;
    }
    std::optional<Tensor> expected;
    for (auto& c : candidates) {
      VulkanBackend& gpu = *c.backend;
      if (c.rounded) {  // against the rule's float32 plan on the same rounded inputs
        VulkanBackendOptions rule_only{.flash = std::make_shared<const vulkan::FlashPlan>(rule)};
        Candidate exact{"", std::make_unique<VulkanBackend>(context, rule_only)};
        VulkanBackend& e = *exact.backend;
        const Tensor want = e.download(attend(exact, e.upload("q", q16), e.upload("k", k16), e.upload("v", v16)));
        const Tensor got = gpu.download(attend(c, gpu.upload("q", q16), gpu.upload("k", k16), gpu.upload("v", v16)));
        const ValueDiff diff = compare_values(got, want, std::ldexp(1.0, -11) + 1e-5, 0);
        if (diff.mismatches > 0) {
          std::cerr << "bench_flash: " << c.name << " differs from the rule's plan by " << diff.max_abs_error << "\n";
          return 1;
        }
        continue;
      }
      const Tensor got = gpu.download(attend(c, gpu.upload("q", q), gpu.upload("k", k), gpu.upload("v", v)));
      if (!expected) {
        expected = got;
        continue;
      }
      const ValueDiff diff = compare_values(got, *expected, 1e-4, 1e-4);
      if (diff.mismatches > 0) {
        std::cerr << "bench_flash: " << c.name << " differs from " << candidates.front().name << " by "
                  << diff.max_abs_error << "\n";
        return 1;
      }
    }
    for (int round = 0; round < rounds; ++round) {
      for (auto& c : candidates) {
        VulkanBackend& gpu = *c.backend;
        Value qv = gpu.upload("q", c.rounded ? q16 : q), kv = gpu.upload("k", c.rounded ? k16 : k),
              vv = gpu.upload("v", c.rounded ? v16 : v);
        gpu.download(attend(c, qv, kv, vv));  // uploads done, buffers in the pool
        const auto start = std::chrono::steady_clock::now();
        Value out;
        for (int r = 0; r < reps; ++r) out = attend(c, qv, kv, vv);
        gpu.synchronize();  // the steps done; the output stays on the device
        c.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / reps);
      }
    }
    double keys_seen = 0;  // over every query row
    for (int64_t i = 0; i < L; ++i) keys_seen += double(causal ? std::min(S, i + 1) : S);
    const double gflop = 4.0 * double(B * H) * keys_seen * double(d) / 1e9;  // QKᵀ and P·V, 2 each
    std::cout << "attention of B " << B << ", H " << H << ", L " << L << ", S " << S << ", d " << d
              << (causal ? ", causal" : "") << " on " << device.name << ": " << std::setprecision(3) << gflop
              << " GFLOP\ntime: the median of " << rounds << " turns of " << reps << " (to the last one's end)\n";
    const auto chars = [](const std::string& text) {  // characters, not bytes (× is two)
      return std::count_if(text.begin(), text.end(), [](char ch) { return (ch & 0xC0) != 0x80; });
    };
    std::ptrdiff_t widest = 0;
    for (const auto& c : candidates) widest = std::max(widest, chars(c.name));
    for (auto& c : candidates) {
      std::sort(c.ms.begin(), c.ms.end());
      const double median = c.ms[c.ms.size() / 2];
      const std::string mark = std::string(c.name == tuned ? "t" : " ") + (c.fused && c.name == rule.describe() ? "r " : "  ");
      const double rate = gflop / median * 1e3;  // (a decimal below 1000: a small problem's rate is not 0)
      std::cout << mark << c.name << std::string(size_t(widest + 2 - chars(c.name)), ' ') << std::fixed
                << std::setprecision(3) << std::setw(8) << median << " ms " << std::setprecision(rate >= 1000 ? 0 : 1)
                << std::setw(7) << rate << " GFLOP/s\n";
    }
    std::cout << "r = the fixed rule's plan; t = the plan tuning chose for this shape class: " << tuned << "\n";
  } catch (const std::exception& e) {  // no driver, a Vulkan call's error: by its VkResult name
    std::cerr << "bench_flash: " << device_error("", e).what() << "\n";
    return 1;
  }
}
