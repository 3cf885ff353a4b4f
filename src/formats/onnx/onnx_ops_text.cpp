// ONNX text-feature ops: TfIdfVectorizer over integer tokens (pool_int64s; a string pool is
// refused, as Kiln has no string tensors). The translator checks what the kernel trusts: the
// gram lengths and skip count, the mode, a pool whose levels ngram_counts splits into whole
// n-grams, one output column per pool n-gram, and a weight per column when weights are given.
#include <algorithm>

#include "formats/onnx/onnx_translate.h"

namespace kiln::formats {
namespace {

Status tfidf_vectorizer(const OnnxNode& node, OnnxEmitter& out) {
  if (node.has("pool_strings")) return node.error("a pool of strings is not supported (no string tensors)");
  constexpr int64_t kMaxGram = 64;
  KILN_ASSIGN_OR_RETURN(int64_t max_n, node.int_in("max_gram_length", 0, 1, kMaxGram));
  KILN_ASSIGN_OR_RETURN(int64_t min_n, node.int_in("min_gram_length", 0, 1, max_n));
  KILN_ASSIGN_OR_RETURN(int64_t max_skip, node.int_in("max_skip_count", 0, 0, int64_t{1} << 20));
  KILN_ASSIGN_OR_RETURN(std::string mode, node.string_in("mode", "", {"TF", "IDF", "TFIDF"}));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> counts, node.ints_in("ngram_counts"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> indexes, node.ints_in("ngram_indexes"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pool, node.ints_in("pool_int64s"));
  KILN_ASSIGN_OR_RETURN(std::vector<double> weights, node.floats_in("weights"));
  const auto pool_size = static_cast<int64_t>(pool.size());
  int64_t grams = 0;
  for (size_t level = 0; level < counts.size(); ++level) {
    const int64_t begin = counts[level], end = level + 1 < counts.size() ? counts[level + 1] : pool_size;
    if (begin < 0 || begin > end || end > pool_size || (end - begin) % static_cast<int64_t>(level + 1) != 0) {
      return node.error("ngram_counts does not split pool_int64s into whole n-grams at level " +
                        std::to_string(level + 1));
    }
    grams += (end - begin) / static_cast<int64_t>(level + 1);
  }
  if (grams == 0 || static_cast<int64_t>(indexes.size()) != grams) {
    return node.error("ngram_indexes must name one output column for each of the pool's " + std::to_string(grams) +
                      " n-grams");
  }
  if (*std::min_element(indexes.begin(), indexes.end()) < 0) return node.error("ngram_indexes must not be negative");
  const int64_t columns = *std::max_element(indexes.begin(), indexes.end()) + 1;
  if (!weights.empty() && static_cast<int64_t>(weights.size()) < columns) {
    return node.error("weights must give one weight for each of the " + std::to_string(columns) + " output columns");
  }
  const ir::DType x = out.graph().value(node.input(0)).dtype;
  if (x != ir::DType::kI32 && x != ir::DType::kI64) return node.error("x must hold int32 or int64 tokens");
  out.graph().value(node.outputs[0]).dtype = ir::DType::kF32;
  out.add("TfIdfVectorizer", node.name, node.inputs, node.outputs,
          {{"max_gram_length", max_n},
           {"min_gram_length", min_n},
           {"max_skip_count", max_skip},
           {"mode", mode},
           {"ngram_counts", counts},
           {"ngram_indexes", indexes},
           {"pool_int64s", pool},
           {"weights", weights}});
  return Status::ok();
}

}  // namespace

void register_onnx_text_ops(OnnxTranslatorTable& table) { table["TfIdfVectorizer"] = tfidf_vectorizer; }

}  // namespace kiln::formats
