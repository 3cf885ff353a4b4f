// kiln inspect ENGINE [--graph] [--dot]
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "ir/input_profile.h"
#include "nlohmann/json.hpp"

namespace kiln::cli {
namespace {

struct InspectArgs {
  std::string engine;
  bool graph = false, dot = false;
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

// The graph's inputs (with their optimisation profiles) and outputs.
void print_onnx_io(const nlohmann::json& onnx) {
  auto profiles = ir::input_profiles_from_json(onnx.value("profiles", nlohmann::json()));
  auto dims = [](const nlohmann::json& v) {
    if (!v.contains("dims")) return std::string("[?]");
    std::string s;
    for (const auto& d : v.at("dims")) s += (s.empty() ? "" : ", ") + (d.is_string() ? d.get<std::string>() : d.dump());
    return "[" + s + "]";
  };
  for (const char* side : {"inputs", "outputs"}) {
    std::printf("\n%s\n", side);
    for (const auto& v : onnx.value(side, nlohmann::json::array())) {
      const std::string name = v.at("name").get<std::string>();
      std::printf("  %-24s %-5s %s\n", name.c_str(), v.at("dtype").get<std::string>().c_str(), dims(v).c_str());
      if (std::string(side) != "inputs" || !profiles) continue;
      for (const auto& p : *profiles) {
        if (p.input != name) continue;
        std::printf("  %-24s profile min %s  opt %s  max %s\n", "", ir::input_profile_dims(p.min).c_str(),
                    ir::input_profile_dims(p.opt).c_str(), ir::input_profile_dims(p.max).c_str());
      }
    }
  }
}

// What each pass did to the node count (engines of older builds record only the pass names).
void print_passes(const nlohmann::json& build) {
  const nlohmann::json passes = build.value("passes", nlohmann::json::array());
  if (passes.empty() || !passes.front().is_object()) return;
  std::printf("\npasses        nodes before -> after\n");
  for (const auto& p : passes) {
    const auto before = p.at("nodes_before").get<long long>(), after = p.at("nodes_after").get<long long>();
    const std::string name = p.at("name").get<std::string>();
    if (after == before) {
      std::printf("  %-24s %6lld -> %lld\n", name.c_str(), before, after);
    } else {
      std::printf("  %-24s %6lld -> %-6lld (%+lld)\n", name.c_str(), before, after, after - before);
    }
  }
  if (build.contains("int8")) {
    const nlohmann::json& q = build.at("int8");
    std::printf("\nint8          %lld products quantised, %s calibration over %lld samples\n",
                q.value("quantized_nodes", 0LL), q.value("calibrator", std::string("?")).c_str(), q.value("samples", 0LL));
  }
}

int run_inspect(const InspectArgs& a) {
  auto model = runtime::LoadedModel::load(a.engine);
  if (!model) return fail(model.status());
  const auto& m = **model;
  const auto& h = m.file().header();
  const auto& meta = m.metadata();
  if (a.dot) {
    std::fputs(ir::print_graph_dot(m.graph()).c_str(), stdout);
    return 0;
  }
  std::printf("engine        %s\n", a.engine.c_str());
  std::printf("format        %u (kiln %s)\n", h.format_version, h.kiln_version.c_str());
  std::printf("target        %s\n", h.target.c_str());
  std::printf("build         %s\n", h.build_options.c_str());
  if (meta.contains("build") && meta.at("build").contains("device")) {
    std::printf("tuned on      %s\n", meta.at("build").at("device").get<std::string>().c_str());
  }
  std::printf("file size     %s\n", human_bytes(static_cast<double>(h.file_size)).c_str());
  std::printf("checksum      %016llx\n", static_cast<unsigned long long>(h.checksum));
  std::printf("\nmodel\n");
  for (const auto& [k, v] : meta.at("model").items()) std::printf("  %-24s %s\n", k.c_str(), v.dump().c_str());
  if (meta.contains("onnx")) print_onnx_io(meta.at("onnx"));
  if (meta.contains("build")) print_passes(meta.at("build"));

  const ir::Graph& g = m.graph();
  std::map<std::string, int> op_counts;
  for (const auto& n : g.nodes()) op_counts[n.op]++;
  std::printf("\ngraph         %zu nodes, %zu weights, activations %s at %lld tokens\n", g.nodes().size(),
              g.weights().size(),
              human_bytes(static_cast<double>(g.arena_per_token()) * 4.0 * static_cast<double>(m.facts().max_batch_tokens)).c_str(),
              static_cast<long long>(m.facts().max_batch_tokens));
  for (const auto& [op, n] : op_counts) std::printf("  %-14s %d\n", op.c_str(), n);
  std::map<std::string, std::pair<int, uint64_t>> by_format;
  for (const auto& [name, w] : g.weights()) {
    // Weights of other dtypes (an int8 build's codes, shapes as i64) are stored raw: named by dtype.
    auto& e = by_format[std::string(w.dtype == ir::DType::kF32 ? ir::weight_format_name(w.format) : ir::dtype_name(w.dtype))];
    e.first++;
    e.second += w.stored.size();
  }
  std::printf("\nweights       %s\n", human_bytes(static_cast<double>(m.weight_bytes())).c_str());
  for (const auto& [f, e] : by_format) {
    std::printf("  %-8s %4d tensors  %s\n", f.c_str(), e.first, human_bytes(static_cast<double>(e.second)).c_str());
  }
  const nlohmann::json kernels = meta.value("kernels", nlohmann::json::array());
  if (!kernels.empty()) std::printf("\nkernels (matmul n x k: decode / prefill, timed at build)\n");
  for (const auto& k : kernels) {
    std::printf("  %-7s %6lld x %-6lld %-22s %8.1f us   %-22s %9.1f us\n", k.at("format").get<std::string>().c_str(),
                static_cast<long long>(k.at("n").get<int64_t>()), static_cast<long long>(k.at("k").get<int64_t>()),
                k.at("decode").get<std::string>().c_str(), k.at("decode_us").get<double>(),
                k.at("prefill").get<std::string>().c_str(), k.at("prefill_us").get<double>());
  }
  std::printf("\nfiles        ");
  for (const auto& f : meta.at("files")) std::printf(" %s", f.get<std::string>().c_str());
  std::printf("\n");
  if (a.graph) std::printf("\n%s", ir::print_graph(g).c_str());
  return 0;
}

}  // namespace

CommandFn add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand("inspect", "Print an engine's header, config, graph, kernels and sizes");
  cmd->add_option("engine", args->engine, "engine file")->required();
  cmd->add_flag("--graph", args->graph, "also print the whole graph");
  cmd->add_flag("--dot", args->dot, "print the graph as Graphviz DOT only");
  return [args] { return run_inspect(*args); };
}

}  // namespace kiln::cli
