// bench_folds: what folding the element-wise steps into the projections' stores saves in one
// pre-norm TransformerEncoderLayer (gelu into linear1's; residual_add1 into out_proj's,
// residual_add2 into linear2's: VulkanBackendOptions::fold_into_store), on random weights.
//
//   bench_folds [--tokens 64,1024] [--d-model 512] [--heads 8] [--feedforward 2048]
//               [--forwards 5] [--turns 3]
//
// Each turn runs --forwards shape-traced forwards folded, then as many apart, on one context,
// and prints the medians of the device's time (timestamps) for each projection with the step
// after it — folded, the step takes no time of its own — and for the whole layer. A first turn
// warms the pipelines and is not printed.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/median.h"
#include "vkattn/backends/make_backend.h"
#include "vkattn/errors.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tracing/tracer.h"

using namespace vkattn;
using bench::median;

namespace {

// The pairs timed: a projection and the step after it, which the fold does in its store
const std::vector<std::pair<std::string, std::string>> kPairs{
    {"linear1", "gelu"}, {"self_attn.out_proj", "residual_add1"}, {"linear2", "residual_add2"}};

// Medians over `forwards` of one layer's forward on x: each pair's ms, then the layer's
struct Times {
  std::vector<double> pairs;
  double layer = 0;
};

Times time_forwards(const TransformerEncoderLayer& layer, Backend& backend, const Tensor& x, int forwards) {
  std::map<std::string, std::vector<double>> ms;  // step name -> ms, a forward each
  std::vector<double> layer_ms;
  for (int i = 0; i < forwards; ++i) {
    StepRecorder steps(false);
    {
      AttachedTracer tracer(backend, steps);
      layer.forward(backend, x);
    }
    const auto& times = steps.pass_end().step_times;
    if (times.empty()) throw std::runtime_error("the device timed no step (it has no timestamp queries)");
    double sum = 0;
    for (size_t s = 0; s < steps.steps().size() && s < times.size(); ++s) {
      ms[steps.steps()[s].event.name].push_back(times[s].duration_us / 1e3);
      sum += times[s].duration_us / 1e3;
    }
    layer_ms.push_back(sum);
  }
  Times t;
  for (const auto& [projection, after] : kPairs) {
    for (const std::string& step : {projection, after}) {
      if (ms[step].empty()) throw std::runtime_error("the layer's trace has no step " + step);
    }
    t.pairs.push_back(median(ms[projection]) + median(ms[after]));
  }
  t.layer = median(layer_ms);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench_folds: one encoder layer with its element-wise steps folded into the projections' stores "
      "and apart"};
  std::vector<int64_t> tokens{64, 1024};
  int64_t E = 512, H = 8, F = 2048;
  int forwards = 5, turns = 3;
  app.add_option("--tokens", tokens, "the contexts T (B = 1)")->delimiter(',')->check(CLI::Range(1, 1 << 16));
  app.add_option("--d-model", E, "E")->check(CLI::Range(1, 1 << 14))->capture_default_str();
  app.add_option("--heads", H, "attention heads (dividing E)")->check(CLI::Range(1, 1 << 10))->capture_default_str();
  app.add_option("--feedforward", F, "F")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--forwards", forwards, "forwards a turn each way")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--turns", turns, "turns after the first")->check(CLI::Range(1, 100))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const TransformerEncoderLayerConfig config{
        .d_model = E, .nhead = H, .dim_feedforward = F, .activation = Activation::gelu, .norm_first = true};
    const TransformerEncoderLayer layer(config, TransformerEncoderLayerWeights::random(config, 1));
    const auto folded = make_backend("gpu"), apart = make_backend("gpu", "", {.fold_into_store = false});
    std::cout << "TransformerEncoderLayer, pre-norm, gelu: E " << E << ", " << H << " heads, feed-forward " << F
              << ", B 1\non " << folded->device_name() << "\n"
              << "device ms, the median of " << forwards << " forwards a turn; folded: the second step in the "
              << "first's store\n"
              << "     T  turn  stores    linear1+gelu  out_proj+add1  linear2+add2     layer\n"
              << std::fixed << std::setprecision(2);
    for (int64_t T : tokens) {
      Tensor x({1, T, E});
      for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = float((i * 7919) % 1000) / 500.0f - 1.0f;
      for (int turn = 0; turn <= turns; ++turn) {
        for (Backend* backend : {folded.get(), apart.get()}) {
          const Times t = time_forwards(layer, *backend, x, forwards);
          if (turn == 0) continue;  // the pipelines' first use
          std::cout << std::setw(6) << T << std::setw(6) << turn << "  " << std::setw(6)
                    << (backend == folded.get() ? "folded" : "apart") << std::setw(16) << t.pairs[0] << std::setw(15)
                    << t.pairs[1] << std::setw(14) << t.pairs[2] << std::setw(10) << t.layer << "\n";
        }
      }
    }
  } catch (const ConfigError& e) {  // the options make no layer: E not a multiple of the heads
    std::cerr << "bench_folds: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "bench_folds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
