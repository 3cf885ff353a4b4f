#include "formats/onnx/onnx_translate.h"

#include <cstring>

namespace kiln::formats {

int64_t OnnxNode::attr_int(const std::string& key, int64_t fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return fallback;
}

Status OnnxNode::error(const std::string& what) const {
  return invalid_argument("node '" + name + "' (" + op_type + "): " + what);
}

Expected<int64_t> OnnxNode::int_in(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  const auto* v = std::get_if<int64_t>(&it->second);
  if (v == nullptr) return error("attribute '" + key + "' must be an int");
  if (*v < lo || *v > hi) {
    return error("attribute '" + key + "' = " + std::to_string(*v) + " is out of range [" + std::to_string(lo) +
                 ", " + std::to_string(hi) + "]");
  }
  return *v;
}

Expected<std::string> OnnxNode::string_in(const std::string& key, const std::string& fallback,
                                          const std::vector<std::string>& allowed) const {
  std::string value = fallback;
  if (auto it = attrs.find(key); it != attrs.end()) {
    const auto* s = std::get_if<std::string>(&it->second);
    if (s == nullptr) return error("attribute '" + key + "' must be a string");
    value = *s;
  }
  for (const auto& a : allowed) {
    if (a == value) return value;
  }
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return error("attribute '" + key + "' = '" + value + "' is not one of " + list);
}

Expected<double> OnnxNode::float_in(const std::string& key, double fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  return error("attribute '" + key + "' must be a float");
}

Expected<std::vector<int64_t>> OnnxNode::ints_in(const std::string& key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return std::vector<int64_t>{};
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return error("attribute '" + key + "' must be a list of ints");
}

Expected<std::vector<double>> OnnxNode::floats_in(const std::string& key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return std::vector<double>{};
  if (const auto* v = std::get_if<std::vector<double>>(&it->second)) return *v;
  return error("attribute '" + key + "' must be a list of floats");
}

ir::ValueId OnnxEmitter::constant(const OnnxNode& node, const std::string& suffix, ir::Tensor t) {
  std::string name = node.name + "/" + suffix;
  while (graph_.find_value(name) != ir::kNoValue) name += "_";
  return graph_.add_weight(name, ir::weight_entry_from_tensor(t));
}

ir::ValueId OnnxEmitter::constant_i64(const OnnxNode& node, const std::string& suffix,
                                      const std::vector<int64_t>& values) {
  ir::Tensor t(ir::DType::kI64, {static_cast<int64_t>(values.size())});
  if (!values.empty()) std::memcpy(t.mutable_bytes(), values.data(), values.size() * sizeof(int64_t));
  return constant(node, suffix, std::move(t));
}

ir::ValueId OnnxEmitter::temp(const OnnxNode& node, const std::string& suffix, ir::DType dtype) {
  ir::ValueId id = graph_.add_value(node.name + "/" + suffix, dtype, {});
  graph_.value(id).shape_known = false;
  return id;
}

void OnnxEmitter::add(std::string op, std::string name, std::vector<ir::ValueId> inputs,
                      std::vector<ir::ValueId> outputs, std::map<std::string, ir::Attr> attrs) {
  ir::Node node;
  node.op = std::move(op);
  node.name = std::move(name);
  node.inputs = std::move(inputs);
  node.outputs = std::move(outputs);
  node.attrs = std::move(attrs);
  // "kiln." attributes are the build's own (fused epilogues, ir/epilogue.h): a file cannot set them.
  std::erase_if(node.attrs, [](const auto& kv) { return kv.first.rfind("kiln.", 0) == 0; });
  graph_.nodes().push_back(std::move(node));
}

const OnnxTranslator* onnx_translator(const std::string& op_type) {
  static const OnnxTranslatorTable table = [] {
    OnnxTranslatorTable t;
    register_onnx_elementwise_ops(t);
    register_onnx_reduce_ops(t);
    register_onnx_tensor_ops(t);
    register_onnx_nn_ops(t);
    register_onnx_quantize_ops(t);
    register_onnx_signal_ops(t);
    register_onnx_text_ops(t);
    register_onnx_recurrent_ops(t);
    return t;
  }();
  auto it = table.find(op_type);
  return it == table.end() ? nullptr : &it->second;
}

}  // namespace kiln::formats
