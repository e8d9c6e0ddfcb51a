#pragma once
// The .npy inputs and outputs of `vkattn run` and `vkattn encode`: read and checked with one
// readable error each (a FileError naming the file), results refused when not finite.
#include <optional>
#include <string>

#include "vkattn/tensor.h"

namespace vkattn::cli {

// An input sequence: float, (B, T, features) batch-first or unbatched (T, features), every value
// finite. `what` names it in errors ("query", "input").
Tensor read_input(const std::string& path, const char* what);

// A mask, or nothing for an empty path: bool (True blocks) or float (added to the scores; -inf
// blocks, NaN and +inf are refused).
std::optional<Tensor> read_mask(const std::string& path, const char* what);

// A result is never written with NaN or Inf in it: a runtime error naming the first one.
void require_finite(const Tensor& t, const char* what);

// "output (2, 5, 16) -> O.npy", or its min, max and mean when it is not saved.
void print_summary(const Tensor& t, const std::string& what, const std::string& path);

}  // namespace vkattn::cli
