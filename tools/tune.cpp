// vkattn tune: measures the plans of every step with more than one (engine/backends/tuner.h) for
// the shape classes of some attention shapes (their forward, and a decode step over their length),
// now rather than at their first use, and prints what it chose against the fixed rule. The plans
// are remembered where every later run finds them.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>

#include "engine/vulkan/plan_cache.h"
#include "tools/commands.h"
#include "tools/interrupt.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/errors.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tensor.h"

namespace vkattn::cli {
namespace {

struct BenchShape {
  std::string name;
  int64_t batch, seq, embed, heads;
  bool causal;
};

// The benchmark's shapes (bench/compare.py)
const std::map<std::string, BenchShape> kNamed = {
    {"S1", {"S1", 32, 100, 512, 8, false}},
    {"S2", {"S2", 1, 1024, 512, 8, true}},
    {"S3", {"S3", 4, 256, 768, 12, false}},
    {"S4", {"S4", 1, 4096, 512, 8, true}},
};

// "S1" or "BxLxExH" with ":causal"
BenchShape parse_shape(const std::string& text) {
  if (auto it = kNamed.find(text); it != kNamed.end()) return it->second;
  static const std::regex form(R"((\d+)x(\d+)x(\d+)x(\d+)(:causal)?)");
  std::smatch m;
  if (!std::regex_match(text, m, form)) {
    throw UsageError("--shapes: '" + text + "' is neither S1…S4 nor BxLxExH[:causal] (e.g. 32x100x512x8)");
  }
  BenchShape s{text, std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3]), std::stoll(m[4]), m[5].matched};
  if (s.batch < 1 || s.seq < 1 || s.embed < 1 || s.heads < 1 || s.embed % s.heads != 0) {
    throw UsageError("--shapes: '" + text + "': sizes must be positive and H must divide E");
  }
  return s;
}

std::string ms_text(const nlohmann::json& ms) {
  if (!ms.is_number()) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2f ms", ms.get<double>());
  return text;
}

}  // namespace

CLI::App* add_tune(CLI::App& app, TuneArgs& a) {
  auto* cmd = app.add_subcommand("tune", "measure the plans of every step that has several, for some shapes, and "
                                         "remember the fastest (see vkattn devices)");
  cmd->add_option("--shapes", a.shapes,
                  "attention shapes whose steps to tune: S1…S4 (the benchmark's) or BxLxExH[:causal]")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--device", a.device, "GPU index or name substring (see vkattn devices); default: the best");
  cmd->add_flag("--again", a.again, "forget this device's remembered plans first and measure them all again");
  return cmd;
}

int run_tune(const TuneArgs& a) {
  std::vector<BenchShape> shapes;
  for (const auto& text : a.shapes) shapes.push_back(parse_shape(text));
  // tuning is asked for here, whatever VKATTN_TUNE says
  VulkanBackendOptions options;
  options.tune = true;
  auto made = make_watched_backend("gpu", a.device, options);
  auto& backend = dynamic_cast<VulkanBackend&>(*made);
  const auto& device = backend.context().device_report();
  auto cache = vulkan::plan_cache(device);
  if (cache->file().empty()) throw UsageError("neither XDG_CACHE_HOME nor HOME is set: there is nowhere to keep plans");
  if (a.again) {
    std::error_code ignored;
    std::filesystem::remove(cache->file(), ignored);
    for (const auto& entry : cache->entries()) cache->forget(entry.first);
  }
  const bool terminal = ::isatty(STDERR_FILENO);
  backend.on_progress([&](const Backend::Progress& p) {
    try {
      stop_if_interrupted();
    } catch (const Interrupted&) {
      throw Interrupted("interrupted (Ctrl-C) during " + p.step + ": the classes measured before it are remembered");
    }
    if (p.step.rfind("tuning ", 0) != 0) return;
    if (terminal) {  // one line, rewritten as it goes
      std::fprintf(stderr, "\r  %s: %3.0f%%%s", p.step.c_str(), 100 * p.done, p.done >= 1 ? "\n" : "");
    } else if (p.done >= 1) {
      std::fprintf(stderr, "  %s: done\n", p.step.c_str());
    }
    std::fflush(stderr);
  });
  std::cout << "tuning on " << device.name << "; driver: " << vulkan::driver_string(device) << "\n";
  const auto start = std::chrono::steady_clock::now();
  for (const BenchShape& s : shapes) {
    std::cout << s.name << ": B " << s.batch << ", L " << s.seq << ", E " << s.embed << ", H " << s.heads
              << (s.causal ? ", causal" : "") << std::endl;
    MultiHeadAttentionConfig config{.embed_dim = s.embed, .num_heads = s.heads, .batch_first = true};
    MultiHeadAttention mha(config, MultiHeadAttentionWeights::random(config, 1));
    const Tensor x = random_tensor({s.batch, s.seq, s.embed}, 2);
    // each path's steps, then which path is the faster where a forward may take either
    for (AttentionPath path : {AttentionPath::unfused, AttentionPath::fused, AttentionPath::automatic}) {
      // the unfused path's (B, H, L, L) scores must fit the device; the fused path's never need to
      if (path == AttentionPath::unfused && uint64_t(s.batch * s.heads) * s.seq * s.seq * 4 > device.max_storage_buffer_range) {
        continue;
      }
      ForwardOptions forward{.need_weights = false, .is_causal = s.causal, .attention = path};
      mha.forward(backend, x, x, x, forward);
    }
    // and a decode step's key split over that many cached positions (a token generated after
    // them, or a decoder's cross-attention over memory of that length)
    backend.decoding_parts(s.batch * s.heads, s.seq, s.embed / s.heads);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "\nplans by shape class: the chosen one (the fastest measured), and the fixed rule's where it\n"
               "differs, else the next fastest\n";
  const auto entries = cache->entries();
  for (const auto& [shape_class, chosen] : backend.tuned_plans()) {
    auto it = entries.find(shape_class);
    if (it == entries.end() || !it->second.contains("measured_ms")) {
      std::cout << "  " << shape_class << ": remembered\n    chosen  " << chosen << "\n";
      continue;
    }
    const nlohmann::json& entry = it->second;
    const nlohmann::json& measured = entry["measured_ms"];
    const std::string rule = entry.value("rule", "");
    std::printf("  %s: %s measured in %.1f s\n", shape_class.c_str(), entry.value("problem", "").c_str(),
                entry.value("seconds", 0.0));
    const nlohmann::json chosen_ms = measured.value(entry.value("describe", ""), nlohmann::json());
    std::printf("    chosen  %-60s %9s\n", chosen.c_str(), ms_text(chosen_ms).c_str());
    // the rule's plan where tuning chose another, else the runner-up: how much the choice is worth
    std::string other = rule, label = "rule";
    if (rule == entry.value("describe", "")) {
      other.clear(), label = "next";
      for (const auto& [plan, ms] : measured.items()) {
        if (plan != rule && ms.is_number() && (other.empty() || ms.get<double>() < measured[other].get<double>())) other = plan;
      }
    }
    const nlohmann::json other_ms = other.empty() ? nlohmann::json() : measured.value(other, nlohmann::json());
    if (other_ms.is_number() && chosen_ms.is_number() && chosen_ms.get<double>() > 0) {
      std::printf("    %-6s  %-60s %9s  %.2f× as long\n", label.c_str(), other.c_str(), ms_text(other_ms).c_str(),
                  other_ms.get<double>() / chosen_ms.get<double>());
    }
  }
  std::printf("%zu shape classes in %.1f s; remembered in %s\n", backend.tuned_plans().size(), seconds,
              cache->file().c_str());
  return 0;
}

}  // namespace vkattn::cli
