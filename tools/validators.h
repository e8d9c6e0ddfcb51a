#pragma once
// Number checks for command-line options. CLI11's NonNegativeNumber and PositiveNumber are
// ranges up to DBL_MAX and print all 309 of its digits when they refuse; these say the rule.
#include <CLI/CLI.hpp>

namespace vkattn::cli {

// A number >= 0 ("--rtol: -1 is not a number >= 0"); NaN is refused too.
extern const CLI::Validator kNonNegativeNumber;
// A number > 0.
extern const CLI::Validator kPositiveNumber;

}  // namespace vkattn::cli
