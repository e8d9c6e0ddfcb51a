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
//                  [--gemv-rows 0|8] [--early-dispatches N] [--cache-dtype F32|F16|BF16]
//                  [--part-lanes true|false] [--unfolded-stores] [--steps]
//
// --parts times each context under each of flash_decoding's key splits (0: the backend's choice).
// --gemv-rows: linear for at most that many rows as a GEMV (shaders/gemv.glsl; 0: the GEMM's
// tilings), instead of the device's rule (8 on a GPU, 0 on a CPU device).
// --unfolded-stores: gelu, the residual_adds and attention_combine as steps of their own, not done
// by the store of the projection before each or by flash_decoding's dispatch
// (VulkanBackendOptions::fold_into_store).
// --steps: after the table, one more decode step a row, shape-traced, its time by op
// (timestamps on the GPU) against its wall time: what a token's time is spent on, and how much
// of it is not the device's steps (the host's checks and recording, submission, the readback);
// and the bytes flash_decoding must read of the caches against its time and the device's measured
// bandwidth (VulkanBackend::measure_peak, after the timed steps).
// --part-lanes: flash_decoding's parts walked by lanes of a subgroup together, or by one
// invocation, instead of the device's rule (VulkanBackendOptions::flash_decoding_subgroups).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include "bench/median.h"
#include "vkattn/backends/make_backend.h"
#include "vkattn/backends/roofline.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/errors.h"
#include "vkattn/modules/causal_lm.h"
#include "vkattn/tracing/tracer.h"

using namespace vkattn;
using bench::median;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

Tensor ids(int64_t n, std::mt19937& rng, int64_t vocab) {
  Tensor t({1, n}, std::vector<float>(static_cast<size_t>(n)), DType::int64);
  for (float& id : t.data) id = static_cast<float>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// A step recorder that also notes, on the host's clock, when the pass began and when its last
// step was reported: a GPU backend reports a step as it records it, so that between the two lie
// the pass's checks, its preflight sizing run and its recording, before the readback submits the
// rest (a GPU has begun on the first dispatches by then: VulkanBackendOptions::early_dispatches).
class TimedSteps : public StepRecorder {
 public:
  TimedSteps() : StepRecorder(false) {}
  void on_pass(const std::string& pass, const std::string& backend, const std::string& device) override {
    begun_ = Clock::now();
    StepRecorder::on_pass(pass, backend, device);
  }
  void on_step(const StepEvent& event) override {
    StepRecorder::on_step(event);
    last_step_ = Clock::now();
  }
  double recording_ms() const { return std::chrono::duration<double, std::milli>(last_step_ - begun_).count(); }

 private:
  Clock::time_point begun_, last_step_;
};

// One traced decode step's time by op (the device's clock on a GPU), against its wall time `wall_ms`:
//   context 256, parts 32: one decode step, shape-traced, 4.31 ms (gpu clock for the steps)
//     op                 dispatches     step ms   of the steps
//     linear                     25       0.912           48 %
//     folded into a neighbour (its store, its load or its dispatch; none of their own):
//       gelu 4, split_heads 12
//   the steps' time 1.90 ms, from the first's start to the last's end 2.40 ms; the rest of the
//   4.31 ms (outside the steps: the host's checks and recording, submission, the readback): 1.91 ms
//   of which on the host before the readback (checks, preflight sizing, recording): 0.52 ms
// The device time of the step's `op` dispatches, in µs
double op_us(const TimedSteps& steps, const std::string& op) {
  const auto& times = steps.pass_end().step_times;
  double us = 0;
  for (size_t i = 0; i < steps.steps().size() && i < times.size(); ++i) {
    if (steps.steps()[i].event.op == op && steps.steps()[i].event.folded.empty()) us += times[i].duration_us;
  }
  return us;
}

// What flash_decoding must read of the caches: their keys and values at the positions filled
struct CacheRead {
  double bytes = 0;
  std::string what;  // "4105 positions, 64.1 MiB\n  (2 · 4 layers · 8 heads · 64 · 4 bytes a position)"
};
CacheRead cache_read(const KVCache& cache) {
  const int64_t element = cache.dtype() == Narrow::none ? 4 : 2;
  const double bytes =
      2.0 * double(cache.layers() * cache.batch() * cache.heads() * cache.length() * cache.head_dim() * element);
  std::ostringstream what;
  what << std::fixed << std::setprecision(1) << cache.length() << " positions, " << bytes / (1 << 20) << " MiB\n  (2 · "
       << cache.layers() << (cache.layers() == 1 ? " layer · " : " layers · ") << cache.heads() << " heads · "
       << cache.head_dim() << " · " << element << " bytes a position)";
  return {bytes, what.str()};
}

// Those bytes against the time flash_decoding's dispatches took, `us`, and the device's measured
// bandwidth (the "≥ 50 % of HBM bandwidth for the bytes it must read"):
//   flash_decoding read the caches' 4105 positions, 64.1 MiB
//     (2 · 4 layers · 8 heads · 64 · 4 bytes a position), in 1.19 ms: 56.5 GB/s,
//     1.2 % of the device's 4612.0 GB/s
//     (measured by the device's clock (peak_flops.comp, …; peak_bytes.comp, 64 MiB))
std::string cache_read_line(const CacheRead& read, double us, const DevicePeak* peak) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << "flash_decoding read the caches' " << read.what << ", in " << us / 1e3
      << " ms: " << std::setprecision(1) << read.bytes / us / 1e3 << " GB/s";
  if (peak && peak->bytes > 0) {
    const double share = read.bytes / us * 1e6 / peak->bytes;
    out << ",\n  " << 100 * share << " % of the device's " << peak->bytes / 1e9 << " GB/s\n  (measured " << peak->how
        << ")";
    if (share > 1) out << "\n  (more than the peak: caches this small may be read from the device's own cache)";
  }
  out << "\n";
  return out.str();
}

std::string step_breakdown(const TimedSteps& steps, double wall_ms) {
  const auto& times = steps.pass_end().step_times;
  struct Op {
    size_t first = 0;  // the op's first step: ops print in the order the pass met them
    int dispatches = 0;
    double us = 0;
  };
  std::map<std::string, Op> ops;
  std::map<std::string, int> folded;  // op -> steps done by a neighbour's store or load: no dispatch, 0 µs
  double busy_us = 0, first_start = std::numeric_limits<double>::infinity(), last_end = 0;
  for (size_t i = 0; i < steps.steps().size() && i < times.size(); ++i) {
    const StepEvent& e = steps.steps()[i].event;
    if (!e.folded.empty()) {
      ++folded[e.op];
      continue;
    }
    Op& op = ops.try_emplace(e.op, Op{i}).first->second;
    op.dispatches += 1;
    op.us += times[i].duration_us;
    busy_us += times[i].duration_us;
    first_start = std::min(first_start, times[i].start_us);
    last_end = std::max(last_end, times[i].start_us + times[i].duration_us);
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(2);
  if (ops.empty()) {
    out << "  (no step times: the backend could not time this pass)\n";
    return out.str();
  }
  std::vector<std::pair<std::string, Op>> ordered(ops.begin(), ops.end());
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
  out << "  op                 dispatches     step ms   of the steps\n";
  for (const auto& [name, op] : ordered) {
    out << "  " << std::left << std::setw(19) << name << std::right << std::setw(10) << op.dispatches
        << std::setw(12) << std::setprecision(3) << op.us / 1e3 << std::setw(13) << std::setprecision(0)
        << 100 * op.us / busy_us << " %\n";
  }
  if (!folded.empty()) {
    out << "  folded into a neighbour (its store, its load or its dispatch; none of their own):\n   ";
    const char* separator = " ";
    for (const auto& [op, count] : folded) {
      out << separator << op << " " << count;
      separator = ", ";
    }
    out << "\n";
  }
  out << std::setprecision(2) << "the steps' time " << busy_us / 1e3 << " ms, from the first's start to the last's end "
      << (last_end - first_start) / 1e3 << " ms; the rest of the\n" << wall_ms
      << " ms (outside the steps: the host's checks and recording, submission, the readback): "
      << std::max(0.0, wall_ms - (last_end - first_start) / 1e3) << " ms\n"
      << "of which on the host before the readback (checks, preflight sizing, recording): " << steps.recording_ms()
      << " ms\n";
  return out.str();
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
  std::optional<uint32_t> early;
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
  app.add_option("--early-dispatches", early,
                 "dispatches a step sends to the device before its readback (0: none, the step submitted whole; "
                 "unset: the device's rule)");
  std::optional<bool> part_lanes;
  app.add_option("--part-lanes", part_lanes,
                 "flash_decoding's parts each walked by lanes of a subgroup together (true) or by one invocation "
                 "(false); unset: the device's rule, or what tuning measured");
  std::string cache_dtype = "F32";
  app.add_option("--cache-dtype", cache_dtype, "the KV cache's numbers: F32, or F16 / BF16 (2 bytes each on a GPU)")
      ->check(CLI::IsMember({"F32", "F16", "BF16"}))
      ->capture_default_str();
  bool apart = false;
  app.add_flag("--unfolded-stores", apart,
               "gelu, the residual_adds and attention_combine steps of their own (else folded into the store "
               "of the projection before each, or into flash_decoding, on a GPU)");
  bool by_step = false;
  app.add_flag("--steps", by_step,
               "after the table, one shape-traced decode step a row: its time by op (the device clock on a GPU)");
  CLI11_PARSE(app, argc, argv);
  try {
    const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
    CausalLMConfig c;
    c.vocab_size = V;
    c.max_positions = longest + tokens;
    c.layer = {E, H, F, Activation::gelu, 1e-5f, true};
    c.num_layers = layers;
    CausalLM model(c, CausalLMWeights::random(c, 1));
    auto backend = make_backend(backend_name, "",
                                {.gemv_rows = gemv_rows,
                                 .early_dispatches = early,
                                 .fold_into_store = !apart,
                                 .flash_decoding_subgroups = part_lanes});
    const Narrow dtype = cache_dtype == "F16"    ? Narrow::float16
                         : cache_dtype == "BF16" ? Narrow::bfloat16
                                                 : Narrow::none;
    std::mt19937 rng(0);
    struct Breakdown {
      std::string text;
      double decoding_us;
      CacheRead read;
    };
    std::vector<Breakdown> breakdowns;  // --steps
    std::cout << "CausalLM: " << layers << " layers, E " << E << ", " << H << " heads, feed-forward " << F << ", vocab "
              << V << ", B = 1, a " << narrow_name(dtype) << " cache,\non " << backend->name() << " ("
              << backend->device_name() << ")\n"
              << "context  parts  lanes  cached ms/token  recompute ms/token  speed-up  cache MiB\n";
    for (int64_t context : contexts) {
      std::optional<double> recompute;
      for (int64_t asked : parts_list) {
        KVCache cache = model.make_cache(*backend, 1, context + tokens, dtype);
        cache.advance(context - 1);  // context - 1 positions of zeros, then one real step
        Tensor sequence = ids(context, rng, V);
        Tensor last({1, 1}, {sequence.data.back()}, DType::int64);
        DecodeOptions options;
        options.parts = std::min(asked, context);
        model.decode(*backend, last, cache, options);  // pipelines made; not timed
        {  // and the last step's length too, untimed: where the steps cross a power of two (a
           // context of 1024), the tuner meets flash_decoding's next shape class there
          KVCache ahead = model.make_cache(*backend, 1, context + tokens, dtype);
          ahead.advance(context + tokens - 1);
          model.decode(*backend, last, ahead, options);
        }
        std::vector<double> cached;
        for (int t = 0; t < tokens - 1; ++t) {
          auto start = Clock::now();
          model.decode(*backend, ids(1, rng, V), cache, options);
          cached.push_back(ms_since(start));
        }
        if (!recompute) {
          auto start = Clock::now();
          // the last position's logits alone, as generation without a cache asks for them
          model.forward(*backend, sequence, {}, AttentionPath::automatic, 1);  // the first: pipelines
          const double first = ms_since(start);
          start = Clock::now();
          model.forward(*backend, sequence, {}, AttentionPath::automatic, 1);
          recompute = std::min(first, ms_since(start));
        }
        const double per_token = median(cached);
        if (by_step) {
          TimedSteps steps;
          backend->add_tracer(steps);
          const auto start = Clock::now();
          try {
            model.decode(*backend, ids(1, rng, V), cache, options);
          } catch (...) {
            backend->remove_tracer(steps);
            throw;
          }
          const double wall = ms_since(start);
          backend->remove_tracer(steps);
          std::ostringstream title;
          title << "context " << context << (asked ? ", parts " + std::to_string(asked) : "")
                << ": one decode step, shape-traced, " << std::fixed << std::setprecision(2) << wall << " ms ("
                << steps.pass_end().clock << " clock for the steps)\n";
          breakdowns.push_back(
              {title.str() + step_breakdown(steps, wall), op_us(steps, "flash_decoding"), cache_read(cache)});
        }
        // the split the last step ran (its length is context + tokens - 1 positions)
        const int64_t parts =
            options.parts > 0 ? options.parts : backend->decoding_parts(H, context + tokens - 1, E / H);
        const uint32_t lanes = backend->decoding_part_lanes(H, context + tokens - 1, E / H);
        std::cout << std::fixed << std::setw(7) << context << std::setw(7) << parts << (asked == 0 ? "*" : " ")
                  << std::setw(6) << lanes << std::setw(17) << std::setprecision(2) << per_token << std::setw(20)
                  << std::setprecision(1) << *recompute << std::setw(9) << std::setprecision(1)
                  << *recompute / per_token << "×" << std::setw(11) << std::setprecision(1)
                  << static_cast<double>(cache.bytes()) / (1 << 20) << "\n";
      }
    }
    std::cout << "cached: the median of " << tokens - 1 << " decode steps; recompute: the faster of two full\n"
              << "  forwards over the context (the last position's logits kept)\n"
              << "parts: flash_decoding's key split (*: the backend's choice)\n"
              << "lanes: those of a subgroup that walk each part together (0: one invocation a part)\n"
              << "cache MiB = 2 · layers · B · H · capacity · d · " << (dtype == Narrow::none ? 4 : 2) << " bytes\n";
    // the bandwidth flash_decoding's reads are held against: measured after the timed steps
    std::optional<DevicePeak> peak;
    if (auto* gpu = dynamic_cast<VulkanBackend*>(backend.get()); gpu && !breakdowns.empty()) peak = gpu->measure_peak();
    for (const Breakdown& b : breakdowns) {
      std::cout << "\n" << b.text;
      if (b.decoding_us > 0) std::cout << cache_read_line(b.read, b.decoding_us, peak ? &*peak : nullptr);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_decoding: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
