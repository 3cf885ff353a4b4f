// Einsum and Unique tensor kernels.
//   Einsum: "bij,bjk->bik"-style equations over any number of operands, with "..." for the
//           broadcast dimensions and the implicit output (labels seen once, in alphabetical
//           order, after the ellipsis) when "->" is absent. Every label's extent is checked
//           across operands; the sum runs over all label values in f64 (i64 for integers), a
//           plain loop that is exact rather than fast.
//   Unique: the distinct elements of the flattened input, or the distinct slices along `axis`,
//           sorted ascending (sorted = 1) or in order of first occurrence; with the index of each
//           one's first occurrence, each input element's index into the result, and the counts.
#include <algorithm>
#include <map>
#include <numeric>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Shape;
using ir::Tensor;

// Labels are letters; ellipsis dimensions get labels 256 + k (k-th from the ellipsis' start).
constexpr int kEllipsis = 256;

Expected<std::vector<int>> parse_term(const ir::Node& n, const std::string& term, int64_t rank, int& ellipsis_rank) {
  std::vector<int> labels;
  const size_t dots = term.find("...");
  const int64_t letters = static_cast<int64_t>(term.size()) - (dots == std::string::npos ? 0 : 3);
  if (dots != std::string::npos && rank >= 0) {
    const int64_t e = rank - letters;
    if (e < 0 || (ellipsis_rank >= 0 && ellipsis_rank != e)) {
      return tensor_error(n, "the ellipsis in '" + term + "' does not fit the operand's rank");
    }
    ellipsis_rank = static_cast<int>(e);
  }
  if (dots != std::string::npos && ellipsis_rank < 0) ellipsis_rank = 0;
  for (size_t i = 0; i < term.size(); ++i) {
    if (i == dots) {
      for (int k = 0; k < ellipsis_rank; ++k) labels.push_back(kEllipsis + k);
      i += 2;
      continue;
    }
    const char c = term[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
      return tensor_error(n, std::string("'") + c + "' is not a label in the equation");
    }
    labels.push_back(static_cast<unsigned char>(c));
  }
  if (rank >= 0 && static_cast<int64_t>(labels.size()) != rank) {
    return tensor_error(n, "term '" + term + "' has " + std::to_string(labels.size()) + " labels for an operand of rank " +
                               std::to_string(rank));
  }
  return labels;
}

Status einsum(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  std::string eq;
  for (char c : n.attr_str("equation", "")) {
    if (c != ' ') eq += c;
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != in.size()) {
    return tensor_error(n, "the equation has " + std::to_string(terms.size()) + " operands, the node " +
                               std::to_string(in.size()));
  }
  int ellipsis_rank = -1;
  std::vector<std::vector<int>> labels;
  std::map<int, int64_t> extent;
  for (size_t t = 0; t < terms.size(); ++t) {
    KILN_ASSIGN_OR_RETURN(std::vector<int> l, parse_term(n, terms[t], in[t]->rank(), ellipsis_rank));
    for (size_t d = 0; d < l.size(); ++d) {
      const int64_t size = in[t]->shape()[d];
      auto [it, fresh] = extent.emplace(l[d], size);
      if (!fresh && it->second != size) {
        if (it->second == 1 && l[d] >= kEllipsis) it->second = size;  // ellipsis dims broadcast
        else if (!(size == 1 && l[d] >= kEllipsis)) return tensor_error(n, "a label has extents " + std::to_string(it->second) + " and " + std::to_string(size));
      }
    }
    labels.push_back(std::move(l));
  }
  std::vector<int> out_labels;
  if (arrow != std::string::npos) {
    KILN_ASSIGN_OR_RETURN(out_labels, parse_term(n, eq.substr(arrow + 2), -1, ellipsis_rank));
    for (int l : out_labels) {
      if (!extent.count(l)) return tensor_error(n, "output label not among the inputs'");
    }
  } else {
    std::map<int, int> seen;
    for (const auto& l : labels) {
      for (int x : l) seen[x]++;
    }
    for (int k = 0; k < std::max(ellipsis_rank, 0); ++k) out_labels.push_back(kEllipsis + k);
    for (const auto& [l, count] : seen) {
      if (count == 1 && l < kEllipsis) out_labels.push_back(l);
    }
  }
  // All labels: the output's first, then the summed ones.
  std::vector<int> all = out_labels;
  for (const auto& [l, size] : extent) {
    if (std::find(all.begin(), all.end(), l) == all.end()) all.push_back(l);
  }
  Shape all_dims, out_shape;
  for (int l : all) all_dims.push_back(extent.at(l));
  for (int l : out_labels) out_shape.push_back(extent.at(l));
  // Per operand, the stride of each label in `all` (0 where absent or broadcast).
  std::vector<std::vector<int64_t>> strides(in.size(), std::vector<int64_t>(all.size(), 0));
  for (size_t t = 0; t < in.size(); ++t) {
    const std::vector<int64_t> s = tensor_strides(in[t]->shape());
    for (size_t d = 0; d < labels[t].size(); ++d) {
      const size_t a = static_cast<size_t>(std::find(all.begin(), all.end(), labels[t][d]) - all.begin());
      if (in[t]->shape()[d] != 1) strides[t][a] += s[d];
    }
  }
  const bool fl = ir::dtype_is_float(in[0]->dtype());
  Tensor y(in[0]->dtype(), out_shape);
  const int64_t out_n = ir::shape_numel(out_shape), total = ir::shape_numel(all_dims);
  const int64_t inner = out_n == 0 ? 0 : total / out_n;
  std::vector<double> acc(static_cast<size_t>(out_n), 0.0);
  std::vector<int64_t> acc_i(static_cast<size_t>(out_n), 0);
  std::vector<int64_t> idx(all.size(), 0), off(in.size(), 0);
  for (int64_t i = 0; i < total; ++i) {
    const size_t o = static_cast<size_t>(i / std::max<int64_t>(inner, 1));
    if (fl) {
      double p = 1.0;
      for (size_t t = 0; t < in.size(); ++t) p *= ir::tensor_get_f64(*in[t], off[t]);
      acc[o] += p;
    } else {
      int64_t p = 1;
      for (size_t t = 0; t < in.size(); ++t) p *= ir::tensor_get_i64(*in[t], off[t]);
      acc_i[o] += p;
    }
    for (size_t d = all.size(); d-- > 0;) {
      for (size_t t = 0; t < in.size(); ++t) off[t] += strides[t][d];
      if (++idx[d] < all_dims[d]) break;
      for (size_t t = 0; t < in.size(); ++t) off[t] -= strides[t][d] * all_dims[d];
      idx[d] = 0;
    }
  }
  for (int64_t i = 0; i < out_n; ++i) {
    if (fl) ir::tensor_set_f64(y, i, acc[static_cast<size_t>(i)]);
    else ir::tensor_set_i64(y, i, acc_i[static_cast<size_t>(i)]);
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status unique(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const bool flat = !n.has_attr("axis");
  const Tensor x = flat ? in[0]->reshaped({in[0]->numel()}) : *in[0];
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, flat ? 0 : n.attr_int("axis", 0), x.rank()));
  const int64_t dim = x.shape()[static_cast<size_t>(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape().size(); ++d) inner *= x.shape()[d];
  // Slice s as a vector of doubles (every dtype Unique takes converts exactly enough to compare).
  const std::vector<double> v = ir::tensor_to_f64(x);
  auto slice = [&](int64_t s) {
    std::vector<double> e;
    for (int64_t a = 0; a < outer; ++a) {
      for (int64_t i = 0; i < inner; ++i) e.push_back(v[static_cast<size_t>((a * dim + s) * inner + i)]);
    }
    return e;
  };
  std::vector<std::vector<double>> slices;
  for (int64_t s = 0; s < dim; ++s) slices.push_back(slice(s));
  std::vector<int64_t> first;  // distinct slices, by first occurrence
  std::vector<int64_t> inverse(static_cast<size_t>(dim));
  for (int64_t s = 0; s < dim; ++s) {
    auto it = std::find_if(first.begin(), first.end(), [&](int64_t f) { return slices[static_cast<size_t>(f)] == slices[static_cast<size_t>(s)]; });
    if (it == first.end()) {
      inverse[static_cast<size_t>(s)] = static_cast<int64_t>(first.size());
      first.push_back(s);
    } else {
      inverse[static_cast<size_t>(s)] = it - first.begin();
    }
  }
  std::vector<int64_t> order(first.size());
  std::iota(order.begin(), order.end(), 0);
  if (n.attr_int("sorted", 1) != 0) {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return slices[static_cast<size_t>(first[static_cast<size_t>(a)])] < slices[static_cast<size_t>(first[static_cast<size_t>(b)])];
    });
  }
  std::vector<int64_t> rank_of(order.size());
  for (size_t r = 0; r < order.size(); ++r) rank_of[static_cast<size_t>(order[r])] = static_cast<int64_t>(r);
  const auto k = static_cast<int64_t>(order.size());
  Shape shape = x.shape();
  shape[static_cast<size_t>(axis)] = k;
  Tensor y(x.dtype(), shape), indices(DType::kI64, {k}), inv(DType::kI64, {dim}), counts(DType::kI64, {k});
  const size_t es = ir::dtype_size(x.dtype());
  for (int64_t r = 0; r < k; ++r) {
    const int64_t s = first[static_cast<size_t>(order[static_cast<size_t>(r)])];
    for (int64_t a = 0; a < outer; ++a) {
      std::copy_n(x.bytes() + static_cast<size_t>((a * dim + s) * inner) * es, static_cast<size_t>(inner) * es,
                  y.mutable_bytes() + static_cast<size_t>((a * k + r) * inner) * es);
    }
    indices.mutable_data<int64_t>()[r] = s;
  }
  for (int64_t s = 0; s < dim; ++s) {
    const int64_t r = rank_of[static_cast<size_t>(inverse[static_cast<size_t>(s)])];
    inv.mutable_data<int64_t>()[s] = r;
    counts.mutable_data<int64_t>()[r]++;
  }
  out[0] = std::move(y);
  if (out.size() > 1) out[1] = std::move(indices);
  if (out.size() > 2) out[2] = std::move(inv);
  if (out.size() > 3) out[3] = std::move(counts);
  return Status::ok();
}

}  // namespace

void register_tensor_einsum_kernels(TensorKernelTable& table) {
  table["Einsum"] = einsum;
  table["Unique"] = unique;
}

}  // namespace kiln::cpu
