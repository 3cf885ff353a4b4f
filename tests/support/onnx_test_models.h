// Small ONNX models built in code for the importer, kernel and CLI tests: a helper that writes a
// graph of named nodes with declared inputs, outputs and initializers through libonnx's protobuf
// classes, the way an exporter would.
#pragma once

#include <onnx/onnx_pb.h>

#include <fstream>
#include <string>
#include <vector>

namespace kiln::testing {

inline onnx::ValueInfoProto onnx_value(const std::string& name, int elem_type, const std::vector<std::string>& dims) {
  onnx::ValueInfoProto v;
  v.set_name(name);
  auto* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  auto* shape = t->mutable_shape();
  for (const auto& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.empty() && (std::isdigit(static_cast<unsigned char>(d[0])) != 0)) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
  return v;
}

inline onnx::NodeProto* onnx_node(onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& in,
                                  const std::vector<std::string>& out, const std::string& name = "") {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? op + "_" + std::to_string(g->node_size()) : name);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

inline void onnx_attr_int(onnx::NodeProto* n, const std::string& key, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

inline onnx::TensorProto* onnx_float_initializer(onnx::GraphProto* g, const std::string& name,
                                                 const std::vector<int64_t>& dims, const std::vector<float>& values) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
  return t;
}

inline onnx::ModelProto onnx_model(int64_t opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln-tests");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  return m;
}

inline void onnx_save(const onnx::ModelProto& m, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  m.SerializeToOstream(&f);
}

}  // namespace kiln::testing
