// kiln check MODEL.onnx [--json]
// Lists every node Kiln cannot run (op type, domain, opset and why) and exits 1 if there is any;
// a file that is not a readable ONNX model is an error (exit 1) as well. --json prints one object
// for tools: {"model", "ir_version", "opsets", "nodes", "supported", "unsupported": [...]}.
#include <cstdio>

#include "backends/cpu/tensor/tensor_kernel.h"
#include "cli/commands.h"
#include "formats/onnx/onnx_model.h"

namespace kiln::cli {
namespace {

struct CheckArgs {
  std::string model;
  bool json = false;
};

int run_check(const CheckArgs& a) {
  auto imported = formats::onnx_import_file(a.model);
  if (!imported) return fail(imported.status());
  std::vector<formats::OnnxUnsupported> problems = imported->unsupported;
  // Every op the importer emits should have a CPU kernel; say so if one does not.
  for (const auto& node : imported->graph.nodes()) {
    if (cpu::tensor_kernel(node.op) == nullptr) {
      problems.push_back({node.name, node.op, "ai.onnx", imported->opsets["ai.onnx"], "no CPU kernel"});
    }
  }
  if (a.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& p : problems) {
      list.push_back({{"node", p.node}, {"op_type", p.op_type}, {"domain", p.domain}, {"opset", p.opset},
                      {"reason", p.reason}});
    }
    nlohmann::json out = {{"model", a.model},
                          {"ir_version", imported->ir_version},
                          {"opsets", imported->opsets},
                          {"nodes", imported->graph.nodes().size()},
                          {"supported", problems.empty()},
                          {"unsupported", list}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    for (const auto& p : problems) std::printf("%s\n", p.line().c_str());
    std::printf("%s: %zu unsupported node%s (IR %lld, opset %lld)\n", a.model.c_str(), problems.size(),
                problems.size() == 1 ? "" : "s", static_cast<long long>(imported->ir_version),
                static_cast<long long>(imported->opsets["ai.onnx"]));
  }
  return problems.empty() ? 0 : 1;
}

}  // namespace

CommandFn add_check_command(CLI::App& app) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* cmd = app.add_subcommand("check", "List the nodes of an ONNX model that Kiln cannot run");
  cmd->add_option("model", args->model, "model.onnx")->required();
  cmd->add_flag("--json", args->json, "print one JSON object");
  return [args] { return run_check(*args); };
}

}  // namespace kiln::cli
