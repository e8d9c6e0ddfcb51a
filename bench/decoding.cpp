// bench_decoding: the time one new token takes at several context lengths, with the KV cache
// (CausalLM::decode: the token's own row, attention over the cache) and without it
// (CausalLM::forward over the whole context, as a model without a cache must), on random weights
// of the size: E 512, 8 heads, 4 layers, feed-forward 2048, B = 1.
//
// The cache is filled with zeros up to the context (KVCache::advance) instead of by a prefill:
// the work of a decode step does not depend on the values it reads, and a prefill of 4095
// positions would take longer than the measurement. That a decode step equals the full forward's
// row is test_decoding's (CausalLMDecode, up to 1000 positions).
//
//   bench_decoding [--contexts 256,1024,4096] [--tokens 9] [--backend gpu|cpu] [--parts 0,1,8,32]
//                  [--gemv-rows 0|8]
//
// --parts times each context under each of flash_decoding's key splits (0: the backend's choice).
// --gemv-rows: linear for at most that many rows as a GEMV (shaders/gemv.glsl; 0: the GEMM's
// tilings), instead of the device's rule (8 on a GPU, 0 on a CPU device).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <optional>
#include <random>

#include "vkattn/backends/make_backend.h"
#include "vkattn/errors.h"
#include "vkattn/modules/causal_lm.h"

using namespace vkattn;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Tensor ids(int64_t n, std::mt19937& rng, int64_t vocab) {
  Tensor t({1, n}, std::vector<float>(static_cast<size_t>(n)), DType::int64);
  for (float& id : t.data) id = static_cast<float>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"time per token with and without the KV cache, against context length"};
  std::vector<int64_t> contexts{256, 1024, 4096};
  int tokens = 9;
  std::string backend_name = "gpu";
  int64_t layers = 4, E = 512, H = 8, F = 2048, V = 256;
  std::vector<int64_t> parts_list{0};
  std::optional<uint32_t> gemv_rows;
  app.add_option("--contexts", contexts, "context lengths (positions already in the cache)")->delimiter(',');
  app.add_option("--tokens", tokens, "decode steps timed per context (the median is reported)")->capture_default_str();
  app.add_option("--backend", backend_name, "gpu or cpu")->check(CLI::IsMember({"gpu", "cpu"}))->capture_default_str();
  app.add_option("--layers", layers)->capture_default_str();
  app.add_option("--embed", E)->capture_default_str();
  app.add_option("--parts", parts_list, "flash_decoding's key splits to time (0: the backend's choice)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gemv-rows", gemv_rows, "linear for at most this many rows as a GEMV, 0 to 8 (unset: the device's rule)")
      ->check(CLI::Range(0, 8));
  CLI11_PARSE(app, argc, argv);
  try {
    const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
    CausalLMConfig c;
    c.vocab_size = V;
    c.max_positions = longest + tokens;
    c.layer = {E, H, F, Activation::gelu, 1e-5f, true};
    c.num_layers = layers;
    CausalLM model(c, CausalLMWeights::random(c, 1));
    auto backend = make_backend(backend_name, "", {.gemv_rows = gemv_rows});
    std::mt19937 rng(0);
    std::cout << "CausalLM: " << layers << " layers, E " << E << ", " << H << " heads, feed-forward " << F
              << ", vocab " << V << ", B = 1, on " << backend->name() << " (" << backend->device_name() << ")\n"
              << "context  parts  cached ms/token  recompute ms/token  speed-up  cache MiB\n";
    for (int64_t context : contexts) {
      std::optional<double> recompute;
      for (int64_t asked : parts_list) {
        KVCache cache = model.make_cache(*backend, 1, context + tokens);
        cache.advance(context - 1);  // context - 1 positions of zeros, then one real step
        Tensor sequence = ids(context, rng, V);
        Tensor last({1, 1}, {sequence.data.back()}, DType::int64);
        DecodeOptions options;
        options.parts = std::min(asked, context);
        model.decode(*backend, last, cache, options);  // pipelines made; not timed
        std::vector<double> cached;
        for (int t = 0; t < tokens - 1; ++t) {
          auto start = Clock::now();
          model.decode(*backend, ids(1, rng, V), cache, options);
          cached.push_back(ms_since(start));
        }
        if (!recompute) {
          auto start = Clock::now();
          model.forward(*backend, sequence);  // the first: pipelines for this length
          const double first = ms_since(start);
          start = Clock::now();
          model.forward(*backend, sequence);
          recompute = std::min(first, ms_since(start));
        }
        const double per_token = median(cached);
        // the split the last step ran (its length is context + tokens - 1 positions)
        const int64_t parts =
            options.parts > 0 ? options.parts : backend->decoding_parts(H, context + tokens - 1, E / H);
        std::cout << std::fixed << std::setw(7) << context << std::setw(7) << parts
                  << (asked == 0 ? "*" : " ") << std::setw(16) << std::setprecision(2) << per_token
                  << std::setw(20) << std::setprecision(1) << *recompute << std::setw(9) << std::setprecision(1)
                  << *recompute / per_token << "×" << std::setw(11) << std::setprecision(1)
                  << static_cast<double>(cache.bytes()) / (1 << 20) << "\n";
      }
    }
    std::cout << "cached: the median of " << tokens - 1 << " decode steps; recompute: the faster of two full "
              << "forwards over the context\nparts: flash_decoding's key split (*: the backend's choice)\n"
              << "cache MiB = 2 · layers · B · H · capacity · d · 4 bytes\n";
  } catch (const std::exception& e) {
    std::cerr << "bench_decoding: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
