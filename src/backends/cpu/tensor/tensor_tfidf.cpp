// The TfIdfVectorizer tensor kernel over integer tokens: x [C] or [N, C] (int32 or int64) -> y [K]
// or [N, K] f32, K = max(ngram_indexes) + 1. For every skip s in [0, max_skip_count] and every
// length n in [min_gram_length, max_gram_length], the n-gram of the tokens at i, i + (s + 1),
// ..., i + (n - 1)(s + 1) that the pool holds counts once into its output column (unigrams once,
// whatever the skip). The pool holds the (l + 1)-grams from ngram_counts[l] on, flattened, and
// ngram_indexes names the column of each pool n-gram in order. Mode TF writes the counts, IDF the
// weight of every n-gram seen (1 without weights), TFIDF the count times the weight.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::Tensor;

Status tfidf(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (x.rank() != 1 && x.rank() != 2) return tensor_error(n, "x must be [C] or [N, C]");
  const int64_t min_n = n.attr_int("min_gram_length"), max_n = n.attr_int("max_gram_length");
  const int64_t max_skip = n.attr_int("max_skip_count");
  const std::string mode = n.attr_str("mode");
  const std::vector<int64_t> counts = n.attr_ints("ngram_counts"), indexes = n.attr_ints("ngram_indexes");
  const std::vector<int64_t> pool = n.attr_ints("pool_int64s");
  const std::vector<double> weights = n.attr_floats("weights");
  // Pool n-gram -> output column, one map a length.
  std::vector<std::map<std::vector<int64_t>, int64_t>> grams(static_cast<size_t>(max_n + 1));
  size_t next = 0;
  for (size_t level = 0; level < counts.size(); ++level) {
    const auto len = static_cast<int64_t>(level + 1);
    const int64_t end = level + 1 < counts.size() ? counts[level + 1] : static_cast<int64_t>(pool.size());
    for (int64_t p = counts[level]; p + len <= end; p += len, ++next) {
      if (len > max_n) continue;
      grams[static_cast<size_t>(len)][std::vector<int64_t>(pool.begin() + p, pool.begin() + p + len)] =
          indexes[next];
    }
  }
  const int64_t columns = *std::max_element(indexes.begin(), indexes.end()) + 1;
  const int64_t rows = x.rank() == 2 ? x.shape()[0] : 1, len = x.shape().back();
  Tensor y(ir::DType::kF32, x.rank() == 2 ? ir::Shape{rows, columns} : ir::Shape{columns});
  float* yp = y.mutable_data<float>();
  std::vector<int64_t> key;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> tf(static_cast<size_t>(columns), 0.0);
    for (int64_t size = std::max<int64_t>(min_n, 1); size <= max_n; ++size) {
      const auto& table = grams[static_cast<size_t>(size)];
      if (table.empty()) continue;
      for (int64_t s = 0; s <= (size == 1 ? 0 : max_skip); ++s) {
        for (int64_t i = 0; i + (size - 1) * (s + 1) < len; ++i) {
          key.clear();
          for (int64_t k = 0; k < size; ++k) key.push_back(ir::tensor_get_i64(x, r * len + i + k * (s + 1)));
          const auto it = table.find(key);
          if (it != table.end()) tf[static_cast<size_t>(it->second)] += 1.0;
        }
      }
    }
    for (int64_t c = 0; c < columns; ++c) {
      const double w = weights.empty() ? 1.0 : weights[static_cast<size_t>(c)];
      const double count = tf[static_cast<size_t>(c)];
      const double v = mode == "TF" ? count : mode == "IDF" ? (count > 0.0 ? w : 0.0) : count * w;
      yp[r * columns + c] = static_cast<float>(v);
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_tfidf_kernels(TensorKernelTable& table) { table["TfIdfVectorizer"] = tfidf; }

}  // namespace kiln::cpu
