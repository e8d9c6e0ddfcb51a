#include "vkattn/tensor.h"

#include <algorithm>
#include <random>
#include <stdexcept>

namespace vkattn {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32: return "float32";
    case DType::boolean: return "bool";
    case DType::int64: return "int64";
  }
  return "?";
}

const char* narrow_name(Narrow narrow) {
  switch (narrow) {
    case Narrow::none: return "float32";
    case Narrow::float16: return "float16";
    case Narrow::bfloat16: return "bfloat16";
  }
  return "?";
}

int64_t stored_words(int64_t count, Narrow narrow) { return narrow == Narrow::none ? count : (count + 1) / 2; }

std::string shape_string(const Shape& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

int64_t element_count(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape unravel_index(const Shape& shape, int64_t flat) {
  Shape index(shape.size());
  for (size_t axis = shape.size(); axis-- > 0;) {
    index[axis] = flat % shape[axis];
    flat /= shape[axis];
  }
  return index;
}

std::string index_string(const Shape& shape, int64_t flat, const std::vector<std::string>& dims) {
  Shape index = unravel_index(shape, flat);
  std::string out = "(";
  for (size_t axis = 0; axis < index.size(); ++axis) {
    if (axis) out += ", ";
    out += (axis < dims.size() ? dims[axis] : "d" + std::to_string(axis)) + "=" + std::to_string(index[axis]);
  }
  return out + ")";
}

Tensor::Tensor(Shape shape_, DType dtype_)
    : shape(std::move(shape_)), data(static_cast<size_t>(element_count(shape))), dtype(dtype_) {}

Tensor::Tensor(Shape shape_, std::vector<float> data_, DType dtype_)
    : shape(std::move(shape_)), data(std::move(data_)), dtype(dtype_) {
  if (static_cast<int64_t>(data.size()) != element_count(shape)) {
    throw std::invalid_argument("Tensor: shape " + shape_string(shape) + " holds " +
                                std::to_string(element_count(shape)) + " elements but " +
                                std::to_string(data.size()) + " values were given");
  }
}

int64_t Tensor::dim(int64_t i) const { return shape.at(static_cast<size_t>(i < 0 ? rank() + i : i)); }

static size_t flat_offset(const Shape& shape, std::initializer_list<int64_t> index) {
  int64_t offset = 0;
  size_t axis = 0;
  for (int64_t i : index) offset = offset * shape[axis++] + i;
  return static_cast<size_t>(offset);
}

float& Tensor::at(std::initializer_list<int64_t> index) { return data[flat_offset(shape, index)]; }
float Tensor::at(std::initializer_list<int64_t> index) const { return data[flat_offset(shape, index)]; }

Tensor stack_rows(std::initializer_list<const Tensor*> parts) {
  Shape shape = (*parts.begin())->shape;
  shape[0] = 0;
  std::vector<float> data;
  for (const Tensor* t : parts) {
    shape[0] += t->dim(0);
    data.insert(data.end(), t->data.begin(), t->data.end());
  }
  Tensor stacked(std::move(shape), std::move(data));
  const Narrow narrow = (*parts.begin())->narrow;  // 16-bit numbers stacked are still 16-bit numbers
  if (std::all_of(parts.begin(), parts.end(), [&](const Tensor* t) { return t->narrow == narrow; })) {
    stacked.narrow = narrow;
  }
  return stacked;
}

Tensor slice_rows(const Tensor& t, int64_t begin, int64_t count) {
  const int64_t row = t.dim(0) ? t.size() / t.dim(0) : 0;
  Shape shape = t.shape;
  shape[0] = count;
  std::vector<float> data(t.data.begin() + begin * row, t.data.begin() + (begin + count) * row);
  Tensor rows(std::move(shape), std::move(data), t.dtype);
  rows.narrow = t.narrow;
  return rows;
}

Tensor swap_first_axes(const Tensor& x) {
  const int64_t A = x.dim(0), B = x.dim(1), C = x.dim(2);
  Tensor y({B, A, C});
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t b = 0; b < B; ++b) {
      std::copy_n(x.data.begin() + (a * B + b) * C, C, y.data.begin() + (b * A + a) * C);
    }
  }
  return y;
}

Tensor random_tensor(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t(std::move(shape));
  for (float& v : t.data) v = dist(rng);
  return t;
}

}  // namespace vkattn
