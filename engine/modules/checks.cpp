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

void features(const std::string& who, const std::string& name, const Tensor& t, int64_t E, const std::string& config) {
  if (t.rank() == 0 || t.dim(-1) != E) {
    throw ShapeError(who + ": " + name + " " + shape_string(t.shape) + " has " +
                     std::to_string(t.rank() ? t.dim(-1) : 0) + " features but " + config + "=" + std::to_string(E));
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

}  // namespace vkattn::checks
