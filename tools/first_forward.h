#pragma once
// The GPU's first forward in a process makes its pipelines (the driver compiles each shader, or
// reads it from its disk cache). `vkattn demo` and `vkattn run --side-by-side` run it once,
// untraced, before their traced pass, so that the table's GPU times are the steps' own.
#include <chrono>
#include <exception>
#include <iomanip>
#include <sstream>
#include <string>

namespace vkattn::cli {

// Runs `forward()` once; a failure is left to the traced pass, which shows where it happened.
// Returns the line that says what the first forward took, for above the table.
template <class F>
std::string untimed_first_forward(F&& forward) {
  const auto start = std::chrono::steady_clock::now();
  try {
    forward();
  } catch (const std::exception&) {
  }
  std::ostringstream line;  // formatted apart: std::cout keeps its own precision for the table
  line << "gpu µs: a second forward; the first, untimed, took " << std::fixed << std::setprecision(1)
       << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()
       << " ms making the pipelines\n";
  return line.str();
}

}  // namespace vkattn::cli
