// Scatter and selection tensor kernels: ScatterElements, ScatterND and Compress.
//   ScatterElements: y = copy(data); y[idx with idx[axis] = indices[idx]] (op)= updates[idx],
//                    for every idx of indices (indices and updates share a shape).
//   ScatterND:       y = copy(data); y[indices[i0..iq-1, :]] (op)= updates[i0..iq-1, ...], the
//                    last dimension of indices addresses the leading dimensions of data.
//   Compress:        the slices along `axis` (or elements of the flattened input) whose condition
//                    entry is true; condition may be shorter than the axis (the rest is false).
// `reduction` is none (assignment, by bytes, any dtype), add, mul, max or min (in double for
// floats, int64 for integers). Updates apply in index order, so duplicates accumulate.
#include <algorithm>
#include <cstring>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::Shape;
using ir::Tensor;

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Expected<Reduction> reduction_of(const ir::Node& n) {
  const std::string r = n.attr_str("reduction", "none");
  if (r == "none") return Reduction::kNone;
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  return tensor_error(n, "reduction '" + r + "' is not one of none, add, mul, max, min");
}

Expected<int64_t> checked_index(const ir::Node& n, int64_t v, int64_t dim) {
  if (v < -dim || v >= dim) {
    return tensor_error(n, "index " + std::to_string(v) + " is out of range for a dimension of " + std::to_string(dim));
  }
  return v < 0 ? v + dim : v;
}

// y[yi] (op)= u[ui].
void apply(Tensor& y, int64_t yi, const Tensor& u, int64_t ui, Reduction r) {
  if (r == Reduction::kNone) {
    const size_t es = ir::dtype_size(y.dtype());
    std::memcpy(y.mutable_bytes() + static_cast<size_t>(yi) * es, u.bytes() + static_cast<size_t>(ui) * es, es);
    return;
  }
  if (ir::dtype_is_float(y.dtype())) {
    const double a = ir::tensor_get_f64(y, yi), b = ir::tensor_get_f64(u, ui);
    const double v = r == Reduction::kAdd ? a + b : r == Reduction::kMul ? a * b : r == Reduction::kMax ? std::max(a, b) : std::min(a, b);
    ir::tensor_set_f64(y, yi, v);
  } else {
    const int64_t a = ir::tensor_get_i64(y, yi), b = ir::tensor_get_i64(u, ui);
    const int64_t v = r == Reduction::kAdd ? a + b : r == Reduction::kMul ? a * b : r == Reduction::kMax ? std::max(a, b) : std::min(a, b);
    ir::tensor_set_i64(y, yi, v);
  }
}

Tensor copy_of(const Tensor& x) {
  Tensor y(x.dtype(), x.shape());
  if (x.byte_size() > 0) std::memcpy(y.mutable_bytes(), x.bytes(), x.byte_size());
  return y;
}

Status scatter_elements(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &idx = *in[1], &upd = *in[2];
  KILN_ASSIGN_OR_RETURN(Reduction r, reduction_of(n));
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", 0), x.rank()));
  if (idx.rank() != x.rank() || idx.shape() != upd.shape()) {
    return tensor_error(n, "indices " + ir::shape_to_string(idx.shape()) + " and updates " +
                               ir::shape_to_string(upd.shape()) + " must share a shape of data's rank");
  }
  if (upd.dtype() != x.dtype()) return tensor_error(n, "updates and data differ in dtype");
  for (size_t d = 0; d < x.shape().size(); ++d) {
    if (idx.shape()[d] > x.shape()[d] && static_cast<int64_t>(d) != axis) {
      return tensor_error(n, "indices are larger than data in dimension " + std::to_string(d));
    }
  }
  Tensor y = copy_of(x);
  const std::vector<int64_t> ys = tensor_strides(x.shape());
  std::vector<int64_t> at(idx.shape().size(), 0);
  for (int64_t i = 0; i < idx.numel(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < at.size(); ++d) {
      int64_t v = at[d];
      if (static_cast<int64_t>(d) == axis) {
        KILN_ASSIGN_OR_RETURN(v, checked_index(n, ir::tensor_get_i64(idx, i), x.shape()[d]));
      }
      off += v * ys[d];
    }
    apply(y, off, upd, i, r);
    for (size_t d = at.size(); d-- > 0;) {
      if (++at[d] < idx.shape()[d]) break;
      at[d] = 0;
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status scatter_nd(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &idx = *in[1], &upd = *in[2];
  KILN_ASSIGN_OR_RETURN(Reduction r, reduction_of(n));
  if (idx.rank() < 1) return tensor_error(n, "indices need rank >= 1");
  const int64_t k = idx.shape().back();
  if (k > x.rank()) return tensor_error(n, "indices' last dimension exceeds data's rank");
  Shape want(idx.shape().begin(), idx.shape().end() - 1);
  want.insert(want.end(), x.shape().begin() + k, x.shape().end());
  if (upd.shape() != want) {
    return tensor_error(n, "updates have shape " + ir::shape_to_string(upd.shape()) + ", expected " +
                               ir::shape_to_string(want));
  }
  if (upd.dtype() != x.dtype()) return tensor_error(n, "updates and data differ in dtype");
  Tensor y = copy_of(x);
  const std::vector<int64_t> ys = tensor_strides(x.shape());
  int64_t slice = 1;
  for (size_t d = static_cast<size_t>(k); d < x.shape().size(); ++d) slice *= x.shape()[d];
  const int64_t tuples = k == 0 ? idx.numel() : idx.numel() / k;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j) {
      const size_t d = static_cast<size_t>(j);
      KILN_ASSIGN_OR_RETURN(int64_t v, checked_index(n, ir::tensor_get_i64(idx, t * k + j), x.shape()[d]));
      off += v * ys[d];
    }
    for (int64_t s = 0; s < slice; ++s) apply(y, off + s, upd, t * slice + s, r);
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status compress(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& cond = *in[1];
  if (cond.rank() != 1) return tensor_error(n, "condition must be 1-D");
  const bool flat = !n.has_attr("axis");
  const Tensor x = flat ? in[0]->reshaped({in[0]->numel()}) : *in[0];
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, flat ? 0 : n.attr_int("axis", 0), x.rank()));
  const int64_t dim = x.shape()[static_cast<size_t>(axis)];
  if (cond.numel() > dim) {
    return tensor_error(n, "condition has " + std::to_string(cond.numel()) + " entries for a dimension of " +
                               std::to_string(dim));
  }
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.numel(); ++i) {
    if (ir::tensor_get_i64(cond, i) != 0) keep.push_back(i);
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape().size(); ++d) inner *= x.shape()[d];
  Shape shape = x.shape();
  shape[static_cast<size_t>(axis)] = static_cast<int64_t>(keep.size());
  Tensor y(x.dtype(), shape);
  const size_t row = static_cast<size_t>(inner) * ir::dtype_size(x.dtype());
  size_t o = 0;
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t k : keep) {
      std::memcpy(y.mutable_bytes() + o, x.bytes() + static_cast<size_t>(a * dim + k) * row, row);
      o += row;
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_scatter_kernels(TensorKernelTable& table) {
  table["ScatterElements"] = scatter_elements;
  table["ScatterND"] = scatter_nd;
  table["Compress"] = compress;
}

}  // namespace kiln::cpu
