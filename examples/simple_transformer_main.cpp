// simple_transformer — the seed article's SimpleTransformer classifier, trained in PyTorch and
// saved with safetensors, run on a Vulkan device (or the CPU reference): prints the logits and
// each sequence's class, and checks them against PyTorch's when given --expected.
//   build/bin/simple_transformer                     the committed example (tests/golden_encoder/)
//   build/bin/simple_transformer --weights W.safetensors --tokens T.npy [--heads H]
//        [--backend gpu|cpu] [--device D] [--trace DIR] [--out LOGITS.npy] [--expected E.npy]
// Exit 0, 1 for a runtime failure or logits that differ from --expected by more than 1e-4, 2 for
// bad input (one line on stderr).
#include <CLI/CLI.hpp>

#include <cmath>
#include <iomanip>
#include <iostream>
#include <memory>

#include "examples/simple_transformer.h"
#include "vkattn/backends/make_backend.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"
#include "vkattn/tracing/trace_dump.h"

namespace {

const std::string kExample = VKATTN_EXAMPLE_DATA;

int run(int argc, char** argv) {
  using namespace vkattn;
  CLI::App app("The article's SimpleTransformer classifier from its PyTorch state_dict", "simple_transformer");
  std::string weights = kExample + "/weights.safetensors", tokens_path = kExample + "/tokens.npy";
  std::string expected_path, backend_name = "gpu", device, trace, out;
  int64_t heads = 0;
  bool defaults = true;
  app.add_option("--weights", weights, "W.safetensors: SimpleTransformer's state_dict (default: the committed example)")
      ->each([&](const std::string&) { defaults = false; });
  app.add_option("--tokens", tokens_path, "T.npy: int64 token ids (B, T)")->each([&](const std::string&) { defaults = false; });
  app.add_option("--heads", heads, "num_heads; default: __metadata__ num_heads")->check(CLI::PositiveNumber);
  app.add_option("--backend", backend_name, "gpu or cpu")->check(CLI::IsMember({"gpu", "cpu"}))->capture_default_str();
  app.add_option("--device", device, "GPU index or name substring; default: the best");
  app.add_option("--trace", trace, "DIR: print every step and write DIR/trace.json");
  app.add_option("--out", out, "LOGITS.npy: write the logits (B, num_classes)");
  app.add_option("--expected", expected_path, "E.npy: PyTorch's logits to check against (default with the example)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (defaults && expected_path.empty()) expected_path = kExample + "/expected_logits.npy";

  auto model = examples::SimpleTransformer::load(weights, heads);
  Tensor tokens = io::read_npy(tokens_path);
  std::unique_ptr<Backend> backend = make_backend(backend_name, device);
  std::unique_ptr<TraceDump> dump;
  std::unique_ptr<ConsoleTracer> console;
  if (!trace.empty()) {
    dump = std::make_unique<TraceDump>(trace, false, nlohmann::json{{"module", "SimpleTransformer"}, {"weights", weights}});
    console = std::make_unique<ConsoleTracer>(std::cout, false);
    backend->add_tracer(*dump);
    backend->add_tracer(*console);
  }
  Tensor logits = model.forward(*backend, tokens);

  const auto& c = model.block_config();
  std::cout << "SimpleTransformer(vocab_size=" << model.vocab_size() << ", embed_dim=" << c.d_model
            << ", num_heads=" << c.nhead << ", num_layers=" << model.num_layers()
            << ", num_classes=" << model.num_classes() << ") on " << backend->name() << " ("
            << backend->device_name() << ")\n"
            << "tokens " << shape_string(tokens.shape) << " -> logits " << shape_string(logits.shape) << "\n";
  const int64_t B = logits.dim(0), C = logits.dim(1);
  for (int64_t b = 0; b < B; ++b) {
    std::cout << "  sequence " << b << ":";
    int64_t best = 0;
    for (int64_t k = 0; k < C; ++k) {
      float v = logits.data[static_cast<size_t>(b * C + k)];
      std::cout << " " << std::showpos << std::fixed << std::setprecision(4) << v << std::noshowpos;
      if (v > logits.data[static_cast<size_t>(b * C + best)]) best = k;
    }
    std::cout << "  -> class " << best << "\n";
  }
  if (!out.empty()) io::write_npy(out, logits);
  if (!expected_path.empty()) {
    Tensor expected = io::read_npy(expected_path);
    if (expected.shape != logits.shape) throw FileError(expected_path + ": shape " + shape_string(expected.shape) + " is not the logits' " + shape_string(logits.shape));
    float worst = 0;
    for (size_t i = 0; i < logits.data.size(); ++i) worst = std::max(worst, std::fabs(logits.data[i] - expected.data[i]));
    std::cout << "max |vkattn - PyTorch| = " << std::scientific << std::setprecision(2) << worst
              << (worst <= 1e-4f ? " (within 1e-4)" : " (MORE THAN 1e-4)") << "\n";
    if (!(worst <= 1e-4f)) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const vkattn::DeviceError& e) {
    std::cerr << "simple_transformer: " << e.what() << "\n";
    return 1;
  } catch (const vkattn::Error& e) {
    std::cerr << "simple_transformer: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "simple_transformer: " << e.what() << "\n";
    return 1;
  }
}
