#pragma once
// What a fuzz target may observe. A parser handed any bytes either succeeds or throws a
// vkattn::Error whose message is one non-empty line starting with the source's name. Anything
// else is a finding and aborts, so that libFuzzer (and the corpus replay in ctest) reports it: a
// crash, a sanitizer report, another exception type escaping, a multi-line or unnamed message,
// or a result that breaks the invariant its target checks.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "vkattn/errors.h"

namespace vkattn::fuzz {

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

// Runs `parse`; a vkattn::Error is an accepted refusal when its message obeys the contract.
// Returns whether `parse` succeeded.
template <class F>
bool refuses_cleanly(const std::string& source, F&& parse) {
  try {
    parse();
    return true;
  } catch (const Error& e) {
    std::string message = e.what();
    if (message.rfind(source, 0) != 0) finding("the message does not start with '" + source + "': " + message);
    if (message.find('\n') != std::string::npos) finding("the message is not one line: " + message);
    return false;
  }
}

}  // namespace vkattn::fuzz
