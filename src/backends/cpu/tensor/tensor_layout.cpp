// Data-movement tensor kernels: shape ops that share their input's storage (Reshape, Flatten,
// Squeeze, Unsqueeze, Identity-like) and copying ops that move whole elements by byte
// (Transpose, Concat, Split, Slice, Gather*, Expand, Tile, Pad, DepthToSpace, ...), so every
// dtype takes the same path. Index inputs are int32 or int64; negative indices count from the end.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Shape;
using ir::Tensor;

void copy_elem(Tensor& dst, int64_t di, const Tensor& src, int64_t si) {
  const size_t es = ir::dtype_size(src.dtype());
  std::memcpy(dst.mutable_bytes() + static_cast<size_t>(di) * es, src.bytes() + static_cast<size_t>(si) * es, es);
}

// y[i] = x[offset(i)] for every element of shape `shape`.
Tensor gather_elems(const Tensor& x, const Shape& shape, const std::vector<int64_t>& offsets) {
  Tensor y(x.dtype(), shape);
  for (size_t i = 0; i < offsets.size(); ++i) copy_elem(y, static_cast<int64_t>(i), x, offsets[i]);
  return y;
}

// Calls f(index vector, linear index) for every element of `shape`.
template <typename F>
void for_each_index(const Shape& shape, F f) {
  const int64_t n = ir::shape_numel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(idx, i);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

Status reshape(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  std::vector<int64_t> dims = ir::tensor_to_i64(*in[1]);
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 && !allowzero) {
      if (i >= x.shape().size()) return tensor_error(n, "shape entry 0 has no input dimension to copy");
      dims[i] = x.shape()[i];
    }
    if (dims[i] == -1) {
      if (infer >= 0) return tensor_error(n, "more than one -1 in the shape");
      infer = static_cast<int64_t>(i);
    } else if (dims[i] < 0) {
      return tensor_error(n, "negative shape entry " + std::to_string(dims[i]));
    } else {
      known *= dims[i];
    }
  }
  if (infer >= 0) dims[static_cast<size_t>(infer)] = known == 0 ? 0 : x.numel() / known;
  if (ir::shape_numel(dims) != x.numel()) {
    return tensor_error(n, "cannot reshape " + ir::shape_to_string(x.shape()) + " to " + ir::shape_to_string(dims));
  }
  out[0] = x.reshaped(dims);
  return Status::ok();
}

Status flatten(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  int64_t axis = n.attr_int("axis", 1);
  if (axis < -x.rank() || axis > x.rank()) return tensor_error(n, "axis out of range");
  if (axis < 0) axis += x.rank();
  int64_t a = 1;
  for (int64_t i = 0; i < axis; ++i) a *= x.shape()[static_cast<size_t>(i)];
  out[0] = x.reshaped({a, a == 0 ? 0 : x.numel() / std::max<int64_t>(a, 1)});
  if (a == 0) {
    int64_t b = 1;
    for (size_t i = static_cast<size_t>(axis); i < x.shape().size(); ++i) b *= x.shape()[i];
    out[0] = x.reshaped({0, b});
  }
  return Status::ok();
}

Status squeeze(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  std::vector<bool> drop(x.shape().size(), false);
  if (in.size() > 1 && in[1] != nullptr) {
    for (int64_t a : ir::tensor_to_i64(*in[1])) {
      KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, a, x.rank()));
      if (x.shape()[static_cast<size_t>(axis)] != 1) return tensor_error(n, "axis " + std::to_string(a) + " is not 1");
      drop[static_cast<size_t>(axis)] = true;
    }
  } else {
    for (size_t i = 0; i < drop.size(); ++i) drop[i] = x.shape()[i] == 1;
  }
  Shape shape;
  for (size_t i = 0; i < drop.size(); ++i) {
    if (!drop[i]) shape.push_back(x.shape()[i]);
  }
  out[0] = x.reshaped(shape);
  return Status::ok();
}

Status unsqueeze(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (in.size() < 2 || in[1] == nullptr) return tensor_error(n, "axes are required");
  const std::vector<int64_t> axes = ir::tensor_to_i64(*in[1]);
  const auto rank = static_cast<int64_t>(x.rank() + static_cast<int64_t>(axes.size()));
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, a, rank));
    if (inserted[static_cast<size_t>(axis)]) return tensor_error(n, "repeated axis");
    inserted[static_cast<size_t>(axis)] = true;
  }
  Shape shape;
  size_t k = 0;
  for (int64_t i = 0; i < rank; ++i) shape.push_back(inserted[static_cast<size_t>(i)] ? 1 : x.shape()[k++]);
  out[0] = x.reshaped(shape);
  return Status::ok();
}

// y (contiguous, `shape`) = x read with `strides` (elements) per output dim: output rows (all dims
// but the last) in parallel, each a strided run along x.
template <typename T>
void permute_copy(const std::byte* src, std::byte* dst, const Shape& shape, const std::vector<int64_t>& strides) {
  const T* x = reinterpret_cast<const T*>(src);
  T* y = reinterpret_cast<T*>(dst);
  const size_t rank = shape.size();
  if (rank == 0) {
    y[0] = x[0];
    return;
  }
  const int64_t inner = shape.back(), inner_stride = strides.back();
  const int64_t rows = inner == 0 ? 0 : ir::shape_numel(shape) / inner;
  parallel_for(0, rows, rows * inner > 65536, [&](int64_t r) {
    int64_t rest = r, off = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      off += rest % shape[d] * strides[d];
      rest /= shape[d];
    }
    const T* from = x + off;
    T* to = y + r * inner;
    if (inner_stride == 1) {
      std::memcpy(to, from, static_cast<size_t>(inner) * sizeof(T));
    } else {
      for (int64_t i = 0; i < inner; ++i) to[i] = from[i * inner_stride];
    }
  });
}

Status transpose(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty()) {
    for (int64_t i = x.rank(); i-- > 0;) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != x.rank()) return tensor_error(n, "perm does not match the rank");
  const std::vector<int64_t> xs = tensor_strides(x.shape());
  Shape shape;
  std::vector<int64_t> strides;
  for (int64_t p : perm) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, p, x.rank()));
    shape.push_back(x.shape()[static_cast<size_t>(axis)]);
    strides.push_back(xs[static_cast<size_t>(axis)]);
  }
  Tensor y = Tensor::uninitialized(x.dtype(), shape);  // a permutation writes every element
  switch (ir::dtype_size(x.dtype())) {
    case 1: permute_copy<uint8_t>(x.bytes(), y.mutable_bytes(), shape, strides); break;
    case 2: permute_copy<uint16_t>(x.bytes(), y.mutable_bytes(), shape, strides); break;
    case 4: permute_copy<uint32_t>(x.bytes(), y.mutable_bytes(), shape, strides); break;
    case 8: permute_copy<uint64_t>(x.bytes(), y.mutable_bytes(), shape, strides); break;
    default: return tensor_error(n, "unsupported element size");
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status concat(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& first = *in[0];
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", 0), first.rank()));
  Shape shape = first.shape();
  shape[static_cast<size_t>(axis)] = 0;
  for (const Tensor* t : in) {
    if (t->rank() != first.rank() || t->dtype() != first.dtype()) return tensor_error(n, "inputs differ in rank or dtype");
    for (int64_t d = 0; d < first.rank(); ++d) {
      if (d != axis && t->shape()[static_cast<size_t>(d)] != first.shape()[static_cast<size_t>(d)]) {
        return tensor_error(n, "input shapes " + ir::shape_to_string(first.shape()) + " and " +
                                   ir::shape_to_string(t->shape()) + " differ off the axis");
      }
    }
    shape[static_cast<size_t>(axis)] += t->shape()[static_cast<size_t>(axis)];
  }
  Tensor y = Tensor::uninitialized(first.dtype(), shape);  // the inputs fill it
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const size_t es = ir::dtype_size(first.dtype());
  const int64_t out_row = shape[static_cast<size_t>(axis)] * inner;
  int64_t at = 0;
  for (const Tensor* t : in) {
    const int64_t row = t->shape()[static_cast<size_t>(axis)] * inner;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(y.mutable_bytes() + static_cast<size_t>(o * out_row + at) * es,
                  t->bytes() + static_cast<size_t>(o * row) * es, static_cast<size_t>(row) * es);
    }
    at += row;
  }
  out[0] = std::move(y);
  return Status::ok();
}

// Elements [begin, begin + len) of `axis`, as a new tensor.
Tensor slice_axis(const Tensor& x, int64_t axis, int64_t begin, int64_t len) {
  Shape shape = x.shape();
  const int64_t full = shape[static_cast<size_t>(axis)];
  shape[static_cast<size_t>(axis)] = len;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  Tensor y(x.dtype(), shape);
  const size_t es = ir::dtype_size(x.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(y.mutable_bytes() + static_cast<size_t>(o * len * inner) * es,
                x.bytes() + static_cast<size_t>((o * full + begin) * inner) * es, static_cast<size_t>(len * inner) * es);
  }
  return y;
}

Status split(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", 0), x.rank()));
  const int64_t len = x.shape()[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes;
  if (in.size() > 1 && in[1] != nullptr) {
    sizes = ir::tensor_to_i64(*in[1]);
  } else {
    const auto parts = static_cast<int64_t>(out.size());
    const int64_t chunk = (len + parts - 1) / parts;
    for (int64_t p = 0, left = len; p < parts; ++p, left -= chunk) sizes.push_back(std::min(chunk, std::max<int64_t>(left, 0)));
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (sizes.size() != out.size() || total != len) return tensor_error(n, "split sizes do not add up to the axis");
  int64_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out[i] = slice_axis(x, axis, at, sizes[i]);
    at += sizes[i];
  }
  return Status::ok();
}

Status slice(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  const std::vector<int64_t> starts = ir::tensor_to_i64(*in[1]), ends = ir::tensor_to_i64(*in[2]);
  std::vector<int64_t> axes, steps;
  if (in.size() > 3 && in[3] != nullptr) axes = ir::tensor_to_i64(*in[3]);
  else for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (in.size() > 4 && in[4] != nullptr) steps = ir::tensor_to_i64(*in[4]);
  else steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    return tensor_error(n, "starts, ends, axes and steps differ in length");
  }
  const auto rank = static_cast<size_t>(x.rank());
  std::vector<int64_t> begin(rank, 0), step(rank, 1);
  Shape shape = x.shape();
  for (size_t i = 0; i < starts.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(int64_t a, tensor_axis(n, axes[i], x.rank()));
    const auto ax = static_cast<size_t>(a);
    const int64_t dim = x.shape()[ax], s = steps[i];
    if (s == 0) return tensor_error(n, "step 0");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      shape[ax] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      shape[ax] = b > e ? (b - e - s - 1) / -s : 0;
    }
    begin[ax] = b;
    step[ax] = s;
  }
  const std::vector<int64_t> xs = tensor_strides(x.shape());
  std::vector<int64_t> offsets(static_cast<size_t>(ir::shape_numel(shape)));
  for_each_index(shape, [&](const std::vector<int64_t>& idx, int64_t i) {
    int64_t off = 0;
    for (size_t d = 0; d < rank; ++d) off += (begin[d] + idx[d] * step[d]) * xs[d];
    offsets[static_cast<size_t>(i)] = off;
  });
  out[0] = gather_elems(x, shape, offsets);
  return Status::ok();
}

Expected<int64_t> checked_index(const ir::Node& n, int64_t i, int64_t dim) {
  if (i < -dim || i >= dim) return tensor_error(n, "index " + std::to_string(i) + " is out of range for a dimension of " + std::to_string(dim));
  return i < 0 ? i + dim : i;
}

Status gather(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &idx = *in[1];
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", 0), x.rank()));
  Shape shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), idx.shape().begin(), idx.shape().end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape().size(); ++d) inner *= x.shape()[d];
  const int64_t dim = x.shape()[static_cast<size_t>(axis)], k = idx.numel();
  Tensor y = Tensor::uninitialized(x.dtype(), shape);  // every (outer, index) row is copied in
  const size_t es = ir::dtype_size(x.dtype());
  for (int64_t j = 0; j < k; ++j) {
    KILN_ASSIGN_OR_RETURN(int64_t r, checked_index(n, ir::tensor_get_i64(idx, j), dim));
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(y.mutable_bytes() + static_cast<size_t>((o * k + j) * inner) * es,
                  x.bytes() + static_cast<size_t>((o * dim + r) * inner) * es, static_cast<size_t>(inner) * es);
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status gather_elements(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &idx = *in[1];
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", 0), x.rank()));
  if (idx.rank() != x.rank()) return tensor_error(n, "indices and data differ in rank");
  const std::vector<int64_t> xs = tensor_strides(x.shape());
  std::vector<int64_t> offsets(static_cast<size_t>(idx.numel()));
  Status st = Status::ok();
  for_each_index(idx.shape(), [&](const std::vector<int64_t>& at, int64_t i) {
    int64_t off = 0;
    for (size_t d = 0; d < at.size(); ++d) {
      int64_t v = at[d];
      if (static_cast<int64_t>(d) == axis) {
        auto c = checked_index(n, ir::tensor_get_i64(idx, i), x.shape()[d]);
        if (!c) {
          st = c.status();
          v = 0;
        } else {
          v = *c;
        }
      }
      off += v * xs[d];
    }
    offsets[static_cast<size_t>(i)] = off;
  });
  KILN_RETURN_IF_ERROR(st);
  out[0] = gather_elems(x, idx.shape(), offsets);
  return Status::ok();
}

Status gather_nd(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &idx = *in[1];
  const int64_t b = n.attr_int("batch_dims", 0);
  if (idx.rank() < 1) return tensor_error(n, "indices need rank >= 1");
  const int64_t m = idx.shape().back();
  if (b < 0 || b + m > x.rank()) return tensor_error(n, "indices' last dimension is too large");
  Shape shape(idx.shape().begin(), idx.shape().end() - 1);
  shape.insert(shape.end(), x.shape().begin() + b + m, x.shape().end());
  int64_t batch = 1, slice = 1;
  for (int64_t d = 0; d < b; ++d) batch *= x.shape()[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(b + m); d < x.shape().size(); ++d) slice *= x.shape()[d];
  const std::vector<int64_t> xs = tensor_strides(x.shape());
  const int64_t tuples = idx.numel() / std::max<int64_t>(m, 1), per_batch = tuples / std::max<int64_t>(batch, 1);
  const int64_t batch_stride = b > 0 ? xs[static_cast<size_t>(b - 1)] : 0;
  std::vector<int64_t> offsets;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = (t / std::max<int64_t>(per_batch, 1)) * batch_stride;
    for (int64_t j = 0; j < m; ++j) {
      KILN_ASSIGN_OR_RETURN(int64_t v, checked_index(n, ir::tensor_get_i64(idx, t * m + j), x.shape()[static_cast<size_t>(b + j)]));
      off += v * xs[static_cast<size_t>(b + j)];
    }
    for (int64_t s = 0; s < slice; ++s) offsets.push_back(off + s);
  }
  out[0] = gather_elems(x, shape, offsets);
  return Status::ok();
}

Status expand(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  KILN_ASSIGN_OR_RETURN(Shape shape, tensor_broadcast_shape(n, {x.shape(), ir::tensor_to_i64(*in[1])}));
  out[0] = gather_elems(x, shape, tensor_broadcast_offsets(x.shape(), shape));
  return Status::ok();
}

Status tile(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  const std::vector<int64_t> reps = ir::tensor_to_i64(*in[1]);
  if (static_cast<int64_t>(reps.size()) != x.rank()) return tensor_error(n, "repeats do not match the rank");
  Shape shape = x.shape();
  for (size_t d = 0; d < shape.size(); ++d) shape[d] *= reps[d];
  const std::vector<int64_t> xs = tensor_strides(x.shape());
  std::vector<int64_t> offsets(static_cast<size_t>(ir::shape_numel(shape)));
  for_each_index(shape, [&](const std::vector<int64_t>& idx, int64_t i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += (idx[d] % x.shape()[d]) * xs[d];
    offsets[static_cast<size_t>(i)] = off;
  });
  out[0] = gather_elems(x, shape, offsets);
  return Status::ok();
}

Tensor i64_tensor(const std::vector<int64_t>& v, Shape shape) {
  Tensor t(DType::kI64, std::move(shape));
  if (!v.empty()) std::memcpy(t.mutable_bytes(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

Status shape_of(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Shape& s = in[0]->shape();
  const auto rank = static_cast<int64_t>(s.size());
  int64_t b = n.attr_int("start", 0), e = n.attr_int("end", rank);
  if (b < 0) b += rank;
  if (e < 0) e += rank;
  b = std::clamp<int64_t>(b, 0, rank);
  e = std::clamp<int64_t>(e, b, rank);
  std::vector<int64_t> v(s.begin() + b, s.begin() + e);
  out[0] = i64_tensor(v, {static_cast<int64_t>(v.size())});
  return Status::ok();
}

Status size_of(const ir::Node&, const TensorInputs& in, std::vector<Tensor>& out) {
  out[0] = i64_tensor({in[0]->numel()}, {});
  return Status::ok();
}

Status constant_of_shape(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const auto dtype = ir::dtype_from_name(n.attr_str("dtype", "f32"));
  if (!dtype) return tensor_error(n, "unknown dtype");
  const std::vector<int64_t> dims = ir::tensor_to_i64(*in[0]);
  for (int64_t d : dims) {
    if (d < 0) return tensor_error(n, "negative dimension");
  }
  Tensor y(*dtype, dims);
  const double v = n.attr_float("value", 0.0);
  for (int64_t i = 0; i < y.numel(); ++i) ir::tensor_set_f64(y, i, v);
  out[0] = std::move(y);
  return Status::ok();
}

Status range(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const double start = ir::tensor_get_f64(*in[0], 0), limit = ir::tensor_get_f64(*in[1], 0),
               delta = ir::tensor_get_f64(*in[2], 0);
  if (delta == 0) return tensor_error(n, "delta is 0");
  const auto count = static_cast<int64_t>(std::max(0.0, std::ceil((limit - start) / delta)));
  Tensor y(in[0]->dtype(), {count});
  for (int64_t i = 0; i < count; ++i) {
    if (ir::dtype_is_float(in[0]->dtype())) ir::tensor_set_f64(y, i, start + static_cast<double>(i) * delta);
    else ir::tensor_set_i64(y, i, ir::tensor_get_i64(*in[0], 0) + i * ir::tensor_get_i64(*in[2], 0));
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status pad(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  const auto rank = static_cast<size_t>(x.rank());
  const std::vector<int64_t> given = ir::tensor_to_i64(*in[1]);
  std::vector<int64_t> axes;
  if (in.size() > 3 && in[3] != nullptr) {
    for (int64_t a : ir::tensor_to_i64(*in[3])) {
      KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, a, x.rank()));
      axes.push_back(axis);
    }
  } else {
    for (size_t i = 0; i < rank; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (given.size() != 2 * axes.size()) return tensor_error(n, "pads do not match the axes");
  std::vector<int64_t> lo(rank, 0), hi(rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    lo[static_cast<size_t>(axes[i])] = given[i];
    hi[static_cast<size_t>(axes[i])] = given[i + axes.size()];
  }
  const std::string mode = n.attr_str("mode", "constant");
  Shape shape = x.shape();
  for (size_t d = 0; d < rank; ++d) {
    shape[d] += lo[d] + hi[d];
    if (shape[d] < 0) return tensor_error(n, "pads make a negative dimension");
  }
  Tensor y(x.dtype(), shape);
  const double value = in.size() > 2 && in[2] != nullptr && in[2]->numel() ? ir::tensor_get_f64(*in[2], 0) : 0.0;
  const std::vector<int64_t> xs = tensor_strides(x.shape());
  Status st = Status::ok();
  for_each_index(shape, [&](const std::vector<int64_t>& idx, int64_t i) {
    int64_t off = 0;
    bool outside = false;
    for (size_t d = 0; d < rank; ++d) {
      int64_t v = idx[d] - lo[d];
      const int64_t dim = x.shape()[d];
      if (v < 0 || v >= dim) {
        if (mode == "constant" || dim == 0) {
          outside = true;
          break;
        }
        if (mode == "edge") {
          v = std::clamp<int64_t>(v, 0, dim - 1);
        } else if (mode == "wrap") {
          v = ((v % dim) + dim) % dim;
        } else {  // reflect
          if (dim == 1) {
            v = 0;
          } else {
            const int64_t period = 2 * (dim - 1);
            v = ((v % period) + period) % period;
            if (v >= dim) v = period - v;
          }
        }
      }
      off += v * xs[d];
    }
    if (outside) ir::tensor_set_f64(y, i, value);
    else copy_elem(y, i, x, off);
  });
  KILN_RETURN_IF_ERROR(st);
  out[0] = std::move(y);
  return Status::ok();
}

Status trilu(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (x.rank() < 2) return tensor_error(n, "needs rank >= 2");
  const int64_t k = in.size() > 1 && in[1] != nullptr ? ir::tensor_get_i64(*in[1], 0) : 0;
  const bool upper = n.attr_int("upper", 1) != 0;
  const int64_t rows = x.shape()[x.shape().size() - 2], cols = x.shape().back();
  Tensor y(x.dtype(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = i % cols, r = (i / cols) % rows;
    const bool keep = upper ? c - r >= k : c - r <= k;
    if (keep) copy_elem(y, i, x, i);
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status one_hot(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &idx = *in[0], &values = *in[2];
  const auto depth = static_cast<int64_t>(ir::tensor_get_f64(*in[1], 0));
  if (depth <= 0) return tensor_error(n, "depth must be positive");
  const auto rank = idx.rank() + 1;
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", -1), rank));
  Shape shape = idx.shape();
  shape.insert(shape.begin() + axis, depth);
  Tensor y(values.dtype(), shape);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < depth; ++j) {
      for (int64_t i = 0; i < inner; ++i) {
        auto v = static_cast<int64_t>(ir::tensor_get_f64(idx, o * inner + i));
        if (v < 0) v += depth;
        copy_elem(y, (o * depth + j) * inner + i, values, v == j ? 1 : 0);
      }
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status depth_space(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (x.rank() != 4) return tensor_error(n, "needs a 4-D input");
  const int64_t b = n.attr_int("blocksize", 1), N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const bool crd = n.attr_str("mode", "DCR") == "CRD";
  Shape shape;
  std::vector<int64_t> offsets;
  if (n.op == "DepthToSpace") {
    if (C % (b * b)) return tensor_error(n, "channels do not divide by blocksize^2");
    const int64_t c2 = C / (b * b);
    shape = {N, c2, H * b, W * b};
    for_each_index(shape, [&](const std::vector<int64_t>& i, int64_t) {
      const int64_t h = i[2] / b, bh = i[2] % b, w = i[3] / b, bw = i[3] % b;
      const int64_t c = crd ? i[1] * b * b + bh * b + bw : (bh * b + bw) * c2 + i[1];
      offsets.push_back(((i[0] * C + c) * H + h) * W + w);
    });
  } else {
    if (H % b || W % b) return tensor_error(n, "spatial dimensions do not divide by blocksize");
    shape = {N, C * b * b, H / b, W / b};
    for_each_index(shape, [&](const std::vector<int64_t>& i, int64_t) {
      const int64_t c = i[1] % C, blk = i[1] / C, bh = blk / b, bw = blk % b;
      offsets.push_back(((i[0] * C + c) * H + i[2] * b + bh) * W + i[3] * b + bw);
    });
  }
  out[0] = gather_elems(x, shape, offsets);
  return Status::ok();
}

Status eye_like(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (x.rank() != 2) return tensor_error(n, "needs a 2-D input");
  const auto dtype = ir::dtype_from_name(n.attr_str("dtype", "f32"));
  if (!dtype) return tensor_error(n, "unknown dtype");
  Tensor y(*dtype, x.shape());
  const int64_t k = n.attr_int("k", 0);
  for (int64_t r = 0; r < x.shape()[0]; ++r) {
    const int64_t c = r + k;
    if (c >= 0 && c < x.shape()[1]) ir::tensor_set_f64(y, r * x.shape()[1] + c, 1.0);
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status non_zero(const ir::Node&, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  std::vector<std::vector<int64_t>> hits;
  for_each_index(x.shape(), [&](const std::vector<int64_t>& idx, int64_t i) {
    if (ir::tensor_get_f64(x, i) != 0.0) hits.push_back(idx);
  });
  const auto rank = static_cast<int64_t>(x.rank()), count = static_cast<int64_t>(hits.size());
  Tensor y(DType::kI64, {rank, count});
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t d = 0; d < rank; ++d) y.mutable_data<int64_t>()[d * count + j] = hits[static_cast<size_t>(j)][static_cast<size_t>(d)];
  }
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_layout_kernels(TensorKernelTable& table) {
  table["Reshape"] = reshape;
  table["Flatten"] = flatten;
  table["Squeeze"] = squeeze;
  table["Unsqueeze"] = unsqueeze;
  table["Transpose"] = transpose;
  table["Concat"] = concat;
  table["Split"] = split;
  table["Slice"] = slice;
  table["Gather"] = gather;
  table["GatherElements"] = gather_elements;
  table["GatherND"] = gather_nd;
  table["Expand"] = expand;
  table["Tile"] = tile;
  table["Shape"] = shape_of;
  table["Size"] = size_of;
  table["ConstantOfShape"] = constant_of_shape;
  table["Range"] = range;
  table["Pad"] = pad;
  table["Trilu"] = trilu;
  table["OneHot"] = one_hot;
  table["DepthToSpace"] = depth_space;
  table["SpaceToDepth"] = depth_space;
  table["EyeLike"] = eye_like;
  table["NonZero"] = non_zero;
}

}  // namespace kiln::cpu
