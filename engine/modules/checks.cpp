#include "engine/modules/checks.h"

#include "vkattn/errors.h"
#include "vkattn/modules/multi_head_attention.h"

namespace vkattn::checks {

void weight(const std::string& who, const std::string& name, const Tensor& t, const Shape& expected,
            const std::string& dims) {
  if (t.shape != expected || t.dtype != DType::float32 || element_count(t.shape) != t.size()) {
    throw ShapeError(who + ": weight " + name + " is " + dtype_name(t.dtype) + " " + shape_string(t.shape) +
                     " but the config needs float32 " + dims + " = " + shape_string(expected));
  }
}

void float_input(const std::string& who, const std::string& name, const Tensor& t) {
  if (t.dtype != DType::float32) throw ShapeError(who + ": " + name + " is " + dtype_name(t.dtype) + " but must be float32");
  if (element_count(t.shape) != t.size()) {
    throw ShapeError(who + ": " + name + " holds " + std::to_string(t.size()) + " values but its shape " +
                     shape_string(t.shape) + " needs " + std::to_string(element_count(t.shape)));
  }
}

void features(const std::string& who, const std::string& name, const Shape& shape, int64_t E,
              const std::string& config) {
  if (shape.empty() || shape.back() != E) {
    throw ShapeError(who + ": " + name + " " + shape_string(shape) + " has " +
                     std::to_string(shape.empty() ? 0 : shape.back()) + " features but " + config + "=" +
                     std::to_string(E));
  }
}

void optional_weight(const std::string& who, const std::string& name, const std::optional<Tensor>& t, bool wanted,
                     const std::string& flag, const Shape& expected, const std::string& dims) {
  if (t.has_value() != wanted) {
    throw ShapeError(who + ": weight " + name + " is " + (wanted ? "missing but " : "given but ") + flag + " is " +
                     (wanted ? "on" : "off"));
  }
  if (t) weight(who, name, *t, expected, dims);
}

Tensor padding_mask(const std::string& who, const std::string& name, const Tensor& mask, const Shape& expected,
                    const std::string& dims, const Shape& as, const std::string& after) {
  if (mask.dtype == DType::int64) throw ShapeError(who + ": " + name + " is int64 but must be bool or float32");
  if (mask.shape != expected) {
    throw ShapeError(who + ": " + name + " " + shape_string(mask.shape) + " must be " + dims + " = " +
                     shape_string(expected) + after);
  }
  Tensor additive = canonical_mask(mask);
  additive.shape = as;
  return additive;
}

void token_ids(const std::string& who, const Tensor& ids, int64_t vocab, int64_t first_position, int64_t positions,
               const std::string& positions_what) {
  auto require = [&](bool ok, const std::string& message) {
    if (!ok) throw ShapeError(who + ": " + message);
  };
  require(ids.dtype == DType::int64, "token ids are " + std::string(dtype_name(ids.dtype)) + " but must be int64");
  require(ids.rank() == 2 && ids.dim(1) >= 1, "token ids " + shape_string(ids.shape) + " must be (B, T), T >= 1");
  for (size_t i = 0; i < ids.data.size(); ++i) {
    const float id = ids.data[i];
    if (id >= 0 && id < static_cast<float>(vocab)) continue;  // the message only for the id that fails
    require(false, "token id " + std::to_string(static_cast<int64_t>(id)) + " at index " + std::to_string(i) +
                       " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
  require(first_position + ids.dim(1) <= positions,
          "positions " + std::to_string(first_position) + " … " + std::to_string(first_position + ids.dim(1) - 1) +
              " go past the " + std::to_string(positions) + " " + positions_what);
}

}  // namespace vkattn::checks
