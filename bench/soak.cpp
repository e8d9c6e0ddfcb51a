// bench_soak: thousands of forwards of random shapes, masks and paths on one context and one
// backend, as a long-running service would make them; every --check-every-th result checked
// against the CPU reference. Prints the forwards run, the shapes' ranges, device memory (the
// buffers vkattn holds) and the process's resident memory — after the warm-up, at their peak and
// at the end — and the errors. Exits 1 on any error, on resident memory that grew by more than
// --rss-growth-mib after the warm-up, or on device memory left after empty_cache() beyond the
// backend's one placeholder buffer. The warm-up is the run's first half: its new shapes build the
// pipelines (the driver's code for each), and the second half runs the same shapes, masks and
// paths again with new values, reusing them. ctest runs a short version (soak_short).
//
//   bench_soak [--forwards 2000] [--check-every 10] [--seed 1] [--rss-growth-mib 16]
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>

#include "engine/vulkan/context.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/compare.h"

using namespace vkattn;

namespace {

double resident_mib() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE))) / (1024.0 * 1024.0);
}

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("random forwards on one context: results, device and resident memory over time", "bench_soak");
  int forwards = 2000, check_every = 10;
  uint32_t seed = 1;
  double rss_growth_mib = 16;
  app.add_option("--forwards", forwards, "forwards to run")->check(CLI::Range(10, 10'000'000));
  app.add_option("--check-every", check_every, "check every Nth result against the reference")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "the shapes' and values' seed");
  app.add_option("--rss-growth-mib", rss_growth_mib, "resident growth after the warm-up that fails the run")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  auto context = std::make_shared<vulkan::Context>();
  VulkanBackend gpu(context);
  ReferenceBackend cpu;
  std::mt19937 rng;
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int warmup = std::max(1, forwards / 2);  // new shapes build new pipelines: half the run
  int errors = 0, checked = 0, fused = 0, masked = 0, cross = 0;
  double rss_after_warmup = 0, rss_peak = 0;
  uint64_t device_after_warmup = 0, device_peak = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int n = 0; n < forwards; ++n) {
    // Forward n has forward n mod warmup's shapes, masks and paths (and its own values): the
    // warm-up builds every pipeline the run needs, so that memory grown after it is memory kept,
    // not code compiled (which varies with the driver's cache and the machine's load).
    rng.seed(seed * 1'000'003u + uint32_t(n % warmup));
    const int64_t heads = int64_t{1} << pick(0, 3), E = heads * pick(1, 8) * (pick(0, 1) ? 4 : 1);
    const int64_t B = pick(1, 3), L = pick(1, 130), S = pick(0, 2) ? L : pick(1, 130);
    const bool causal = S == L && pick(0, 1), padding = pick(0, 2) == 0, need_weights = pick(0, 3) == 0;
    const AttentionPath path = need_weights ? AttentionPath::unfused
                                            : std::array{AttentionPath::fused, AttentionPath::unfused,
                                                         AttentionPath::automatic}[size_t(pick(0, 2))];
    const MultiHeadAttentionConfig config{.embed_dim = E, .num_heads = heads, .batch_first = true};
    const MultiHeadAttention module{config, MultiHeadAttentionWeights::random(config, uint32_t(n))};
    const Tensor q = random_tensor({B, L, E}, uint32_t(n)), kv = random_tensor({B, S, E}, uint32_t(n + 1));
    ForwardOptions options{.need_weights = need_weights, .is_causal = causal, .attention = path};
    if (padding) {  // some keys of each sequence padded; the last sequence's all of them now and then
      Tensor mask({B, S}, DType::boolean);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < S; ++j) mask.at({b, j}) = pick(0, 3) == 0 || (b == B - 1 && n % 7 == 0) ? 1.0f : 0.0f;
      options.key_padding_mask = std::move(mask);
    }
    fused += path != AttentionPath::unfused && !need_weights;
    masked += padding;
    cross += S != L;
    try {
      const AttentionResult got = module.forward(gpu, q, S == L && n % 2 ? q : kv, S == L && n % 2 ? q : kv, options);
      if (n % check_every == 0) {
        const AttentionResult want = module.forward(cpu, q, S == L && n % 2 ? q : kv, S == L && n % 2 ? q : kv, options);
        const ValueDiff d = compare_values(got.output, want.output, 1e-4, 1e-4);
        ++checked;
        if (d.mismatches) {
          ++errors;
          std::cerr << "forward " << n << " (B " << B << ", L " << L << ", S " << S << ", E " << E << ", H " << heads
                    << "): " << d.mismatches << " values differ, max " << d.max_abs_error << "\n";
        }
      }
    } catch (const std::exception& e) {
      ++errors;
      std::cerr << "forward " << n << ": " << e.what() << "\n";
    }
    const double rss = resident_mib();
    if (n + 1 == warmup) rss_after_warmup = rss, device_after_warmup = context->allocated_bytes();
    rss_peak = std::max(rss_peak, rss);
    device_peak = std::max(device_peak, context->allocated_bytes());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double rss_end = resident_mib();
  const uint64_t device_end = context->allocated_bytes();
  gpu.empty_cache();
  const uint64_t device_emptied = context->allocated_bytes();

  std::printf("%d forwards in %.1f s on %s: B 1-3, L and S 1-130, E up to 256, H 1-8; %d fused, %d with padding,"
              " %d cross-attention\n",
              forwards, seconds, context->device_report().name.c_str(), fused, masked, cross);
  std::printf("checked against the reference: %d forwards, errors: %d\n", checked, errors);
  std::printf("device memory held (MiB): after the %d warm-up forwards %.2f, peak %.2f, end %.2f, after "
              "empty_cache %.6f\n",
              warmup, mib(device_after_warmup), mib(device_peak), mib(device_end), mib(device_emptied));
  std::printf("resident memory (MiB): after the warm-up %.1f, peak %.1f, end %.1f\n", rss_after_warmup, rss_peak,
              rss_end);
#ifdef __SANITIZE_ADDRESS__
  // AddressSanitizer keeps freed memory in quarantine (256 MiB): resident memory says nothing here.
  const bool rss_flat = true;
  std::printf("(AddressSanitizer build: resident memory not judged)\n");
#else
  const bool rss_flat = rss_end - rss_after_warmup <= rss_growth_mib;
#endif
  const bool device_flat = device_emptied <= 16;  // the backend's placeholder buffer
  if (!rss_flat) std::printf("FAIL: resident memory grew by %.1f MiB after the warm-up\n", rss_end - rss_after_warmup);
  if (!device_flat) std::printf("FAIL: %llu device bytes held after empty_cache\n", (unsigned long long)device_emptied);
  return errors == 0 && rss_flat && device_flat ? 0 : 1;
}
