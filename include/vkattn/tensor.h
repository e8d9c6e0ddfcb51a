#pragma once
// A host tensor: a shape and a dense row-major (C order) array of floats.
// Masks are tensors too: dtype boolean stores 0 (keep) and 1 (blocked) as floats. Token ids
// are dtype int64, integers stored as floats (exact: the readers refuse |id| > 2^24).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace vkattn {

using Shape = std::vector<int64_t>;

enum class DType { float32, boolean, int64 };

// "float32" / "bool" / "int64": numpy's names, as the trace writes them.
const char* dtype_name(DType dtype);

// The 16-bit type every value of a float tensor is exactly, where it came so from a file (a
// float16 or bfloat16 checkpoint's weights, widened to float32 on the host), or none. A backend
// that keeps such weights 16-bit (Backend::upload_matrix) stores them in 2 bytes each.
enum class Narrow { none, float16, bfloat16 };
// "float16" / "bfloat16" ("float32" for none: what the numbers are then)
const char* narrow_name(Narrow narrow);
// The 32-bit words `count` elements take on a backend: one each, or two to a word when 16-bit.
int64_t stored_words(int64_t count, Narrow narrow);

// "(2, 5, 64)"
std::string shape_string(const Shape& shape);

// Product of the dims; 1 for a scalar shape ().
int64_t element_count(const Shape& shape);

// The multi-index of element `flat` in a C-order tensor of `shape`.
Shape unravel_index(const Shape& shape, int64_t flat);
// "(b=1, h=0, i=3, j=2)": that multi-index with each axis named by `dims` (d0, d1, … where
// `dims` has no name for it).
std::string index_string(const Shape& shape, int64_t flat, const std::vector<std::string>& dims = {});

struct Tensor;
// A float tensor of `shape` drawn uniformly from [-1, 1) by std::mt19937(seed): the same numbers
// on every machine, for demos, benchmarks and tests.
Tensor random_tensor(Shape shape, uint32_t seed);

// Tensors of one trailing shape stacked on the first axis: (R_i, …) -> (ΣR_i, …), torch.cat(dim=0)
// (q, k and v's projection weights as PyTorch's packed in_proj_weight). 16-bit (`narrow`) where
// every part is.
Tensor stack_rows(std::initializer_list<const Tensor*> parts);

// Rows [begin, begin + count) of a (rows, …) tensor, stack_rows' inverse: torch's t[begin:begin +
// count] (q, k and v's weights out of a packed in_proj_weight or qkv_proj). Keeps `narrow`.
Tensor slice_rows(const Tensor& t, int64_t begin, int64_t count);

// A rank-3 tensor's first two axes swapped: (A, B, C) -> (B, A, C), torch's x.transpose(0, 1)
// (sequence-first (L, B, E) and batch-first (B, L, E)).
Tensor swap_first_axes(const Tensor& x);

struct Tensor {
  Shape shape;
  std::vector<float> data;
  DType dtype = DType::float32;
  Narrow narrow = Narrow::none;  // float32 values that are all float16 / bfloat16 numbers

  Tensor() = default;
  // A zero-filled tensor.
  explicit Tensor(Shape shape_, DType dtype_ = DType::float32);
  Tensor(Shape shape_, std::vector<float> data_, DType dtype_ = DType::float32);

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  // Dim i, counted from the back when negative (dim(-1) is the last).
  int64_t dim(int64_t i) const;
  int64_t size() const { return static_cast<int64_t>(data.size()); }
  // Element at a multi-index, bounds unchecked.
  float& at(std::initializer_list<int64_t> index);
  float at(std::initializer_list<int64_t> index) const;
};

}  // namespace vkattn
