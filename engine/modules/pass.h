#pragma once
// One traced pass of a module's recipe: begun, checked against the backend's memory limits
// (Backend::preflight), run, its result read back, and ended, with the error when it fails.
#include <exception>
#include <string>

#include "vkattn/backends/backend.h"
#include "vkattn/tensor.h"

namespace vkattn {

// `work()` inside the pass `pass`: begun before it, ended after it, or ended with the error it
// throws, so that tracers hear of every failure and keep the steps reached before it.
template <class Work>
auto in_pass(Backend& backend, const std::string& pass, const Work& work) {
  backend.begin_pass(pass);
  try {
    auto result = work();
    backend.end_pass();
    return result;
  } catch (const std::exception& e) {
    backend.end_pass(e.what());
    throw;
  }
}

// `recipe(backend)` returns the pass's result as a Value; it runs twice, sized then for real.
template <class Recipe>
Tensor run_pass(Backend& backend, const std::string& pass, const Recipe& recipe) {
  return in_pass(backend, pass, [&] {
    backend.preflight(pass, [&](Backend& b) { recipe(b); });
    return backend.download(recipe(backend));
  });
}

// run_pass with the result left on the backend (Backend::download reads it back): torch's forward
// on CUDA, whose output stays there for the next module.
template <class Recipe>
auto run_pass_on_device(Backend& backend, const std::string& pass, const Recipe& recipe) {
  return in_pass(backend, pass, [&] {
    backend.preflight(pass, [&](Backend& b) { recipe(b); });
    return recipe(backend);
  });
}

}  // namespace vkattn
