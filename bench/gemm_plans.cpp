// bench_gemm: the projection GEMM (linear: x (M, K) · Wᵀ (N, K)) under every GEMM plan tuning
// measures on the device (tuning::gemm_candidates: on a CPU device broadcast tiles, B packed or
// not, and the shared tiling beside them; on a GPU shared tilings of
// 32 to 128 rows and columns a workgroup) — taking turns round after round so that a shared
// machine's drift falls on all alike. Each plan's output is checked against the CPU reference
// first (on 64 of its rows). Prints each plan's median and best GFLOP/s, the plan
// the fixed rule gives the device, and the plan tuning chose for the product's shape class
// (measured now, or remembered: see engine/backends/tuner.h), with its speed as a share of the
// fastest measured here, and the fastest's as a share of the device's peak multiply-add rate
// (VulkanBackend::measure_peak). Where the device has float16 cooperative matrices
// (DeviceReport::float16_products), linear's float16 products (VulkanBackendOptions::
// float16_products) take their turns too, checked against the reference on inputs rounded to
// float16, and print on a line of their own: a different precision, torch's float16 matmul's.
//
//   bench_gemm [--m 3200] [--n 512] [--k 512] [--rounds 5] [--reps 8] [--skip-shared]
//
// --skip-shared leaves out the shared tiling where the device's rule is another (CPU devices).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <memory>
#include <vector>

#include "engine/backends/tuner.h"
#include "engine/vulkan/context.h"
#include "engine/vulkan/gemm_plan.h"
#include "reference/reference.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/errors.h"
#include "vkattn/tensor.h"
#include "vkattn/tracing/compare.h"

using namespace vkattn;

int main(int argc, char** argv) {
  CLI::App app{"the projection GEMM under every GEMM plan, on the default Vulkan device"};
  int64_t M = 3200, N = 512, K = 512;
  int rounds = 5, reps = 8;
  bool skip_shared = false;
  app.add_option("--m", M, "rows of x (B·L)")->check(CLI::PositiveNumber);
  app.add_option("--n", N, "output features")->check(CLI::PositiveNumber);
  app.add_option("--k", K, "input features")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "turns each plan takes")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "GEMMs per turn, in one submission")->check(CLI::PositiveNumber);
  app.add_flag("--skip-shared", skip_shared, "leave out the shared tiling where the rule is another (slow on CPU devices)");
  CLI11_PARSE(app, argc, argv);
  try {
    auto context = std::make_shared<vulkan::Context>();
    const auto& device = context->device_report();
    struct Candidate {
      vulkan::GemmPlan plan;
      std::unique_ptr<VulkanBackend> backend;
      std::vector<double> ms;
    };
    std::vector<Candidate> candidates;
    auto add = [&](const vulkan::GemmPlan& plan) {
      for (const auto& c : candidates) {  // one kernel on this product's columns (fitted() narrows wide tiles)
        if (c.plan.fitted(uint64_t(N)).describe() == plan.fitted(uint64_t(N)).describe()) return;
      }
      VulkanBackendOptions options{.gemm = std::make_shared<const vulkan::GemmPlan>(plan)};
      candidates.push_back({plan, std::make_unique<VulkanBackend>(context, options), {}});
    };
    for (const auto& plan : tuning::gemm_candidates(device)) add(plan);
    if (!skip_shared && vulkan::plan_gemm(device).variant != vulkan::GemmVariant::shared) {
      add(vulkan::plan_gemm(device, vulkan::GemmVariant::shared));  // beside broadcast, on a CPU device
    }
    const vulkan::GemmPlan rule = vulkan::plan_gemm(device);
    Tensor x = random_tensor({M, K}, 1), w = random_tensor({N, K}, 2);
    // what tuning chooses for this product's class (whatever VKATTN_TUNE says)
    std::string tuned = "none (the product is too small to be tuned)";
    {
      VulkanBackendOptions options;
      options.tune = true;
      VulkanBackend gpu(context, options);
      gpu.download(gpu.linear("q_proj", gpu.upload("x", x), gpu.upload("w", w), nullptr));
      if (!gpu.tuned_plans().empty()) tuned = gpu.tuned_plans().front().second;
    }
    // the reference on at most 64 rows of x, every `stride`-th: a 4096² product checked in a
    // second, not a minute
    const int64_t stride = std::max<int64_t>(1, M / 64), sampled = (M + stride - 1) / stride;
    Tensor x_rows({sampled, K});
    for (int64_t r = 0; r < sampled; ++r) {
      std::copy_n(x.data.data() + r * stride * K, K, x_rows.data.data() + r * K);
    }
    ReferenceBackend cpu;
    const Tensor expected = cpu.download(cpu.linear("q_proj", cpu.upload("x", x_rows), cpu.upload("w", w), nullptr));
    for (auto& c : candidates) {
      VulkanBackend& gpu = *c.backend;
      const Tensor all = gpu.download(gpu.linear("q_proj", gpu.upload("x", x), gpu.upload("w", w), nullptr));
      Tensor got({sampled, N});
      for (int64_t r = 0; r < sampled; ++r) {
        std::copy_n(all.data.data() + r * stride * N, N, got.data.data() + r * N);
      }
      ValueDiff diff = compare_values(got, expected, 1e-4, 1e-4);
      if (diff.mismatches > 0) {
        std::cerr << "bench_gemm: " << c.plan.describe() << " differs from the reference by " << diff.max_abs_error
                  << "\n";
        return 1;
      }
    }
    // float16 products, where the device has them: checked on the same rows against the
    // reference on x and W rounded to float16 (what the products see; their sums are float32's)
    std::unique_ptr<VulkanBackend> half;
    std::vector<double> half_ms;
    if (device.float16_products) {
      half = std::make_unique<VulkanBackend>(context, VulkanBackendOptions{.float16_products = true});
      const Tensor all = half->download(half->linear("q_proj", half->upload("x", x), half->upload("w", w), nullptr));
      auto rounded = [](Tensor t) {  // ties to even, as the device's conversion (glm's go away from 0)
        for (float& v : t.data) v = reference::round_to(v, static_cast<int>(Narrow::float16));
        return t;
      };
      const Tensor xr = rounded(x_rows), wr = rounded(w);
      const Tensor expected16 = cpu.download(cpu.linear("q_proj", cpu.upload("x", xr), cpu.upload("w", wr), nullptr));
      Tensor got({sampled, N});
      for (int64_t r = 0; r < sampled; ++r) std::copy_n(all.data.data() + r * stride * N, N, got.data.data() + r * N);
      // each element within √K · 2⁻²³ · Σ_k |x_k · w_k| of the reference's: the random-walk bound
      // of two float32 sums of K products, in the unit of truncation, as tensor cores may add
      // (an H200's at K = 4096 were 6.3e-4 off, past the float32 plans' 1e-4)
      double worst = 0, worst_bound = 0;
      for (int64_t r = 0; r < sampled; ++r) {
        for (int64_t j = 0; j < N; ++j) {
          double magnitude = 0;
          for (int64_t k = 0; k < K; ++k) magnitude += std::abs(double(xr.data[r * K + k]) * wr.data[j * K + k]);
          const double bound = std::sqrt(double(K)) * std::ldexp(magnitude, -23);
          const double error = std::abs(double(got.data[r * N + j]) - expected16.data[r * N + j]);
          if (!(error <= bound)) {
            std::cerr << "bench_gemm: float16 products differ from the reference by " << error << " at row "
                      << r * stride << ", column " << j << ", past the bound " << bound << "\n";
            return 1;
          }
          if (error > worst) worst = error, worst_bound = bound;
        }
      }
      std::cout << "float16 products checked: at most " << std::setprecision(2) << std::scientific << worst
                << " from the reference (its bound there " << worst_bound << ")\n"
                << std::defaultfloat;
    }
    // one turn of `reps` products on `gpu`, in ms a product
    auto turn = [&](VulkanBackend& gpu) {
      Value xv = gpu.upload("x", x), wv = gpu.upload("w", w);
      gpu.download(gpu.linear("q_proj", xv, wv, nullptr));  // uploads done, buffers in the pool
      auto start = std::chrono::steady_clock::now();
      Value y;
      for (int r = 0; r < reps; ++r) y = gpu.linear("q_proj", xv, wv, nullptr);
      gpu.synchronize();  // the products done, as torch.cuda.synchronize(); the output stays on the device
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / reps;
    };
    for (int round = 0; round < rounds; ++round) {
      for (auto& c : candidates) c.ms.push_back(turn(*c.backend));
      if (half) half_ms.push_back(turn(*half));
    }
    // the device's peak multiply-add rate, the roof the fastest plan is held against: measured
    // after the turns, with the device busy a while (an H200 measured before them, idle during
    // the checks on the host, gave a fifth of its fp32 rate, at both three runs and a quarter
    // of a second of them)
    const DevicePeak peak = candidates.front().backend->measure_peak();
    const double gflop = 2.0 * double(M) * double(N) * double(K) / 1e9;
    std::cout << "linear (" << M << ", " << K << ") · (" << N << ", " << K << ")ᵀ on " << device.name << ", "
              << gflop << " GFLOP\n"
              << "time: the median of " << rounds << " turns of " << reps << " (to the last one's end); speed: the median's / the best's\n";
    // lines padded to the longest plan's characters, not bytes (× is two)
    const auto chars = [](const std::string& text) {
      return std::count_if(text.begin(), text.end(), [](char ch) { return (ch & 0xC0) != 0x80; });
    };
    std::ptrdiff_t widest = 0;
    for (const auto& c : candidates) widest = std::max(widest, chars(c.plan.fitted(uint64_t(N)).describe()));
    double fastest = 1e300, tuned_ms = 0;
    for (auto& c : candidates) {
      std::sort(c.ms.begin(), c.ms.end());
      fastest = std::min(fastest, c.ms[c.ms.size() / 2]);
      if (c.plan.fitted(uint64_t(N)).describe() == tuned) tuned_ms = c.ms[c.ms.size() / 2];
    }
    for (auto& c : candidates) {
      const double median = c.ms[c.ms.size() / 2], best = c.ms.front();
      const std::string described = c.plan.fitted(uint64_t(N)).describe();
      const std::string mark = std::string(described == tuned ? "t" : " ") +
                               (described == rule.fitted(uint64_t(N)).describe() ? "r " : "  ");
      // GFLOP/s in thousands without a decimal, so that a GPU's line fits 100 columns as a CPU's
      const double rate = gflop / median * 1e3, best_rate = gflop / best * 1e3;
      std::cout << mark << described << std::string(size_t(widest + 2 - chars(described)), ' ') << std::fixed
                << std::setprecision(2) << std::setw(7) << median << " ms " << std::setprecision(best_rate >= 1000 ? 0 : 1)
                << std::setw(6) << rate << " / " << best_rate << " GFLOP/s\n";
    }
    std::cout << "r = the fixed rule's plan; t = the plan tuning chose for this shape class:\n  " << tuned;
    if (tuned_ms > 0) std::cout << ", " << std::setprecision(0) << 100 * fastest / tuned_ms << " % of the fastest's speed here";
    const double share = gflop / fastest * 1e12 / peak.flops;
    std::cout << "\nthe fastest plan's median: " << std::setprecision(1) << gflop / fastest * 1e3 << " GFLOP/s, "
              << std::setprecision(0) << 100 * share << " % of the device's peak " << std::setprecision(1)
              << peak.flops / 1e9 << " GFLOP/s,\n  measured " << peak.how << "\n";
    if (share > 1) std::cout << "  (more than the peak: the measure of the peak is wrong on this device)\n";
    if (half) {
      std::sort(half_ms.begin(), half_ms.end());
      const double median = half_ms[half_ms.size() / 2];
      std::cout << "float16 products on cooperative matrices (x and W rounded to float16, sums float32):\n  "
                << std::setprecision(2) << median << " ms, " << std::setprecision(1) << gflop / median * 1e3
                << " GFLOP/s (median), " << std::setprecision(2) << fastest / median << "× the fastest plan's\n";
    } else {
      std::cout << "float16 products on cooperative matrices: none on this device\n";
    }
  } catch (const std::exception& e) {  // no driver, a Vulkan call's error: by its VkResult name
    std::cerr << "bench_gemm: " << device_error("", e).what() << "\n";
    return 1;
  }
}
