#pragma once
// The checks every module makes of what it is given, each with one message wherever it is made:
// a weight's dtype and shape, an optional weight against the switch that wants it, token ids, and
// a key padding mask's dtype and shape.
#include <cstdint>
#include <optional>
#include <string>

#include "vkattn/tensor.h"

namespace vkattn::checks {

// ShapeError "<who>: weight <name> is <dtype> <shape> but the config needs float32 <dims> =
// <expected>", e.g. dims "(E, F)" and expected (8, 5).
void weight(const std::string& who, const std::string& name, const Tensor& t, const Shape& expected,
            const std::string& dims);

// An input tensor: float32, holding as many values as its shape says. ShapeError "<who>: <name>
// is <dtype> but must be float32" or "<who>: <name> holds N values but its shape (…) needs M".
void float_input(const std::string& who, const std::string& name, const Tensor& t);

// Its last dim, the features: ShapeError "<who>: <name> (…) has N features but <config>=<E>".
// `shape` is the tensor's (a host tensor's or a backend value's).
void features(const std::string& who, const std::string& name, const Shape& shape, int64_t E,
              const std::string& config);

// A weight given exactly when the config's `flag` is on: ShapeError "<who>: weight <name> is missing
// but <flag> is on" (or "is given but <flag> is off"), then weight()'s check.
void optional_weight(const std::string& who, const std::string& name, const std::optional<Tensor>& t, bool wanted,
                     const std::string& flag, const Shape& expected, const std::string& dims);

// A language model's token ids: int64 (B, T), T >= 1, each in [0, vocab), positions
// first_position … first_position + T - 1 below `positions` (the model's, named `positions_what`,
// e.g. "rows of position_embedding"). ShapeError "<who>: …" naming the first wrong one.
void token_ids(const std::string& who, const Tensor& ids, int64_t vocab, int64_t first_position, int64_t positions,
               const std::string& positions_what);

// A key padding mask (True or -inf = padding), bool or float of the shape `expected`, named `dims`
// ("(B, S)", "(S,)"): ShapeError "<who>: <name> is int64 but must be bool or float32" or
// "<who>: <name> <shape> must be <dims> = <expected><after>". Returns it additive float
// (canonical_mask), shaped `as`: an unbatched (S,) mask as (1, S).
Tensor padding_mask(const std::string& who, const std::string& name, const Tensor& mask, const Shape& expected,
                    const std::string& dims, const Shape& as, const std::string& after = "");

}  // namespace vkattn::checks
