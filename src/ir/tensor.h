// Tensor: a dense, row-major array of one DType with concrete dimensions — what a general graph's
// values hold at run time (and what constant folding computes at build time).
//
// Storage is shared and reference-counted: copying a Tensor copies a handle, not the elements,
// so a Reshape or an Identity hands its input on for free. A tensor either owns its storage
// (created with a shape, zero-filled) or borrows bytes someone else keeps alive (view(): an
// engine's mapped weight, a caller's input). Only owned storage may be written, and only by the
// code that created it, before it hands the tensor on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::ir {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_to_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Owned, zero-filled storage of shape_numel(shape) elements, starting on a 64-byte boundary.
  Tensor(DType dtype, Shape shape);
  // Owned storage left as it comes (also 64-byte aligned), for a kernel that writes every
  // element: no pass over the bytes before the kernel's own.
  static Tensor uninitialized(DType dtype, Shape shape);
  // Borrows `bytes`, which must hold exactly the elements and outlive every copy of the tensor.
  static Tensor view(DType dtype, Shape shape, std::span<const std::byte> bytes);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t byte_size() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  const std::byte* bytes() const { return data_; }
  // Writable only for owned storage (checked).
  std::byte* mutable_bytes();
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(data_);
  }
  template <typename T>
  T* mutable_data() {
    return reinterpret_cast<T*>(mutable_bytes());
  }

  // The same elements under another shape of equal element count (checked); shares storage.
  Tensor reshaped(Shape shape) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  int64_t numel_ = 1;  // shape_numel(shape_): kernels loop on numel(), so it is not recomputed
  std::shared_ptr<std::byte[]> owned_;
  const std::byte* data_ = nullptr;
};

// Element i of `t` converted to double / int64 (any dtype).
double tensor_get_f64(const Tensor& t, int64_t i);
int64_t tensor_get_i64(const Tensor& t, int64_t i);
// Sets element i of an owned tensor from a double / int64, converting to its dtype.
void tensor_set_f64(Tensor& t, int64_t i, double v);
void tensor_set_i64(Tensor& t, int64_t i, int64_t v);
// The whole tensor as doubles / int64s.
std::vector<double> tensor_to_f64(const Tensor& t);
std::vector<int64_t> tensor_to_i64(const Tensor& t);

// A weight entry that serves `t`'s elements (f32 through `load`, other dtypes through
// `load_bytes`); the entry keeps a handle to the tensor's storage.
WeightEntry weight_entry_from_tensor(const Tensor& t);

}  // namespace kiln::ir
