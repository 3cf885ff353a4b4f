#include "passes/pipeline.h"

namespace kiln::passes {

const std::vector<Pass>& default_pipeline() {
  static const std::vector<Pass> passes = {
      {"eliminate_noops", run_eliminate_noops},
      {"fold_constants", run_fold_constants},
      {"fuse_conv_batchnorm", run_fuse_conv_batchnorm},
      {"fuse_subgraphs", run_fuse_subgraphs},
      {"fuse_epilogues", run_fuse_epilogues},
      {"fuse_attention", run_fuse_attention},
      {"transpose_matmul_weights", run_transpose_matmul_weights},
      {"eliminate_dead_nodes", run_eliminate_dead_nodes},
      {"fuse_sibling_matmuls", run_fuse_sibling_matmuls},
      {"fuse_silu_mul", run_fuse_silu_mul},
      {"quantize_int8", run_quantize_int8},
      {"pack_matmul_weights", run_pack_matmul_weights},
      {"assign_precision", run_assign_precision},
      {"select_kernels", run_select_kernels},
      {"plan_memory", run_plan_memory},
  };
  return passes;
}

Status run_pipeline(ir::Graph& graph, const PassContext& ctx, const std::string& dump_after,
                    const std::function<void(const std::string&)>& dump,
                    const std::function<void(size_t, size_t, const std::string&)>& on_pass,
                    std::vector<PassRecord>* records) {
  const auto& passes = default_pipeline();
  if (!dump_after.empty() && dump_after != "all" && dump_after != "input") {
    bool known = false;
    for (const auto& p : passes) known = known || p.name == dump_after;
    if (!known) {
      std::string names;
      for (const auto& p : passes) names += " " + p.name;
      return invalid_argument("--dump-after: no pass named '" + dump_after + "'; passes are:" + names);
    }
  }
  if (dump && dump_after == "input") dump("== input graph ==\n" + ir::print_graph(graph));
  for (size_t i = 0; i < passes.size(); ++i) {
    if (on_pass) on_pass(i, passes.size(), passes[i].name);
    const size_t before = graph.nodes().size();
    KILN_RETURN_IF_ERROR(passes[i].run(graph, ctx).with_context("pass " + passes[i].name));
    if (records != nullptr) records->push_back({passes[i].name, before, graph.nodes().size()});
    KILN_RETURN_IF_ERROR(ir::verify(graph).with_context("graph after pass " + passes[i].name));
    if (dump && (dump_after == passes[i].name || dump_after == "all")) {
      dump("== after " + passes[i].name + " ==\n" + ir::print_graph(graph));
    }
  }
  return Status::ok();
}

}  // namespace kiln::passes
