// bench_submissions: the longest single submission of a long fused pass, before and after
// bounded work per submission (VulkanBackendOptions::max_submission_seconds): flash_attention
// alone at B 1, H --heads, d --dim, causal, on the default device, once as one dispatch
// (max_submission_seconds = 0, what vkattn did before) and once split (the default budget, or
// --budget), with the same inputs, each on a backend whose pipeline is already made. Prints each run's wall time, submissions and longest
// submission, and whether the two outputs are bit for bit the same.
//
//   bench_submissions [--lengths 16384,65536] [--heads 1] [--dim 64] [--budget 1.0]
#include <CLI/CLI.hpp>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <memory>
#include <vector>

#include "engine/vulkan/context.h"
#include "engine/vulkan/recorder.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/tensor.h"

using namespace vkattn;

namespace {

struct Run {
  Tensor out;
  double seconds = 0, longest = 0;
  uint64_t submissions = 0;
};

Run flash(const std::shared_ptr<vulkan::Context>& context, double budget, int64_t L, int64_t H, int64_t d) {
  VulkanBackend b(context, {.max_submission_seconds = budget});
  {  // the pipeline made (the driver compiles it at first use) before anything is timed
    Value small = b.upload("small", random_tensor({1, H, 64, d}, 4));
    b.download(b.flash_attention("flash_attention", small, small, small, nullptr, nullptr, true));
  }
  Value q = b.upload("q", random_tensor({1, H, L, d}, 1));
  Value k = b.upload("k", random_tensor({1, H, L, d}, 2));
  Value v = b.upload("v", random_tensor({1, H, L, d}, 3));
  b.download(q);  // the uploads done before the clock starts
  auto& recorder = const_cast<vulkan::Recorder&>(b.recorder());
  recorder.reset_longest_submission();
  const uint64_t before = recorder.submissions();
  const auto start = std::chrono::steady_clock::now();
  Run run;
  run.out = b.download(b.flash_attention("flash_attention", q, k, v, nullptr, nullptr, true));
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.longest = recorder.longest_submission_s();
  run.submissions = recorder.submissions() - before;
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("the longest submission of a long fused pass, as one dispatch and split", "bench_submissions");
  std::vector<int64_t> lengths{16384, 65536};
  int64_t heads = 1, dim = 64;
  double budget = VulkanBackendOptions{}.max_submission_seconds;
  app.add_option("--lengths", lengths, "query and key lengths L")->delimiter(',');
  app.add_option("--heads", heads, "H")->check(CLI::PositiveNumber);
  app.add_option("--dim", dim, "head dim d")->check(CLI::Range(1, 256));
  app.add_option("--budget", budget, "seconds a submission may take when split")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  auto context = std::make_shared<vulkan::Context>();
  std::cout << "flash_attention, causal, B 1, H " << heads << ", d " << dim << ", on "
            << context->device_report().name << "\n"
            << std::left << std::setw(8) << "L" << std::setw(26) << "submissions" << std::setw(12) << "wall"
            << std::setw(22) << "longest submission" << "same bits\n";
  for (int64_t L : lengths) {
    const Run whole = flash(context, 0, L, heads, dim);
    const Run split = flash(context, budget, L, heads, dim);
    auto row = [&](const char* what, const Run& r, const std::string& same) {
      std::cout << std::left << std::setw(8) << L << std::setw(26)
                << (std::to_string(r.submissions) + " (" + what + ")") << std::fixed << std::setprecision(2)
                << std::setw(12) << (std::to_string(r.seconds).substr(0, 6) + " s") << std::setw(22)
                << (std::to_string(r.longest).substr(0, 6) + " s") << same << "\n";
    };
    row("one dispatch", whole, "");
    row("split", split, split.out.data == whole.out.data ? "yes" : "NO");
  }
  return 0;
}
