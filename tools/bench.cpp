// vkattn bench: one attention shape, validated once against the CPU reference, then timed.
// Prints the median and fastest forward (wall clock around MultiHeadAttention::forward: inputs
// and weights uploaded, the output read back), GFLOP/s, peak Vulkan memory and every step's
// time from one traced forward, with its GFLOP/s, GB/s and how near it came to the device's
// peak (VulkanBackend::measure_peak, backends/roofline.h). --tracing-overhead alternates
// untraced, shape-traced and value-traced forwards in one run and reports what each tracer costs.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "engine/vulkan/context.h"
#include "tools/commands.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/backends/roofline.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/compare.h"
#include "vkattn/tracing/step_table.h"

namespace vkattn::cli {

namespace {

using nlohmann::json;

// The multiply-adds of the unfused recipe, times two: four projections, Q·Kᵀ and P·V (masks,
// softmax and the head reshapes are memory traffic, not counted).
double forward_flops(const BenchArgs& a) {
  auto d = [](int64_t v) { return static_cast<double>(v); };
  const double B = d(a.batch), L = d(a.seq), S = d(a.kv_seq ? a.kv_seq : a.seq), E = d(a.embed);
  return 2 * B * (L * E * E + 2 * S * E * E + L * E * E) + 2 * 2 * B * L * S * E;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The median over rounds of (this mode's time / the untraced time in the same round) - 1:
// pairing each traced forward with its neighbour cancels the slow drift of a shared machine.
double paired_overhead(const std::vector<double>& traced, const std::vector<double>& untraced) {
  std::vector<double> ratios;
  for (size_t i = 0; i < traced.size() && i < untraced.size(); ++i) ratios.push_back(traced[i] / untraced[i]);
  return median(ratios) - 1;
}

// The output's tolerance against the float32 reference, absolute and relative: 1e-4, or with
// --float16-products 1e-2, where every product's inputs are rounded to float16 (11 bits)
double validation_tolerance(const BenchArgs& a) { return a.float16_products ? 1e-2 : 1e-4; }

// The backend bench times. --float16-products on a device without float16 cooperative matrices
// is the user's request the device cannot meet, named by its flag (exit 2), where the backend's
// own refusal is a DeviceError (exit 1, a device that failed).
std::unique_ptr<Backend> bench_backend(const BenchArgs& a) {
  const VulkanBackendOptions options{.early_dispatches = a.early_dispatches, .float16_products = a.float16_products};
  try {
    return make_watched_backend(a.backend, a.device, options);
  } catch (const DeviceError&) {
    if (!a.float16_products) throw;
    const auto plain = make_watched_backend(a.backend, a.device, {.early_dispatches = a.early_dispatches});
    const vulkan::DeviceReport& device = static_cast<const VulkanBackend&>(*plain).context().device_report();
    if (device.float16_products) throw;
    throw UsageError("--float16-products: '" + device.name +
                     "' has no float16 cooperative matrices; leave it off (vkattn devices says which have them)");
  }
}

// The tracers a timed forward can carry: none, shapes only (no readback), or every value.
const std::vector<std::string> kTracing = {"none", "shapes", "values"};

class Bench {
 public:
  explicit Bench(const BenchArgs& a)
      : a_(a),
        config_{.embed_dim = a.embed, .num_heads = a.heads, .batch_first = true},
        mha_(config_, MultiHeadAttentionWeights::random(config_, a.seed)),
        query_(random_tensor({a.batch, a.seq, a.embed}, a.seed + 1)),
        memory_(a.kv_seq ? random_tensor({a.batch, a.kv_seq, a.embed}, a.seed + 2) : Tensor()),
        backend_(bench_backend(a)) {
    options_.need_weights = false;
    options_.is_causal = a.causal;
    options_.attention = parse_attention_path(a.attention);
    options_.pack_in_proj = a.pack_in_proj;
    if (auto* vulkan = dynamic_cast<VulkanBackend*>(backend_.get())) vulkan->fold_layout_steps(!a.copy_layout_steps);
    if (a.resident) {  // as torch on a GPU: the module and its input there before the clock starts
      mha_.keep_weights_on(*backend_);
      query_value_ = backend_->upload("query", query_);
      memory_value_ = a.kv_seq ? backend_->upload("memory", memory_) : query_value_;
    }
  }

  Backend& backend() { return *backend_; }
  // --resident: the last forward's time until it returned, recorded but not yet read back (the
  // checks, the preflight's sizing run and the recording, on the host), in ms
  double host_ms() const { return host_ms_; }
  VulkanBackend* gpu() { return dynamic_cast<VulkanBackend*>(backend_.get()); }

  // One forward with the tracing mode's tracer attached; its wall time in ms.
  double time_forward(const std::string& tracing, StepRecorder* keep = nullptr) {
    std::optional<StepRecorder> local;
    StepRecorder* recorder = keep;
    if (!recorder && tracing != "none") recorder = &local.emplace(tracing == "values");
    if (recorder) backend_->add_tracer(*recorder);
    auto start = std::chrono::steady_clock::now();
    try {
      if (a_.resident) {
        last_values_ = mha_.forward(*backend_, query_value_, memory_value_, memory_value_, options_).output;
        // recorded, the rest submitted by the readback: the host's share of the forward (a GPU
        // has begun on its first dispatches by then: --early-dispatches)
        host_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (auto* vulkan = dynamic_cast<VulkanBackend*>(backend_.get())) vulkan->synchronize();  // to its end
      } else {
        last_ = mha_.forward(*backend_, query_, kv(), kv(), options_);
      }
    } catch (...) {
      if (recorder) backend_->remove_tracer(*recorder);
      throw;
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (recorder) backend_->remove_tracer(*recorder);
    return ms;
  }

  // The output's largest |backend - reference|, or throws when they disagree beyond the run's
  // tolerance; `first_ms` gets the forward's time (the process's first: it makes the pipelines).
  double validate(double& first_ms) {
    first_ms = time_forward("none");
    if (a_.resident) last_.output = backend_->download(last_values_);
    ReferenceBackend cpu;
    AttentionResult expected = mha_.forward(cpu, query_, kv(), kv(), options_);
    // the reference runs the same path, in float32; float16 products round every product's inputs
    const double tolerance = validation_tolerance(a_);
    ValueDiff d = compare_values(last_.output, expected.output, tolerance, tolerance);
    if (d.mismatches) {
      throw std::runtime_error("validation failed: the " + a_.backend + " output differs from the reference: " +
                               mismatch_report(d, expected.output.shape, {"b", "i", "e"}, a_.backend, "cpu", tolerance,
                                               tolerance));
    }
    return d.max_abs_error;
  }

 private:
  const BenchArgs& a_;
  MultiHeadAttentionConfig config_;
  MultiHeadAttention mha_;
  // Key and value: the memory with --kv-seq, else the query itself, the one tensor, so that
  // self-attention uploads it once as a module's caller would
  const Tensor& kv() const { return a_.kv_seq ? memory_ : query_; }
  Tensor query_, memory_;
  std::unique_ptr<Backend> backend_;
  Value query_value_, memory_value_, last_values_;  // --resident: on the backend
  ForwardOptions options_;
  AttentionResult last_;
  double host_ms_ = 0;
};

}  // namespace

CLI::App* add_bench(CLI::App& app, BenchArgs& a) {
  auto* cmd = app.add_subcommand("bench", "time one attention shape (validated against the reference first)");
  auto size = [&](const char* name, int64_t& v, const char* what) {
    return cmd->add_option(name, v, what)->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  };
  size("--batch", a.batch, "B");
  size("--seq", a.seq, "L, query length");
  cmd->add_option("--kv-seq", a.kv_seq, "S, key length (cross-attention when given)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  size("--embed", a.embed, "E");
  size("--heads", a.heads, "H (must divide E)");
  cmd->add_flag("--causal", a.causal, "block each query from later keys");
  cmd->add_option("--backend", a.backend, "gpu or cpu")->check(CLI::IsMember({"gpu", "cpu"}))->capture_default_str();
  cmd->add_option("--device", a.device, "GPU index or name substring (see vkattn devices)");
  cmd->add_option("--attention", a.attention, "auto (= fused: bench asks for no weights), unfused (four steps) or fused (one flash_attention step)")
      ->check(CLI::IsMember({"auto", "unfused", "fused"}))
      ->capture_default_str();
  cmd->add_flag("--pack-in-proj", a.pack_in_proj,
                "self-attention: project q, k and v with one in_proj GEMM (B, L, E) -> (B, L, 3E), as PyTorch packs them");
  cmd->add_flag("--copy-layout-steps", a.copy_layout_steps,
                "run split_heads and merge_heads as copies instead of folding them into the projections (GPU)");
  cmd->add_option("--early-dispatches", a.early_dispatches,
                  "dispatches a forward sends to the device before its readback, then segments as long as all sent "
                  "before; 0: the forward submitted whole at its readback (GPU; unset: 4 on a GPU, 0 on a CPU device)");
  cmd->add_flag("--float16-products", a.float16_products,
                "the GEMMs' and flash_attention's products in float16 on the device's cooperative matrices, "
                "accumulated in float32, as torch's float16 matmul has them (GPU; validated to 1e-2; "
                "vkattn devices says whether a device has them)");
  cmd->add_flag("--resident", a.resident,
                "time forwards on tensors already on the backend, as torch's on CUDA: the input uploaded and the "
                "weights kept before the clock starts, the output left there (each forward timed to its end)");
  cmd->add_option("--iters", a.iters, "timed forwards (per tracing mode with --tracing-overhead)")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", a.warmup, "untimed forwards first")->capture_default_str()->check(CLI::Range(0, 1000));
  cmd->add_option("--trace", a.tracing, "tracer on each timed forward: none, shapes (no readback) or values")
      ->check(CLI::IsMember(kTracing))->capture_default_str();
  cmd->add_flag("--tracing-overhead", a.tracing_overhead,
                "alternate untraced, shape-traced and value-traced forwards; report each tracer's cost");
  cmd->add_flag("--json", a.json, "print one JSON object instead of the report");
  cmd->add_option("--seed", a.seed, "seed for weights and inputs");
  return cmd;
}

int run_bench(const BenchArgs& a) {
  if (a.float16_products && a.backend == "cpu") {
    throw UsageError("--float16-products: the cpu backend computes in float32 only; give --backend gpu");
  }
  Bench bench(a);
  double first_ms = 0;
  const double validation_error = a.backend == "cpu" ? 0.0 : bench.validate(first_ms);
  for (int i = 0; i < a.warmup; ++i) bench.time_forward("none");

  // Timed forwards. With --tracing-overhead every mode runs once per round, in a rotating order,
  // so that drift on a shared machine falls on all three alike.
  std::map<std::string, std::vector<double>> ms;
  std::vector<double> host_ms;  // --resident: each forward's host share
  for (int i = 0; i < a.iters; ++i) {
    if (!a.tracing_overhead) {
      ms[a.tracing].push_back(bench.time_forward(a.tracing));
      if (a.resident) host_ms.push_back(bench.host_ms());
      continue;
    }
    for (size_t m = 0; m < kTracing.size(); ++m) {
      const std::string& mode = kTracing[(m + static_cast<size_t>(i)) % kTracing.size()];
      ms[mode].push_back(bench.time_forward(mode));
    }
  }
  const std::string timed = a.tracing_overhead ? "none" : a.tracing;
  const double total_ms = median(ms[timed]);
  const double min_ms = *std::min_element(ms[timed].begin(), ms[timed].end());

  // One more forward, shape-traced, for each step's time and the peak memory.
  StepRecorder steps(false);
  if (bench.gpu()) bench.gpu()->reset_peak();
  const uint64_t up = bench.backend().uploaded_bytes(), down = bench.backend().downloaded_bytes();
  bench.time_forward("shapes", &steps);
  const uint64_t carried_up = bench.backend().uploaded_bytes() - up, carried_down = bench.backend().downloaded_bytes() - down;
  const uint64_t peak = bench.gpu() ? bench.gpu()->peak_allocated_bytes() : 0;
  const double flops = forward_flops(a);
  const double gflops = flops / (total_ms * 1e6);
  // the device's peak, measured after the forwards (it frees the buffers they kept)
  std::optional<DevicePeak> device_peak;
  if (bench.gpu()) device_peak = bench.gpu()->measure_peak();

  json steps_json = json::array();
  for (size_t i = 0; i < steps.steps().size(); ++i) {
    const StepEvent& e = steps.steps()[i].event;
    const auto& times = steps.pass_end().step_times;
    const StepCost cost = step_cost(e);
    steps_json.push_back({{"index", e.index}, {"name", e.name}, {"op", e.op}, {"output", e.output.shape},
                          {"time_us", i < times.size() ? json(times[i].duration_us) : json()},
                          {"flops", cost.flops}, {"bytes", cost.bytes}});
    if (!e.folded.empty()) steps_json.back()["folded"] = e.folded;
    if (device_peak && i < times.size() && times[i].duration_us > 0 && e.folded.empty()) {
      // the time the step's least work needs at the device's peak, over the time it took
      steps_json.back()["of_roofline"] = roofline_seconds(cost, *device_peak) / (times[i].duration_us * 1e-6);
    }
  }
  const int64_t S = a.kv_seq ? a.kv_seq : a.seq;
  if (a.json) {
    json out = {{"config", {{"batch", a.batch}, {"seq", a.seq}, {"kv_seq", S}, {"embed", a.embed}, {"heads", a.heads},
                            {"causal", a.causal}, {"need_weights", false}, {"attention", attention_path_name(resolve_attention(parse_attention_path(a.attention), false))},
                            {"pack_in_proj", a.pack_in_proj}, {"copy_layout_steps", a.copy_layout_steps},
                            {"early_dispatches", a.early_dispatches ? json(*a.early_dispatches) : json()},
                            {"resident", a.resident}, {"float16_products", a.float16_products}}},
                {"backend", a.backend}, {"device", bench.backend().device_name()}, {"iters", a.iters},
                {"trace", timed}, {"total_ms", total_ms}, {"min_ms", min_ms},
                {"host_ms", host_ms.empty() ? json() : json(median(host_ms))}, {"flops", flops}, {"gflops", gflops},
                {"peak_device_bytes", peak}, {"uploaded_bytes", carried_up}, {"downloaded_bytes", carried_down},
                {"validation_max_abs_error", validation_error},
                {"first_forward_ms", a.backend == "cpu" ? json() : json(first_ms)},
                {"step_clock", steps.pass_end().clock}, {"steps", steps_json}};
    if (device_peak) {
      out["device_peak"] = {
          {"flops_per_s", device_peak->flops}, {"bytes_per_s", device_peak->bytes}, {"how", device_peak->how}};
    }
    if (a.tracing_overhead) {
      for (const auto& mode : kTracing) {
        out["tracing"][mode] = {{"median_ms", median(ms[mode])}, {"min_ms", *std::min_element(ms[mode].begin(), ms[mode].end())}};
      }
      for (const char* mode : {"shapes", "values"}) {
        out["tracing"][mode]["overhead"] = paired_overhead(ms[mode], ms["none"]);
        out["tracing"][mode]["min_overhead"] = out["tracing"][mode]["min_ms"].get<double>() / min_ms - 1;
      }
    }
    std::cout << out.dump(1) << "\n";
    return 0;
  }

  std::cout << std::fixed << std::setprecision(2) << (a.kv_seq ? "cross" : "self") << "-attention B=" << a.batch
            << " L=" << a.seq << " S=" << S << " E=" << a.embed << " H=" << a.heads << " d=" << a.embed / a.heads
            << (a.causal ? " causal" : "") << ", need_weights=False, " << attention_path_name(resolve_attention(parse_attention_path(a.attention), false)) << ", on " << a.backend << " ("
            << bench.backend().device_name() << ")\n";
  if (a.backend == "gpu") {
    std::cout << "validated against the cpu reference: max |gpu - cpu| of the output " << std::scientific
              << std::setprecision(2) << validation_error << ", within " << validation_tolerance(a) << std::fixed
              << "\n"
              << (a.float16_products ? "products: float16 on cooperative matrices, accumulated in float32\n" : "")
              << "first forward (the validation's, not in the times below): " << first_ms
              << " ms; it made the pipelines\n";
  }
  if (a.resident) std::cout << "resident: the input and the weights on the device before the clock, the output left there\n";
  std::cout << a.iters << (a.resident ? " resident" : "") << " forwards (" << a.warmup << " warm-up, tracer: " << timed
            << "): median " << total_ms
            << " ms, fastest " << min_ms << " ms;" << (a.resident ? "\n  " : " ") << flops / 1e9 << " GFLOP each, "
            << gflops << " GFLOP/s\n";
  if (bench.gpu() && !host_ms.empty()) {
    std::cout << "  of which on the host before the readback (checks, sizing, recording): median "
              << median(host_ms) << " ms\n";
  }
  if (bench.gpu()) std::cout << "peak Vulkan memory (device and staging buffers): " << static_cast<double>(peak) / 1048576.0 << " MiB\n";
  if (bench.gpu()) {
    std::cout << "carried a forward: " << double(carried_up) / 1048576.0 << " MiB to the device, "
              << double(carried_down) / 1048576.0 << " MiB back\n";
  }
  if (device_peak) {
    std::cout << "the device's peak: " << device_peak->flops / 1e9 << " GFLOP/s, " << device_peak->bytes / 1e9
              << " GB/s, measured\n  " << device_peak->how << "\n";
  }
  std::cout << "\nstep times (" << steps.pass_end().clock << " clock, one shape-traced forward)";
  if (device_peak) {
    std::cout << "; of peak: the time a step's least work needs\nat the device's peak (its multiply-adds at the "
              << "rate or its bytes at the bandwidth, the longer)\nover its time (docs/performance.md)";
  }
  std::cout << ":\n";
  double step_sum = 0;
  for (const auto& t : steps.pass_end().step_times) step_sum += t.duration_us;
  // one line a step: its index, its name (with its op), its output, then right-aligned numbers
  auto cell = [](const std::string& text, size_t width, bool right) {
    const std::string pad(width - std::min(width, display_width(text)), ' ');
    return right ? pad + text : text + pad;
  };
  auto fixed = [](double v, int digits) {
    std::ostringstream text;
    text << std::fixed << std::setprecision(digits) << v;
    return text.str();
  };
  const std::vector<size_t> widths{4, 24, 18, 9, 8, 9, 8, 9};
  auto row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) line += cell(cells[c], widths[c], c >= 3);
    std::cout << line.substr(0, line.find_last_not_of(' ') + 1) << "\n";
  };
  std::vector<std::string> header{"#", "step", "output", steps.pass_end().clock + " µs", "share", "GFLOP/s", "GB/s"};
  if (device_peak) header.push_back("of peak");
  row(header);
  for (size_t i = 0; i < steps_json.size(); ++i) {
    const json& s = steps_json[i];
    const StepEvent& event = steps.steps()[i].event;
    std::vector<std::string> cells{std::to_string(event.index), step_label(event), shape_string(event.output.shape)};
    if (s.contains("folded")) {
      const std::string& folded = s["folded"].get<std::string>();
      std::cout << cell(cells[0], widths[0], false) << cell(cells[1], widths[1], false) << cell(cells[2], widths[2], false)
                << "   " << folded.substr(0, folded.find(',')) << "\n";  // "folded into q_proj's store"
      continue;
    }
    if (s["time_us"].is_null()) {
      cells.push_back("-");
    } else {
      const double us = s["time_us"].get<double>(), step_flops = s["flops"].get<double>();
      cells.push_back(fixed(us, 2));
      cells.push_back(fixed(100 * us / step_sum, 1) + " %");
      cells.push_back(us > 0 && step_flops > 0 ? fixed(step_flops / (us * 1e3), 2) : "");
      cells.push_back(us > 0 ? fixed(s["bytes"].get<double>() / (us * 1e3), 2) : "");
      if (device_peak) cells.push_back(s.contains("of_roofline") ? fixed(100 * s["of_roofline"].get<double>(), 1) + " %" : "");
    }
    row(cells);
  }
  if (a.tracing_overhead) {
    std::cout << "\ntracing overhead, " << a.iters << " rounds of one forward per tracer, in rotating order:\n"
              << "  tracer      median     fastest   overhead (median of per-round ratios; of fastest)\n";
    for (const auto& mode : kTracing) {
      const double fast = *std::min_element(ms[mode].begin(), ms[mode].end());
      std::cout << "  " << std::left << std::setw(8) << mode << std::right << std::setw(9) << median(ms[mode]) << " ms"
                << std::setw(9) << fast << " ms";
      if (mode != "none") {
        std::cout << std::showpos << std::setw(10) << 100 * paired_overhead(ms[mode], ms["none"]) << " %;"
                  << std::setw(8) << 100 * (fast / min_ms - 1) << " %" << std::noshowpos;
      }
      std::cout << "\n";
    }
  }
  return 0;
}

}  // namespace vkattn::cli
