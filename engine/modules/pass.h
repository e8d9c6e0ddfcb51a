#pragma once
// One traced pass of a module's recipe: begun, checked against the backend's memory limits
// (Backend::preflight), run, its result read back, and ended, with the error when it fails.
#include <exception>
#include <string>

#include "vkattn/backends/backend.h"
#include "vkattn/tensor.h"

namespace vkattn {

// `recipe(backend)` returns the pass's result as a Value; it runs twice, sized then for real.
template <class Recipe>
Tensor run_pass(Backend& backend, const std::string& pass, const Recipe& recipe) {
  backend.begin_pass(pass);
  try {
    backend.preflight(pass, [&](Backend& b) { recipe(b); });
    Tensor out = backend.download(recipe(backend));
    backend.end_pass();
    return out;
  } catch (const std::exception& e) {
    backend.end_pass(e.what());
    throw;
  }
}

}  // namespace vkattn
