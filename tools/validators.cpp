#include "tools/validators.h"

#include <string>

namespace vkattn::cli {
namespace {

CLI::Validator number_check(const std::string& rule, bool (*holds)(double)) {
  return CLI::Validator(
      [rule, holds](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !holds(value)) return text + " is not a number " + rule;
        return {};
      },
      "NUMBER " + rule);
}

}  // namespace

const CLI::Validator kNonNegativeNumber = number_check(">= 0", [](double v) { return v >= 0; });
const CLI::Validator kPositiveNumber = number_check("> 0", [](double v) { return v > 0; });

}  // namespace vkattn::cli
