// bench_grouped_query: what grouped-query attention and a sliding window buy, at one shape
// (issue 27's: B 1, L 4096, H 32, d 128, causal), timed as the fused flash_attention step alone
// (the device's own timestamps, the median of --reps passes after an untimed one):
//   MHA       K and V with H heads                     (H_kv = H)
//   GQA       K and V with H_kv heads, each serving H / H_kv query heads
//   GQA + W   the same with a sliding window of W keys
// and the KV cache each needs for a context of L positions (2 · H_kv · L · d · 4 bytes a layer).
//
//   bench_grouped_query [--length 4096] [--heads 32] [--kv-heads 8] [--dim 128] [--window 512]
//                       [--reps 3] [--backend gpu|cpu]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <vector>

#include "bench/median.h"
#include "vkattn/backends/make_backend.h"
#include "vkattn/errors.h"
#include "vkattn/tensor.h"
#include "vkattn/tracing/tracer.h"

using namespace vkattn;
using bench::median;

namespace {

// The flash_attention step's time in ms: the median of `reps` traced passes, after one untimed.
double time_flash(Backend& b, const Value& q, const Value& k, const Value& v, int64_t window, int reps) {
  StepRecorder recorder(false);
  std::vector<double> ms;
  for (int r = -1; r < reps; ++r) {
    if (r >= 0) b.add_tracer(recorder);
    b.begin_pass("flash_attention");
    Value out = b.flash_attention("flash_attention", q, k, v, nullptr, nullptr, true, window);
    b.download(out);  // submits the pass and waits for it (the transfer is not the step's time)
    b.end_pass();
    if (r < 0) continue;
    b.remove_tracer(recorder);
    const auto& times = recorder.pass_end().step_times;
    if (times.empty()) throw std::runtime_error("the backend could not time the step");
    ms.push_back(times.back().duration_us / 1000.0);
  }
  return median(ms);
}

// The share of causal scores (i >= j) a window of W keys keeps: rows 0 … W-1 keep all theirs.
double visited_fraction(int64_t L, int64_t W) {
  const double l = static_cast<double>(L), w = static_cast<double>(std::min(W, L));
  return (w * l - w * (w - 1) / 2) / (l * (l + 1) / 2);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fused attention with grouped-query heads and a sliding window, against multi-head attention"};
  int64_t L = 4096, H = 32, H_kv = 8, d = 128, W = 512;
  int reps = 3;
  std::string backend_name = "gpu";
  app.add_option("--length", L, "L = S: the sequence")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--heads", H, "H query heads")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", H_kv, "H_kv key/value heads, dividing H")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--dim", d, "d, the head dim")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--window", W, "W, the sliding window")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed passes per variant (the median is reported)")->capture_default_str();
  app.add_option("--backend", backend_name, "gpu or cpu")->check(CLI::IsMember({"gpu", "cpu"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (H % H_kv != 0) throw ConfigError("--kv-heads " + std::to_string(H_kv) + " does not divide --heads " + std::to_string(H));
    auto backend = make_backend(backend_name, "");
    Backend& b = *backend;
    Value q = b.upload("q", random_tensor({1, H, L, d}, 1));
    Value k_full = b.upload("k", random_tensor({1, H, L, d}, 2)), v_full = b.upload("v", random_tensor({1, H, L, d}, 3));
    Value k_grouped = b.upload("k", random_tensor({1, H_kv, L, d}, 4));
    Value v_grouped = b.upload("v", random_tensor({1, H_kv, L, d}, 5));
    std::cout << "flash_attention, causal, B 1, L = S = " << L << ", H " << H << ", d " << d << ", on " << b.name()
              << " (" << b.device_name() << "); median of " << reps << " passes\n";
    const double mha = time_flash(b, q, k_full, v_full, 0, reps);
    const double gqa = time_flash(b, q, k_grouped, v_grouped, 0, reps);
    const double windowed = time_flash(b, q, k_grouped, v_grouped, W, reps);
    auto cache_mib = [&](int64_t heads) { return static_cast<double>(2 * heads * L * d * 4) / (1 << 20); };
    std::cout << std::fixed << std::setprecision(1)
              << "variant                      K, V heads  window      ms  vs MHA  KV cache MiB a layer\n"
              << "MHA                          " << std::setw(10) << H << std::setw(8) << "-" << std::setw(8) << mha
              << std::setw(7) << 1.0 << "x" << std::setw(22) << cache_mib(H) << "\n"
              << "GQA                          " << std::setw(10) << H_kv << std::setw(8) << "-" << std::setw(8) << gqa
              << std::setw(7) << mha / gqa << "x" << std::setw(22) << cache_mib(H_kv) << "\n"
              << "GQA + sliding window         " << std::setw(10) << H_kv << std::setw(8) << W << std::setw(8)
              << windowed << std::setw(7) << mha / windowed << "x" << std::setw(22) << cache_mib(H_kv) << "\n"
              << "window " << W << " against full causal GQA: " << std::setprecision(2) << gqa / windowed
              << "x faster (it visits about " << std::setprecision(0)
              << 100.0 * visited_fraction(L, W)
              << " % of the causal scores)\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_grouped_query: " << e.what() << "\n";
    return 1;
  }
}
