// vkattn diff A B: two trace dumps of the same recipe, compared step by step; the first step
// that disagrees is named with its largest error and the first differing element, its index
// decoded into the step's dims, and both values. Exit 0 when every step agrees, 1 when one
// diverges, 2 when a dump is unreadable, holds no values, or the two differ in their recipe.
#include <iomanip>
#include <iostream>

#include "tools/commands.h"
#include "tools/validators.h"
#include "vkattn/errors.h"
#include "vkattn/tracing/trace_dump.h"

namespace vkattn::cli {

CLI::App* add_diff(CLI::App& app, DiffArgs& a) {
  auto* cmd = app.add_subcommand("diff", "compare two trace dumps step by step; point at the first that disagrees");
  cmd->add_option("A", a.a, "a dump directory (vkattn run --trace A --trace-values)")->required();
  cmd->add_option("B", a.b, "another, of the same recipe")->required();
  cmd->add_option("--atol", a.atol, "absolute tolerance")->capture_default_str()->check(kNonNegativeNumber);
  cmd->add_option("--rtol", a.rtol, "relative tolerance (times |B|)")->capture_default_str()->check(kNonNegativeNumber);
  return cmd;
}

int run_diff(const DiffArgs& a) {
  TraceFile ta = read_trace(a.a), tb = read_trace(a.b);
  TraceDiff diff = diff_traces(ta, tb, a.atol, a.rtol);
  size_t compared = 0;
  for (const auto& d : diff.steps) compared += d.compared;
  if (compared == 0) throw FileError("no step values to compare: record both dumps with --trace-values");

  std::cout << "A: " << a.a << " (" << ta.backend << ", " << ta.device << ")\n"
            << "B: " << a.b << " (" << tb.backend << ", " << tb.device << ")\n"
            << std::left << std::setw(4) << "#" << std::setw(20) << "step" << std::setw(18) << "op" << std::setw(18)
            << "shape" << "max |A - B|\n";
  for (size_t i = 0; i < diff.steps.size(); ++i) {
    const StepDiff& d = diff.steps[i];
    std::cout << std::left << std::setw(4) << d.step.index << std::setw(20) << d.step.name << std::setw(18) << d.step.op
              << std::setw(18) << shape_string(d.step.shape);
    if (!d.compared) {
      std::cout << "(no values)\n";
      continue;
    }
    std::cout << std::scientific << std::setprecision(2) << d.max_abs_error << std::defaultfloat
              << (d.mismatches ? "  DIVERGES" : "") << "\n";
    if (d.mismatches) {
      std::cout << "\nfirst divergent step: " << d.step.index << " " << d.step.name << " (" << d.step.op << "), "
                << mismatch_report(d, d.step.shape, d.step.dims, "A", "B", a.atol, a.rtol) << "\n";
      return 1;
    }
  }
  std::cout << "\nall " << compared << " compared steps agree within atol " << a.atol << " + rtol " << a.rtol << " * |B|\n";
  if (ta.error || tb.error) std::cout << "note: " << (ta.error ? "A" : "B") << " stopped early: " << (ta.error ? *ta.error : *tb.error) << "\n";
  return 0;
}

}  // namespace vkattn::cli
