#include "formats/onnx/onnx_model.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <set>

#include "formats/onnx/onnx_tensor.h"
#include "formats/onnx/onnx_translate.h"

namespace kiln::formats {
namespace {

std::string domain_name(const std::string& d) { return d.empty() ? "ai.onnx" : d; }

// The declared dtype and shape of a graph input, output or value_info entry.
Status apply_type(const onnx::ValueInfoProto& info, ir::Graph& graph, ir::ValueId id) {
  ir::Value& v = graph.value(id);
  // No type, or an empty one (as some exporters declare subgraph outputs): nothing is declared.
  if (!info.has_type() || info.type().value_case() == onnx::TypeProto::VALUE_NOT_SET) return Status::ok();
  if (!info.type().has_tensor_type()) {
    return unimplemented("value '" + info.name() + "' is not a tensor (sequences, maps and optionals are not supported)");
  }
  const auto& tt = info.type().tensor_type();
  if (tt.elem_type() != 0) {
    auto dtype = onnx_dtype(tt.elem_type());
    if (!dtype) return dtype.status().with_context("value '" + info.name() + "'");
    v.dtype = *dtype;
  }
  if (!tt.has_shape()) return Status::ok();
  std::vector<int64_t> shape;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) return invalid_argument("value '" + info.name() + "' has a negative dimension");
      shape.push_back(d.dim_value());
    } else if (d.has_dim_param() && !d.dim_param().empty()) {
      shape.push_back(graph.dim_symbol(d.dim_param()));
    } else {
      shape.push_back(ir::kUnknownDim);
    }
  }
  graph.value(id).shape = std::move(shape);
  graph.value(id).shape_known = true;
  return Status::ok();
}

Expected<ir::Attr> convert_attr(const onnx::AttributeProto& a) {
  using A = onnx::AttributeProto;
  switch (a.type()) {
    case A::INT: return ir::Attr{static_cast<int64_t>(a.i())};
    case A::FLOAT: return ir::Attr{static_cast<double>(a.f())};
    case A::STRING: return ir::Attr{a.s()};
    case A::INTS: return ir::Attr{std::vector<int64_t>(a.ints().begin(), a.ints().end())};
    case A::FLOATS: {
      std::vector<double> v(a.floats().begin(), a.floats().end());
      return ir::Attr{std::move(v)};
    }
    case A::STRINGS: {
      // Joined with ',': the recurrent ops' activation names, the only string lists Kiln reads.
      std::string joined;
      for (const std::string& s : a.strings()) {
        if (s.find(',') != std::string::npos) return unimplemented("attribute '" + a.name() + "' holds a string with a comma");
        joined += (joined.empty() ? "" : ",") + s;
      }
      return ir::Attr{std::move(joined)};
    }
    default: return unimplemented("attribute '" + a.name() + "' has a type Kiln does not support");
  }
}

class Importer {
 public:
  Importer(OnnxImport& out, std::string base_dir) : out_(out), g_(out.graph), base_dir_(std::move(base_dir)) {}

  Status run(const onnx::ModelProto& model) {
    const onnx::GraphProto& graph = model.graph();
    // Initializers first: in IR < 4 they are also listed as inputs, and then they are weights.
    for (const auto& init : graph.initializer()) {
      auto t = onnx_tensor_decode(init, base_dir_);
      if (!t) return t.status().with_context("initializer '" + init.name() + "'");
      add_weight(init.name(), std::move(*t));
    }
    for (const auto& input : graph.input()) {
      if (values_.count(input.name())) continue;
      ir::ValueId id = g_.add_value(input.name(), ir::DType::kF32, {});
      values_[input.name()] = id;
      KILN_RETURN_IF_ERROR(apply_type(input, g_, id));
      if (!input.type().tensor_type().has_shape()) {
        return invalid_argument("graph input '" + input.name() + "' has no shape; export it with its shape");
      }
      g_.inputs().push_back(id);
    }
    for (const auto& info : graph.value_info()) declared_[info.name()] = &info;
    for (const auto& info : graph.output()) declared_[info.name()] = &info;

    for (int i = 0; i < graph.node_size(); ++i) {
      const onnx::NodeProto& proto = graph.node(i);
      std::string name = proto.name().empty() ? proto.op_type() + "_" + std::to_string(i) : proto.name();
      while (!node_names_.insert(name).second) name += "_" + std::to_string(i);
      KILN_RETURN_IF_ERROR(import_node(proto, name));
    }
    for (const auto& output : graph.output()) {
      auto it = values_.find(output.name());
      if (it == values_.end()) return invalid_argument("graph output '" + output.name() + "' is never produced");
      ir::ValueId id = it->second;
      if (g_.value(id).is_weight || std::count(g_.inputs().begin(), g_.inputs().end(), id)) {
        // A graph output that is a constant or an input: an Identity node gives it a producer.
        const std::string copy_name = output.name() + "/output";
        ir::ValueId copy = g_.add_value(output.name(), g_.value(id).dtype, g_.value(id).shape);
        ir::Node node;
        node.op = "Identity";
        node.name = copy_name;
        node.inputs = {id};
        node.outputs = {copy};
        g_.nodes().push_back(std::move(node));
        id = copy;
      }
      g_.outputs().push_back(id);
    }
    return Status::ok();
  }

 private:
  // A weight under the ONNX name; stored under a fresh one when a branch reuses a name.
  void add_weight(const std::string& name, ir::Tensor t) {
    std::string stored = name;
    for (int i = 1; g_.weights().count(stored) != 0; ++i) stored = name + "@" + std::to_string(i);
    values_[name] = g_.add_weight(stored, ir::weight_entry_from_tensor(t));
  }

  int64_t opset_of(const std::string& domain) const {
    auto it = out_.opsets.find(domain_name(domain));
    return it == out_.opsets.end() ? 0 : it->second;
  }

  Status import_node(const onnx::NodeProto& proto, const std::string& name) {
    const std::string domain = domain_name(proto.domain());
    OnnxNode node;
    node.op_type = proto.op_type();
    node.name = name;
    node.opset = opset_of(proto.domain());
    auto unsupported = [&](const std::string& reason) {
      out_.unsupported.push_back({name, proto.op_type(), domain, node.opset, reason});
      // Later nodes may read this node's outputs: give them values of unknown type.
      for (const auto& o : proto.output()) {
        if (!o.empty() && !values_.count(o)) {
          ir::ValueId id = g_.add_value(o, ir::DType::kF32, {});
          g_.value(id).shape_known = false;
          values_[o] = id;
        }
      }
      return Status::ok();
    };
    for (const auto& in : proto.input()) {
      if (in.empty()) {
        node.inputs.push_back(ir::kNoValue);
        continue;
      }
      auto it = values_.find(in);
      if (it == values_.end()) {
        return invalid_argument("node '" + name + "' (" + proto.op_type() + ") reads '" + in +
                                "', which no earlier node, input or initializer provides");
      }
      node.inputs.push_back(it->second);
    }
    while (!node.inputs.empty() && node.inputs.back() == ir::kNoValue) node.inputs.pop_back();
    if (domain != "ai.onnx") return unsupported("domain '" + domain + "' is not supported");
    if (node.opset > kOnnxMaxOpset) {
      return unsupported("opset " + std::to_string(node.opset) + " is newer than Kiln supports (up to " +
                         std::to_string(kOnnxMaxOpset) + ")");
    }
    if (proto.op_type() == "If") return import_if(proto, name, node.inputs, unsupported);
    for (const auto& a : proto.attribute()) {
      if (a.type() == onnx::AttributeProto::TENSOR) {
        auto t = onnx_tensor_decode(a.t(), base_dir_);
        if (!t) return unsupported("attribute '" + a.name() + "': " + t.status().message());
        node.tensor_attrs.emplace(a.name(), std::move(*t));
        continue;
      }
      if (!a.ref_attr_name().empty()) return unsupported("attribute references are only valid inside functions");
      auto attr = convert_attr(a);
      if (!attr) return unsupported(attr.status().message());
      node.attrs[a.name()] = std::move(*attr);
    }
    const OnnxTranslator* translate = onnx_translator(proto.op_type());
    if (translate == nullptr) return unsupported("unsupported op");
    // Every op Kiln translates has an output and, Constant aside, a first input.
    if (std::all_of(proto.output().begin(), proto.output().end(), [](const std::string& o) { return o.empty(); })) {
      return unsupported("the node has no output");
    }
    if (proto.op_type() != "Constant" && (node.inputs.empty() || node.inputs[0] == ir::kNoValue)) {
      return unsupported("the node's first input is missing");
    }
    // Outputs: values typed as declared (value_info / graph outputs) where ONNX says, else found at run time.
    // Where's first input is its bool condition; its values come from the second.
    const size_t typed_by = proto.op_type() == "Where" && node.inputs.size() > 1 ? 1 : 0;
    const ir::DType default_dtype = node.inputs.size() > typed_by && node.inputs[typed_by] != ir::kNoValue
                                        ? g_.value(node.inputs[typed_by]).dtype
                                        : ir::DType::kF32;
    std::vector<std::string> output_names;
    for (const auto& o : proto.output()) {
      if (o.empty()) {
        node.outputs.push_back(ir::kNoValue);
        continue;
      }
      if (values_.count(o)) return invalid_argument("node '" + name + "': value '" + o + "' is produced twice");
      ir::ValueId id = g_.add_value(o, default_dtype, {});
      g_.value(id).shape_known = false;
      if (auto it = declared_.find(o); it != declared_.end()) {
        Status typed = apply_type(*it->second, g_, id);
        if (!typed) return unsupported(typed.message());
      }
      node.outputs.push_back(id);
      output_names.push_back(o);
    }
    // Unused optional outputs get a value of their own, so that every node output exists.
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      if (node.outputs[i] == ir::kNoValue) {
        node.outputs[i] = g_.add_value(name + "/unused" + std::to_string(i), default_dtype, {});
        g_.value(node.outputs[i]).shape_known = false;
      }
    }
    const size_t nodes_before = g_.nodes().size();
    OnnxEmitter emitter(g_);
    Status st = (*translate)(node, emitter);
    if (!st) {
      g_.nodes().resize(nodes_before);
      std::string reason = st.message();
      // The translator's message starts with "node 'N' (Op): "; the list entry names the node already.
      if (const size_t p = reason.find("): "); p != std::string::npos && reason.rfind("node '", 0) == 0) {
        reason = reason.substr(p + 3);
      }
      for (size_t i = 0; i < output_names.size(); ++i) values_[output_names[i]] = node.outputs[i];
      out_.unsupported.push_back({name, proto.op_type(), domain, node.opset, reason});
      return Status::ok();
    }
    if (!guard_.empty()) {
      for (size_t i = nodes_before; i < g_.nodes().size(); ++i) g_.nodes()[i].attrs["kiln.guard"] = guard_;
    }
    size_t k = 0;
    for (const auto& o : proto.output()) {
      if (!o.empty()) values_[o] = node.outputs[k];
      ++k;
    }
    return Status::ok();
  }

  // ONNX's If, imported flat (ir/tensor_ops.h): both branches' nodes join the graph under a guard
  // on the condition, and a kiln.Select picks the taken branch's outputs. Names a branch defines
  // are visible only inside it.
  Status import_if(const onnx::NodeProto& proto, const std::string& name, const std::vector<ir::ValueId>& inputs,
                   const std::function<Status(const std::string&)>& unsupported) {
    if (inputs.size() != 1 || inputs[0] == ir::kNoValue) return unsupported("expected one input, the condition");
    const ir::ValueId cond = inputs[0];
    if (g_.value(cond).dtype != ir::DType::kBool) return unsupported("the condition must be bool");
    const onnx::GraphProto* branch[2] = {nullptr, nullptr};  // then, else
    for (const auto& a : proto.attribute()) {
      if (a.type() == onnx::AttributeProto::GRAPH && (a.name() == "then_branch" || a.name() == "else_branch")) {
        branch[a.name() == "then_branch" ? 0 : 1] = &a.g();
      } else {
        return unsupported("attribute '" + a.name() + "' is not one of If's");
      }
    }
    if (branch[0] == nullptr || branch[1] == nullptr) return unsupported("then_branch and else_branch are both required");
    std::vector<ir::ValueId> outs[2];
    for (int b = 0; b < 2; ++b) {
      const onnx::GraphProto& g = *branch[b];
      if (g.output_size() != proto.output_size()) {
        return unsupported(std::string(b == 0 ? "then_branch" : "else_branch") + " has " + std::to_string(g.output_size()) +
                           " outputs for the node's " + std::to_string(proto.output_size()));
      }
      const auto saved_values = values_;
      const auto saved_declared = declared_;
      guard_.push_back(cond);
      guard_.push_back(b == 0 ? 1 : 0);
      Status st = import_branch(g, name + (b == 0 ? "/then" : "/else"));
      for (int i = 0; st && i < g.output_size(); ++i) {
        auto it = values_.find(g.output(i).name());
        if (it == values_.end()) {
          st = invalid_argument("node '" + name + "' (If): branch output '" + g.output(i).name() + "' is never produced");
        } else {
          outs[b].push_back(it->second);
        }
      }
      guard_.resize(guard_.size() - 2);
      values_ = saved_values;
      declared_ = saved_declared;
      KILN_RETURN_IF_ERROR(st);
    }
    ir::Node select;
    select.op = "kiln.Select";
    select.name = name;
    select.inputs = {cond};
    for (int b = 0; b < 2; ++b) select.inputs.insert(select.inputs.end(), outs[b].begin(), outs[b].end());
    for (int i = 0; i < proto.output_size(); ++i) {
      const std::string& o = proto.output(i);
      const ir::Value& from = g_.value(outs[0][static_cast<size_t>(i)]);
      const std::string value_name = o.empty() ? name + "/unused" + std::to_string(i) : o;
      if (!o.empty() && values_.count(o)) return invalid_argument("node '" + name + "': value '" + o + "' is produced twice");
      const ir::ValueId id = g_.add_value(value_name, from.dtype, {});
      g_.value(id).shape_known = false;
      if (auto it = declared_.find(o); !o.empty() && it != declared_.end()) {
        Status typed = apply_type(*it->second, g_, id);
        if (!typed) return unsupported(typed.message());
      }
      select.outputs.push_back(id);
      if (!o.empty()) values_[o] = id;
    }
    if (!guard_.empty()) select.attrs["kiln.guard"] = guard_;
    g_.nodes().push_back(std::move(select));
    return Status::ok();
  }

  // A branch's initializers and nodes, its node names under `prefix`.
  Status import_branch(const onnx::GraphProto& graph, const std::string& prefix) {
    for (const auto& init : graph.initializer()) {
      auto t = onnx_tensor_decode(init, base_dir_);
      if (!t) return t.status().with_context("initializer '" + init.name() + "'");
      add_weight(init.name(), std::move(*t));
    }
    for (const auto& info : graph.value_info()) declared_[info.name()] = &info;
    for (const auto& info : graph.output()) declared_[info.name()] = &info;
    for (int i = 0; i < graph.node_size(); ++i) {
      const onnx::NodeProto& proto = graph.node(i);
      std::string name = prefix + "/" + (proto.name().empty() ? proto.op_type() + "_" + std::to_string(i) : proto.name());
      while (!node_names_.insert(name).second) name += "_" + std::to_string(i);
      KILN_RETURN_IF_ERROR(import_node(proto, name));
    }
    return Status::ok();
  }

  OnnxImport& out_;
  ir::Graph& g_;
  std::string base_dir_;
  std::map<std::string, ir::ValueId> values_;
  std::map<std::string, const onnx::ValueInfoProto*> declared_;
  std::set<std::string> node_names_;
  std::vector<int64_t> guard_;  // (condition value, branch) of the Ifs being imported, outermost first
};

}  // namespace

std::string OnnxUnsupported::line() const {
  return "node '" + node + "' (" + op_type + ", " + domain + " opset " + std::to_string(opset) + "): " + reason;
}

bool is_onnx_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
}

Expected<OnnxImport> onnx_import_bytes(const std::string& bytes, const std::string& base_dir,
                                       const std::string& display_name) {
  onnx::ModelProto model;
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                static_cast<int>(std::min<size_t>(bytes.size(), INT32_MAX)));
  stream.SetTotalBytesLimit(std::numeric_limits<int>::max());
  if (bytes.empty() || !model.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
    return invalid_argument(display_name + " is not a valid ONNX model (the protobuf is truncated or malformed)");
  }
  if (!model.has_graph()) return invalid_argument(display_name + " holds no graph");
  if (model.ir_version() <= 0 || model.ir_version() > kOnnxMaxIrVersion) {
    return invalid_argument(display_name + " has IR version " + std::to_string(model.ir_version()) +
                            "; Kiln reads IR versions 1 to " + std::to_string(kOnnxMaxIrVersion));
  }
  OnnxImport out;
  out.ir_version = model.ir_version();
  out.producer = model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());
  for (const auto& o : model.opset_import()) out.opsets[domain_name(o.domain())] = o.version();
  if (!out.opsets.count("ai.onnx")) out.opsets["ai.onnx"] = 1;  // IR 1-2 files may omit it
  Importer importer(out, base_dir);
  KILN_RETURN_IF_ERROR(importer.run(model).with_context(display_name));
  return out;
}

Expected<OnnxImport> onnx_import_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open " + path);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t slash = path.rfind('/');
  return onnx_import_bytes(bytes, slash == std::string::npos ? "." : path.substr(0, slash), path);
}

Expected<ir::Graph> onnx_import_require_supported(OnnxImport import) {
  if (!import.unsupported.empty()) {
    std::string more = import.unsupported.size() > 1
                           ? " (and " + std::to_string(import.unsupported.size() - 1) + " more; see `kiln check`)"
                           : "";
    return unimplemented(import.unsupported.front().line() + more);
  }
  KILN_RETURN_IF_ERROR(ir::verify(import.graph));
  return std::move(import.graph);
}

}  // namespace kiln::formats
