// verify(), the printers and JSON (de)serialisation of ir::Graph.
#include <set>
#include <sstream>

#include "ir/graph.h"
#include "ir/ops.h"
#include "nlohmann/json.hpp"

namespace kiln::ir {
namespace {

std::string dims_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += s[i] == kTokens ? "T" : s[i] == kRows ? "R" : std::to_string(s[i]);
  }
  return out + "]";
}

std::string attr_str(const Attr& a) {
  std::ostringstream os;
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) {
          os << v;
        } else if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, double>) {
          os << v;
        } else {
          os << "[";
          for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
          os << "]";
        }
      },
      a);
  return os.str();
}

nlohmann::json attr_to_json(const Attr& a) {
  return std::visit([](const auto& v) { return nlohmann::json(v); }, a);
}

Expected<Attr> attr_from_json(const nlohmann::json& j) {
  if (j.is_number_integer()) return Attr{j.get<int64_t>()};
  if (j.is_number()) return Attr{j.get<double>()};
  if (j.is_string()) return Attr{j.get<std::string>()};
  if (j.is_array()) {
    bool all_int = true;
    for (const auto& e : j) {
      if (!e.is_number()) return invalid_argument("attribute list holds a non-number");
      all_int = all_int && e.is_number_integer();
    }
    if (all_int) return Attr{j.get<std::vector<int64_t>>()};
    return Attr{j.get<std::vector<double>>()};
  }
  return invalid_argument("unsupported attribute value " + j.dump());
}

}  // namespace

Status verify(const Graph& graph) {
  const auto n_values = static_cast<ValueId>(graph.values().size());
  std::set<ValueId> available;
  for (ValueId id : graph.inputs()) {
    if (id < 0 || id >= n_values) return invalid_argument("graph input id out of range");
    available.insert(id);
  }
  for (const auto& v : graph.values()) {
    if (v.is_weight) {
      if (!graph.weights().count(v.name)) return invalid_argument("weight '" + v.name + "' has no entry");
      available.insert(v.id);
    }
  }
  std::set<std::string> names;
  for (const auto& node : graph.nodes()) {
    if (!names.insert(node.name).second) return invalid_argument("duplicate node name '" + node.name + "'");
    const OpInfo* info = op_info(node.op);
    for (ValueId in : node.inputs) {
      // A tensor op's absent optional input (ONNX's empty name) is kNoValue.
      if (in == kNoValue && info != nullptr && info->family == OpFamily::kTensor) continue;
      if (in < 0 || in >= n_values) return invalid_argument("node '" + node.name + "': input out of range");
      if (!available.count(in)) {
        return invalid_argument("node '" + node.name + "' reads '" + graph.value(in).name +
                                "' before it is produced");
      }
    }
    KILN_ASSIGN_OR_RETURN(auto shapes, infer_shapes(graph, node));
    if (shapes.size() != node.outputs.size()) {
      return invalid_argument("node '" + node.name + "': wrong number of outputs");
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      ValueId out = node.outputs[i];
      if (out < 0 || out >= n_values) return invalid_argument("node '" + node.name + "': output out of range");
      if (!available.insert(out).second) {
        return invalid_argument("value '" + graph.value(out).name + "' is produced twice");
      }
      if (graph.value(out).shape != shapes[i]) {
        return invalid_argument("node '" + node.name + "': output shape " + dims_str(graph.value(out).shape) +
                                " but the op gives " + dims_str(shapes[i]));
      }
    }
  }
  for (ValueId id : graph.outputs()) {
    if (id < 0 || id >= n_values || !available.count(id)) return invalid_argument("graph output never produced");
  }
  return Status::ok();
}

std::string print_graph(const Graph& graph) {
  std::ostringstream os;
  auto name_of = [&](ValueId id) { return "%" + graph.value(id).name; };
  auto type_of = [&](ValueId id) {
    const Value& v = graph.value(id);
    return (v.dtype == DType::kF32 ? std::string() : std::string(dtype_name(v.dtype)) + ":") + graph.shape_str(v);
  };
  os << "inputs:";
  for (ValueId id : graph.inputs()) os << " " << name_of(id) << type_of(id);
  os << "\n";
  for (const auto& node : graph.nodes()) {
    os << "  ";
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      os << (i ? ", " : "") << name_of(node.outputs[i]) << type_of(node.outputs[i]);
    }
    os << " = " << node.op << "(";
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] == kNoValue) {
        os << (i ? ", " : "") << "-";
        continue;
      }
      const Value& v = graph.value(node.inputs[i]);
      os << (i ? ", " : "") << (v.is_weight ? "@" + v.name : name_of(v.id));
      if (v.is_weight) {
        const WeightEntry& w = graph.weights().at(v.name);
        os << ":" << (w.dtype == DType::kF32 ? weight_format_name(w.format) : dtype_name(w.dtype)) << dims_str(v.shape);
      }
    }
    os << ")";
    if (!node.attrs.empty()) os << " " << print_attrs(node);
    os << "\n";
  }
  os << "outputs:";
  for (ValueId id : graph.outputs()) os << " " << name_of(id);
  os << "\n";
  return os.str();
}

std::string print_attrs(const Node& node) {
  std::string out = "{";
  for (const auto& [k, a] : node.attrs) out += (out.size() > 1 ? ", " : "") + k + "=" + attr_str(a);
  return out + "}";
}

std::string print_graph_dot(const Graph& graph) {
  std::ostringstream os;
  os << "digraph kiln {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n";
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& node = graph.nodes()[i];
    os << "  n" << i << " [label=\"" << node.name << "\\n" << node.op << "\"];\n";
  }
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    for (ValueId in : graph.nodes()[i].inputs) {
      if (in == kNoValue) continue;
      int64_t p = graph.producer(in);
      if (p >= 0) {
        os << "  n" << p << " -> n" << i << " [label=\"" << dims_str(graph.value(in).shape) << "\"];\n";
      }
    }
  }
  os << "}\n";
  return os.str();
}

nlohmann::json graph_to_json(const Graph& graph) {
  nlohmann::json values = nlohmann::json::array();
  for (const auto& v : graph.values()) {
    nlohmann::json value = {{"name", v.name}, {"dtype", dtype_name(v.dtype)}, {"shape", v.shape},
                             {"weight", v.is_weight}, {"arena_offset", v.arena_offset}};
    if (!v.shape_known) value["shape_known"] = false;
    values.push_back(std::move(value));
  }
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : graph.nodes()) {
    nlohmann::json attrs = nlohmann::json::object();
    for (const auto& [k, a] : n.attrs) attrs[k] = attr_to_json(a);
    nodes.push_back({{"op", n.op}, {"name", n.name}, {"inputs", n.inputs}, {"outputs", n.outputs},
                     {"attrs", attrs}});
  }
  nlohmann::json weights = nlohmann::json::object();
  for (const auto& [name, w] : graph.weights()) {
    weights[name] = {{"shape", w.shape}, {"format", weight_format_name(w.format)}};
    if (w.dtype != DType::kF32) weights[name]["dtype"] = dtype_name(w.dtype);
  }
  nlohmann::json out = {{"values", values}, {"nodes", nodes}, {"inputs", graph.inputs()},
                        {"outputs", graph.outputs()}, {"weights", weights},
                        {"arena_per_token", graph.arena_per_token()}};
  if (!graph.dim_names().empty()) out["dim_names"] = graph.dim_names();
  return out;
}

Expected<Graph> graph_from_json(const nlohmann::json& json) {
  try {
    Graph g;
    for (const auto& v : json.at("values")) {
      const std::string dtype = v.at("dtype").get<std::string>();
      const std::optional<DType> parsed = dtype_from_name(dtype);
      if (!parsed) return invalid_argument("unknown value dtype " + dtype);
      ValueId id = g.add_value(v.at("name").get<std::string>(), *parsed, v.at("shape").get<std::vector<int64_t>>());
      g.value(id).shape_known = v.value("shape_known", true);
      g.value(id).is_weight = v.at("weight").get<bool>();
      g.value(id).arena_offset = v.at("arena_offset").get<int64_t>();
    }
    for (const auto& [name, w] : json.at("weights").items()) {
      auto format = weight_format_from_name(w.at("format").get<std::string>());
      if (!format) return invalid_argument("weight '" + name + "' has unknown format");
      WeightEntry entry;
      entry.shape = w.at("shape").get<std::vector<int64_t>>();
      entry.format = *format;
      if (w.contains("dtype")) {
        const std::optional<DType> dtype = dtype_from_name(w.at("dtype").get<std::string>());
        if (!dtype) return invalid_argument("weight '" + name + "' has unknown dtype");
        entry.dtype = *dtype;
      }
      g.weights()[name] = std::move(entry);
    }
    for (const auto& n : json.at("nodes")) {
      Node node;
      node.op = n.at("op").get<std::string>();
      node.name = n.at("name").get<std::string>();
      node.inputs = n.at("inputs").get<std::vector<ValueId>>();
      node.outputs = n.at("outputs").get<std::vector<ValueId>>();
      for (const auto& [k, a] : n.at("attrs").items()) {
        KILN_ASSIGN_OR_RETURN(node.attrs[k], attr_from_json(a));
      }
      g.nodes().push_back(std::move(node));
    }
    g.inputs() = json.at("inputs").get<std::vector<ValueId>>();
    g.outputs() = json.at("outputs").get<std::vector<ValueId>>();
    g.set_arena_per_token(json.at("arena_per_token").get<int64_t>());
    if (json.contains("dim_names")) g.dim_names() = json.at("dim_names").get<std::vector<std::string>>();
    KILN_RETURN_IF_ERROR(verify(g).with_context("engine graph"));
    return g;
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("malformed graph: ") + e.what());
  }
}

}  // namespace kiln::ir
