#pragma once
// Numbers as a report prints them: `digits` significant digits ("-0.008269936",
// "-1.234568e-05"), and NaN and infinities as Python prints them ("nan", "inf", "-inf"), never
// C's "-nan". At most digits + 7 characters for any double.
#include <string>

namespace vkattn {

std::string number_text(double v, int digits = 4);

}  // namespace vkattn
