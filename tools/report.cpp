// vkattn report DIR [--against DIR2] -o FILE.html: a trace dump as one self-contained page — the
// recipe step by step, every traced tensor as a heatmap, the step times as a timeline — or two
// dumps of one recipe against each other, opened at the first divergent element `vkattn diff`
// names. Exit 0 when written (whether or not the dumps agree), 2 when a dump is unreadable or
// the two describe different recipes; nothing is written then.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "engine/io/file.h"
#include "tools/commands.h"
#include "tools/validators.h"
#include "vkattn/tracing/report.h"
#include "vkattn/tracing/side_by_side.h"
#include "vkattn/tracing/trace_dump.h"

namespace vkattn::cli {

CLI::App* add_report(CLI::App& app, ReportArgs& a) {
  auto* cmd = app.add_subcommand("report", "a trace dump (or two, against each other) as one offline HTML page");
  cmd->add_option("DIR", a.dir, "a dump directory (vkattn run --trace DIR --trace-values)")->required();
  cmd->add_option("--against", a.against, "DIR2: another dump of the same recipe; the page shows both and |DIR - DIR2|");
  cmd->add_option("-o,--out", a.out, "FILE.html: the page to write")->required();
  cmd->add_option("--title", a.title, "the page's heading; default: the dump's directory (and DIR2's)");
  cmd->add_option("--atol", a.atol, "absolute tolerance of a step's agreement")->capture_default_str()->check(kNonNegativeNumber);
  cmd->add_option("--rtol", a.rtol, "relative tolerance (times |DIR2|)")->capture_default_str()->check(kNonNegativeNumber);
  return cmd;
}

void say_report_written(const std::string& file, const std::string& what) {
  std::ostringstream size;
  const auto bytes = static_cast<double>(std::filesystem::file_size(file));
  size << std::fixed << std::setprecision(bytes < 1e6 ? 0 : 1) << (bytes < 1e6 ? bytes / 1e3 : bytes / 1e6)
       << (bytes < 1e6 ? " kB" : " MB");
  std::cout << "report: " << file << " (" << size.str() << ", opens offline in any browser): " << what << "\n";
}

int run_report(const ReportArgs& a) {
  io::check_output_path(a.out);
  const StepRecorder pass = load_trace(a.dir);
  std::optional<StepRecorder> against;
  if (!a.against.empty()) against.emplace(load_trace(a.against));
  const std::string a_label = std::filesystem::path(a.dir).filename().string();
  const std::string b_label = against ? std::filesystem::path(a.against).filename().string() : "";
  ReportSection section{.title = pass.pass(), .pass = &pass, .pass_label = a_label.empty() ? "A" : a_label};
  if (against) {
    section.against = &*against;
    section.against_label = b_label.empty() || b_label == section.pass_label ? "B" : b_label;
  }
  ReportOptions options{.title = a.title, .atol = a.atol, .rtol = a.rtol};
  if (options.title.empty()) options.title = "vkattn trace: " + a.dir + (against ? " against " + a.against : "");
  write_report(a.out, {section}, options);
  std::string what = std::to_string(pass.steps().size()) + " steps";
  if (against) {
    const SideBySide table(pass, *against, a.atol, a.rtol);
    const auto first = table.first_divergent();
    what += first ? "; it opens at the first divergent step, " + std::to_string(table.rows()[*first].event().index) +
                        " " + table.rows()[*first].event().name
                  : "; every step agrees";
  }
  say_report_written(a.out, what);
  return 0;
}

}  // namespace vkattn::cli
