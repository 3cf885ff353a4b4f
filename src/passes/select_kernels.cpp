// Kernel selection by timing: for each matmul, every candidate kernel the target offers for the
// weight's format (and the row count: KernelTuner::matmul_candidates_for) is timed on the build
// machine at a decode shape (m = 1) and a prefill shape (m = min(128, max_batch_tokens)); the
// best pair of one results class (pick()) is recorded on the node as kernel_decode /
// kernel_prefill (with the measured microseconds). Shapes repeat across layers, so timings are
// cached per (format, n, k).
//
// The pass also picks the weight's layout. When the format has a panel variant
// (ir/weight_format.h) that fits the weight's shape, and every user of the weight is a matmul
// (an embedding lookup needs whole rows), both layouts are candidates: each is scored by its
// best decode time plus its best prefill time per token, and the weight is stored in the
// winner, the panel layout unless the plain one is clearly faster. Without timing, the panel
// layout is taken (its kernels read weights in the order they compute).
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "passes/pass.h"

namespace kiln::passes {
namespace {

// The plain layout replaces the panel layout only when it scores at least this much better. A
// weight is timed alone, in cache; in a whole model the weights stream from memory, where the
// panel layout's single in-order stream per task is the better one (measured on the demo model:
// the same scores within noise, but 10% fewer decode tokens/s with every weight plain).
constexpr double kPlainLayoutMargin = 0.9;

struct Choice {
  std::string kernel;
  double seconds = 0.0;
};

struct Selection {
  ir::WeightFormat format;
  Choice decode, prefill;
};

// Each candidate's time at [m, k] x [n, k]^T, in order (0 where not timed); a lone candidate is
// timed only when `time_lone` (its time is compared with another layout's). The candidates are
// timed in KernelTuner::timing_rounds() rounds, one after another within each round, and each
// keeps its fastest: another process that takes the cores for a while slows every candidate a
// little rather than one of them a lot.
std::vector<Choice> timed(KernelTuner* tuner, const std::vector<std::string>& candidates, ir::WeightFormat format,
                          int64_t m, int64_t n, int64_t k, bool autotune, bool time_lone) {
  std::vector<Choice> out;
  for (const auto& c : candidates) out.push_back({c, 0.0});
  const bool time = tuner != nullptr && autotune && (candidates.size() > 1 || time_lone);
  if (!time) return out;
  const int rounds = std::max(1, tuner->timing_rounds());
  for (int round = 0; round < rounds; ++round) {
    for (Choice& c : out) {
      const double s = tuner->time_matmul(c.kernel, format, m, n, k);
      c.seconds = round == 0 ? s : std::min(c.seconds, s);
    }
  }
  return out;
}

// The decode and prefill kernels with the best score (decode time plus prefill time per row)
// among pairs of one results class (KernelTuner::matmul_results_class): with kernels of two
// classes, a sequence decoded in a batch (prefill kernel) would not give the tokens it gives
// alone (decode kernel). Untimed, the first decode candidate and the first prefill candidate of
// its class. When no pair agrees, each is the fastest of its own list.
Selection pick(KernelTuner* tuner, ir::WeightFormat format, const std::vector<Choice>& decode,
               const std::vector<Choice>& prefill, int64_t prefill_m) {
  std::optional<Selection> best;
  double best_score = 0.0;
  for (const Choice& d : decode) {
    const std::string results = tuner->matmul_results_class(d.kernel);
    for (const Choice& p : prefill) {
      if (tuner->matmul_results_class(p.kernel) != results) continue;
      const double score = d.seconds + p.seconds / static_cast<double>(prefill_m);
      if (!best || score < best_score) {
        best = Selection{format, d, p};
        best_score = score;
      }
    }
  }
  if (best) return *best;
  auto fastest = [](const std::vector<Choice>& choices) {
    return *std::min_element(choices.begin(), choices.end(),
                             [](const Choice& a, const Choice& b) { return a.seconds < b.seconds; });
  };
  return Selection{format, fastest(decode), fastest(prefill)};
}

// Names of weights some non-matmul node reads (or that a matmul reads as its activation).
std::set<std::string> weights_needing_rows(const ir::Graph& graph) {
  std::set<std::string> out;
  for (const auto& node : graph.nodes()) {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] == ir::kNoValue) continue;
      const ir::Value& v = graph.value(node.inputs[i]);
      if (!v.is_weight) continue;
      const bool matmul_weight = node.op == "matmul" && i == 1;
      const bool matmul_bias = node.op == "matmul" && i == 2;
      if (!matmul_weight && !matmul_bias) out.insert(v.name);
    }
  }
  return out;
}

}  // namespace

Status run_select_kernels(ir::Graph& graph, const PassContext& ctx) {
  if (ctx.tuner == nullptr) return internal_error("select_kernels needs a target to time kernels on");
  const int64_t prefill_m = std::min<int64_t>(128, ctx.options.max_batch_tokens);
  const std::set<std::string> row_weights = weights_needing_rows(graph);
  std::map<std::tuple<ir::WeightFormat, int64_t, int64_t, bool>, Selection> cache;
  for (auto& node : graph.nodes()) {
    if (node.op != "matmul") continue;
    const ir::Value& wv = graph.value(node.inputs[1]);
    if (!wv.is_weight) {
      return unimplemented("matmul '" + node.name + "' multiplies two activations; kiln runs only products with a "
                           "weight (fold build-time ops first)");
    }
    ir::WeightEntry& w = graph.weight(node.inputs[1]);
    const ir::WeightFormat base = ir::weight_format_base(w.format);
    const bool may_pack = row_weights.count(wv.name) == 0;
    const auto key = std::make_tuple(base, w.rows(), w.cols(), may_pack);
    auto it = cache.find(key);
    if (it == cache.end()) {
      std::vector<ir::WeightFormat> formats;
      const auto panel = ir::weight_format_panel(base);
      if (may_pack && panel && ir::weight_format_fits(*panel, w.rows(), w.cols()) &&
          !ctx.tuner->matmul_candidates(*panel).empty()) {
        formats.push_back(*panel);
      }
      formats.push_back(base);
      std::optional<Selection> best;
      double best_score = 0.0;
      for (ir::WeightFormat f : formats) {
        const auto decode = ctx.tuner->matmul_candidates_for(f, 1);
        const auto prefill = ctx.tuner->matmul_candidates_for(f, prefill_m);
        if (decode.empty() || prefill.empty()) {
          return unimplemented("target " + ctx.tuner->target() + " has no matmul kernel for weight format " +
                               std::string(ir::weight_format_name(f)));
        }
        const bool time_lone = formats.size() > 1;
        const Selection s =
            pick(ctx.tuner, f, timed(ctx.tuner, decode, f, 1, w.rows(), w.cols(), ctx.options.autotune, time_lone),
                 timed(ctx.tuner, prefill, f, prefill_m, w.rows(), w.cols(), ctx.options.autotune, time_lone),
                 prefill_m);
        const double score = s.decode.seconds + s.prefill.seconds / static_cast<double>(prefill_m);
        if (!best || score < kPlainLayoutMargin * best_score) {
          best = s;
          best_score = score;
        }
        if (s.decode.seconds == 0.0) break;  // not timed: the first layout wins
      }
      it = cache.emplace(key, *best).first;
    }
    const Selection& sel = it->second;
    w.format = sel.format;
    node.attrs["kernel_decode"] = sel.decode.kernel;
    node.attrs["kernel_prefill"] = sel.prefill.kernel;
    if (sel.decode.seconds > 0.0) node.attrs["kernel_decode_us"] = sel.decode.seconds * 1e6;
    if (sel.prefill.seconds > 0.0) node.attrs["kernel_prefill_us"] = sel.prefill.seconds * 1e6;
  }
  return Status::ok();
}

}  // namespace kiln::passes
