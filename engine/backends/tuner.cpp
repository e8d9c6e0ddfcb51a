#include "engine/backends/tuner.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "reference/reference.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/errors.h"
#include "vkattn/tensor.h"
#include "vkattn/tracing/compare.h"

namespace vkattn::tuning {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t bucket(uint64_t n) {  // the power of two at or above n
  uint64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Candidates are timed on about this many multiply-adds: a few ms on lavapipe; on a GPU a problem
// that fills its thousands of lanes, about a ms there (fewer timed the wrong plan: docs/tuning.md,
// "The measurements behind its constants")
double timed_work(const vulkan::Context& context) {
  return context.device_report().type == vk::PhysicalDeviceType::eCpu ? 1e8 : 1e10;
}
// A GEMM's rows are cut no lower than this for timed_work() (only below 20 times it): with fewer,
// a CPU device's threads share too few workgroups evenly and the tiles of most rows lose for it
// (docs/tuning.md)
constexpr uint64_t kFewestTimedRows = 1024;
// Turns each candidate takes, after a first run; a candidate this many times slower than the
// best after its first run is not run again
constexpr int kTurns = 5;
constexpr double kHopeless = 3.0;
// One turn runs the problem this many times (in one submission, then one readback) at most, to
// last about kTurnSeconds
constexpr int kMaxReps = 16;
constexpr double kTurnSeconds = 0.02;

// A tuned plan's `why`: chosen now, or read from the cache
constexpr const char* kMeasured = "measured fastest on this device";
constexpr const char* kRemembered = "measured fastest on this device (remembered)";

// A candidate left out for its values, not for the device's refusal
constexpr const char* kDiffers = "differs from the reference by ";

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One problem to run on any backend: its inputs as tensors (16-bit weights where a tensor says
// so: Tensor::narrow), the step that runs them.
struct Runnable {
  std::vector<Tensor> inputs;
  std::function<Value(Backend&, const std::vector<Value>&)> run;
};

struct Trial {
  std::string plan;
  const Runnable* timed = nullptr;  // the problem it is timed on
  std::unique_ptr<VulkanBackend> backend;
  std::vector<Value> inputs;  // the timed problem's, on the device
  std::vector<double> ms;
  std::string left_out;
};

std::vector<Value> upload_all(Backend& backend, const Runnable& problem) {
  std::vector<Value> values;
  for (size_t i = 0; i < problem.inputs.size(); ++i) {
    const Tensor& input = problem.inputs[i];
    const std::string name = "input" + std::to_string(i);
    values.push_back(input.narrow == Narrow::none ? backend.upload(name, input) : backend.upload_matrix(name, input));
  }
  return values;
}

// Seconds per run of `trial`'s timed problem on its backend: `reps` runs in one submission.
double time_runs(Trial& trial, int reps) {
  const auto start = Clock::now();
  for (int r = 0; r < reps; ++r) trial.timed->run(*trial.backend, trial.inputs);
  trial.backend->synchronize();
  return seconds_since(start) / reps;
}

// The tuning loop shared by every family: `make(i)` gives candidate i's backend; `chosen` is set
// to the index of the fastest. `k` is the length of the sums each output element takes.
// `check` and `timed` hold one problem for all candidates, or one each (the same inputs, other steps).
Outcome measure(const std::string& what, const std::vector<std::string>& plans,
                const std::function<std::unique_ptr<VulkanBackend>(size_t)>& make, const std::vector<Runnable>& checks,
                const std::vector<Runnable>& timeds, uint64_t k, const Progress& progress, size_t& chosen) {
  const auto start = Clock::now();
  ReferenceBackend cpu;
  const Tensor expected = cpu.download(checks[0].run(cpu, upload_all(cpu, checks[0])));
  // sums of k products of values in [-1, 1]: their rounding grows as √k
  const double atol = 1e-5 * std::sqrt(double(std::max<uint64_t>(k, 1))) + 1e-5, rtol = 1e-4;
  std::vector<Trial> trials(plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    trials[i].plan = plans[i];
    trials[i].timed = &timeds[std::min(i, timeds.size() - 1)];
  }
  // 1. Each candidate made and run on the checked problem, which compiles its pipeline — most of
  //    tuning's time on a CPU device — on as many threads as there are cores (a backend serves
  //    one thread at a time: each is handed back whole). Progress and Ctrl-C on this thread.
  std::atomic<size_t> next = 0, checked = 0;
  std::atomic<bool> stop = false;
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto check_next = [&] {
    const size_t i = next++;
    if (i >= trials.size() || stop) return false;
    Trial& t = trials[i];
    try {
      t.backend = make(i);
      const Runnable& check = checks[std::min(i, checks.size() - 1)];
      const Tensor got = t.backend->download(check.run(*t.backend, upload_all(*t.backend, check)));
      const ValueDiff diff = compare_values(got, expected, atol, rtol);
      if (diff.mismatches > 0) {
        t.left_out = kDiffers + std::to_string(diff.max_abs_error);
        t.backend.reset();
      }
    } catch (const DeviceError& e) {  // a pipeline the driver refuses, memory: not this plan
      t.left_out = e.what();
      t.backend.reset();
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      stop = true;
    }
    ++checked;
    return true;
  };
  const size_t steps = plans.size() + 1;
  // Said before any check: helpers may take every candidate before this thread takes one
  if (progress) progress(what, 0.0);
  {
    std::vector<std::thread> helpers;
    const size_t cores = std::max(1u, std::thread::hardware_concurrency());
    for (size_t h = 1; h < std::min(cores, trials.size()); ++h) {
      helpers.emplace_back([&] {
        while (check_next()) {
        }
      });
    }
    try {
      while (check_next()) {
        if (progress) progress(what, double(checked) / double(steps));
      }
    } catch (...) {  // the progress callback stopped tuning (Interrupted)
      stop = true;
      for (auto& h : helpers) h.join();
      throw;
    }
    for (auto& h : helpers) h.join();
  }
  if (failure) std::rethrow_exception(failure);
  // 2. One at a time: the timed problem's first run (its buffers made, caches warm), then one timed
  for (Trial& t : trials) {
    if (!t.backend) continue;
    try {
      t.inputs = upload_all(*t.backend, *t.timed);
      time_runs(t, 1);
      t.ms.push_back(1e3 * time_runs(t, 1));
    } catch (const DeviceError& e) {
      t.left_out = e.what();
      t.backend.reset();
    }
  }
  double best = 0;
  for (const Trial& t : trials) {
    if (!t.ms.empty() && (best == 0 || t.ms.front() < best)) best = t.ms.front();
  }
  if (best == 0) {
    std::string why;
    bool refused_only = true;  // by the device (its limits, its compiler), none wrong
    for (const Trial& t : trials) {
      why += "; " + t.plan + ": " + t.left_out;
      refused_only = refused_only && t.left_out.rfind(kDiffers, 0) != 0;
    }
    if (!refused_only) throw DeviceError("tuning " + what + ": no plan matched the reference" + why);
    // Nothing measured: the first candidate (the rule's plan), and why, for the caller to say
    Outcome outcome;
    for (const Trial& t : trials) outcome.candidates.push_back({t.plan, 0, t.left_out});
    outcome.chosen = outcome.rule = plans.front();
    outcome.none_ran = "no candidate could run (" + trials.front().plan + ": " + trials.front().left_out + ")";
    outcome.seconds = seconds_since(start);
    chosen = 0;
    return outcome;
  }
  const int reps = std::clamp(int(kTurnSeconds * 1e3 / best), 1, kMaxReps);
  for (int turn = 0; turn < kTurns; ++turn) {  // in turns, so that a busy machine's drift falls on all alike
    if (progress) progress(what, (double(plans.size()) + double(turn) / kTurns) / double(steps));
    for (Trial& t : trials) {
      if (t.backend && t.ms.front() <= kHopeless * best) t.ms.push_back(1e3 * time_runs(t, reps));
    }
  }
  Outcome outcome;
  chosen = trials.size();
  double chosen_ms = 0;
  for (size_t i = 0; i < trials.size(); ++i) {
    Trial& t = trials[i];
    Candidate c{t.plan, 0, t.left_out};
    if (!t.ms.empty()) {
      // the first run alone when it was not run again; else the median of the turns
      std::vector<double> turns(t.ms.size() > 1 ? t.ms.begin() + 1 : t.ms.begin(), t.ms.end());
      std::sort(turns.begin(), turns.end());
      c.ms = turns[turns.size() / 2];
      if (chosen == trials.size() || c.ms < chosen_ms) chosen = i, chosen_ms = c.ms;
    }
    outcome.candidates.push_back(c);
  }
  outcome.chosen = trials[chosen].plan;
  outcome.rule = plans.front();
  outcome.seconds = seconds_since(start);
  if (progress) progress(what, 1.0);
  return outcome;
}

// ", B bfloat16" for a 16-bit B; nothing for float32
std::string format_text(Narrow b_format) {
  return b_format == Narrow::none ? "" : std::string(", B ") + narrow_name(b_format);
}

// `problem` as a runnable GEMM step, with batch × M rows.
Runnable gemm_runnable(const GemmProblem& problem, uint64_t batch, uint64_t M) {
  const std::string& step = problem.step;
  const auto b = int64_t(batch), m = int64_t(M), n = int64_t(problem.N), k = int64_t(problem.K);
  if (step == "linear") {  // the weights 16-bit as a checkpoint's are: every value exactly one
    Tensor weights = random_tensor({n, k}, 2);
    if (problem.b_format != Narrow::none) {
      for (float& w : weights.data) w = reference::round_to(w, static_cast<int>(problem.b_format));
      weights.narrow = problem.b_format;
    }
    return {{random_tensor({b * m, k}, 1), weights},
            [](Backend& be, const std::vector<Value>& in) { return be.linear("linear", in[0], in[1], nullptr); }};
  }
  if (step == "attention_scores") {  // Q (1, batch, M, K) · K (1, batch, N, K)ᵀ
    return {{random_tensor({1, b, m, k}, 1), random_tensor({1, b, n, k}, 2)},
            [](Backend& be, const std::vector<Value>& in) { return be.attention_scores("attention_scores", in[0], in[1]); }};
  }
  if (step == "attention_values") {  // P (1, batch, M, K) · V (1, batch, K, N)
    return {{random_tensor({1, b, m, k}, 1), random_tensor({1, b, k, n}, 2)},
            [](Backend& be, const std::vector<Value>& in) { return be.attention_values("attention_values", in[0], in[1]); }};
  }
  throw std::logic_error("tuning: no GEMM step named " + step);
}

std::string gemm_text(const GemmProblem& p) {
  const std::string rows = p.batch > 1 ? std::to_string(p.batch) + " × (" : "(";
  if (p.step == "linear") {
    return "(" + std::to_string(p.M) + ", " + std::to_string(p.K) + ") · (" + std::to_string(p.N) + ", " +
           std::to_string(p.K) + ")ᵀ" + format_text(p.b_format);
  }
  return rows + std::to_string(p.M) + ", " + std::to_string(p.K) + ") · (" + std::to_string(p.K) + ", " +
         std::to_string(p.N) + ")";
}

}  // namespace

std::string shape_class(const GemmProblem& p) {
  return p.step + ": rows ≤ " + std::to_string(bucket(p.batch * p.M)) + ", n ≤ " + std::to_string(bucket(p.N)) +
         ", k ≤ " + std::to_string(bucket(p.K)) + format_text(p.b_format);
}

std::string shape_class(const FlashProblem& p) {
  return "flash_attention: d " + std::to_string(p.d) + ", L ≤ " + std::to_string(bucket(p.L)) + ", S ≤ " +
         std::to_string(bucket(p.S)) + (p.causal ? ", causal" : "");
}

std::string shape_class(const RowProblem& p) {
  return p.step + ": rows ≤ " + std::to_string(bucket(p.rows)) + ", n ≤ " + std::to_string(bucket(p.cols));
}

std::string shape_class(const DecodingProblem& p) {
  return "flash_decoding: d " + std::to_string(p.d) + ", rows ≤ " + std::to_string(bucket(p.rows)) + ", S ≤ " +
         std::to_string(bucket(p.keys));
}

std::vector<vulkan::DecodingPlan> decoding_candidates(const vulkan::DecodingPlan& rule, const DecodingProblem& problem,
                                                      const std::vector<uint32_t>& lane_counts) {
  // the class holds lengths above half its bucket: at 8 keys a part there, every count fits them all
  const auto shortest = int64_t(bucket(problem.keys) / 2 + 1);
  std::vector<vulkan::DecodingPlan> plans{{std::clamp<int64_t>(rule.parts, 1, shortest), rule.lanes}};
  for (uint32_t lanes : lane_counts.empty() ? std::vector<uint32_t>{rule.lanes} : lane_counts) {
    for (int64_t parts = 1; parts * 8 <= shortest; parts *= 2) {
      if (parts != plans.front().parts || lanes != plans.front().lanes) plans.push_back({parts, lanes});
    }
  }
  return plans;
}

std::vector<vulkan::RowPlan> row_candidates(const vulkan::DeviceReport& device, uint32_t workgroup_size) {
  std::vector<vulkan::RowPlan> plans{vulkan::plan_rows(device, workgroup_size)};
  if (plans.front().lanes) plans.push_back({0, kMeasured});  // a row per workgroup
  return plans;
}

std::vector<vulkan::GemmPlan> gemm_candidates(const vulkan::DeviceReport& device, const std::string& product,
                                              Narrow b_format) {
  vulkan::GemmPlan rule = vulkan::plan_gemm(device);
  const bool packs = product != "attention_values" && b_format == Narrow::none;
  rule.packed_b = rule.packed_b && packs;
  std::vector<vulkan::GemmPlan> plans{rule};
  auto add = [&](vulkan::GemmPlan plan) {  // a variant of the rule, once
    plan.packed_b = plan.packed_b && packs;
    plan.why = kMeasured;
    for (const auto& p : plans) {
      if (p.describe() == plan.describe()) return;
    }
    plans.push_back(plan);
  };
  if (rule.variant == vulkan::GemmVariant::broadcast) {
    // (the shared tiling is left out where broadcast runs: on a CPU device it is far slower)
    // row sets of 4 (the B fetched for a column serves twice the rows) where that is at most 32
    // rows: the fastest on lavapipe (docs/tuning.md)
    for (uint32_t row_sets : {2u, 1u, 4u}) {
      if (rule.lanes * row_sets > 32) continue;
      for (uint32_t tile_n : {16u, 8u}) {
        vulkan::GemmPlan plan = rule;
        plan.tile_m = rule.lanes * row_sets;
        plan.tile_n = tile_n;
        add(plan);
      }
    }
    // (storage inputs are no candidate where the rule reads texels, as here: they read slower on
    // Mesa 22 and 25, at every tile measured, and on SwiftShader, and compiling a candidate costs
    // more than timing it: docs/tuning.md)
    // B read where it lies, at the rule's tile: packing costs a read and a write of B, which a
    // product with few row blocks, or a device whose fetches do not care, may not repay
    if (rule.packed_b) {
      vulkan::GemmPlan plan = rule;
      plan.packed_b = false;
      add(plan);
    }
  } else {
    // a CPU device: the rule's 4 × 4 an invocation at either side; a GPU: blocks of 32 to 128 rows
    // and columns, 4 × 4 to 8 × 8 an invocation, 8 or 16 k a tile (a small product fills more of
    // the GPU with small blocks)
    struct Shape {
      uint32_t side, tile_m, tile_n, depth;
    };
    const bool cpu = device.type == vk::PhysicalDeviceType::eCpu;
    const std::vector<Shape> shapes =
        cpu ? std::vector<Shape>{{16, 4, 4, 16}, {8, 4, 4, 16}}
            : std::vector<Shape>{{16, 8, 8, 8}, {16, 8, 8, 16}, {16, 8, 4, 8}, {16, 4, 4, 16}, {8, 8, 8, 8}, {8, 4, 4, 16}};
    for (const Shape& shape : shapes) {
      vulkan::GemmPlan plan = rule;
      plan.side = shape.side;
      plan.workgroup_size = shape.side * shape.side;
      plan.tile_m = shape.tile_m;
      plan.tile_n = shape.tile_n;
      plan.depth = shape.depth;
      if (plan.workgroup_size > device.max_workgroup_invocations || plan.workgroup_size > device.max_workgroup_size_x ||
          plan.shared_bytes() > device.max_shared_memory_bytes) {
        continue;
      }
      add(plan);
    }
  }
  return plans;
}

std::vector<vulkan::FlashPlan> flash_candidates(const vulkan::DeviceReport& device, uint32_t workgroup_size,
                                                uint32_t d) {
  // the rule first; the subgroup plan's variations beside it
  const vulkan::FlashPlan subgroups = vulkan::plan_flash(device, workgroup_size);
  std::vector<vulkan::FlashPlan> plans{vulkan::flash_rule(device, workgroup_size, d)};
  auto add = [&](vulkan::FlashPlan plan) {
    plan.why = kMeasured;
    for (const auto& p : plans) {
      if (p.describe() == plan.describe()) return;
    }
    plans.push_back(plan);
  };
  const bool cpu = device.type == vk::PhysicalDeviceType::eCpu;
  add(subgroups);
  if (subgroups.lanes) {
    const std::vector<uint32_t> rows =
        cpu ? std::vector{subgroups.lanes, 2 * subgroups.lanes, 4 * subgroups.lanes} : std::vector{1u, 2u, 4u, 8u};
    for (uint32_t r : rows) {
      // 4 rows a lane at 16 lanes: 64 accumulators of d floats a lane, minutes for lavapipe to compile
      if (r > 32 || (!cpu && r > subgroups.lanes)) continue;
      vulkan::FlashPlan plan = vulkan::plan_flash(device, workgroup_size, r);
      plan.texel_inputs = subgroups.texel_inputs;
      add(plan);
    }
    // Half and twice the subgroup plan's block of keys, at its rows, on a CPU device (blocks of at
    // most 32 keys: the block's scores and rows of V are unrolled code)
    for (uint32_t keys : {subgroups.keys / 2, subgroups.keys * 2}) {
      if (!cpu || keys == 0 || keys * subgroups.lanes > 32) continue;
      vulkan::FlashPlan plan = subgroups;
      plan.keys = keys;
      add(plan);
    }
  }
  // (nor storage inputs where the subgroup plan reads texels: 1.7× as long on Mesa 22 and 25, no
  // faster on SwiftShader: docs/tuning.md)
  // FlashAttention-2's order on a GPU, as d leaves its tiles room in shared memory
  if (!cpu) {
    for (const auto& plan : vulkan::tiled_flash_plans(device, d)) add(plan);
  }
  vulkan::FlashPlan per_invocation;  // a query row per invocation, no subgroups
  per_invocation.workgroup_size = workgroup_size;
  per_invocation.texel_inputs = subgroups.texel_inputs;
  add(per_invocation);
  return plans;
}

nlohmann::json to_json(const vulkan::GemmPlan& p) {
  return {{"variant", p.variant == vulkan::GemmVariant::broadcast ? "broadcast" : "shared"},
          {"workgroup_size", p.workgroup_size},
          {"lanes", p.lanes},
          {"tile_m", p.tile_m},
          {"tile_n", p.tile_n},
          {"side", p.side},
          {"depth", p.depth},
          {"texel_inputs", p.texel_inputs},
          {"packed_b", p.packed_b}};
}

nlohmann::json to_json(const vulkan::RowPlan& p) { return {{"lanes", p.lanes}}; }

nlohmann::json to_json(const vulkan::FlashPlan& p) {
  return {{"lanes", p.lanes},
          {"rows", p.rows},
          {"keys", p.keys},
          {"workgroup_size", p.workgroup_size},
          {"texel_inputs", p.texel_inputs},
          {"tiled", p.tiled}};
}

namespace {

template <class T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.is_object() || !j.contains(name)) throw ConfigError(std::string("a remembered plan has no '") + name + "'");
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw ConfigError(std::string("a remembered plan's '") + name + "' has the wrong type");
  }
}

}  // namespace

vulkan::GemmPlan gemm_plan_from_json(const nlohmann::json& j) {
  vulkan::GemmPlan p;
  const std::string variant = field<std::string>(j, "variant");
  if (variant != "broadcast" && variant != "shared") throw ConfigError("a remembered plan's variant is '" + variant + "'");
  p.variant = variant == "broadcast" ? vulkan::GemmVariant::broadcast : vulkan::GemmVariant::shared;
  p.workgroup_size = field<uint32_t>(j, "workgroup_size");
  p.lanes = field<uint32_t>(j, "lanes");
  p.tile_m = field<uint32_t>(j, "tile_m");
  p.tile_n = field<uint32_t>(j, "tile_n");
  p.side = field<uint32_t>(j, "side");
  p.depth = field<uint32_t>(j, "depth");
  p.texel_inputs = field<bool>(j, "texel_inputs");
  p.packed_b = field<bool>(j, "packed_b");
  p.why = kRemembered;
  return p;
}

vulkan::FlashPlan flash_plan_from_json(const nlohmann::json& j) {
  vulkan::FlashPlan p;
  p.lanes = field<uint32_t>(j, "lanes");
  p.rows = field<uint32_t>(j, "rows");
  p.keys = field<uint32_t>(j, "keys");
  p.workgroup_size = field<uint32_t>(j, "workgroup_size");
  p.texel_inputs = field<bool>(j, "texel_inputs");
  p.tiled = j.value("tiled", false);  // (plans remembered before the tiled kernel are not tiled)
  p.why = kRemembered;
  return p;
}

vulkan::RowPlan row_plan_from_json(const nlohmann::json& j) {
  return {field<uint32_t>(j, "lanes"), kRemembered};
}

vulkan::DecodingPlan decoding_plan_from_json(const nlohmann::json& j) {
  const vulkan::DecodingPlan plan{field<int64_t>(j, "parts"), field<uint32_t>(j, "lanes")};
  if (plan.parts < 1) throw ConfigError("a remembered split into " + std::to_string(plan.parts) + " parts");
  if (!std::has_single_bit(plan.lanes) && plan.lanes != 0) {
    throw ConfigError("a remembered split's parts of " + std::to_string(plan.lanes) + " lanes");
  }
  return plan;
}

nlohmann::json Outcome::to_json() const {
  nlohmann::json measured = nlohmann::json::object();
  for (const auto& c : candidates) {
    measured[c.plan] = c.left_out.empty() ? nlohmann::json(c.ms) : nlohmann::json(c.left_out);
  }
  nlohmann::json entry = {{"plan", plan},         {"describe", chosen},       {"rule", rule},
                          {"problem", problem},   {"measured_ms", measured}, {"seconds", seconds}};
  if (!none_ran.empty()) entry["none_ran"] = none_ran;
  return entry;
}

Outcome tune_gemm(const std::shared_ptr<vulkan::Context>& context, const VulkanBackendOptions& options,
                  const GemmProblem& problem, const std::vector<vulkan::GemmPlan>& candidates,
                  const Progress& progress) {
  // The timed problem: the class's first, its batch (then rows) cut to about timed_work()
  const double work = timed_work(*context);
  GemmProblem timed = problem;
  while (timed.multiply_adds() > 2 * work && timed.batch > 1) timed.batch = (timed.batch + 1) / 2;
  while (timed.multiply_adds() > 2 * work && timed.M > 64 &&
         (timed.M / 2 >= kFewestTimedRows || timed.multiply_adds() > 20 * work)) {
    timed.M = (timed.M + 1) / 2;
  }
  // The checked problem: odd rows, at most 2 of the batch
  const uint64_t check_rows = std::min<uint64_t>(problem.M, 37);
  // Plans that are one kernel on this problem's columns (fitted() narrows wide tiles) run once
  std::vector<vulkan::GemmPlan> distinct;
  std::vector<std::string> plans;
  for (const auto& c : candidates) {
    const vulkan::GemmPlan fitted = c.fitted(problem.N);  // the same for every N of the class
    if (std::find(plans.begin(), plans.end(), fitted.describe()) != plans.end()) continue;
    distinct.push_back(fitted);
    plans.push_back(fitted.describe());
  }
  size_t chosen = 0;
  Outcome outcome = measure(
      problem.step + " " + gemm_text(timed), plans,
      [&](size_t i) {
        VulkanBackendOptions o = options;
        o.tune = false;
        o.gemm = std::make_shared<const vulkan::GemmPlan>(distinct[i]);
        return std::make_unique<VulkanBackend>(context, o);
      },
      {gemm_runnable(problem, std::min<uint64_t>(problem.batch, 2), check_rows)},
      {gemm_runnable(problem, timed.batch, timed.M)}, problem.K, progress, chosen);
  outcome.problem = gemm_text(timed);
  outcome.plan = to_json(distinct[chosen]);
  return outcome;
}

Outcome tune_flash(const std::shared_ptr<vulkan::Context>& context, const VulkanBackendOptions& options,
                   const FlashProblem& problem, const std::vector<vulkan::FlashPlan>& candidates,
                   const Progress& progress) {
  const double work = timed_work(*context);
  FlashProblem timed = problem;
  while (timed.multiply_adds() > 2 * work && timed.heads > 1) timed.heads = (timed.heads + 1) / 2;
  while (timed.multiply_adds() > 2 * work && timed.L > 256) {  // one very long head: fewer rows, or both
    if (timed.S == timed.L) timed.S = (timed.S + 1) / 2;
    timed.L = (timed.L + 1) / 2;
  }
  const uint64_t check_l = std::min<uint64_t>(problem.L, 37);
  const uint64_t check_s = problem.S == problem.L ? check_l : std::min<uint64_t>(problem.S, 45);
  auto runnable = [&](uint64_t heads, uint64_t L, uint64_t S) {
    const auto h = int64_t(heads), l = int64_t(L), s = int64_t(S), d = int64_t(problem.d);
    const bool causal = problem.causal;
    return Runnable{{random_tensor({1, h, l, d}, 1), random_tensor({1, h, s, d}, 2), random_tensor({1, h, s, d}, 3)},
                    [causal](Backend& be, const std::vector<Value>& in) {
                      return be.flash_attention("flash_attention", in[0], in[1], in[2], nullptr, nullptr, causal);
                    }};
  };
  std::vector<std::string> plans;
  for (const auto& c : candidates) plans.push_back(c.describe());
  const std::string text = std::to_string(timed.heads) + " heads, L " + std::to_string(timed.L) + ", S " +
                           std::to_string(timed.S) + ", d " + std::to_string(timed.d) +
                           (timed.causal ? ", causal" : "");
  size_t chosen = 0;
  Outcome outcome = measure(
      "flash_attention " + text, plans,
      [&](size_t i) {
        VulkanBackendOptions o = options;
        o.tune = false;
        o.flash = std::make_shared<const vulkan::FlashPlan>(candidates[i]);
        return std::make_unique<VulkanBackend>(context, o);
      },
      {runnable(std::min<uint64_t>(problem.heads, 3), check_l, check_s)}, {runnable(timed.heads, timed.L, timed.S)},
      std::max(problem.S, problem.d), progress, chosen);
  outcome.problem = text;
  outcome.plan = to_json(candidates[chosen]);
  return outcome;
}

Outcome tune_rows(const std::shared_ptr<vulkan::Context>& context, const VulkanBackendOptions& options,
                  const RowProblem& problem, const std::vector<vulkan::RowPlan>& candidates, const Progress& progress) {
  const double work = timed_work(*context);
  RowProblem timed = problem;
  while (timed.multiply_adds() > 2 * work && timed.rows > 64) timed.rows = (timed.rows + 1) / 2;
  const bool softmax = problem.step == "softmax";
  auto runnable = [&](uint64_t rows) {
    const auto r = int64_t(rows), c = int64_t(problem.cols);
    Tensor x = random_tensor({r, c}, 1);
    for (size_t i = 0; i < x.data.size(); i += 7) x.data[i] *= 20.0f;  // scores that saturate
    if (softmax) {
      return Runnable{{x}, [](Backend& be, const std::vector<Value>& in) { return be.softmax("softmax", in[0]); }};
    }
    return Runnable{{x, random_tensor({c}, 2), random_tensor({c}, 3)}, [](Backend& be, const std::vector<Value>& in) {
                      return be.layer_norm("layer_norm", in[0], in[1], in[2], 1e-5f);
                    }};
  };
  std::vector<std::string> plans;
  for (const auto& c : candidates) plans.push_back(c.describe());
  const std::string text = problem.step + " (" + std::to_string(timed.rows) + ", " + std::to_string(timed.cols) + ")";
  size_t chosen = 0;
  Outcome outcome = measure(
      text, plans,
      [&](size_t i) {
        VulkanBackendOptions o = options;
        o.tune = false;
        o.rows = std::make_shared<const vulkan::RowPlan>(candidates[i]);
        return std::make_unique<VulkanBackend>(context, o);
      },
      {runnable(std::min<uint64_t>(problem.rows, 37))}, {runnable(timed.rows)}, problem.cols, progress, chosen);
  outcome.problem = "(" + std::to_string(timed.rows) + ", " + std::to_string(timed.cols) + ")";
  outcome.plan = to_json(candidates[chosen]);
  return outcome;
}

Outcome tune_decoding(const std::shared_ptr<vulkan::Context>& context, const VulkanBackendOptions& options,
                      const DecodingProblem& problem, const std::vector<vulkan::DecodingPlan>& candidates,
                      const Progress& progress) {
  // The step's own problem (never larger than what the pass itself holds, its query heads sharing
  // their cached keys as the pass's do), its queries cut as a GEMM's rows are to about
  // timed_work(): a prompt decoded whole (4 heads × 1,023 queries over 1,023 keys, lesson 09) took
  // 26.6 s to measure uncut on lavapipe. Checked on one head of keys and at most 3 queries: every
  // count then splits the same keys as when it is timed.
  const uint64_t group = std::max<uint64_t>(problem.query_heads() / problem.key_heads(), 1);
  const double work = timed_work(*context);
  DecodingProblem timed = problem;
  while (timed.multiply_adds() > 2 * work && timed.queries > 1 && timed.rows / 2 >= kFewestTimedRows) {
    timed.queries = (timed.queries + 1) / 2;
    timed.rows = problem.query_heads() * timed.queries;
  }
  auto runnable = [&](uint64_t key_heads, uint64_t queries, int64_t parts) {
    const auto h = int64_t(key_heads * group), l = int64_t(queries), kh = int64_t(key_heads),
               s = int64_t(problem.keys), d = int64_t(problem.d);
    return Runnable{{random_tensor({1, h, l, d}, 1), random_tensor({1, kh, s, d}, 2), random_tensor({1, kh, s, d}, 3)},
                    [s, parts](Backend& be, const std::vector<Value>& in) {
                      return be.flash_decoding_combine("flash_decoding", "attention_combine", in[0], in[1], in[2], s,
                                                       nullptr, false, 0, parts);
                    }};
  };
  std::vector<std::string> plans;
  std::vector<Runnable> checks, timeds;
  for (const vulkan::DecodingPlan& plan : candidates) {
    plans.push_back(plan.describe());
    checks.push_back(runnable(1, std::min<uint64_t>(problem.queries, 3), plan.parts));
    timeds.push_back(runnable(problem.key_heads(), timed.queries, plan.parts));
  }
  const std::string text = std::to_string(timed.rows) + " rows, S " + std::to_string(problem.keys) + ", d " +
                           std::to_string(problem.d);
  size_t chosen = 0;
  Outcome outcome = measure(
      "flash_decoding " + text, plans,
      [&](size_t i) {
        VulkanBackendOptions o = options;
        o.tune = false;
        o.flash_decoding_subgroups = candidates[i].lanes > 0;
        return std::make_unique<VulkanBackend>(context, o);
      },
      checks, timeds, std::max(problem.keys, problem.d), progress, chosen);
  outcome.problem = text;
  outcome.plan = {{"parts", candidates[chosen].parts}, {"lanes", candidates[chosen].lanes}};
  return outcome;
}

std::string path_class(const FlashProblem& p) {
  return "attention path: d " + std::to_string(p.d) + ", L ≤ " + std::to_string(bucket(p.L)) + ", S ≤ " +
         std::to_string(bucket(p.S)) + (p.causal ? ", causal" : "");
}

Outcome tune_path(const std::shared_ptr<vulkan::Context>& context, const VulkanBackendOptions& options,
                  const FlashProblem& problem, const std::function<void(VulkanBackend&)>& prepare,
                  const Progress& progress) {
  // The problem itself, unless it is very large: the candidates' own steps are then tuned for
  // the classes the real pass meets, and remembered for it
  const double work = timed_work(*context);
  FlashProblem timed = problem;
  while (timed.multiply_adds() > 10 * work && timed.heads > 1) timed.heads = (timed.heads + 1) / 2;
  const uint64_t check_l = std::min<uint64_t>(problem.L, 37);
  const uint64_t check_s = problem.S == problem.L ? check_l : std::min<uint64_t>(problem.S, 45);
  const bool causal = problem.causal;
  auto inputs = [&](uint64_t heads, uint64_t L, uint64_t S) {
    const auto h = int64_t(heads), l = int64_t(L), s = int64_t(S), d = int64_t(problem.d);
    return std::vector<Tensor>{random_tensor({1, h, l, d}, 1), random_tensor({1, h, s, d}, 2),
                               random_tensor({1, h, s, d}, 3)};
  };
  const auto fused = [causal](Backend& be, const std::vector<Value>& in) {
    return be.flash_attention("flash_attention", in[0], in[1], in[2], nullptr, nullptr, causal);
  };
  const auto unfused = [causal](Backend& be, const std::vector<Value>& in) {
    Value scores = be.attention_scores("attention_scores", in[0], in[1]);
    if (causal) scores = be.attention_mask("attention_mask", scores, nullptr, nullptr, true);
    return be.attention_values("attention_values", be.softmax("softmax", scores), in[2]);
  };
  const auto small = inputs(std::min<uint64_t>(problem.heads, 3), check_l, check_s);
  const auto big = inputs(timed.heads, timed.L, timed.S);
  const std::string text = std::to_string(timed.heads) + " heads, L " + std::to_string(timed.L) + ", S " +
                           std::to_string(timed.S) + ", d " + std::to_string(timed.d) + (causal ? ", causal" : "");
  size_t chosen = 0;
  Outcome outcome = measure(
      "the attention path " + text, {"fused", "unfused"},
      [&](size_t) {
        VulkanBackendOptions o = options;
        o.tune = true;  // each path's steps under their own measured plans
        auto backend = std::make_unique<VulkanBackend>(context, o);
        if (prepare) prepare(*backend);
        return backend;
      },
      {Runnable{small, fused}, Runnable{small, unfused}}, {Runnable{big, fused}, Runnable{big, unfused}},
      std::max(problem.S, problem.d), progress, chosen);
  outcome.problem = text;
  outcome.plan = {{"path", chosen == 0 ? "fused" : "unfused"}};
  return outcome;
}

bool tune_from_environment() {
  const char* value = std::getenv("VKATTN_TUNE");
  if (!value) return true;
  const std::string v = value;
  if (v.empty() || v == "on" || v == "1" || v == "true" || v == "yes") return true;
  if (v == "off" || v == "0" || v == "false" || v == "no") return false;
  throw ConfigError("VKATTN_TUNE must be on or off, not '" + v + "'");
}

}  // namespace vkattn::tuning
