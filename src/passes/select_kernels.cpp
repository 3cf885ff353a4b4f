// Kernel selection by timing: for each matmul, every candidate kernel the target offers for the
// weight's format is timed on the build machine at a decode shape (m = 1) and a prefill shape
// (m = min(128, max_batch_tokens)); the fastest of each is recorded on the node as
// kernel_decode / kernel_prefill (with the measured microseconds). Shapes repeat across layers,
// so timings are cached per (format, n, k).
#include <algorithm>
#include <map>
#include <tuple>

#include "passes/pass.h"

namespace kiln::passes {
namespace {

struct Choice {
  std::string kernel;
  double seconds = 0.0;
};

Choice fastest(KernelTuner* tuner, const std::vector<std::string>& candidates, ir::WeightFormat format,
               int64_t m, int64_t n, int64_t k, bool autotune) {
  if (tuner == nullptr || !autotune || candidates.size() == 1) return {candidates.front(), 0.0};
  Choice best{candidates.front(), 1e30};
  for (const auto& c : candidates) {
    const double t = tuner->time_matmul(c, format, m, n, k);
    if (t < best.seconds) best = {c, t};
  }
  return best;
}

}  // namespace

Status run_select_kernels(ir::Graph& graph, const PassContext& ctx) {
  if (ctx.tuner == nullptr) return internal_error("select_kernels needs a target to time kernels on");
  const int64_t prefill_m = std::min<int64_t>(128, ctx.options.max_batch_tokens);
  std::map<std::tuple<ir::WeightFormat, int64_t, int64_t>, std::pair<Choice, Choice>> cache;
  for (auto& node : graph.nodes()) {
    if (node.op != "matmul") continue;
    if (!graph.value(node.inputs[1]).is_weight) {
      return unimplemented("matmul '" + node.name + "' multiplies two activations; kiln runs only products with a "
                           "weight (fold build-time ops first)");
    }
    const ir::WeightEntry& w = graph.weight(node.inputs[1]);
    const auto key = std::make_tuple(w.format, w.rows(), w.cols());
    auto it = cache.find(key);
    if (it == cache.end()) {
      const auto candidates = ctx.tuner->matmul_candidates(w.format);
      if (candidates.empty()) {
        return unimplemented("target " + ctx.tuner->target() + " has no matmul kernel for weight format " +
                             std::string(ir::weight_format_name(w.format)));
      }
      Choice decode = fastest(ctx.tuner, candidates, w.format, 1, w.rows(), w.cols(), ctx.options.autotune);
      Choice prefill =
          fastest(ctx.tuner, candidates, w.format, prefill_m, w.rows(), w.cols(), ctx.options.autotune);
      it = cache.emplace(key, std::make_pair(decode, prefill)).first;
    }
    node.attrs["kernel_decode"] = it->second.first.kernel;
    node.attrs["kernel_prefill"] = it->second.second.kernel;
    if (it->second.first.seconds > 0.0) {
      node.attrs["kernel_decode_us"] = it->second.first.seconds * 1e6;
      node.attrs["kernel_prefill_us"] = it->second.second.seconds * 1e6;
    }
  }
  return Status::ok();
}

}  // namespace kiln::passes
